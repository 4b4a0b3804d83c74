"""The class list: who a submission belongs to, the grade file a platform imports, and per-student overrides.

A roster is a CSV. Any platform's export works as long as it has an identifier column; the first
of these names found is used (case and spaces ignored):

========== ===================================================================
id         ``id``, ``student_id``, each platform's own (:mod:`.lms`: Moodle's ``identifier``)
name       each platform's own, ``name``, ``student``, ``full name``; with none of these,
           ``first name`` and ``last name`` (``surname``, ``family name``, then each platform's) joined
match      ``match``, ``folder``, ``file``: an explicit folder or file name (optional)
username   ``username``, ``login``, ``user``, ``login id`` (JupyterHub, nbgrader: the folder's name)
email      ``email``, ``email address``
========== ===================================================================

A submission's student folder (or file) is matched to a roster row, first rule that finds exactly
one row: ``match`` (equal, or a prefix of the folder's name); the folder *is* a username, email
(or its part before ``@``) or id (JupyterHub and nbgrader name folders by user); the row's
numeric id appears as a ``_``-separated part of it (Moodle names folders
``Full Name_1234_assignsubmission_file_`` and Canvas files ``lastfirst_1234_5678_name.ipynb``,
both holding the id of the platform's own export); the folder starts with the row's name (Moodle's
``Full Name_``) or is Canvas's ``lastfirst`` of it. Names compare in Unicode (NFC, case folded):
``José Núñez`` stays ``José Núñez``.

:func:`write_grades` writes that same roster back with the grade filled in, so the platform takes
it as it gave it (Moodle's grading worksheet has a "Grade" column; for Canvas name the assignment's
column). Overrides and the late policy live in :mod:`.policy`.

More in ``docs/design/grader.md`` (mha_course.grading.classroom.roster).
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ..safe_text import csv_cell
from . import lms

_ID_FIRST, _ID_LAST = ("id", "student_id", "studentid"), ("username", "email", "email address")
_USER_COLUMNS = ("username", "login", "user", "login id", "user name")
_EMAIL_COLUMNS = ("email", "email address", "e-mail")
_MAX_COLUMNS = ("maximum",)
_COMMENT_COLUMNS = ("feedback",)
_NAME_COLUMNS = ("name", "student", "full name", "fullname", "student name")
_FIRST_NAME_COLUMNS = ("first name", "firstname", "given name", "given names")
_LAST_NAME_COLUMNS = ("last name", "lastname", "surname", "family name")
_MATCH_COLUMNS = ("match", "folder", "file", "submission")
_NAME_PARTS = ((_FIRST_NAME_COLUMNS, "first_name_columns"), (_LAST_NAME_COLUMNS, "last_name_columns"))


def _id_columns() -> tuple[str, ...]:
    """The plain id columns, with each platform's own (:mod:`.lms`: Moodle's "identifier", ...) between them."""
    return (*_ID_FIRST, *lms.columns("id_columns"), *_ID_LAST)


def _columns(plain: tuple[str, ...], field: str) -> tuple[str, ...]:
    """The platforms' columns of one kind (``field`` of :class:`.lms.LmsFormat`), then the plain ones."""
    return (*lms.columns(field), *(c for c in plain if c not in lms.columns(field)))


def _plain_then(plain: tuple[str, ...], field: str) -> tuple[str, ...]:
    """The plain column names of one kind, then the platforms' own (``field`` of :class:`.lms.LmsFormat`)."""
    return (*plain, *(c for c in lms.columns(field) if c not in plain))


def _norm(column: str) -> str:
    return re.sub(r"\s+", " ", column.strip().lower().replace("\ufeff", ""))


def _find(columns: list[str], wanted: tuple[str, ...]) -> str | None:
    by_norm = {_norm(c): c for c in columns}
    return next((by_norm[w] for w in wanted if w in by_norm), None)


def fold(text: str) -> str:
    """Text compared as a person reads it: Unicode NFC, case folded, outer spaces removed."""
    return unicodedata.normalize("NFC", text).casefold().strip()


def _letters(text: str) -> str:
    return "".join(ch for ch in fold(text) if ch.isalpha())


@dataclass
class Student:
    """One row of the roster (``row`` keeps every column, to write the file back as it came)."""

    student_id: str
    name: str
    match: str
    row: dict[str, str] = field(default_factory=dict)
    username: str = ""
    email: str = ""
    first_name: str = ""  # where the roster splits the name in two columns
    last_name: str = ""

    def identities(self) -> set[str]:
        """Every name an override or a ``--pick`` may use for this student."""
        return {v for v in (self.student_id, self.name, self.username, self.email) if v}

    def logins(self) -> set[str]:
        """Folded names a folder may be named by: username, email and its local part, id."""
        out = {fold(v) for v in (self.username, self.email, self.student_id) if v}
        if "@" in self.email:
            out.add(fold(self.email.split("@", 1)[0]))
        return out

    def name_forms(self) -> set[str]:
        """Canvas's ``lastfirst`` of the name (either order: "Martin, Alice" or "Alice Martin")."""
        if self.first_name and self.last_name:  # known parts: "Anna" + "van der Berg"
            first, last = self.first_name, self.last_name
        elif not self.name:
            return set()
        elif "," in self.name:
            last, first = self.name.split(",", 1)
        else:
            *given, last = self.name.split()
            first = " ".join(given)
        return {_letters(last + first), _letters(first + last)} - {""}

    @property
    def number(self) -> str:
        """The id's digits (Moodle's "Participant 1234" -> "1234"), as platforms put them in file names."""
        digits = re.findall(r"\d+", self.student_id)
        return digits[-1] if digits else ""


@dataclass
class Roster:
    columns: list[str]
    students: list[Student]
    points_possible: dict[str, float] = field(default_factory=dict)  # column -> the platform's maximum
    # rows without an id (Canvas's "Points Possible"), by their place among the rows: written back as they came
    other_rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def find(self, folder: str) -> Student | None:
        """The roster row a student folder (or file) name belongs to, or None (no rule finds exactly one)."""
        return self.find_closeness(folder)[0]

    def find_closeness(self, folder: str) -> tuple[Student | None, int]:
        """:meth:`find`, and how closely the folder matched: 0 when it is the row's id, username, email
        or match column exactly, higher for each looser rule (case and Unicode folded, the id's digits
        among its parts, the name). Two folders matched to one student are told apart by it: a folder
        named ``ALICE`` beside ``alice`` must not replace alice's notebook by being newer."""
        for s in self.students:
            if folder in (s.student_id, s.username, s.email, s.match) and folder:
                return s, 0
        for s in self.students:
            if s.match and (folder == s.match or folder.startswith(s.match)):
                return s, 1
        folded = fold(folder)
        parts = set(re.split(r"[_\s]+", folder))
        head = folded.split("_", 1)[0]
        rules = (
            lambda s: folded in s.logins(),
            lambda s: bool(s.number) and s.number in parts,
            lambda s: bool(s.name) and folded.startswith(fold(s.name) + "_"),
            lambda s: _letters(head) in s.name_forms(),
        )
        for closeness, rule in enumerate(rules, start=2):
            hits = [s for s in self.students if rule(s)]
            if len(hits) == 1:
                return hits[0], closeness
        return None, len(rules) + 2

    def max_for(self, column: str) -> float | None:
        """The platform's maximum for grade ``column``: its Points Possible, else what the column's name carries,
        else one Maximum Grade for all rows."""
        if column in self.points_possible:
            return self.points_possible[column]
        if (in_name := lms.column_max(column)) is not None:
            return in_name
        col = _find(self.columns, _columns(_MAX_COLUMNS, "max_columns"))
        values = {s.row.get(col, "").strip() for s in self.students} - {""} if col else set()
        try:
            return float(values.pop()) if len(values) == 1 else None
        except ValueError:
            return None


def _cell(row: dict, column: str | None) -> str:
    return unicodedata.normalize("NFC", (row.get(column) or "").strip()) if column else ""


def read_roster(path: str | Path) -> Roster:
    """Read a roster CSV; raises ValueError naming the columns expected and found."""
    text = Path(path).read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    columns = list(reader.fieldnames or [])
    user_columns = _plain_then(_USER_COLUMNS, "user_columns")
    id_col, name_col, match_col, user_col, email_col = (
        _find(columns, w)
        for w in (_id_columns(), _columns(_NAME_COLUMNS, "name_columns"), _MATCH_COLUMNS, user_columns, _EMAIL_COLUMNS)
    )
    first_col, last_col = (_find(columns, _plain_then(plain, field)) for plain, field in _NAME_PARTS)
    if id_col is None:
        raise ValueError(
            f"{path}: the roster needs an id column (one of {', '.join(_id_columns())}); found columns {columns}"
        )
    max_rows = lms.max_rows()
    students: list[Student] = []
    possible: dict[str, float] = {}
    other_rows: list[tuple[int, dict[str, str]]] = []
    for row in reader:
        if name_col and fold(row.get(name_col) or "") in max_rows:
            for column, value in row.items():  # Canvas's "Points Possible": each assignment column's maximum
                try:
                    possible[column] = float(value)
                except (TypeError, ValueError):
                    pass
        if not (row.get(id_col) or "").strip():
            other_rows.append((len(students) + len(other_rows), dict(row)))  # Canvas's "Points Possible" row
            continue
        name, match, user, email, first, last = (
            _cell(row, c) for c in (name_col, match_col, user_col, email_col, first_col, last_col)
        )
        if not name:  # no full-name column, or an empty cell in it: the two parts
            name = " ".join(part for part in (first, last) if part)
        students.append(Student(row[id_col].strip(), name, match, dict(row), user, email, first, last))
    if not students:
        raise ValueError(f"{path}: no row has an id in the column {id_col!r}, so the roster names no student")
    return Roster(columns, students, possible, other_rows)


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
    excused: dict[str, set[str]] | None = None,
) -> None:
    """The roster as it came, with one grade column per entry of ``columns`` (column -> student id -> points).

    Rows without an id (Canvas's "Points Possible") stay where they were, as they were. ``comments``
    (student id -> one line) fills the roster's feedback-comments column when it has one (Moodle's
    worksheet: "Feedback comments"). Every cell is written through :func:`.safe_text.csv_cell`: none
    can start a spreadsheet formula. ``excused`` (column -> student ids) writes Canvas's ``EX`` in a
    Canvas gradebook (one with a "Points Possible" row or SIS columns); elsewhere the cell stays empty.
    """
    excused_cell = lms.excused_cell(roster.columns, bool(roster.points_possible))
    no_grade = lms.no_grade_cells()
    names = roster.columns + [c for c in columns if c not in roster.columns]
    comment_col = _find(roster.columns, _columns(_COMMENT_COLUMNS, "comment_columns"))
    rows: list[dict[str, str]] = []
    for s in roster.students:
        row = dict(s.row)
        for column, grades in columns.items():
            grade = grades.get(s.student_id)
            # no grade: empty, or the platform's own mark (Moodle's "-": "no grade yet") as it came
            came = (s.row.get(column) or "").strip()
            row[column] = (came if came in no_grade else "") if grade is None else f"{grade:g}"
            if grade is None and excused_cell and s.student_id in (excused or {}).get(column, set()):
                row[column] = excused_cell
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
