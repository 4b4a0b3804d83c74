"""The class's results as graded, kept beside its seed, so that one student or one exercise is regraded and merged.

Every class run keeps its results, before overrides and penalties, in ``grading-results.json`` beside
``grading-seed.json`` (one entry per assignment and class, the seed file's key)::

    {"classes": {"a04_masks @ moodle-a04": {"settings": {...}, "results": [{"path": ..., "tests": [...]}, ...]}}}

``settings`` are the run's limits and scan policy: a part regrade under other ones is refused (it would
mix two gradings in one gradebook).

``grade CLASS --only STUDENT`` grades that student alone with the class's seed, takes everyone else's
result from here (:func:`merge`), and writes every output again from the whole class, so the others'
rows, feedback and exports come out as they were and the student's as a full regrade gives them.
``--exercise KEY`` takes only that exercise's cases from the new grade.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..verdicts import ReviewFlag, Status, SubmissionResult, TestResult
from .collect import Submission
from .lms import nfc
from .roster import Roster

RESULTS_FILE = "grading-results.json"
_FIELDS = {f.name for f in dataclasses.fields(SubmissionResult)}


def settings(args) -> dict:
    """What a part regrade must share with the class's run (``args``: the command's options): the limits and the
    scan's policy."""
    names = ("case_timeout", "cell_timeout", "notebook_timeout", "memory_mb", "submission_timeout")
    return {
        **{n: getattr(args, n) for n in names},
        "strict_definitions": args.strict_definitions,
        "on_tamper": args.on_tamper,
    }


def results_file(seed_file: Path) -> Path:
    """Where a class's results are kept: beside its seed file."""
    return seed_file.parent / RESULTS_FILE


def as_dict(result: SubmissionResult) -> dict:
    """``result`` as plain JSON data (:func:`from_dict` gives it back, equal)."""
    return dataclasses.asdict(result)


def from_dict(data: dict) -> SubmissionResult:
    """A result back from :func:`as_dict`'s data; raises ValueError naming what does not fit."""
    if not isinstance(data, dict) or set(data) - _FIELDS:
        raise ValueError(
            f"not a kept result: fields {sorted(set(data) - _FIELDS) if isinstance(data, dict) else data!r}"
        )
    fields = dict(data)
    try:
        fields["tests"] = [TestResult(**{**t, "status": Status(t["status"])}) for t in data.get("tests", [])]
        fields["flags"] = [ReviewFlag(**f) for f in data.get("flags", [])]
        return SubmissionResult(**fields)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not a kept result ({exc})") from None


def read_kept(path: Path, key: str, settings: dict) -> list[SubmissionResult] | None:
    """The results kept for ``key`` in ``path`` (None when there are none).

    Raises ValueError if the file does not parse, or when they were graded with other ``settings``.
    """
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))["classes"].get(key)
        if entry is None:
            return None
        results, before = [from_dict(d) for d in entry["results"]], entry["settings"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a file of kept results ({exc}); grade the whole class again") from None
    changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
    if changed:
        was = ", ".join(f"{k} {before.get(k)!r} now {settings.get(k)!r}" for k in changed)
        raise ValueError(f"the class was graded with other settings ({was}): grade the whole class with them")
    return results


def keep(path: Path, key: str, results: list[SubmissionResult], write, settings: dict) -> None:
    """Keep ``results`` (as graded, before any policy) and the run's ``settings`` for ``key`` in ``path``."""
    try:
        classes = json.loads(path.read_text(encoding="utf-8"))["classes"] if path.exists() else {}
        if not isinstance(classes, dict):
            classes = {}
    except (ValueError, KeyError, TypeError):
        classes = {}
    classes[key] = {"settings": settings, "results": [as_dict(r) for r in results]}
    write(path, json.dumps({"classes": classes}, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


def select(rows: list[Submission], wanted: list[str], roster: Roster | None) -> list[Submission]:
    """The rows of the students ``wanted`` names (folder, submission path, roster id, name, username or email).

    Raises ValueError naming each name that matches no row.
    """
    chosen: set[str] = set()
    unknown = []
    for name in wanted:
        student = roster.find(name) if roster is not None else None
        hits = [
            row
            for row in rows
            if nfc(name) in {nfc(row.student), nfc(row.key), row.student_id, nfc(row.student_name)} - {""}
            or (student is not None and row.student_id == student.student_id)
        ]
        if not hits:
            unknown.append(name)
        chosen.update(row.key for row in hits)
    if unknown:
        raise ValueError(f"--only: no student {', '.join(map(repr, unknown))} in this class (a folder, id or name)")
    return [row for row in rows if row.key in chosen]  # the class's order


def check_exercises(exercises: list[str], known: set[str]) -> None:
    """Raise ValueError for an ``--exercise`` key that is no exercise of the assignment(s) graded."""
    wrong = [e for e in exercises if e not in known]
    if wrong:
        raise ValueError(
            f"--exercise: {', '.join(wrong)} is no exercise here; expected one of {', '.join(sorted(known))}"
        )


def _one_exercise(old: SubmissionResult, new: SubmissionResult, exercises: set[str]) -> SubmissionResult:
    """``old`` with the cases of ``exercises`` taken from ``new``, in the assignment's order of exercises."""
    if old.error or new.error or old.assignment != new.assignment:
        return new  # nothing to merge case by case: the new grade as a whole
    order = list(dict.fromkeys(t.exercise for t in new.tests))
    order += [e for e in dict.fromkeys(t.exercise for t in old.tests) if e not in order]
    source = {e: (new if e in exercises else old) for e in order}
    return dataclasses.replace(old, tests=[t for e in order for t in source[e].tests if t.exercise == e])


def check_complete(rows: list[Submission], kept: list[SubmissionResult], regraded: set[str]) -> None:
    """Raise ValueError when a row neither regraded nor kept (a student new to the folder) has no result."""
    old = {r.key for r in kept}
    missing = [row.key for row in rows if row.key not in regraded and row.key not in old]
    if missing:
        raise ValueError(
            f"no kept result for {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: "
            "grade the whole class (without --only) first"
        )


def merge(
    rows: list[Submission],
    kept: list[SubmissionResult],
    fresh: list[SubmissionResult],
    exercises: list[str],
) -> list[SubmissionResult]:
    """The whole class's results: ``fresh`` for the rows regraded, the ``kept`` one for every other row.

    The rows' order is the class's (as a full run gives). A kept result takes the row's current path
    and names (the class may have moved since). Raises ValueError for a row with no kept result.
    """
    new = {r.key: r for r in fresh}
    old = {r.key: r for r in kept}
    check_complete(rows, kept, set(new))
    merged = []
    for row in rows:
        if row.key in new:
            r = new[row.key]
            if exercises and row.key in old:
                r = _one_exercise(old[row.key], r, set(exercises))
        else:
            r = old[row.key]
            r.path = str(row.path or row.key)
        r.student, r.student_id, r.student_name = row.student, row.student_id, row.student_name
        merged.append(r)
    return merged
