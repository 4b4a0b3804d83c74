"""The learning platforms (LMS) the grader reads and writes, one module each, in one registry.

A platform's conventions are one :class:`~.format.LmsFormat` in a module of this folder
(:mod:`.moodle`, :mod:`.canvas`, :mod:`.nbgrader`, :mod:`.gradescope`), registered by its name in
:data:`PLATFORMS`: adding a platform is one new module and one word there (CONTRIBUTING.md, "Add an LMS
format"). The grader asks the registry, never a platform by name: :func:`flat_name` when it groups a
download's files by student (:mod:`..collect`), :func:`columns` when it reads a roster or writes the grade
export (:mod:`..roster`), :func:`time_files` when it looks for the time a submission was handed in
(:mod:`..submitted_at`). Platforms are asked in the order registered; the first that knows wins.

Names are kept in Unicode (NFC), whatever the zip tool wrote.
"""

from __future__ import annotations

import importlib
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager

from .format import FlatName, LmsFormat, TimeFile

#: The platforms shipped, by module name, in the order they are asked.
PLATFORMS = ("moodle", "canvas", "nbgrader", "gradescope")
#: Folders of a JupyterHub collection that are the instructor's own, not a student's (``--skip-folders``).
INSTRUCTOR_FOLDERS = ("jupyter-admin",)

_registered: list[LmsFormat] = [importlib.import_module(f"{__name__}.{name}").FORMAT for name in PLATFORMS]


def formats() -> list[LmsFormat]:
    """Every registered platform, in the order they are asked."""
    return list(_registered)


def register_lms(platform: LmsFormat) -> LmsFormat:
    """Add a platform (asked after those registered before it); raises ValueError if its name is taken."""
    if not isinstance(platform, LmsFormat):
        raise TypeError(f"register_lms takes an LmsFormat; got {type(platform).__name__}")
    if any(p.name == platform.name for p in _registered):
        raise ValueError(f"an LMS format named {platform.name!r} is registered already")
    _registered.append(platform)
    return platform


def unregister_lms(name: str) -> None:
    """Remove the platform of this name (no error if absent)."""
    _registered[:] = [p for p in _registered if p.name != name]


@contextmanager
def registered_lms(platform: LmsFormat) -> Iterator[LmsFormat]:
    """``with registered_lms(FORMAT):`` -- the platform is known for the block only (tests, a trial)."""
    register_lms(platform)
    try:
        yield platform
    finally:
        unregister_lms(platform.name)


def nfc(name: str) -> str:
    """One spelling per name: a zip tool may write ``é`` as e + accent (NFD), which must not split a student."""
    return unicodedata.normalize("NFC", name)


def flat_name(file_name: str) -> FlatName | None:
    """A flat download's file name as the first platform that knows its pattern reads it, or None."""
    name = nfc(file_name)
    return next((found for p in _registered if (found := p.flat_name(name)) is not None), None)


def student_of(rel: str) -> str:
    """The student a path belongs to: its first folder, or for a flat file its platform's prefix, or its name."""
    parts = nfc(rel).split("/")
    if len(parts) > 1:
        return parts[0]
    found = flat_name(parts[0])
    return found.student if found else parts[0]


def original_name(rel: str) -> str:
    """The file name the student gave, without a flat download's platform prefix."""
    name = nfc(rel).rsplit("/", 1)[-1]
    found = flat_name(name)
    return found.original if found else name


def columns(field: str) -> tuple[str, ...]:
    """Every platform's column names of one kind (``"id_columns"``, ``"time_columns"``, ...), in order, once each."""
    found: list[str] = []
    for p in _registered:
        found += [c for c in getattr(p, field) if c not in found]
    return tuple(found)


def time_files() -> list[TimeFile]:
    """The platforms' readers of a time file beside the submissions, in order."""
    return [p.time_file for p in _registered if p.time_file is not None]


def no_grade_cells() -> set[str]:
    """The cells platforms write for "no grade yet" (written back as they came)."""
    return {p.no_grade for p in _registered if p.no_grade}


def excused_cell(roster_columns: list[str], has_max_row: bool) -> str:
    """The cell that excuses a student in this roster's platform ("" where the platform has none)."""
    return next((p.excused for p in _registered if p.excused and p.gradebook(roster_columns, has_max_row)), "")


def max_rows() -> set[str]:
    """The name cells of rows that hold each column's maximum (Canvas's "points possible")."""
    return {p.max_row for p in _registered if p.max_row}


def column_max(column: str) -> float | None:
    """The maximum a grade column's own name carries, as the first platform that writes one reads it."""
    return next((m for p in _registered if (m := p.column_max(column)) is not None), None)
