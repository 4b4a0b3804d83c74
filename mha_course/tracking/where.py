"""Which chapter is running: the notebook's path as the front end tells the kernel, else the check's name.

Front ends tell a kernel which notebook it runs in different ways: JupyterLab and Notebook 7 set
``JPY_SESSION_NAME`` in the kernel's environment (the notebook's path), ipykernel also binds it as
``__session__``, and VS Code binds ``__vsc_ipynb_file__`` in the notebook's namespace. Where none of
them does (nbclient, papermill, Colab, an old front end), ``MHA_COURSE_NOTEBOOK`` may name the notebook;
failing that, the check's own name says it: every chapter's check names (``check_prediction("my_D", ...)``)
are read from the notebooks folder, and a name that only one chapter uses identifies that chapter.

A path identifies a chapter when its file name starts with the chapter's two digits
(``12_flash_attention_idea.ipynb``, a learner's ``12_flash_attention_idea-Copy1.ipynb`` too).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path

NOTEBOOK_ENV = "MHA_COURSE_NOTEBOOK"  # the explicit fallback: the running notebook's path or file name
CHAPTER_FILE = re.compile(r"^(\d\d)_[^/\\]*\.ipynb$")
CHECK_CALL = re.compile(r"""\bcheck_(?:prediction|choice|exercise)\(\s*["']([A-Za-z_]\w*)["']""")
# The course's own notebooks, when the package runs from the course's folder (not from an installed copy)
COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def notebook_path() -> str | None:
    """The running notebook's path as the front end gave it, or ``MHA_COURSE_NOTEBOOK``; None if none did."""
    found = os.environ.get("JPY_SESSION_NAME")
    if not found:
        namespace = _user_namespace()
        found = namespace.get("__vsc_ipynb_file__") or namespace.get("__session__")
    if not found:
        found = os.environ.get(NOTEBOOK_ENV)
    return str(found) if found else None


def _user_namespace() -> dict:
    """The notebook's global names (IPython's user namespace), or {} outside IPython."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        return shell.user_ns if shell is not None else {}
    except Exception:  # an IPython without a shell: no names
        return {}


def chapter_of_path(path: str | None) -> str | None:
    """``"12"`` for ``.../12_flash_attention_idea.ipynb``; None for any other file name."""
    if not path:
        return None
    match = CHAPTER_FILE.match(re.split(r"[/\\]", path)[-1])
    return match[1] if match else None


def check_names(notebook: Path) -> list[str]:
    """The names a chapter checks (``check_prediction("my_D", ...)``, ``check_exercise(...)``), in order, once each.

    Read from the notebook's code cells as plain JSON (no nbformat: the library does not need it);
    a file that cannot be read names none.
    """
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return []
    names: list[str] = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else str(source)
            names += [n for n in CHECK_CALL.findall(source) if n not in names]
    return names


def chapter_files(folder: Path = COURSE_NOTEBOOKS) -> dict[str, Path]:
    """{"00": path, ...}: the chapters in ``folder`` ({} when the folder is not there)."""
    try:
        paths = sorted(folder.glob("*.ipynb"))
    except OSError:
        return {}
    return {chapter_of_path(p.name): p for p in paths if chapter_of_path(p.name)}  # type: ignore[misc]


@functools.lru_cache(maxsize=4)
def _chapters_by_name(folder: Path) -> dict[str, str | None]:
    """{check name: chapter}, None for a name two chapters use."""
    owner: dict[str, str | None] = {}
    for chapter, path in chapter_files(folder).items():
        for name in check_names(path):
            owner[name] = chapter if owner.get(name, chapter) == chapter else None
    return owner


def current_chapter(name: str, folder: Path = COURSE_NOTEBOOKS) -> tuple[str | None, str | None]:
    """(chapter, notebook path) for a check called ``name`` in this kernel; (None, path) when neither tells."""
    path = notebook_path()
    chapter = chapter_of_path(path)
    if chapter is None:
        chapter = _chapters_by_name(folder).get(name)
    return chapter, path
