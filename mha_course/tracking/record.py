"""Recording a verdict: what every check calls, and which never raises into a notebook or a graded run.

``check_prediction``, ``check_choice`` and ``check_exercise`` record ``right``, ``wrong`` or ``not yet``
under the running chapter and the check's name; the assignments' self-check records its score under the
assignment and exercise. Nothing is recorded inside the grader (its submission process sets the
self-check's ``GRADING``), when ``MHA_COURSE_PROGRESS=off``, or for a chapter that cannot be
identified (:mod:`.where`). A file that cannot be read or written costs the learner one line on
stderr, once per kernel, and never an exception: progress is a convenience, the notebook is the work.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from . import store, where

RIGHT, WRONG, NOT_YET = "right", "wrong", "not yet"
_warned: list[str] = []  # the one problem already shown in this process


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def in_grader() -> bool:
    """True inside the grader's submission process (the self-check there is the grader's no-op)."""
    selfcheck = sys.modules.get("mha_course.grading.learner.selfcheck")
    return bool(getattr(selfcheck, "GRADING", False))


def _warn_once(problem: str) -> None:
    if not _warned:
        _warned.append(problem)
        print(f"(progress not saved: {problem})", file=sys.stderr)


def _save(change: Any) -> bool:
    """Apply ``change`` to the progress file; False (and one line on stderr) when it cannot be done."""
    try:
        path = store.progress_file()
        if path is None or in_grader():
            return False
        store.update(path, change)
        return True
    except store.ProgressFileError as error:
        _warn_once(str(error))
    except Exception as error:  # whatever else goes wrong, the learner's check goes on
        _warn_once(f"{type(error).__name__}: {error}")
    return False


def record_check(name: str, verdict: str) -> bool:
    """Record a chapter's check ``name`` as ``verdict`` (right, wrong, not yet); True when saved."""
    try:
        if store.progress_file() is None or in_grader():
            return False
        chapter, path = where.current_chapter(name)
    except Exception:
        return False
    if chapter is None:
        return False

    def change(data: dict) -> None:
        entry = data["chapters"].setdefault(chapter, {})
        if path:
            entry["notebook"] = path
        entry.setdefault("checks", {})[name] = {"verdict": verdict, "at": _now()}

    return _save(change)


def record_selfcheck(assignment: str, exercise: str, score: float, checked: float, hidden: float) -> bool:
    """Record an assignment's self-check: ``score`` of the ``checked`` points, ``hidden`` more when graded.

    Not from a chapter's notebook: chapter 00 shows the self-check on a softmax of its own, which is not
    the learner's assignment.
    """
    try:
        if where.chapter_of_path(where.notebook_path()) is not None:
            return False
    except Exception:
        return False

    def change(data: dict) -> None:
        data["assignments"].setdefault(assignment, {})[exercise] = {
            "score": score,
            "checked": checked,
            "hidden": hidden,
            "at": _now(),
        }

    return _save(change)


def reset(what: str | None = None) -> list[str]:
    """Forget everything (``what`` None or ``"all"``), one chapter (``"12"``) or one assignment (``"a02_softmax"``).

    Returns the parts forgotten. Raises :class:`~.store.ProgressFileError` (unlike recording: the learner
    asked for this) when the file cannot be written, and ValueError when ``what`` names nothing recorded.
    """
    path = store.progress_file()
    if path is None:
        raise store.ProgressFileError(f"{store.ENV}=off: there is no progress file to reset")
    if what in (None, "all"):  # written afresh, unread: this also mends a file that cannot be read
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            store.write(path, store.empty())
        except OSError as error:
            raise store.ProgressFileError(f"cannot write the progress file {path}: {error}") from None
        return ["all"]
    if not isinstance(what, str):
        raise TypeError(f"what must be a chapter, an assignment or 'all' (a str), got {type(what).__name__}")
    wanted = what.strip().zfill(2) if what.strip().isdigit() else what.strip()
    forgotten: list[str] = []

    def change(data: dict) -> None:
        for part in ("chapters", "assignments"):
            # "a02" forgets a02_softmax; "a05" forgets both a05 assignments
            for key in [k for k in data[part] if k == wanted or (part == "assignments" and k.startswith(wanted + "_"))]:
                del data[part][key]
                forgotten.append(key)

    store.update(path, change)
    if not forgotten:
        raise ValueError(f"nothing recorded for {what!r}: give a chapter (e.g. '12'), an assignment or 'all'")
    return forgotten
