"""Written answers graded by hand: a rubric per assignment, and the instructor's points merged into the gradebook.

Some assignments ask for free-response Markdown (a06_debug_mha's bug log, a13's "Think about it"). In
the solution notebook such a cell is a Markdown cell whose nbgrader metadata says ``solution: true``
and which holds ``### BEGIN SOLUTION``: the prompt is what comes before, the model answer what lies
between. nbgrader gives them 0 (``grade: false``) and the tests cannot grade them, so:

* ``python -m mha_course.grading.classroom.manual rubric KEY --out DIR [--class FOLDER]`` writes
  ``DIR/KEY-rubric.md`` (each question: id, points, prompt, model answer) and
  ``DIR/KEY-manual.csv``, a sheet to fill: ``student,question,points,max_points,comment``, one row
  per student and question when the class folder is given;
* ``grade ... --manual-grades FILE`` merges it: each question becomes an exercise ``written:<id>``
  of the submission (its points in the score, the CSV, the feedback with the comment, the platform's
  export and results.json). A question without points yet is **pending**: it is shown as "pending"
  (never 0) in the CSV and the feedback; it counts in the maximum, so the score is what was given so far.

A question's points: the sheet's ``max_points``, else nbgrader's ``points`` in the cell's metadata,
else :data:`DEFAULT_POINTS`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..safe_text import clean, csv_cell
from ..verdicts import Status, SubmissionResult, TestResult

DEFAULT_POINTS = 5.0
PREFIX = "written:"  # exercise key of a question graded by hand
PENDING = "pending"
_SOLUTIONS = Path(__file__).resolve().parents[3] / "solutions"
_BEGIN, _END = "### BEGIN SOLUTION", "### END SOLUTION"


@dataclass(frozen=True)
class Question:
    """One free-response cell of a solution notebook."""

    key: str  # nbgrader's grade_id
    points: float
    prompt: str
    answer: str  # the model answer


@dataclass(frozen=True)
class ManualGrade:
    """One row of the sheet: a student's points for one question (None: not graded yet)."""

    student: str
    question: str
    points: float | None
    max_points: float | None
    comment: str
    assignment: str = ""


def questions(solution: str | Path) -> list[Question]:
    """The free-response questions of a solution notebook (see the module docstring), in order."""
    nb = json.loads(Path(solution).read_text(encoding="utf-8"))
    found: list[Question] = []
    for cell in nb.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") != "markdown" or not meta.get("solution") or _BEGIN not in source:
            continue
        prompt, _, rest = source.partition(_BEGIN)
        answer = rest.partition(_END)[0]
        points = float(meta["points"]) if meta.get("grade") and meta.get("points") else DEFAULT_POINTS
        found.append(Question(str(meta.get("grade_id", f"q{len(found) + 1}")), points, prompt.strip(), answer.strip()))
    return found


def assignment_questions(key: str) -> list[Question]:
    """The questions of assignment ``key`` from ``solutions/`` ([] when it has none or is not there)."""
    from ..engine import registry

    try:
        name = registry.get_assignment(key).notebook
    except (KeyError, ValueError, AttributeError):
        return []
    path = _SOLUTIONS / name
    return questions(path) if path.is_file() else []


def rubric_markdown(key: str, found: list[Question]) -> str:
    """The rubric to read while grading: each question's id, points, prompt and model answer."""
    lines = [f"# Rubric: {key} (written answers graded by hand)", ""]
    if not found:
        return "\n".join(lines + ["This assignment has no written answer to grade by hand.", ""])
    lines += [
        f"Enter points in `{key}-manual.csv` (student, question, points, max_points, comment) and grade with "
        "`--manual-grades` that file. An empty `points` is shown as pending, never as 0.",
        "",
    ]
    for q in found:
        lines += [f"## `{q.key}` ({q.points:g} points)", "", q.prompt, "", "**Model answer**", "", q.answer, ""]
    return "\n".join(lines)


def sheet(key: str, found: list[Question], students: list[str]) -> str:
    """The CSV to fill: one row per student and question (one example row per question without students)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["student", "question", "points", "max_points", "comment", "assignment"])
    for student in students or [""]:
        for q in found:
            writer.writerow([csv_cell(student), q.key, "", f"{q.points:g}", "", key])
    return out.getvalue()


def _number(text: str, what: str, row: int) -> float | None:
    text = text.strip()
    if not text or text.lower() == PENDING:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"manual grades, row {row}: {what} must be a number or empty; got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"manual grades, row {row}: {what} must be >= 0; got {text!r}")
    return value


def read_manual(path: str | Path) -> list[ManualGrade]:
    """Read ``student,question,points[,max_points][,comment][,assignment]``; raises ValueError naming a bad row."""
    reader = csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig")))
    columns = {(c or "").strip().lower() for c in reader.fieldnames or []}
    if not {"student", "question", "points"} <= columns:
        raise ValueError(
            f"{path}: manual grades need the columns student, question, points (and max_points, comment); "
            f"found {reader.fieldnames}"
        )
    grades = []
    for number, raw in enumerate(reader, start=2):
        row = {(k or "").strip().lower(): (v or "") for k, v in raw.items()}
        if not row["student"].strip() and not row["points"].strip():
            continue  # the template's example row
        if not row["student"].strip() or not row["question"].strip():
            raise ValueError(f"manual grades, row {number}: student and question are required")
        points = _number(row["points"], "points", number)
        most = _number(row.get("max_points", ""), "max_points", number)
        if points is not None and most is not None and points > most:
            raise ValueError(f"manual grades, row {number}: points {points:g} exceed max_points {most:g}")
        grades.append(
            ManualGrade(
                row["student"].strip(),
                row["question"].strip(),
                points,
                most,
                row.get("comment", "").strip(),
                row.get("assignment", "").strip(),
            )
        )
    return grades


def _identities(r: SubmissionResult) -> set[str]:
    return {s.casefold() for s in (r.student, r.student_id, r.student_name) if s}


def merge(results: list[SubmissionResult], grades: list[ManualGrade]) -> list[str]:
    """Add each graded submission's written questions as ``written:<id>`` tests; returns warnings.

    Every question of the assignment (from ``solutions/``, and any the sheet names) is added to every
    graded submission of it: with the sheet's points, else pending (out of its points, 0 given so far).
    A sheet row that matches no submission is a warning, never a silent loss.
    """
    warnings: list[str] = []
    used: set[int] = set()
    for r in results:
        if r.error or not r.assignment:
            continue
        found = {q.key: q for q in assignment_questions(r.assignment)}
        mine = [
            (i, g)
            for i, g in enumerate(grades)
            if g.student.casefold() in _identities(r) and (not g.assignment or g.assignment == r.assignment)
        ]
        keys = list(found) + [g.question for _, g in mine if g.question not in found]
        for key in dict.fromkeys(keys):
            given = [(i, g) for i, g in mine if g.question == key]
            used.update(i for i, _ in given)
            grade = given[-1][1] if given else None
            most = (grade.max_points if grade and grade.max_points is not None else None) or (
                found[key].points if key in found else DEFAULT_POINTS
            )
            r.tests = [t for t in r.tests if t.exercise != PREFIX + key]  # a regrade merges afresh
            r.tests.append(_test(key, most, grade))
            if grade is not None and grade.points is not None and grade.points > most:
                warnings.append(f"{clean(r.student)}: {key} has {grade.points:g} points of {most:g}")
        if any(g.points is None for g in [gr for _, gr in mine]) or any(
            t.exercise.startswith(PREFIX) and t.status == Status.NOT_RUN for t in r.tests
        ):
            note = "written answers graded by hand: pending"
            if note not in r.notes:
                r.notes.append(note)
        r.max_points = max(r.max_points, sum(t.points for t in r.tests))
    for i, g in enumerate(grades):
        if i not in used:
            warnings.append(f"manual grade for {clean(g.student)} ({clean(g.question)}) matches no graded submission")
    return warnings


def _test(key: str, most: float, grade: ManualGrade | None) -> TestResult:
    if grade is None or grade.points is None:
        return TestResult(
            PREFIX + key,
            f"Written answer {key} (graded by hand)",
            "graded by hand",
            most,
            0.0,
            Status.NOT_RUN,
            f"{PENDING}: your instructor has not graded this answer yet",
            False,
        )
    comment = clean(grade.comment) or "graded by hand"
    status = Status.PASSED if grade.points >= most else Status.FAILED
    return TestResult(
        PREFIX + key,
        f"Written answer {key} (graded by hand)",
        "graded by hand",
        most,
        grade.points,
        status,
        f"{grade.points:g} / {most:g} points from your instructor: {comment}",
        False,
    )


def pending(r: SubmissionResult) -> set[str]:
    """The exercise keys of ``r``'s written answers not graded yet."""
    return {t.exercise for t in r.tests if t.exercise.startswith(PREFIX) and t.status == Status.NOT_RUN}


def _students(folder: str) -> list[str]:
    from .collect import collect

    return sorted({row.student for row in collect([folder])})


def main(argv: list[str] | None = None) -> int:
    """``rubric KEY --out DIR [--class FOLDER]``: write the rubric and the sheet to fill."""
    parser = argparse.ArgumentParser(prog="python -m mha_course.grading.classroom.manual", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rubric = sub.add_parser("rubric", help="write KEY-rubric.md and KEY-manual.csv")
    rubric.add_argument("assignment")
    rubric.add_argument("--out", type=Path, default=Path("."))
    rubric.add_argument("--class", dest="class_folder", help="the class folder: one sheet row per student")
    args = parser.parse_args(argv)
    from ..engine import registry

    try:
        registry.get_assignment(args.assignment)
    except (KeyError, ValueError) as exc:
        parser.error(str(exc))
    found = assignment_questions(args.assignment)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.assignment}-rubric.md").write_text(rubric_markdown(args.assignment, found), encoding="utf-8")
    students = _students(args.class_folder) if args.class_folder else []
    (args.out / f"{args.assignment}-manual.csv").write_text(sheet(args.assignment, found, students), encoding="utf-8")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", args.assignment)
    print(f"{len(found)} written question(s): {args.out / (name + '-rubric.md')}, {args.out / (name + '-manual.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
