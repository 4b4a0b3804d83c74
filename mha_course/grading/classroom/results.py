"""What the grader writes: Gradescope's results.json, a CSV gradebook, a class summary, a text report.

Gradescope's format (https://gradescope-autograders.readthedocs.io, "Output format")::

    {"score": 27.0, "execution_time": 3.1, "output": "...",
     "visibility": "visible", "stdout_visibility": "hidden",
     "tests": [{"name": "softmax_np: rows sum to 1", "number": "1.1", "score": 2.0, "max_score": 2.0,
                "status": "passed", "output": "passed", "tags": ["softmax_np", "passed"],
                "visibility": "visible"}, ...],
     "extra_data": {"max_score": 29.0, "student": ..., "seed": ..., "isolation": {...}, ...}}

Public cases are ``"visible"``; hidden cases are ``"after_published"`` (the learner sees them once
the instructor publishes grades, so hidden tests cannot be probed one submission at a time, yet
the final feedback explains every lost point). Files are written atomically (temporary file,
then rename), and the grader writes results.json last, from its own process, to the path it was
given -- whatever a submission wrote elsewhere is never read.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from pathlib import Path

from ..safe_text import clean, csv_cell, shorten
from ..verdicts import CASES_SEE, Status, SubmissionResult
from ..walls import tiers
from . import manual, review_flags
from .report import excused_note, sections
from .seeds import reproduce_line


def _visibility(hidden: bool) -> str:
    return "after_published" if hidden else "visible"


def _numbers(result: SubmissionResult) -> list[str]:
    """Gradescope's ``number`` of each test: exercise.case, in the assignment's order ("2.3")."""
    order: dict[str, int] = {}
    seen: dict[str, int] = {}
    out = []
    for t in result.tests:
        order.setdefault(t.exercise, len(order) + 1)
        seen[t.exercise] = seen.get(t.exercise, 0) + 1
        out.append(f"{order[t.exercise]}.{seen[t.exercise]}")
    return out


def headline(result: SubmissionResult) -> str:
    """The submission's one-line score, revealing nothing about hidden tests while any exist.

    With hidden tests: "visible tests: 12 / 14 points; 3 more tests (12 points) are graded after
    grades are published", so the total cannot be read before the deadline.
    """
    if result.error:
        return f"Could not grade {clean(Path(result.path).name)}: {result.error}"
    head = f"{result.title} ({result.assignment}, version {result.version})"
    hidden = [t for t in result.tests if t.hidden]
    if not hidden:
        return f"{head}: {result.score:g} / {result.max_score:g} points"
    visible = [t for t in result.tests if not t.hidden]
    return (
        f"{head}: visible tests {sum(t.score for t in visible):g} / {sum(t.points for t in visible):g} "
        f"points; {len(hidden)} more tests ({sum(t.points for t in hidden):g} points) are graded after "
        "grades are published"
    )


def gradescope(result: SubmissionResult) -> dict:
    """One submission as Gradescope's results.json dictionary (the documented fields only, plus extra_data)."""
    tests = [
        {
            "name": t.name,
            "number": number,
            "score": t.score,
            "max_score": t.points,
            "status": "passed" if t.status == Status.PASSED else "failed",  # Gradescope's own two values
            "output": t.output,
            "tags": [t.exercise, t.status.replace(" ", "_")],
            "visibility": _visibility(t.hidden),
        }
        for t, number in zip(result.tests, _numbers(result), strict=True)
    ]
    lines = [headline(result)] + ([f"- late: {result.late_note}"] if result.late_note else [])
    lines += [f"- {sentence}" for sentence in review_flags.learner_sentences(result)]
    lines += [f"- {note}" for note in result.notes]
    if result.tests and result.input_seed is not None:
        lines.append(f"- {reproduce_line(result.input_seed)}")
    if result.isolation and result.isolation.get("tier") != tiers.registered()[0].label:  # below the strongest
        lines.append(f"- {result.isolation.get('summary', 'graded without isolation')}")
    if result.isolation and result.isolation.get("cases_see") == CASES_SEE[True]:
        lines.append(f"- each test saw {CASES_SEE[True]}")
    return {
        "score": result.score,
        "execution_time": round(result.execution_time, 3),
        "output": "\n".join(lines),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"max_score": result.max_score, **provenance(result)},
    }


def provenance(result: SubmissionResult) -> dict:
    """What reproduces and explains a grade: who, which file, assignment, version, seed, isolation."""
    return {
        "student": result.student,
        "student_id": result.student_id,
        "submission": result.key or clean(result.path),
        "assignment": result.assignment,
        "version": result.version,
        "seed": result.seed,
        "input_seed": result.input_seed,
        "isolation": result.isolation,
        "on_tamper": result.on_tamper,
        "review": {
            "state": result.review_state,
            "label": result.flag_label,
            "decision": result.review,
            "count": max(result.flag_count, len(result.flags)),
            "flags": [f.as_dict() for f in result.flags],
        },
        "copied_reference": result.copied,
        "overrides": {k: v for k, v in result.adjustments.items()},
        "raw_score": result.raw_score,
        "adjustments": list(result.adjustment_log),
        "late_days": result.late_days,
        "late_penalty": result.late_penalty,
        "late": result.late_note,
        "lms_max": result.lms_max,
        "lms_score": result.lms_score,
    }


def merged_gradescope(results: list[SubmissionResult]) -> dict:
    """Several notebooks in one Gradescope submission: scores add up, test names get the file name."""
    if len(results) == 1:
        return gradescope(results[0])
    parts = [gradescope(r) for r in results]
    tests = [
        dict(t, name=f"{clean(Path(r.path).name)} | {t['name']}")
        for r, p in zip(results, parts, strict=True)
        for t in p["tests"]
    ]
    return {
        "score": sum(p["score"] for p in parts),
        "execution_time": round(sum(p["execution_time"] for p in parts), 3),
        "output": "\n\n".join(p["output"] for p in parts),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "max_score": sum(p["extra_data"]["max_score"] for p in parts),
            "isolation": results[0].isolation,
            "on_tamper": results[0].on_tamper,
            "seed": results[0].seed,
            "submissions": [p["extra_data"] for p in parts],
        },
    }


def results_file_name(result: SubmissionResult) -> str:
    """A file name for one submission's results.json, unique per submission key (never shared).

    The readable part is the key with unsafe characters replaced; a hash of the exact key keeps two
    keys that read alike (``a b/x.ipynb`` and ``a_b/x.ipynb``) apart.
    """
    import hashlib
    import re

    key = result.key or result.path
    # \w keeps every letter (José Núñez stays readable); anything else, and lone surrogates, become _
    readable = re.sub(r"[^\w.-]+", "_", key.replace("/", "__"))[-120:].strip("._") or "submission"
    try:
        raw = key.encode("utf-8", "surrogateescape")  # a non-UTF-8 name: its bytes
    except UnicodeEncodeError:
        raw = key.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(raw).hexdigest()[:8]
    return f"{readable}-{digest}.results.json"


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write ``text`` (str, or bytes as they are) to ``path`` through a temporary file and a rename.

    A path that exists and is not a regular file (``/dev/null``, ``/dev/stdout``, a pipe) is written
    in place: renaming over it would replace the device with a file.
    """
    path = Path(path)
    # backslashreplace: a lone surrogate that reached here is written escaped, never aborts the run
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    if path.exists() and not path.is_file():
        with open(path, "wb") as handle:
            handle.write(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600: give the mode open() would have given
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting and restoring it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: str | Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def gradebook_rows(results: list[SubmissionResult]) -> tuple[list[str], list[dict]]:
    """(columns, rows): one row per submission (student, file), a column per exercise, then what reproduces it."""
    exercises: list[str] = []
    for r in results:
        for key in r.raw_exercise_scores():
            if key not in exercises:
                exercises.append(key)
    columns = [
        "student",
        "student_id",
        "name",
        "submission",
        "assignment",
        "version",
        *exercises,
        "raw",
        "adjustments",
        "final",
        "total",
        "max_score",
        "late_days",
        "lms_grade",
        "lms_max",
        "status",
        "review",
        "copied_reference",
        "notes",
        "seed",
        "input_seed",
        "isolation",
        "on_tamper",
    ]
    rows = []
    for r in results:
        scores = r.exercise_scores()
        waived = [k for k, v in r.adjustments.items() if v is None]
        row = {
            "student": r.student or clean(Path(r.path).name),
            "student_id": r.student_id,
            "name": r.student_name,
            "submission": r.key or clean(r.path),
            "assignment": r.assignment or "",
            "version": r.version or "",
            **{k: f"{scores[k]:g}" if k in scores else ("waived" if k in waived else "") for k in exercises},
            **{k: manual.PENDING for k in manual.pending(r) if k in exercises and k not in r.adjustments},
            "raw": f"{r.raw_score:g}",
            "adjustments": "; ".join(r.adjustment_log),
            "final": f"{r.score:g}",
            "total": f"{r.score:g}",
            "max_score": f"{r.max_score:g}",
            "late_days": str(r.late_days) if r.late_days else "",
            "lms_grade": "" if r.lms_score is None else f"{round(r.lms_score, 2):g}",
            "lms_max": "" if r.lms_max is None else f"{r.lms_max:g}",
            "status": f"error: {r.error}" if r.error else "graded",
            "review": review_flags.instructor_line(r),
            "copied_reference": "; ".join(r.copied),
            "notes": " | ".join(r.notes),
            "seed": "" if r.seed is None else str(r.seed),
            "input_seed": "" if r.input_seed is None else str(r.input_seed),
            "isolation": (r.isolation or {}).get("kind", ""),
            "on_tamper": r.on_tamper,
        }
        rows.append(row)
    return columns, rows


def write_csv(path: str | Path, results: list[SubmissionResult]) -> None:
    """The class gradebook as CSV (see :func:`gradebook_rows`); no cell can start a spreadsheet formula."""
    import io

    columns, rows = gradebook_rows(results)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([csv_cell(c) for c in columns])
    writer.writerows([csv_cell(row[c]) for c in columns] for row in rows)
    write_atomic(path, buf.getvalue())


def class_summary(results: list[SubmissionResult], limit: int = 8) -> str:
    """What the class gets wrong, one short block per assignment (never averaged across assignments).

    Per assignment: how many were graded, mean and median out of its maximum, each exercise's mean
    and share of full marks, then its ``limit`` commonest misconceptions (the root causes of
    :mod:`.feedback`, counted in students). The full picture is ``--report``'s.
    """
    graded = [r for r in results if not r.error]
    lines = [f"{len(results)} submission(s), {len(graded)} graded, {len(results) - len(graded)} could not be graded"]
    flagged = [r for r in results if r.flags and not r.review]
    if flagged:
        policy = review_flags.policy_line(flagged[0].on_tamper)
        lines.append(f"{len(flagged)} flagged for review by the static scan ({policy}; see --report or the CSV)")
    for section in sections(results):
        scores = sorted(section.scores)
        if not scores:
            lines.append(f"{section.key}: none graded")
            continue
        median = (
            scores[len(scores) // 2]
            if len(scores) % 2
            else (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2
        )
        lines.append(
            f"{section.key}: {len(scores)} graded, mean {sum(scores) / len(scores):.1f} / "
            f"{section.max_score:g}, median {median:g}" + excused_note(section)
        )
        for key, _title, mean, most, full in section.exercises:
            lines.append(f"  {key}: mean {mean:.1f} / {most:g}, full marks {full:.0%}")
        if not section.misconceptions:
            lost = [r for r in section.graded if any(t.status != Status.PASSED for t in r.tests)]
            if not lost:
                lines.append("  every graded test passed in every submission")
            else:
                lines.append(
                    f"  no wrong result to group, yet {len(lost)} submission(s) lost points: to cells that raised "
                    "or to tests that did not run (see --report)"
                )
            continue
        lines.append("  commonest mistakes (students, each counted once per exercise: exercise: hint):")
        for exercise, cause, who in section.misconceptions[:limit]:
            lines.append(f"  {len(who):>3}  {exercise}: {shorten(cause, 140)}")
        if len(section.misconceptions) > limit:
            lines.append(f"  ... and {len(section.misconceptions) - limit} more (see --report)")
    return "\n".join(lines)


def text_report(result: SubmissionResult) -> str:
    """A submission's verdicts as a plain-text table (what the CLI prints for one notebook)."""
    if result.error:
        return f"{clean(result.path)}: could not be graded: {result.error}"
    lines = [
        f"{clean(result.path)}: {result.title} (version {result.version}): {result.score:g} / {result.max_score:g} "
        f"points in {result.execution_time:.1f} s"
    ]
    for t in result.tests:
        mark = "PASS" if t.status == Status.PASSED else t.status.upper()
        hidden = " (hidden)" if t.hidden else ""
        lines.append(f"  [{mark}] {t.score:g}/{t.points:g}  {t.name}{hidden}")
        if t.status != Status.PASSED:
            lines.append(f"         -> {t.output}")
    if result.flags:
        lines.append(f"  {review_flags.instructor_line(result)}")
        lines.append(f"  {review_flags.policy_line(result.on_tamper)}")
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def terminal_summary(results: list[SubmissionResult], missing: list[str], quiet: bool = False) -> list[str]:
    """The grader's lines on the terminal: one submission's report, or a line per student (not ``quiet``)
    and the class summary; then the roster's students with no submission."""
    lines = []
    if len(results) == 1 and not quiet:
        lines.append(text_report(results[0]))
    elif len(results) > 1:
        if not quiet:
            for r in results:  # learner text is clean (one line, no escapes): see safe_text
                status = f"error: {r.error}" if r.error else f"{r.score:g} / {r.max_score:g}"
                status += f" ({r.review_state})" if r.flags else ""
                lines.append(f"{r.key or clean(r.path)}: {status}")
        lines.append(class_summary(results))
    if missing:
        lines.append(f"no submission from {len(missing)} student(s) of the roster: {clean(', '.join(missing))}")
    return lines
