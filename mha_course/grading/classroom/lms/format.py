"""What the grader knows of one learning platform (an LMS), in one record: :class:`LmsFormat`.

Everything is optional: a platform fills in what it does differently, and :mod:`.` (the registry)
asks every registered platform in turn. The fields follow a submission through the grader:

* **collect**: :attr:`LmsFormat.flat_name` reads a flat download's file name (Canvas's
  ``martinalice_1234_5678_a02.ipynb``): whose it is, the name the student gave, a late marker, a time;
* **when handed in**: :attr:`LmsFormat.time_columns` (the roster's column of the submission time) and
  :attr:`LmsFormat.time_file` (a file the platform writes beside the submissions);
* **the roster and the grade export**: :attr:`LmsFormat.id_columns`, :attr:`LmsFormat.user_columns`,
  :attr:`LmsFormat.name_columns` (or a name split in :attr:`LmsFormat.first_name_columns` and
  :attr:`LmsFormat.last_name_columns`), :attr:`LmsFormat.comment_columns`, the cells it writes for "no grade yet" and "excused";
* **the maximum points**: :attr:`LmsFormat.max_columns`, :attr:`LmsFormat.max_row` (a row holding each
  column's maximum) and :attr:`LmsFormat.column_max` (a maximum written in a column's own name).

Column names are compared lower case with runs of spaces as one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path


@dataclass(frozen=True)
class FlatName:
    """A flat download's file name, read: whose it is and what the platform says about it."""

    student: str  # the student the file belongs to (files of one student are grouped by it)
    original: str  # the file name the student gave
    late: bool = False  # the platform marks it handed in after the due date
    submitted_at: float | None = None  # the time the name records (POSIX), None: none


#: ``time_file(notebook path, assignment key, the folders given, zone)`` -> (time or None, where it came from).
TimeFile = Callable[[Path, str, list[Path], tzinfo], tuple[float | None, str]]


def _no_flat_name(name: str) -> FlatName | None:
    return None


def _no_column_max(column: str) -> float | None:
    return None


def _not_its_gradebook(columns: list[str], has_max_row: bool) -> bool:
    return False


@dataclass(frozen=True)
class LmsFormat:
    """One learning platform's conventions; see the module's docstring for where each is used."""

    name: str
    flat_name: Callable[[str], FlatName | None] = _no_flat_name
    time_columns: tuple[str, ...] = ()
    time_file: TimeFile | None = None
    id_columns: tuple[str, ...] = ()  # asked after the plain "id", "student_id" and before "username", "email"
    user_columns: tuple[str, ...] = ()  # login names, asked after the plain "username", "login", "user"
    name_columns: tuple[str, ...] = ()  # a full name, asked before the plain "name", "student", "full name"
    first_name_columns: tuple[str, ...] = ()  # a name split in two (no full-name column): asked after "first name"
    last_name_columns: tuple[str, ...] = ()  # ... and after "last name", "surname"
    comment_columns: tuple[str, ...] = ()  # where the grade export writes each student's feedback line
    no_grade: str = ""  # the cell the platform writes for "no grade yet" (written back as it came)
    excused: str = ""  # the cell that excuses a student, written in this platform's gradebook only
    gradebook: Callable[[list[str], bool], bool] = _not_its_gradebook  # (roster columns, has a max_row) -> its own?
    max_columns: tuple[str, ...] = ()  # a column holding the maximum grade (one value for all rows)
    max_row: str = ""  # a row, by its name cell, holding each grade column's maximum
    column_max: Callable[[str], float | None] = _no_column_max  # the maximum a grade column's name carries
