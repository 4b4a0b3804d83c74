"""A platform's time as the grader reads it: ISO 8601, or Moodle's worksheet's English dates."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

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
