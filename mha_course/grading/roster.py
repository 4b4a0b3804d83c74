"""The class list: who a submission belongs to, the grade file a platform imports, and per-student overrides.

A roster is a CSV. Any platform's export works as long as it has an identifier column; the first
of these names found is used (case and spaces ignored):

========== ===================================================================
id         ``id``, ``student_id``, ``identifier`` (Moodle: "Participant 1234"), ``sis user id``
name       ``name``, ``student``, ``full name``
match      ``match``, ``folder``, ``file``: an explicit folder or file name (optional)
========== ===================================================================

A submission's student folder (or file) is matched to a roster row by ``match`` (equal, or a
prefix of the folder's name), else by the row's numeric id appearing as a ``_``-separated part of
it: Moodle names folders ``Full Name_1234_assignsubmission_file_`` and Canvas files
``lastfirst_1234_5678_name.ipynb``, both holding the id of the platform's own export.

:func:`write_grades` writes that same roster back with the grade filled in, so the platform takes
it as it gave it (Moodle's grading worksheet has a "Grade" column; for Canvas name the assignment's
column). :func:`read_overrides` reads the instructor's per-student decisions, applied on every
(re)grade.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from .safe_text import csv_cell

_ID_COLUMNS = ("id", "student_id", "studentid", "identifier", "sis user id", "username", "email")
_NAME_COLUMNS = ("name", "student", "full name", "fullname", "student name")
_MATCH_COLUMNS = ("match", "folder", "file", "submission")


def _norm(column: str) -> str:
    return re.sub(r"\s+", " ", column.strip().lower().replace("\ufeff", ""))


def _find(columns: list[str], wanted: tuple[str, ...]) -> str | None:
    by_norm = {_norm(c): c for c in columns}
    return next((by_norm[w] for w in wanted if w in by_norm), None)


@dataclass
class Student:
    """One row of the roster (``row`` keeps every column, to write the file back as it came)."""

    student_id: str
    name: str
    match: str
    row: dict[str, str] = field(default_factory=dict)

    @property
    def number(self) -> str:
        """The id's digits (Moodle's "Participant 1234" -> "1234"), as platforms put them in file names."""
        digits = re.findall(r"\d+", self.student_id)
        return digits[-1] if digits else ""


@dataclass
class Roster:
    columns: list[str]
    students: list[Student]
    # rows without an id (Canvas's "Points Possible"), by their place among the rows: written back as they came
    other_rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def find(self, folder: str) -> Student | None:
        """The roster row a student folder (or file) name belongs to, or None."""
        for s in self.students:
            if s.match and (folder == s.match or folder.startswith(s.match)):
                return s
        parts = set(re.split(r"[_\s]+", folder))
        hits = [s for s in self.students if s.number and s.number in parts]
        return hits[0] if len(hits) == 1 else None


def read_roster(path: str | Path) -> Roster:
    """Read a roster CSV; raises ValueError naming the columns expected and found."""
    text = Path(path).read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    columns = list(reader.fieldnames or [])
    id_col, name_col, match_col = (_find(columns, w) for w in (_ID_COLUMNS, _NAME_COLUMNS, _MATCH_COLUMNS))
    if id_col is None:
        raise ValueError(
            f"{path}: the roster needs an id column (one of {', '.join(_ID_COLUMNS)}); found columns {columns}"
        )
    students, other_rows = [], []
    for row in reader:
        if not (row.get(id_col) or "").strip():
            other_rows.append((len(students) + len(other_rows), dict(row)))  # Canvas's "Points Possible" row
            continue
        students.append(
            Student(
                row[id_col].strip(),
                (row.get(name_col) or "").strip() if name_col else "",
                (row.get(match_col) or "").strip() if match_col else "",
                dict(row),
            )
        )
    return Roster(columns, students, other_rows)


def write_grades(path: str | Path, roster: Roster, grades: dict[str, float | None], column: str, write) -> None:
    """The roster as it came, with ``column`` (added if new) holding each student's grade.

    ``grades`` maps student ids to points (None or absent: left empty, e.g. no submission).
    ``write`` is the atomic writer of :mod:`.results`.
    """
    return write_grade_columns(path, roster, {column: grades}, write)


def write_grade_columns(
    path: str | Path,
    roster: Roster,
    columns: dict[str, dict[str, float | None]],
    write,
    comments: dict[str, str] | None = None,
) -> None:
    """The roster as it came, with one grade column per entry of ``columns`` (column -> student id -> points).

    Rows without an id (Canvas's "Points Possible") stay where they were, as they were. ``comments``
    (student id -> one line) fills the roster's feedback-comments column when it has one (Moodle's
    worksheet: "Feedback comments"). Every cell is written through :func:`.safe_text.csv_cell`: none
    can start a spreadsheet formula.
    """
    names = roster.columns + [c for c in columns if c not in roster.columns]
    comment_col = next((c for c in roster.columns if _norm(c) in {"feedback comments", "feedback"}), None)
    rows: list[dict[str, str]] = []
    for s in roster.students:
        row = dict(s.row)
        for column, grades in columns.items():
            grade = grades.get(s.student_id)
            row[column] = "" if grade is None else f"{grade:g}"
        if comment_col and comments and s.student_id in comments:
            row[comment_col] = comments[s.student_id]
        rows.append(row)
    for index, row in roster.other_rows:
        rows.insert(index, row)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([csv_cell(c) for c in names])
    for row in rows:
        writer.writerow([csv_cell(row.get(c) or "") for c in names])
    write(path, buf.getvalue())


@dataclass(frozen=True)
class Override:
    """An instructor's decision for one student: ``points`` for one exercise (or ``*``: the total)."""

    student: str  # a student id, a student folder name or a submission key
    exercise: str  # an exercise key, or "*" for the whole submission
    points: float | None  # None: waive (the exercise, or the submission, leaves the maximum too)
    reason: str
    assignment: str = ""  # empty: any assignment

    def applies_to(self, result) -> bool:
        """Whether this override names ``result``'s student (id, folder or submission key) and assignment."""
        who = {result.student_id, result.student, result.key} - {""}
        return self.student in who and self.assignment in ("", result.assignment)


def apply_overrides(results, overrides: list[Override]) -> None:
    """Record every matching override on its result (``adjustments``) with a note saying so."""
    for r in results:
        for o in overrides:
            if o.applies_to(r):
                r.adjustments[o.exercise] = o.points
                what = "the whole submission" if o.exercise == "*" else f"exercise {o.exercise}"
                value = "waived" if o.points is None else f"set to {o.points:g} points"
                r.notes.append(f"instructor override: {what} {value}" + (f" ({o.reason})" if o.reason else ""))


def read_overrides(path: str | Path) -> list[Override]:
    """Read ``student,exercise,points,reason[,assignment]`` rows (points ``waive`` or empty: waived).

    Raises ValueError naming the row that does not parse.
    """
    reader = csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig")))
    need = {"student", "exercise", "points"}
    if not need <= {_norm(c) for c in reader.fieldnames or []}:
        raise ValueError(
            f"{path}: overrides need the columns student, exercise, points (and reason); found {reader.fieldnames}"
        )
    out = []
    for number, row in enumerate(reader, start=2):
        row = {_norm(k): (v or "").strip() for k, v in row.items() if k}
        raw = row["points"].lower()
        try:
            points = None if raw in ("", "waive", "waived", "excused") else float(raw)
        except ValueError:
            raise ValueError(
                f"{path}, line {number}: points must be a number or 'waive'; got {row['points']!r}"
            ) from None
        out.append(
            Override(row["student"], row["exercise"] or "*", points, row.get("reason", ""), row.get("assignment", ""))
        )
    return out
