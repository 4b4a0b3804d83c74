"""Gradescope: one student's upload (``--one-submission``), its time in ``submission_metadata.json``.

The autograder finds ``submission_metadata.json`` in ``/autograder/``, beside the folder given and
outside the student's upload (``created_at``).
"""

from __future__ import annotations

import json
import os
from datetime import tzinfo
from pathlib import Path

from .format import LmsFormat
from .times import parse_time

TIME_FILE = "submission_metadata.json"


def time_file(path: Path, assignment: str, roots: list[Path], zone: tzinfo) -> tuple[float | None, str]:
    """``created_at`` of the metadata beside a folder given that holds ``path``; never through a link."""
    for root in roots:
        meta = root.parent / TIME_FILE
        inside = Path(os.path.abspath(root)) in Path(os.path.abspath(path)).parents
        if root.is_dir() and inside and meta.is_file() and not meta.is_symlink():
            created = json.loads(meta.read_text(encoding="utf-8")).get("created_at", "")
            return parse_time(str(created), zone), "Gradescope's submission metadata"
    return None, ""


FORMAT = LmsFormat(name="gradescope", time_file=time_file)
