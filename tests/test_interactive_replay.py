"""Every slider of every chapter still works after the whole notebook has run.

nbval executes each notebook once, top to bottom, which calls each interactive callback with its
initial values only. A learner runs everything and *then* moves the sliders: a callback that reads a
global which a later cell redefined, or one that breaks at the end of its own range, fails only then.
This test does the same: it executes the notebook, then replays every ``mha_course.viz.interactive``
callback at its current values and with each control at its ends (``viz.replay_interactive``).

The kernel is driven by jupyter_client's *blocking* client, as nbval does. nbclient's asyncio client
sometimes misses a zmq wake-up under load and then sits idle until its cell timeout (seen here:
a 5 s notebook taking 305 s and still passing); the blocking client polls and cannot miss one.
"""

from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

CELL_TIMEOUT_S = 300

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
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    cells.append("from mha_course.viz import replay_interactive\nprint('replayed', replay_interactive(), 'calls')")
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(path.parent))
    try:
        for index, source in enumerate(cells):
            printed: list[str] = []

            def keep_output(msg, printed=printed):
                if msg["msg_type"] == "stream":
                    printed.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    printed.append("\n".join(msg["content"]["traceback"]))

            reply = client.execute_interactive(source, timeout=CELL_TIMEOUT_S, output_hook=keep_output)
            assert reply["content"]["status"] == "ok", f"code cell {index} failed:\n{source}\n{''.join(printed)}"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "replayed" in "".join(printed), printed
