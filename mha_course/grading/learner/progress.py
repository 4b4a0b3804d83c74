"""The learner's progress, listed: ``mha_course.progress()`` in a notebook, ``python -m mha_course.progress`` in a shell.

Per chapter (00-17): how many of its checks the learner has answered (predictions made, functions
written) and how many were right, of the checks the chapter has (its ``check_prediction``,
``check_choice`` and ``check_exercise`` calls, counted in the notebook when the notebooks folder is
there). Per assignment: the self-check's score on the public cases, exercise by exercise, and the
points its hidden cases add when graded. What was recorded comes from the progress file
(:mod:`mha_course.tracking.store`); the listing only reads it, and a file it cannot read is named,
with what to do, instead of raising.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...tracking import record, store, where

CHAPTERS = [f"{n:02d}" for n in range(18)]


@dataclass
class ChapterRow:
    chapter: str
    title: str
    checks: int | None  # how many the chapter has; None when its notebook is not at hand
    answered: int  # predictions made, functions written (right or wrong)
    right: int

    def text(self) -> str:
        if self.checks == 0:
            return "no checks in this chapter"
        if not self.answered:
            return "not started" + (f" ({self.checks} check{'s' if self.checks > 1 else ''})" if self.checks else "")
        of = f" of {self.checks}" if self.checks else ""
        return f"{self.answered}{of} answered, {self.right} right"


@dataclass
class AssignmentRow:
    assignment: str
    score: float | None  # None: no exercise self-checked yet
    checked: float  # the public cases' points
    hidden: float  # the hidden cases' points (the grader's alone)
    unchecked: list[str]  # exercises not self-checked yet

    def text(self) -> str:
        total = f"{_fmt(self.checked + self.hidden)} points when graded"
        if self.score is None:
            return f"not checked yet ({total})"
        rest = f"; not checked yet: {', '.join(self.unchecked)}" if self.unchecked else ""
        return f"{_fmt(self.score)} of the {_fmt(self.checked)} points checked here ({total}){rest}"


@dataclass
class Progress:
    """What ``mha_course.progress()`` returns: the rows, the file, and a problem reading it (or "")."""

    file: Path | None
    chapters: list[ChapterRow] = field(default_factory=list)
    assignments: list[AssignmentRow] = field(default_factory=list)
    problem: str = ""

    def __str__(self) -> str:
        head = f"Your progress (kept in {self.file})" if self.file else f"Progress is not kept ({store.ENV}=off)"
        lines = [head] + ([f"  ! {self.problem}"] if self.problem else []) + ["", "Chapters"]
        lines += [f"  {row.chapter}  {_cut(row.title, 44):<44}  {row.text()}" for row in self.chapters]
        lines += ["", "Assignments (self-check on the public cases)"]
        lines += [f"  {row.assignment:<24}  {row.text()}" for row in self.assignments]
        lines += ["", "A check run again replaces its verdict. Start afresh: python -m mha_course.progress --reset"]
        return "\n".join(lines)

    __repr__ = __str__  # a notebook shows the listing as the cell's value


def _fmt(x: float) -> str:
    return f"{x:g}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _title(path: Path | None) -> str:
    """The notebook's first ``# `` heading, without its "Chapter NN:" prefix ("" when unreadable)."""
    if path is None:
        return ""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return ""
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        for line in ("".join(source) if isinstance(source, list) else str(source)).splitlines():
            if line.startswith("# "):  # "# 12 — The FlashAttention idea: ...", "# 00 · Start here"
                return re.sub(r"^\d+\s*[·—–-]\s*", "", line[2:].strip())
    return ""


def chapter_rows(data: dict[str, Any], folder: Path = where.COURSE_NOTEBOOKS) -> list[ChapterRow]:
    """One row per chapter, 00-17 (and any other chapter recorded), from the record and the notebooks."""
    files = where.chapter_files(folder)
    rows = []
    for chapter in sorted(set(CHAPTERS) | set(data.get("chapters", {}))):
        entry = data.get("chapters", {}).get(chapter, {})
        recorded = entry.get("notebook") if isinstance(entry, dict) else None
        path = files.get(chapter)
        if path is None and recorded and Path(recorded).is_file():
            path = Path(recorded)
        checks = entry.get("checks", {}) if isinstance(entry, dict) else {}
        names = where.check_names(path) if path is not None else None
        checks = checks if isinstance(checks, dict) else {}
        # a name the chapter no longer checks (an older version of it) does not count
        verdicts = [
            v.get("verdict") for n, v in checks.items() if isinstance(v, dict) and (names is None or n in names)
        ]
        rows.append(
            ChapterRow(
                chapter=chapter,
                title=_title(path),
                checks=len(names) if names is not None else None,
                answered=sum(v in (record.RIGHT, record.WRONG) for v in verdicts),
                right=sum(v == record.RIGHT for v in verdicts),
            )
        )
    return rows


def assignment_rows(data: dict[str, Any]) -> list[AssignmentRow]:
    """One row per assignment the grader knows (and any other recorded), from the record and the registry."""
    from ..engine.registry import assignments

    recorded = data.get("assignments", {})
    rows = []
    for assignment in sorted(assignments(), key=lambda a: a.key):
        entries = recorded.get(assignment.key, {}) if isinstance(recorded.get(assignment.key), dict) else {}
        score, unchecked = None, []
        for exercise in assignment.exercises:
            entry = entries.get(exercise.key)
            if isinstance(entry, dict) and isinstance(entry.get("score"), (int, float)):
                score = (score or 0) + entry["score"]
            else:
                unchecked.append(exercise.key)
        rows.append(
            AssignmentRow(
                assignment=assignment.key,
                score=score,
                checked=sum(c.points for e in assignment.exercises for c in e.cases if not c.hidden),
                hidden=sum(c.points for e in assignment.exercises for c in e.cases if c.hidden),
                unchecked=unchecked,
            )
        )
    return rows


def progress(reset: str | None = None) -> Progress:
    """Your progress through the course: per chapter, checks answered and right; per assignment, the self-check.

    Args:
        reset: forget what was recorded first: ``"all"``, a chapter (``"12"``) or an assignment
            (``"a02_softmax"``, or ``"a02"``).

    Returns:
        a :class:`Progress`; it shows as a table in a notebook (``print`` it elsewhere).

    Raises:
        ValueError: ``reset`` names nothing recorded. (Reading never raises: a file that cannot be
            read is named in the listing, with what to do.)
    """
    if reset is not None:
        record.reset(reset)
    path = store.progress_file()
    listing = Progress(path)
    data = store.empty()
    if path is not None:
        try:
            data = store.load(path)
        except store.ProgressFileError as error:
            listing.problem = str(error)
    listing.chapters = chapter_rows(data)
    listing.assignments = assignment_rows(data)
    return listing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.progress",
        description="List your progress through the course: per chapter, the checks you answered and got right; "
        "per assignment, your self-check score and what the hidden tests add when graded. Checks record "
        f"themselves as you run them, in a JSON file (${store.ENV} chooses another; {store.OFF} records nothing).",
    )
    parser.add_argument("--where", action="store_true", help="print the progress file's path and stop")
    parser.add_argument("--json", action="store_true", help="print the raw record (the file's JSON)")
    parser.add_argument(
        "--reset",
        nargs="?",
        const="all",
        metavar="WHAT",
        help="forget what was recorded: everything (no WHAT), a chapter (12) or an assignment (a02_softmax)",
    )
    args = parser.parse_args(argv)
    path = store.progress_file()
    if args.where:
        print(path if path is not None else f"{store.ENV}=off: nothing is recorded")
        return 0
    try:
        if args.reset is not None:
            print(f"forgotten: {', '.join(record.reset(args.reset))}")
            return 0
        if args.json:
            print(json.dumps(store.load(path) if path else store.empty(), indent=1, sort_keys=True))
            return 0
    except (store.ProgressFileError, ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(progress())
    return 0


if __name__ == "__main__":
    sys.exit(main())
