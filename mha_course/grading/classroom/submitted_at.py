"""When each submission was handed in, as the platform recorded it (not the file's modification time).

A plain ``cp -r`` or an unzip gives every file a new modification time, so the late penalty and the
choice among a student's notebooks read the platform's own record first, in this order, each
platform's part in its module of :mod:`.lms`:

======================= ===============================================================================
the roster              a column of the submission's time: Moodle's grading worksheet ``Last modified
                        (submission)``, Canvas's submissions export ``Submitted at`` (its gradebook CSV
                        holds no time: there only the ``_LATE_`` marker of the download's file names tells),
                        any platform's ``submitted`` (:func:`.lms.columns` ``("time_columns")``)
the file name           a flat download whose platform writes the time in the name (:attr:`.lms.FlatName.submitted_at`)
a file of the platform  nbgrader's ``timestamp.txt`` in ``submitted/<student>/<assignment>/``
                        (``... 23:59:59.1 UTC``); Gradescope's ``submission_metadata.json`` beside the folder
                        given (``created_at``), as the autograder finds it in ``/autograder/``, outside the
                        student's upload (:func:`.lms.time_files`)
======================= ===============================================================================

A time without a zone (Moodle writes the instructor's local time) is read in ``zone``, the due
date's zone (UTC unless ``--due`` names one). Without any of these the file's modification time is
used and the row says so (:data:`FILE_TIME_WARNING`): the grader prints it and the report lists it.
"""

from __future__ import annotations

import re
from datetime import UTC, tzinfo
from pathlib import Path

from . import lms
from .collect import Submission
from .lms.times import parse_time
from .roster import Student

#: Roster columns of the submission's time that no one platform owns, asked after the platforms' own.
PLAIN_TIME_COLUMNS = ("submitted",)
FILE_TIME_WARNING = "timed by the file's modification time: the platform's record was not found (a copy resets it)"


def time_columns() -> tuple[str, ...]:
    """Roster columns holding the submission's time (case and spaces ignored), first found wins."""
    return (*lms.columns("time_columns"), *PLAIN_TIME_COLUMNS)


def _from_files(path: Path, assignment: str, roots: list[Path], zone: tzinfo) -> tuple[float | None, str]:
    """(time, source) from the file name (a platform that writes the time there) or a platform's file beside the
    submissions; each platform reads its file only where it writes it (a student can upload one with any date)."""
    named = lms.flat_name(path.name)
    if named is not None and named.submitted_at is not None:
        return named.submitted_at, "the platform's file name"
    for read in lms.time_files():
        when, source = read(path, assignment, roots, zone)
        if when is not None:
            return when, source
    return None, ""


def _from_roster(student: Student | None, zone: tzinfo) -> tuple[float | None, str]:
    if student is None:
        return None, ""
    by_norm = {re.sub(r"\s+", " ", c.strip().lower()): c for c in student.row}
    for wanted in time_columns():
        if wanted in by_norm:
            return parse_time(student.row[by_norm[wanted]] or "", zone), f"the roster's {by_norm[wanted]!r}"
    return None, ""


def stamp(rows: list[Submission], roots: list[str | Path], roster, zone: tzinfo = UTC) -> list[str]:
    """Set each graded row's :attr:`~.collect.Submission.submitted_at` from the platform's record.

    ``roster`` is the :class:`~.roster.Roster` (or None); rows must have been matched to it
    (:func:`.intake.identify`). Returns the problems met (a time that does not parse), one line each;
    such a row keeps no platform time.
    """
    by_id = {s.student_id: s for s in roster.students} if roster is not None else {}
    paths = [Path(r) for r in roots]
    problems = []
    for row in rows:
        if row.path is None:
            continue
        try:  # the instructor's export first: a file in a download may be the student's
            when, source = _from_roster(by_id.get(row.student_id), zone)
            if when is None:
                when, source = _from_files(Path(row.path), row.assignment or row.grade_as or "", paths, zone)
        except (ValueError, OSError, AttributeError) as exc:
            problems.append(f"{row.key}: {exc}")
            continue
        row.submitted_at, row.time_source = when, source if when is not None else ""
    return problems
