"""Every interactive cell leaves a picture that a static view can show.

A widget is only a reference to live kernel state: nbconvert, GitHub and any viewer without a
widget manager print ``interactive(children=...)`` in its place. ``sliders.interactive`` (and
``interpret.head_picker``, built on it) puts a PNG of the default settings' figures into the same
output, and hands the first picture to the widget's Output area as state, so that a notebook
runner never has to answer the kernel while it waits for the cell (the cause of
``nbconvert --execute`` stalling now and then on an interactive cell).
"""

from __future__ import annotations

import ast
import base64
import io
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient import output_widget as nbclient_output_widget
from nbformat.v4 import new_code_cell, new_notebook
from PIL import Image
from test_interactive_cells import NOTEBOOKS, interactive_cells

ROOT = Path(__file__).resolve().parents[2]
WIDGET = "application/vnd.jupyter.widget-view+json"
# ipywidgets' own makers: a cell calling them directly would get no picture for a static view
DIRECT = {"interact", "interact_manual", "interactive", "interactive_output"}


def _direct_widget_calls(source: str) -> list[str]:
    try:
        tree = ast.parse("\n".join("" if re.match(r"\s*[%!]", ln) else ln for ln in source.splitlines()))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ipywidgets"):
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name in DIRECT]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DIRECT:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in ("ipywidgets", "widgets"):
                found.append(ast.unparse(node.func))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_interactive_cells_go_through_the_library(path):
    cells = nbformat.read(path, as_version=4).cells
    problems = [
        f"cell {i}: {call} (use mha_course.plots.sliders.interactive, which leaves a picture for static views)"
        for i, cell in enumerate(cells)
        if cell.cell_type == "code"
        for call in _direct_widget_calls(cell.source)
    ]
    assert problems == [], "\n".join(problems)


def test_the_direct_call_rule_catches_ipywidgets_interact():
    assert _direct_widget_calls("import ipywidgets\nipywidgets.interact(f, a=(0, 1))")
    assert _direct_widget_calls("from ipywidgets import interact")
    assert _direct_widget_calls("sliders.interactive(f, a=(0, 1))") == []


def _execute(nb, monkeypatch) -> tuple[nbformat.NotebookNode, list[dict]]:
    """Run ``nb`` with nbclient in the repository root; also return every message the client sent back."""
    sent: list[dict] = []
    send = nbclient_output_widget.OutputWidget.send

    def counting_send(self, data=None, metadata=None, buffers=None):
        sent.append(data)
        return send(self, data, metadata, buffers)

    monkeypatch.setattr(nbclient_output_widget.OutputWidget, "send", counting_send)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb, sent


def _picture(cell) -> Image.Image | None:
    for output in cell.outputs:
        data = output.get("data", {})
        if "image/png" in data:
            return Image.open(io.BytesIO(base64.b64decode(data["image/png"])))
    return None


SETUP = """%matplotlib inline
import matplotlib.pyplot as plt
import torch
from mha_course.plots import sliders
from mha_course.models.interpret import head_picker
from mha_course.models.model import build_model
from mha_course.models.tasks import get_task

torch.manual_seed(0)
task = get_task("sort", length=3)
model = build_model(task, num_layers=1, embed_dim=16, num_heads=2)
data = task.sample(4, 0)


def one(a=1.0):
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.plot([0.0, a])
    print("drawn at", a)
    plt.show()


def two(a=1.0):
    one(a)
    one(2 * a)


def words(a=1.0):
    print(f"{a:.1f} GFLOP")
"""


@pytest.mark.slow
def test_each_interactive_cell_shows_its_default_picture_without_a_live_kernel(monkeypatch):
    cells = [
        new_code_cell(SETUP),
        new_code_cell("sliders.interactive(one, a=(0.0, 3.0))"),
        new_code_cell("sliders.interactive(two, a=(0.0, 3.0))"),
        new_code_cell("head_picker(model, task, data)"),
        new_code_cell("sliders.interactive(words, a=(0.0, 3.0))"),
    ]
    nb, sent = _execute(
        new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        ),
        monkeypatch,
    )
    for i in (1, 2, 3):
        shown = [o for o in nb.cells[i].outputs if o.output_type in ("execute_result", "display_data")]
        assert len(shown) == 1 and WIDGET in shown[0].data, f"cell {i}: one widget expected, got {shown}"
        assert "image/png" in shown[0].data, f"cell {i}: no picture for a static view"
    # a callback that only prints: its text stands in for "interactive(children=...)"
    (words,) = nb.cells[4].outputs
    assert WIDGET in words.data and words.data["text/plain"] == "1.0 GFLOP", words.data["text/plain"]
    assert nb.cells[1].outputs[0].data["text/plain"] == "drawn at 1.0"
    one, two = _picture(nb.cells[1]), _picture(nb.cells[2])
    assert two.height == 2 * one.height and two.width == one.width, "two figures are stacked into one picture"
    # the live widget shows the same first picture: it is the Output area's state
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]
    with_picture = [out for out in outputs if any("image/png" in o.get("data", {}) for o in out)]
    assert len(outputs) == 4 and len(with_picture) == 3, outputs
    assert any(o.get("text") == "drawn at 1.0\n" for out in outputs for o in out), outputs
    # nothing was printed inside an Output area while the cells ran, so the runner never had to answer
    assert sent == [], f"the notebook runner sent {len(sent)} comm messages back while cells ran"


@pytest.mark.slow
def test_a_chapter_executed_by_nbclient_has_a_picture_in_its_interactive_cell(monkeypatch):
    path = ROOT / "notebooks" / "01_dot_products.ipynb"
    interactive = [i for i, _ in interactive_cells(path)]
    assert interactive, "chapter 01 has a slider cell"
    nb, sent = _execute(nbformat.read(path, as_version=4), monkeypatch)
    for i in interactive:
        picture = _picture(nb.cells[i])
        assert picture is not None, f"{path.name} cell {i}: no image/png output for a static view"
        assert picture.width > 400 and picture.height > 200, picture.size
    assert sent == []
