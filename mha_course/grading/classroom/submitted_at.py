"""When each submission was handed in, as the platform recorded it (not the file's modification time).

A plain ``cp -r`` or an unzip gives every file a new modification time, so the late penalty and the
choice among a student's notebooks read the platform's own record first, in this order:

======================= ===============================================================================
Moodle, Canvas, others  the roster's ``Last modified (submission)`` column (Moodle's grading worksheet),
                        or a ``Submitted at`` / ``submitted_at`` / ``Submission time`` column (Canvas's
                        submissions export; its gradebook CSV holds no time: there only the ``_LATE_``
                        marker of the download's file names tells)
nbgrader                ``timestamp.txt`` in ``submitted/<student>/<assignment>/`` (``... 23:59:59.1 UTC``)
Gradescope              ``submission_metadata.json`` beside the folder given (``created_at``), as the
                        autograder finds it in ``/autograder/``, outside the student's upload
======================= ===============================================================================

A time without a zone (Moodle writes the instructor's local time) is read in ``zone``, the due
date's zone (UTC unless ``--due`` names one). Without any of these the file's modification time is
used and the row says so (:data:`FILE_TIME_WARNING`): the grader prints it and the report lists it.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, tzinfo
from pathlib import Path

from .collect import Submission
from .roster import Student

NBGRADER_FILE = "timestamp.txt"
GRADESCOPE_FILE = "submission_metadata.json"
#: Roster columns holding the submission's time (case and spaces ignored), first found wins.
TIME_COLUMNS = ("last modified (submission)", "submitted at", "submitted_at", "submission time", "submitted")
FILE_TIME_WARNING = "timed by the file's modification time: the platform's record was not found (a copy resets it)"

_FORMATS = (  # Moodle's worksheet in English, with and without the weekday, 12 and 24 hours
    "%A, %d %B %Y, %I:%M %p",
    "%A, %d %B %Y, %H:%M",
    "%d %B %Y, %I:%M %p",
    "%d %B %Y, %H:%M",
)


def parse_time(text: str, zone: tzinfo = UTC) -> float | None:
    """A platform's time as a POSIX timestamp, or None when the text is empty or Moodle's ``-``.

    ISO 8601 (``2026-11-20T23:59:00Z``, ``2026-11-20 23:59:59.123 UTC``) and Moodle's
    ``Friday, 20 November 2026, 11:59 PM`` are read; a time without a zone is in ``zone``.
    Raises ValueError naming the text when it is none of these.
    """
    raw = (text or "").strip()
    if raw in ("", "-"):
        return None
    iso = re.sub(r"\s*(UTC|GMT|Z)$", "+00:00", raw)
    when = None
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        for fmt in _FORMATS:
            try:
                when = datetime.strptime(raw, fmt)
                break
            except ValueError:
                continue
    if when is None:
        raise ValueError(
            f"a submission time must be ISO 8601 or Moodle's 'Friday, 20 November 2026, 11:59 PM'; got {raw!r}"
        )
    return (when if when.tzinfo else when.replace(tzinfo=zone)).timestamp()


def _from_files(path: Path, assignment: str, roots: list[Path], zone: tzinfo) -> tuple[float | None, str]:
    """(time, source) from nbgrader's timestamp or Gradescope's metadata, only where the platform writes them.

    A student can upload a file named ``timestamp.txt`` or ``submission_metadata.json`` with any date in it,
    so neither is read from anywhere else: nbgrader's sits in the folder named after the assignment
    (``submitted/<student>/<assignment>/``), Gradescope's beside the folder given (``/autograder/``), outside
    the upload. Links are never read.
    """
    stamp = path.parent / NBGRADER_FILE
    if assignment and path.parent.name == assignment and stamp.is_file() and not stamp.is_symlink():
        return parse_time(stamp.read_text(encoding="utf-8", errors="replace")[:200], zone), f"nbgrader's {stamp.name}"
    for root in roots:
        meta = root.parent / GRADESCOPE_FILE
        inside = Path(os.path.abspath(root)) in Path(os.path.abspath(path)).parents
        if root.is_dir() and inside and meta.is_file() and not meta.is_symlink():
            created = json.loads(meta.read_text(encoding="utf-8")).get("created_at", "")
            return parse_time(str(created), zone), "Gradescope's submission metadata"
    return None, ""


def _from_roster(student: Student | None, zone: tzinfo) -> tuple[float | None, str]:
    if student is None:
        return None, ""
    by_norm = {re.sub(r"\s+", " ", c.strip().lower()): c for c in student.row}
    for wanted in TIME_COLUMNS:
        if wanted in by_norm:
            return parse_time(student.row[by_norm[wanted]] or "", zone), f"the roster's {by_norm[wanted]!r}"
    return None, ""


def stamp(rows: list[Submission], roots: list[str | Path], roster, zone: tzinfo = UTC) -> list[str]:
    """Set each graded row's :attr:`~.collect.Submission.submitted_at` from the platform's record.

    ``roster`` is the :class:`~.roster.Roster` (or None); rows must have been matched to it
    (:func:`.bookkeeping.identify`). Returns the problems met (a time that does not parse), one line each;
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
