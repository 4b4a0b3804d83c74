"""Moodle: a folder (or a flat file) per participant, the grading worksheet as roster and grade export.

Downloads name each student's folder ``Full Name_PARTICIPANT_assignsubmission_file_`` (a flat download
puts the same prefix before each file name). The grading worksheet holds ``Identifier``
("Participant 1234"), ``Last modified (submission)`` (the time, in the instructor's zone), ``Maximum
Grade``, ``Feedback comments`` and ``-`` in the grade column for "no grade yet". The course gradebook's
export splits the name (``First name``, ``Last name``: plain columns the roster joins) and has an
``Email address`` (its ``ID number`` is empty unless the site fills it in, so it is no id here).
"""

from __future__ import annotations

import re

from .format import FlatName, LmsFormat

#: ``Full Name_PARTICIPANT_assignsubmission_file_original name``.
_FLAT = re.compile(r"^(?P<who>.+?_\d+_assign(?:submission|feedback)_[a-z]+_)(?P<name>.+)$")


def flat_name(name: str) -> FlatName | None:
    match = _FLAT.match(name)
    return FlatName(match["who"], match["name"]) if match else None


FORMAT = LmsFormat(
    name="moodle",
    flat_name=flat_name,
    time_columns=("last modified (submission)",),
    id_columns=("identifier",),
    comment_columns=("feedback comments",),
    no_grade="-",
    max_columns=("maximum grade", "max grade"),
)
