"""Sphinx extension: the notebooks beside their pages, and the whole course as one zip, for a reader to run.

After an HTML build (``build-finished``):

- ``notebooks/NN_x.ipynb`` and ``exercises/aNN_x.ipynb`` beside each page: the notebook as a
  learner opens it (:func:`learner_notebook`: outputs stripped, the chapters' ``answers`` cells
  left out as on the page) and, where the site has a repository, a first cell that installs the
  course's library when it is missing (on Colab; a no-op in the course's own environment);
- ``mha-course.zip`` at the site's root (:func:`write_course_zip`): what ``make lab`` needs to start
  the course locally (:data:`COURSE_FILES`): the chapters and exercises as above, the library, its
  requirements, the Makefile and the README. Never ``solutions/`` or ``tests/``; the grader's hidden
  cases are cut out of its exercise modules (:func:`without_hidden_cases`), which keep their public
  cases, so the learner's ``check()`` works as in the repository.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import zipfile
from pathlib import Path

from course_content import DOWNLOAD_CHECK, _source, web_text
from course_pages import ANSWERS_TAG, COURSE_ZIP

ROOT = Path(__file__).resolve().parent.parent
ZIP_FOLDER = "mha-course"  # the folder the zip unpacks into
# What the zip holds, relative to the repository: files, and folders taken whole (but for _SKIPPED).
COURSE_FILES = (
    "README.md",
    "LICENSE",
    "Makefile",
    "requirements.txt",
    "pyproject.toml",
    "jupyter",
    "notebooks",
    "exercises",
    "mha_course",
    "benchmarks",
)
_SKIPPED = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
HIDDEN_CASE_MODULES = "mha_course/grading/exercises"
# A zip entry's fixed date: the same sources make the same zip.
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)


def install_cell(repository_url: str, branch: str) -> dict:
    """The code cell that installs the course's library where it is missing (Colab), from the repository."""
    source = (
        "# On Colab (or wherever the course's library is not installed yet) this installs it; in the course's\n"
        "# own environment (make lab) it does nothing.\n"
        "import importlib.util\n"
        "\n"
        'if importlib.util.find_spec("mha_course") is None:\n'
        f'    %pip install --quiet "mha_course[grading] @ git+{repository_url}.git@{branch}"\n'
    )
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": "install-" + hashlib.sha1(source.encode()).hexdigest()[:8],
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def learner_notebook(notebook: dict, install: dict | None = None) -> dict:
    """The notebook as a reader downloads it: no outputs or execution counts, no ``answers`` cells,
    and ``install`` (if given) after the title cell."""
    cells = []
    for cell in notebook["cells"]:
        if ANSWERS_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        cell = dict(cell)
        if cell["cell_type"] == "markdown":  # no sentence promising the answer cells left out
            cell["source"] = web_text(_source(cell), "", DOWNLOAD_CHECK)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    if install is not None:
        cells.insert(1 if cells and cells[0]["cell_type"] == "markdown" else 0, install)
    return {**notebook, "cells": cells}


def _notebook_text(notebook: dict) -> str:
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def without_hidden_cases(source: str, where: str = "<module>") -> str:
    """``source`` with every element ``f(..., hidden=True)`` of a tuple or list cut out, line by line.

    Raises:
        ValueError: a ``hidden=True`` call that is not a whole-line element of a tuple or list (it
            cannot be cut out safely, so the module would be published with its hidden case).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    kept_calls: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                if isinstance(element, ast.Call) and _is_hidden(element):
                    first, last = element.lineno - 1, (element.end_lineno or element.lineno) - 1
                    before = lines[first][: element.col_offset]
                    after = lines[last][element.end_col_offset or 0 :].strip()
                    if before.strip() or not re.fullmatch(r",?\s*(#.*)?", after):
                        raise ValueError(f"{where}:{element.lineno}: a hidden case that is not a line of its own")
                    drop.update(range(first, last + 1))
                    kept_calls.add(id(element))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_hidden(node) and id(node) not in kept_calls:
            raise ValueError(f"{where}:{node.lineno}: a hidden case outside a tuple or list of cases")
    out = "".join(line for index, line in enumerate(lines) if index not in drop)
    ast.parse(out)  # still Python
    return out


def _is_hidden(call: ast.Call) -> bool:
    return any(k.arg == "hidden" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def course_files(root: Path = ROOT) -> list[Path]:
    """The files of :data:`COURSE_FILES` under ``root``, sorted.

    Raises:
        ValueError: one of them is missing (the zip would not start the course).
    """
    files: list[Path] = []
    for name in COURSE_FILES:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in path.rglob("*")
                if p.is_file() and not _SKIPPED & set(p.relative_to(root).parts) and p.suffix not in {".pyc"}
            ]
        else:
            raise ValueError(f"{path} is missing: the course's zip needs it")
    return sorted(files)


def _zip_text(archive: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(f"{ZIP_FOLDER}/{name}", _ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, text)


def write_course_zip(target: Path, install: dict | None = None, root: Path = ROOT) -> list[str]:
    """Writes the course's zip to ``target``; returns its entries (without the top folder)."""
    names = []
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w") as archive:
        for path in course_files(root):
            name = path.relative_to(root).as_posix()
            if path.suffix == ".ipynb":
                notebook = json.loads(path.read_text(encoding="utf-8"))
                _zip_text(archive, name, _notebook_text(learner_notebook(notebook)))
            elif name.startswith(HIDDEN_CASE_MODULES + "/") and path.suffix == ".py":
                _zip_text(archive, name, without_hidden_cases(path.read_text(encoding="utf-8"), name))
            else:
                info = zipfile.ZipInfo(f"{ZIP_FOLDER}/{name}", _ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (path.stat().st_mode & 0o777) << 16
                archive.writestr(info, path.read_bytes())
            names.append(name)
    return names


def _on_build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    config = app.config
    install = install_cell(config.course_repository_url, config.course_branch) if config.course_repository_url else None
    out = Path(app.outdir)
    for docname in sorted(app.env.found_docs):
        source = Path(app.srcdir) / (docname + ".ipynb")
        if docname.startswith(("notebooks/", "exercises/")) and source.is_file():
            notebook = json.loads(source.read_text(encoding="utf-8"))
            target = out / (docname + ".ipynb")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_notebook_text(learner_notebook(notebook, install)), encoding="utf-8")
    write_course_zip(out / COURSE_ZIP)


def setup(app):
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
