"""The progress file: one plain JSON file per learner, where it lives, read and written safely.

Where: ``$MHA_COURSE_PROGRESS`` when set (a path; ``off`` records nothing), else the user's data
folder, ``mha_course/progress.json`` in ``$XDG_DATA_HOME`` (``~/.local/share`` when unset) on Linux,
``~/Library/Application Support`` on macOS, ``%APPDATA%`` on Windows. Not beside the course: a fresh
clone, ``git clean`` or a second copy of the course keep the learner's record, and it never ends up in
a commit. ``python -m mha_course.progress --where`` prints the path.

What (``format`` 1), readable and editable by hand::

    {"format": 1,
     "chapters": {"12": {"notebook": "12_flash_attention_idea.ipynb",
                         "checks": {"my_m": {"verdict": "right", "at": "2026-11-29T10:02:11Z"}}}},
     "assignments": {"a02_softmax": {"softmax": {"score": 10, "checked": 11, "hidden": 4,
                                                 "at": "2026-11-29T10:30:00Z"}}}}

A verdict is ``right``, ``wrong`` or ``not yet``; a later check of the same name replaces it. Each write
goes to a temporary file that then replaces the old one, under a lock where the system has one (an
empty ``progress.json.lock`` beside it), so a crash or a second kernel leaves either the old file or
the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENV = "MHA_COURSE_PROGRESS"
OFF = "off"
FORMAT = 1


class ProgressFileError(RuntimeError):
    """The progress file cannot be read or written; the message names the file and what to do."""


def data_folder() -> Path:
    """The user's data folder for applications, by the platform's convention."""
    home = Path.home()
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    return Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")


def progress_file() -> Path | None:
    """Where progress is kept: ``$MHA_COURSE_PROGRESS``, else the data folder's ``mha_course/progress.json``;
    None when ``MHA_COURSE_PROGRESS=off``."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() == OFF:
        return None
    return Path(chosen).expanduser() if chosen else data_folder() / "mha_course" / "progress.json"


def empty() -> dict[str, Any]:
    return {"format": FORMAT, "chapters": {}, "assignments": {}}


def load(path: Path) -> dict[str, Any]:
    """The file's record (an empty one when there is no file yet).

    Raises:
        ProgressFileError: the file cannot be read, is not JSON, or is not a progress record.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return empty()
    except (OSError, UnicodeDecodeError) as error:
        raise ProgressFileError(f"cannot read the progress file {path}: {error}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ProgressFileError(
            f"the progress file {path} is not valid JSON ({error}); mend it by hand, or start afresh with "
            "`python -m mha_course.progress --reset`"
        ) from None
    if not (isinstance(data, dict) and isinstance(data.get("chapters", {}), dict)):
        raise ProgressFileError(f"the progress file {path} holds no progress record; move it away to start afresh")
    if not isinstance(data.get("assignments", {}), dict):
        raise ProgressFileError(f"the progress file {path} holds no progress record; move it away to start afresh")
    return {**empty(), **data}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside ``path`` where the system offers one (POSIX), so two kernels take turns."""
    try:
        import fcntl
    except ImportError:  # Windows: the atomic replace alone
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Read the record, apply ``change`` to it, and write it back atomically.

    Raises:
        ProgressFileError: the file cannot be read (see :func:`load`) or written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            data = load(path)
            change(data)
            write(path, data)
    except OSError as error:
        raise ProgressFileError(f"cannot write the progress file {path}: {error}") from None


def write(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder (never half a file)."""
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    handle, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
