"""Every slider of every chapter still works after the whole notebook has run.

nbval executes each notebook once, top to bottom, which calls each interactive callback with its
initial values only. A learner runs everything and *then* moves the sliders: a callback that reads a
global which a later cell redefined, or one that breaks at the end of its own range, fails only then.
This test does the same: it executes the notebook, then replays every ``mha_course.plots.sliders.interactive``
callback at its current values and with each control at its ends (``sliders.replay_interactive``).

On the way it checks that each cell that makes a widget shows it (a cell ending in
``picker = head_picker(...)`` builds one and shows nothing), and, right after that cell, runs its
widget call once more with ipywidgets made unimportable: it must then show its static fallback
(pictures or printed lines) instead, and no widget.

The kernel is driven by jupyter_client's *blocking* client, as nbval does. nbclient's asyncio client
sometimes misses a zmq wake-up under load and then sits idle until its cell timeout (seen here:
a 5 s notebook taking 305 s and still passing); the blocking client polls and cannot miss one.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

CELL_TIMEOUT_S = 300
WIDGET = "application/vnd.jupyter.widget-view+json"
MAKES_A_WIDGET = re.compile(r"\b(?:interactive|head_picker)\(")  # not replay_interactive(
NO_WIDGETS_NOTE = "ipywidgets is not installed"
# The cell's widget call again, as if ipywidgets were missing; the kernel is left as it was (the
# module back in place, and viz's record of widgets restored so that the replay moves the sliders).
WITHOUT_WIDGETS = """
import sys as _sys
from mha_course.plots import sliders as _sliders
_made, _widgets = dict(_sliders._MADE), _sys.modules.get("ipywidgets")
_sys.modules["ipywidgets"] = None  # import ipywidgets now fails
try:
    _fallback = (
{call}
    )
finally:
    if _widgets is None:
        _sys.modules.pop("ipywidgets", None)
    else:
        _sys.modules["ipywidgets"] = _widgets
    _sliders._MADE.clear()
    _sliders._MADE.update(_made)
_fallback
"""

ROOT = Path(__file__).resolve().parents[2]
WITH_WIDGETS = sorted(
    p
    for p in [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")]
    if "interactive(" in p.read_text() or "head_picker(" in p.read_text()
)


def _last_statement(source: str) -> str:
    """The cell's last statement (its widget call: test_interactive_cells.py checks that it is)."""
    python = "\n".join("" if re.match(r"\s*[%!]", line) else line for line in source.splitlines())
    return ast.get_source_segment(python, ast.parse(python).body[-1])


def test_the_replay_finds_a_stale_global_and_an_out_of_range_end():
    import matplotlib

    matplotlib.use("Agg")
    from mha_course.plots import sliders

    sliders._MADE.clear()
    data = [1.0, 2.0, 3.0]

    def show(i=1):
        return data[i]  # reads `data` when called, as a notebook callback reads a global

    sliders.interactive(show, i=(0, 2, 1))
    sliders.interactive(show, i=(0, 2, 1))  # the same cell run twice: one widget is replayed, not two
    assert sliders.replay_interactive() == 3  # current value, then min, then max
    data = [1.0]  # a later "cell" rebinds it
    with pytest.raises(RuntimeError, match=r"show\(\{'i': 2\}\): IndexError"):
        sliders.replay_interactive()
    sliders._MADE.clear()


@pytest.mark.slow
@pytest.mark.parametrize("path", WITH_WIDGETS, ids=[f"{p.parent.name}/{p.name}" for p in WITH_WIDGETS])
def test_every_slider_works_after_the_notebook_has_run(path):
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    with_widget = [index for index, source in enumerate(cells) if MAKES_A_WIDGET.search(source)]
    assert with_widget, "no cell calls interactive(...) or head_picker(...)"
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(path.parent))

    def run(source, label):
        printed: list[str] = []
        shown: list[str] = []

        def keep_output(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                printed.append("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] in ("display_data", "execute_result"):
                shown.extend(msg["content"]["data"])

        reply = client.execute_interactive(source, timeout=CELL_TIMEOUT_S, output_hook=keep_output)
        assert reply["content"]["status"] == "ok", f"{label} failed:\n{source}\n{''.join(printed)}"
        return "".join(printed), shown

    try:
        for index, source in enumerate(cells):
            _, shown = run(source, f"code cell {index}")
            if index in with_widget:
                assert WIDGET in shown, f"code cell {index} makes a widget but does not show it:\n{source}"
                printed, shown = run(
                    WITHOUT_WIDGETS.format(call=_last_statement(source)),
                    f"code cell {index}'s widget call without ipywidgets",
                )
                text = [line for line in printed.splitlines() if line.strip() and NO_WIDGETS_NOTE not in line]
                assert WIDGET not in shown and ("image/png" in shown or text), (
                    f"code cell {index} shows nothing without ipywidgets:\n{source}"
                )
        printed, _ = run(
            "from mha_course.plots.sliders import replay_interactive\nprint('replayed', replay_interactive(), 'calls')",
            "the replay",
        )
        assert "replayed" in printed, printed
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
