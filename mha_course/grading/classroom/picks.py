"""Which notebook of a student the instructor chose to grade (``--pick student=file``, or a CSV of them).

A pick overrides the usual rule (the notebook named like the assignment's, else the newest): the
student may have uploaded a draft last. The student is named by their folder (or Canvas prefix), or
anything the roster knows them by; the file by its path below the student's folder or its name.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .class_files import FileKind
from .lms import nfc, original_name


def read_picks(values: list[str]) -> dict[str, str]:
    """Student -> file from ``student=file`` values, or CSV files with columns ``student`` and ``file``.

    Raises ValueError naming the value or row that does not parse.
    """
    picks: dict[str, str] = {}
    for value in values:
        path = Path(value)
        if value.lower().endswith(".csv") and path.is_file():
            reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig")))
            if not {"student", "file"} <= {c.strip().lower() for c in reader.fieldnames or []}:
                raise ValueError(f"{value}: picks need the columns student and file; found {reader.fieldnames}")
            for number, row in enumerate(reader, start=2):
                row = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
                if not row["student"] or not row["file"]:
                    raise ValueError(f"{value}, line {number}: student and file must both be given")
                picks[nfc(row["student"])] = row["file"]
            continue
        student, sep, file = value.rpartition("=")
        if not sep or not student.strip() or not file.strip():
            raise ValueError(f"--pick takes STUDENT=FILE or a CSV file of student,file; got {value!r}")
        picks[nfc(student.strip())] = file.strip()
    return picks


def picked(student: str, files: list, pick: str) -> tuple[list, str | None]:
    """The student's files (collect's entries) once ``pick`` is the only notebook among them, or why there is none."""
    want = nfc(pick).strip("/")
    hits = [
        f
        for f in files
        if f.kind in (FileKind.NOTEBOOK, FileKind.FALLBACK)
        and (
            nfc(f.rel) == want
            or nfc(f.rel).endswith("/" + want)
            or nfc(original_name(f.rel)) == want
            or nfc(Path(f.rel).name) == want
        )
    ]
    if not hits:
        found = ", ".join(f.rel for f in files) or "nothing"
        return [], f"the notebook picked for {student} ({pick}) is not among its files (found: {found})"
    for f in files:
        if f not in hits and f.kind in (FileKind.NOTEBOOK, FileKind.FALLBACK):
            f.kind, f.unreadable = FileKind.OTHER, None
    return files, None
