"""nbgrader (and JupyterHub): a folder per user, ``submitted/<student>/<assignment>/timestamp.txt`` with the time."""

from __future__ import annotations

from datetime import tzinfo
from pathlib import Path

from .format import LmsFormat
from .times import parse_time

TIME_FILE = "timestamp.txt"


def time_file(path: Path, assignment: str, roots: list[Path], zone: tzinfo) -> tuple[float | None, str]:
    """nbgrader's ``timestamp.txt``, read only in the folder named after the assignment (a student could
    upload one anywhere else); never through a link."""
    stamp = path.parent / TIME_FILE
    if assignment and path.parent.name == assignment and stamp.is_file() and not stamp.is_symlink():
        return parse_time(stamp.read_text(encoding="utf-8", errors="replace")[:200], zone), f"nbgrader's {stamp.name}"
    return None, ""


FORMAT = LmsFormat(name="nbgrader", time_file=time_file)
