"""Each case sees the notebook the student ran: its state after the cells, in a process of its own.

The cases run in processes forked from a settled copy of the notebook process (:mod:`mha_course.grading.inside.broker`):
what the cells made (values, files) is there for every case; what a case makes (files, processes) is gone
before the next; threads the cells left are not in the copy; a cell that never returns ends the notebook
there. ``--strict-definitions`` loads the definitions only, and every output says which a run used.
"""

from __future__ import annotations

import json
import os

import pytest
from grading_fake import GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.engine import pipeline as grader
from mha_course.grading.engine import registry
from mha_course.grading.inside import broker
from mha_course.grading.verdicts import CASES_SEE, Limits

LIMITS = Limits(case_timeout=10, cell_timeout=8, notebook_timeout=60, memory_mb=1024)
STRICT = Limits(case_timeout=10, cell_timeout=8, notebook_timeout=60, memory_mb=1024, strict_definitions=True)

# A correct add_arrays that only works in the notebook's state: made by a factory, reading a table a loop
# filled, a setting made by a statement, and a file a cell wrote.
STATEFUL = (
    "import numpy as np\n"
    "SIGN = {}\n"
    "for k in (1, -1):\n"
    "    SIGN[k] = float(k)\n"
    "with open('scale.txt', 'w') as f:\n"
    "    f.write('1.0')\n"
    "def make_adder(sign_table):\n"
    "    def add_arrays(a, b):\n"
    "        with open('scale.txt') as f:\n"
    "            scale = float(f.read())\n"
    "        return scale * (a + sign_table[1] * b)\n"
    "    return add_arrays\n"
    "add_arrays = make_adder(SIGN)\n"
)


def _grade(tmp_path, *cells, limits=LIMITS, seed=None):
    require_sandbox()
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "submission.ipynb", *cells)
        result = grader.grade_notebook(path, limits=limits, seed=seed)
    assert result.error is None, result.error
    return result


def _score(result, exercise):
    return sum(t.score for t in result.tests if t.exercise == exercise)


def _outputs(result, exercise):
    return [t.output for t in result.tests if t.exercise == exercise]


@pytest.mark.slow
def test_a_function_that_needs_the_notebooks_state_scores_in_full_and_strict_mode_says_why_not(tmp_path):
    result = _grade(tmp_path, STATEFUL, GOOD_DOUBLE, seed=7)
    assert _score(result, "fake_add") == 4, _outputs(result, "fake_add")
    assert result.isolation["cases_see"] == CASES_SEE[False]
    strict = _grade(tmp_path, STATEFUL, GOOD_DOUBLE, limits=STRICT, seed=7)
    assert _score(strict, "fake_add") == 0
    assert any("which the grader does not run" in o for o in _outputs(strict, "fake_add")), strict.tests
    assert strict.isolation["cases_see"] == CASES_SEE[True]
    assert _score(strict, "fake_double") == _score(result, "fake_double") == 2


# Each case appends to a file and reports how many lines it holds: were a case's file kept for the next,
# later cases would see more than the one line the cells left plus their own.
COUNTING = (
    "import numpy as np\n"
    "open('log.txt', 'w').write('cells\\n')\n"
    "def add_arrays(a, b):\n"
    "    with open('log.txt', 'a') as f:\n"
    "        f.write('case\\n')\n"
    "    lines = open('log.txt').read().split()\n"
    "    if lines != ['cells', 'case']:\n"
    "        raise ValueError(f'this case saw {lines}')\n"
    "    return a + b\n"
)


@pytest.mark.slow
def test_a_file_a_cell_wrote_reaches_every_case_and_one_a_case_wrote_none(tmp_path):
    result = _grade(tmp_path, COUNTING, GOOD_DOUBLE, seed=3)
    assert _score(result, "fake_add") == 4, _outputs(result, "fake_add")


LEFT_THREAD = (
    "import threading, time\n"
    "import numpy as np\n"
    "STOP = threading.Event()\n"
    "threading.Thread(target=lambda: STOP.wait(600), daemon=True).start()\n"
    "def add_arrays(a, b):\n"
    "    if threading.active_count() != 1:\n"
    "        raise ValueError(f'{threading.active_count()} threads in the case process')\n"
    "    return a + b\n"
)

POOL = (
    "from concurrent.futures import ThreadPoolExecutor\n"
    "POOL = ThreadPoolExecutor(1)\n"
    "POOL.submit(lambda: None).result()\n"
    "def add_arrays(a, b):\n"
    "    return POOL.submit(lambda: a + b).result()\n"
)


@pytest.mark.slow
def test_threads_the_cells_left_are_not_in_a_case_and_a_pool_that_hangs_is_explained(tmp_path):
    result = _grade(tmp_path, LEFT_THREAD, GOOD_DOUBLE)
    assert _score(result, "fake_add") == 4, _outputs(result, "fake_add")
    pooled = _grade(tmp_path, POOL, GOOD_DOUBLE, limits=Limits(case_timeout=3, cell_timeout=8, memory_mb=1024))
    assert _score(pooled, "fake_add") == 0
    assert any("your cells left 1 thread running" in o for o in _outputs(pooled, "fake_add")), pooled.tests


@pytest.mark.slow
def test_a_cell_that_never_returns_ends_the_notebook_there(tmp_path):
    hang = "import time\nwhile True:\n    time.sleep(1)\n"
    good_add = "def add_arrays(a, b):\n    return a + b\n"
    before = _grade(tmp_path, good_add, hang, GOOD_DOUBLE, limits=Limits(cell_timeout=3, memory_mb=1024))
    assert _score(before, "fake_add") == 4 and _score(before, "fake_double") == 0
    note = " ".join(before.notes)
    assert "cell 3 timed out" in note and "it and the 1 cell after it were not run" in note, before.notes
    assert all("does not define 'double'" in o for o in _outputs(before, "fake_double")), before.tests


@pytest.mark.slow
def test_a_missing_target_names_the_cells_that_raised(tmp_path):
    broken = "import numpy as np\nSCALE = 1 / undefined_name\ndef add_arrays(a, b):\n    return a + b\n"
    result = _grade(tmp_path, broken, GOOD_DOUBLE)
    outputs = _outputs(result, "fake_add")
    assert _score(result, "fake_add") == 0
    assert all("cell 2 raised NameError" in o and "Restart and Run All" in o for o in outputs), outputs


def test_results_json_names_what_each_test_saw(tmp_path):
    from mha_course.grading.classroom.results import gradescope as results_json
    from mha_course.grading.verdicts import SubmissionResult

    strict = SubmissionResult(path="x.ipynb", isolation={"kind": "bubblewrap", "cases_see": CASES_SEE[True]})
    data = results_json(strict)
    assert data["extra_data"]["isolation"]["cases_see"] == CASES_SEE[True]
    assert "definitions only" in data["output"]
    plain = results_json(SubmissionResult(path="x.ipynb", isolation={"cases_see": CASES_SEE[False]}))
    assert "definitions only" not in plain["output"]


def test_files_restore_removes_what_a_case_added_and_keeps_the_cells_files(tmp_path):
    scratch = tmp_path / "scratch"
    (scratch / "kept" / "deep").mkdir(parents=True)
    (scratch / "kept" / "deep" / "table.npy").write_bytes(b"cells")
    (scratch / "notes.txt").write_text("cells")
    files = broker._Files(str(scratch), me=os.getpid())
    (scratch / "kept" / "deep" / "new.txt").write_text("case")
    (scratch / "fresh" / "a").mkdir(parents=True)
    (scratch / "fresh" / "a" / "b.txt").write_text("case")
    (scratch / "notes.txt").write_text("a case changed this")
    files.restore()
    left = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*"))
    assert left == ["kept", "kept/deep", "kept/deep/table.npy", "notes.txt"], left
    assert (scratch / "notes.txt").read_text() == "cells"
    assert json.loads(json.dumps(left))  # plain paths only


def test_a_cell_is_in_linecache_as_ipython_puts_it(tmp_path):
    import inspect
    import linecache

    from mha_course.grading.inside.runner import _run_cell

    namespace: dict = {}
    assert _run_cell("def f(x):\n    return x + 1\n", 4, namespace) is None
    assert linecache.getline("<cell 5>", 2).strip() == "return x + 1"
    assert "return x + 1" in inspect.getsource(namespace["f"])


def test_files_restore_writes_back_a_cell_file_a_case_changed_or_removed(tmp_path):
    scratch = tmp_path / "scratch"
    (scratch / "d").mkdir(parents=True)
    (scratch / "log.txt").write_text("cells\n")
    (scratch / "d" / "w.npy").write_bytes(b"weights")
    files = broker._Files(str(scratch), me=os.getpid())
    for _ in range(3):  # every case finds what the cells left, whatever the one before did
        assert (scratch / "log.txt").read_text() == "cells\n" and (scratch / "d" / "w.npy").read_bytes() == b"weights"
        with open(scratch / "log.txt", "a") as f:
            f.write("case\n")
        (scratch / "d" / "w.npy").unlink()
        (scratch / "d").chmod(0)
        files.restore()
    assert sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")) == ["d", "d/w.npy", "log.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("smaps", [True, False], ids=["pss", "resident sizes (tier B)"])
def test_memory_a_case_shares_with_the_notebook_is_counted_once(smaps, monkeypatch):
    """The watch's measure: a forked case process holds the notebook's pages too, counted once."""
    import builtins

    import numpy as np
    import psutil

    from mha_course.grading.engine.process import proportional_size

    held = np.ones(2**25)  # 256 MiB, written
    if not smaps:  # as in tier B, where root without CAP_SYS_PTRACE reads no other uid's smaps
        real_open = builtins.open

        def no_smaps(path, *args, **kwargs):
            if "smaps_rollup" in str(path):
                raise PermissionError(path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", no_smaps)
    # The child holds the pages from the fork on (its page table is a copy) and waits on a pipe until it is killed:
    # a child that slept a few seconds could end first on a busy machine, and then count for nothing.
    wait_here, never_written = os.pipe()
    child = os.fork()
    if child == 0:
        os.read(wait_here, 1)
        os._exit(0)
    try:
        pids = [os.getpid(), child]
        rss = sum(psutil.Process(p).memory_info().rss for p in pids)
        counted = proportional_size(pids)
        assert rss - counted > 0.8 * held.nbytes and counted > held.nbytes, (rss, counted)
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(wait_here)
        os.close(never_written)
