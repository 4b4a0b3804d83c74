"""Every interactive cell shows something: its widget where ipywidgets is installed, its static
pictures where it is not.

``sliders.interactive`` and ``interpret.head_picker`` return the widget (or, for the picker without
ipywidgets, the static Figure); Jupyter shows it only when it is the cell's *result*. A cell that
ends ``picker = head_picker(...)`` builds the widget and shows nothing: the widget's first picture
goes into the widget's own output area, which is never displayed. So:

* every code cell of every notebook that makes one ends with that call as a bare expression
  (or ``display(...)``), checked on the source;
* in a real kernel, such a cell displays exactly one widget, and with ipywidgets missing it
  displays its static settings' output (the picker's grid exactly once), and no widget.

``test_interactive_replay.py`` runs every chapter and then checks the same on its real cells.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))
MAKERS = {"interactive", "head_picker"}
WIDGET = "application/vnd.jupyter.widget-view+json"


def _name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _widget_calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _name(node) in MAKERS]


def _parse(source: str) -> ast.Module:
    # IPython magics and shell lines are not Python; they never make a widget
    return ast.parse("\n".join("" if re.match(r"\s*[%!]", line) else line for line in source.splitlines()))


def interactive_cells(path: Path) -> list[tuple[int, str]]:
    """(index, source) of the code cells that build a widget with sliders.interactive or head_picker."""
    cells = nbformat.read(path, as_version=4).cells
    return [(i, c.source) for i, c in enumerate(cells) if c.cell_type == "code" and _widget_calls(_parse(c.source))]


def _problem(source: str) -> str | None:
    tree = _parse(source)
    calls = _widget_calls(tree)
    if len(calls) > 1:
        return f"{len(calls)} widgets in one cell: Jupyter shows only the last line's"
    last = tree.body[-1]
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        if last.value is calls[0]:
            return None
        if _name(last.value) == "display" and calls[0] in ast.walk(last.value):
            return None
    return (
        f"the cell must end with the {_name(calls[0])}(...) call itself, so that Jupyter shows "
        f"the widget; it ends with: {ast.get_source_segment(source, last) or ast.dump(last)}"
    )


def test_notebooks_do_make_widgets():
    assert sum(len(interactive_cells(p)) for p in NOTEBOOKS) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_each_interactive_cell_ends_with_its_widget(path):
    problems = [
        f"cell {i}: {problem}" for i, source in interactive_cells(path) if (problem := _problem(source)) is not None
    ]
    assert problems == [], "\n".join(problems)


def test_the_source_rule_tells_a_shown_widget_from_a_lost_one():
    assert _problem("picker = head_picker(model, task, data)") is not None
    assert _problem("w = sliders.interactive(f, a=(0, 1))\nprint('done')") is not None
    assert _problem("interactive(f, a=(0, 1))\ninteractive(g, b=(0, 1))") is not None
    assert _problem("head_picker(model, task, data)  # a comment") is None
    assert _problem("def f(a=1):\n    print(a)\n\nsliders.interactive(f, static=[{'a': 2}],\n    a=(0, 3))") is None
    assert _problem("picker = head_picker(m, t, d)\ndisplay(picker)") is not None  # display of a name: say it
    assert _problem("display(head_picker(m, t, d))") is None
    assert _problem("%matplotlib inline\ninteractive(f, a=(0, 1))") is None


# --- in a real kernel ------------------------------------------------------------------------

SETUP = """
%matplotlib inline
import sys
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

def draw(a=1.0):
    plt.plot([0.0, a])
    plt.show()
"""
INTERACTIVE = "sliders.interactive(draw, static=[{'a': 1.0}, {'a': 2.0}], a=(0.0, 3.0))"
PICKER = "head_picker(model, task, data)"


def _outputs(client, source: str) -> list[str]:
    """What the cell displayed: mime types of display_data/execute_result, 'stream' for text."""
    shown: list[str] = []

    def hook(msg):
        kind = msg["msg_type"]
        if kind in ("display_data", "execute_result"):
            shown.extend(m for m in msg["content"]["data"] if m != "text/plain")
        elif kind == "stream":
            shown.append("stream")
        elif kind == "error":
            shown.append("error: " + "\n".join(msg["content"]["traceback"]))

    reply = client.execute_interactive(source, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", (source, shown)
    return shown


@pytest.fixture(scope="module")
def kernel():
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:
        _outputs(client, SETUP)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


@pytest.mark.slow
def test_in_a_kernel_each_maker_shows_one_widget_then_its_static_fallback(kernel):
    # with ipywidgets: exactly one widget each (the first picture goes into it)
    for source in (INTERACTIVE, PICKER):
        assert _outputs(kernel, source).count(WIDGET) == 1, source
    # assigned instead of shown: no widget at all, which is what the source rule above prevents
    assert WIDGET not in _outputs(kernel, "picker = " + PICKER)

    _outputs(kernel, "sys.modules['ipywidgets'] = None  # import ipywidgets now fails")
    shown = _outputs(kernel, INTERACTIVE)
    assert WIDGET not in shown and shown.count("image/png") == 2, shown  # one picture per static setting
    assert shown[0] == "stream"  # the note that says why there are no sliders
    shown = _outputs(kernel, PICKER)
    assert shown == ["image/png"], shown  # the static grid, once
