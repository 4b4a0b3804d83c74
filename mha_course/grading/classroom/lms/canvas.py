"""Canvas: one flat folder of files prefixed with the student, a gradebook CSV with a Points Possible row.

The bulk download names files ``lastfirst[_LATE]_USERID_SUBMISSIONID_original name`` (the name in any
letters, ``núñezjosé``; ``LATE`` marks a submission after the due date). The gradebook export holds
``SIS User ID``, ``SIS Login ID``, a "Points Possible" row with each assignment's maximum, and takes
``EX`` for an excused student; the submissions export holds ``Submitted at``.
"""

from __future__ import annotations

import re

from .format import FlatName, LmsFormat

_FLAT = re.compile(r"^(?P<who>[^\W\d_]+)_(?P<late>LATE_)?(?P<id>\d+)_\d+_(?P<name>.+)$")


def flat_name(name: str) -> FlatName | None:
    match = _FLAT.match(name)
    return FlatName(f"{match['who']}_{match['id']}", match["name"], bool(match["late"])) if match else None


def gradebook(columns: list[str], has_max_row: bool) -> bool:
    """A Canvas gradebook: it has the Points Possible row or SIS columns."""
    return has_max_row or any(c.startswith("SIS ") for c in columns)


FORMAT = LmsFormat(
    name="canvas",
    flat_name=flat_name,
    time_columns=("submitted at", "submitted_at", "submission time"),
    id_columns=("sis user id",),
    user_columns=("sis login id",),
    excused="EX",
    gradebook=gradebook,
    max_columns=("points possible",),
    max_row="points possible",
)
