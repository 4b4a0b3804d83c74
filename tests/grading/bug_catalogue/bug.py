"""One catalogued bug (a source edit of a solution notebook) and how a test applies and runs it."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import nbformat

from mha_course.grading.engine.notebook import code_cells

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Bug:
    id: str
    notebook: str  # assignment key = solution notebook stem
    what: str
    edits: list  # [(old, new)]: each old must occur in exactly one code cell


def mutated(bug: Bug) -> nbformat.NotebookNode:
    """The solution notebook of ``bug.notebook`` with the bug's edits applied (each to exactly one code cell)."""
    nb = nbformat.read(ROOT / "solutions" / f"{bug.notebook}.ipynb", as_version=4)
    for old, new in bug.edits:
        cells = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        assert len(cells) == 1, f"{bug.id}: edit does not apply to exactly one cell: {old[:60]!r}"
        cells[0].source = cells[0].source.replace(old, new)
    return nb


def targets(nb) -> dict:
    """Execute a notebook's code cells here (self-check disabled) and return its namespace."""
    import matplotlib
    import matplotlib.pyplot

    matplotlib.use("Agg")
    namespace: dict = {}
    for _, source in code_cells(nb):
        if "check(" in source and "def " not in source and "class " not in source:
            continue  # check cells
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
            exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - course files and their edits
        namespace["check"] = lambda *a, **k: None
    matplotlib.pyplot.close("all")  # the cells' figures: drawn nowhere, kept by nothing the targets need
    return namespace
