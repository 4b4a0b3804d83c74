"""Every slider of every chapter still works after the whole notebook has run.

nbval executes each notebook once, top to bottom, which calls each interactive callback with its
initial values only. A learner runs everything and *then* moves the sliders: a callback that reads a
global which a later cell redefined, or one that breaks at the end of its own range, fails only then.
This test does the same: it executes the notebook, then replays every ``mha_course.viz.interactive``
callback at its current values and with each control at its ends (``viz.replay_interactive``).
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
WITH_WIDGETS = sorted(p for p in [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")]
                      if "interactive(" in p.read_text() or "head_picker(" in p.read_text())


def test_the_replay_finds_a_stale_global_and_an_out_of_range_end():
    import matplotlib

    matplotlib.use("Agg")
    from mha_course import viz

    viz._MADE.clear()
    data = [1.0, 2.0, 3.0]

    def show(i=1):
        return data[i]  # reads `data` when called, as a notebook callback reads a global

    viz.interactive(show, i=(0, 2, 1))
    viz.interactive(show, i=(0, 2, 1))  # the same cell run twice: one widget is replayed, not two
    assert viz.replay_interactive() == 3  # current value, then min, then max
    data = [1.0]  # a later "cell" rebinds it
    with pytest.raises(RuntimeError, match=r"show\(\{'i': 2\}\): IndexError"):
        viz.replay_interactive()
    viz._MADE.clear()


@pytest.mark.parametrize("path", WITH_WIDGETS, ids=[f"{p.parent.name}/{p.name}" for p in WITH_WIDGETS])
def test_every_slider_works_after_the_notebook_has_run(path):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "from mha_course.viz import replay_interactive\nprint('replayed', replay_interactive(), 'calls')"))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "replayed" in printed, printed
