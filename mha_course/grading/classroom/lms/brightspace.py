"""TRIAL ONLY: a Brightspace-like platform: flat files named SUBMISSION-ATTEMPT - WHO - TIME - name, a grades CSV.

The download names each file ``123456-654321 - alice - Nov 20, 2026 1000 PM - a02.ipynb`` (the time of the
attempt, read as UTC here); the grade export holds ``OrgDefinedId``, ``Username`` (``#alice``), ``Email``,
the maximum in the grade column's name (``a02 Points Grade <Numeric MaxPoints:12>``) and an
``End-of-Line Indicator`` column.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .format import FlatName, LmsFormat

_FLAT = re.compile(r"^\d+-\d+ - (?P<who>.+?) - (?P<when>[A-Z][a-z]{2} \d{1,2}, \d{4} \d{3,4} [AP]M) - (?P<name>.+)$")
_MAX = re.compile(r"<Numeric MaxPoints:(?P<points>\d+(?:\.\d+)?)")


def flat_name(name: str) -> FlatName | None:
    match = _FLAT.match(name)
    if not match:
        return None
    when = datetime.strptime(match["when"], "%b %d, %Y %I%M %p")
    return FlatName(match["who"], match["name"], submitted_at=when.replace(tzinfo=UTC).timestamp())


def column_max(column: str) -> float | None:
    match = _MAX.search(column)
    return float(match["points"]) if match else None


FORMAT = LmsFormat(
    name="brightspace",
    flat_name=flat_name,  # the student, the name they gave, the time of the attempt
    id_columns=("orgdefinedid",),
    column_max=column_max,  # the maximum points, for --grades-out's scale
)
