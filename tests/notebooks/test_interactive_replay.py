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

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
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


@dataclass
class Ran:
    """What one cell did in the kernel: its printed text (streams and tracebacks), the MIME types it
    showed, and the text/plain of its results and displays."""

    printed: str
    shown: list[str]
    results: str


class NotebookKernel:
    """A python3 kernel started in a notebook's folder; ``run`` executes one cell and requires it to succeed."""

    def __init__(self, folder: Path):
        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=str(folder))

    def run(self, source: str, label: str) -> Ran:
        printed: list[str] = []
        shown: list[str] = []
        results: list[str] = []

        def keep_output(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                printed.append("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] in ("display_data", "execute_result"):
                shown.extend(msg["content"]["data"])
                if WIDGET not in msg["content"]["data"]:
                    results.append(msg["content"]["data"].get("text/plain", ""))

        reply = self.client.execute_interactive(source, timeout=CELL_TIMEOUT_S, output_hook=keep_output)
        assert reply["content"]["status"] == "ok", f"{label} failed:\n{source}\n{''.join(printed)}"
        return Ran("".join(printed), shown, "\n".join(results))

    def __enter__(self) -> NotebookKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def run_every_cell(kernel: NotebookKernel, cells: list[str]) -> list[Ran]:
    """Run the notebook's code cells in order (each must succeed, as under nbval --nbval-lax); a cell that
    makes a widget must show it, and its widget call run again without ipywidgets must show its static
    fallback instead. Returns what each cell did."""
    ran = []
    for index, source in enumerate(cells):
        ran.append(kernel.run(source, f"code cell {index}"))
        if MAKES_A_WIDGET.search(source):
            assert WIDGET in ran[-1].shown, f"code cell {index} makes a widget but does not show it:\n{source}"
            without = kernel.run(
                WITHOUT_WIDGETS.format(call=_last_statement(source)),
                f"code cell {index}'s widget call without ipywidgets",
            )
            text = [line for line in without.printed.splitlines() if line.strip() and NO_WIDGETS_NOTE not in line]
            assert WIDGET not in without.shown and ("image/png" in without.shown or text), (
                f"code cell {index} shows nothing without ipywidgets:\n{source}"
            )
    return ran


def replay_sliders(kernel: NotebookKernel) -> None:
    """Move every slider the notebook made: its current values, then each control at its ends."""
    ran = kernel.run(
        "from mha_course.plots.sliders import replay_interactive\nprint('replayed', replay_interactive(), 'calls')",
        "the replay",
    )
    assert "replayed" in ran.printed, ran.printed


def code_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def asks_the_learner(path: Path) -> bool:
    """Whether the notebook asks for predictions or exercises: test_answer_keys.py then runs it (sliders included)."""
    tags = {tag for cell in nbformat.read(path, as_version=4).cells for tag in cell.metadata.get("tags", [])}
    return bool(tags & {"prediction", "exercise"})


REPLAYED = [p for p in WITH_WIDGETS if not asks_the_learner(p)]


@pytest.mark.slow
@pytest.mark.parametrize("path", REPLAYED, ids=[f"{p.parent.name}/{p.name}" for p in REPLAYED])
def test_every_slider_works_after_the_notebook_has_run(path):
    cells = code_cells(path)
    assert any(MAKES_A_WIDGET.search(source) for source in cells), "no cell calls interactive(...) or head_picker(...)"
    with NotebookKernel(path.parent) as kernel:
        run_every_cell(kernel, cells)
        replay_sliders(kernel)
