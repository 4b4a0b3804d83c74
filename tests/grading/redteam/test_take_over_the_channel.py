"""Red-team regressions on the sandbox's reply channel, its re-runs and its walls (second review).

Each test grades a submission built to exploit one finding, in this process with the static scan
switched off (what is tested is the sandbox and the grader), and asserts it gains nothing:

* a cell that takes over the reply channel (writes the runtime's frames, answers cases from a thread):
  the process that ran it is killed before any case, and each case has a process of its own;
* autograd done in a thread pool's thread, where torch's modes do not follow by themselves;
* the re-runs as an oracle: a visible case's error message showing how hidden cases went;
* a thread a case leaves running (one a cell started died with the notebook process);
* a second installed copy of the course, readable from inside;
* writable places outside the scratch's size limit (``/dev/shm``, ``/``, ``/run``, the grader's stderr);
* and the honest idioms that must keep working (``display``, ``from mha_course import check, assert_close``).

Where the cases came from: the second review (test_redteam_channel.py before the tests mirrored the
package).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from grading_fake import assert_the_attack_cell_was_reached, require_sandbox, write_submission

from mha_course.grading import verdicts
from mha_course.grading.engine import pipeline as grader
from mha_course.grading.engine import registry
from mha_course.grading.engine.process import Isolator
from mha_course.grading.static.scan import ScanReport
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]
LIMITS = Limits(case_timeout=20, cell_timeout=30, notebook_timeout=90, memory_mb=1024)

# ``isolator`` (tests/grading/conftest.py): tier A here; tier B when tests/grading/walls/test_confined.py runs this file
# again inside the Docker reproduction, where bubblewrap is refused.
EXPECTED_TIER = os.environ.get("MHA_COURSE_EXPECT_TIER", "")


@pytest.fixture(autouse=True)
def no_scan(monkeypatch):
    """Only the run-time walls are under test: the static scan would flag some of these cells first."""
    monkeypatch.setattr(grader, "scan", lambda cells, assignment: ScanReport())


def _notebook(folder: str, name: str, last: str | None = None, first: str | None = None) -> dict:
    nb = json.loads((ROOT / folder / name).read_text())
    code = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    if last is not None:
        nb["cells"].append({**code, "source": last})
    if first is not None:
        at = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
        nb["cells"].insert(at, {**code, "source": first})
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    return nb


def _grade(
    tmp_path: Path, nb: dict, isolator: Isolator, seed: int | None = 11, limits: Limits = LIMITS
) -> verdicts.SubmissionResult:
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(nb))
    result = grader.grade_notebook(path, limits=limits, isolator=isolator, seed=seed)
    assert result.error is None, result.error
    return result


def _score(result, exercise: str | None = None) -> float:
    return sum(t.score for t in result.tests if exercise is None or t.exercise == exercise)


# --- 1. the reply channel cannot be taken over from a cell ----------------------------------------

TAKEOVER = r"""
import os, sys, json, struct, threading, stat
import numpy as np, torch
from mha_course.grading.inside import wire

def frame(message, blob=b""):
    data = json.dumps(message).encode()
    return struct.pack(">Q", len(data)) + data + struct.pack(">Q", len(blob)) + blob

def cheat(x, axis=-1, dim=None):
    t = torch.as_tensor(np.asarray(x)).double()
    out = torch.softmax(t, dim if dim is not None else axis)
    out = torch.nan_to_num(out, nan=0.0).to(torch.as_tensor(np.asarray(x)).dtype)
    return out.numpy() if isinstance(x, np.ndarray) else out

def serve(f):
    while True:
        try:
            (n,) = struct.unpack(">Q", f.read(8)); message = json.loads(f.read(n))
            (m,) = struct.unpack(">Q", f.read(8)); blob = f.read(m)
        except Exception:
            return
        if message.get("event") != "case":
            continue
        module, _, name = message["call"].partition(":")
        call = getattr(__import__(module, fromlist=[name]), name)
        got = call(cheat, wire.unpack(message["inputs"], blob))
        structure, out = wire.pack(got)
        f.write(frame({"ok": True, "structure": structure, "forbidden": [], "ops": []}, out))

channels = []
for fd in {int(sys.argv[-1]), *map(int, os.listdir("/proc/self/fd"))}:
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            channels.append(open(fd, "r+b", buffering=0, closefd=False))
    except OSError:
        pass
for f in channels:
    try:
        f.write(frame({"event": "cell_done", "index": 10**6, "error": None}) + frame({"event": "ready"}))
    except OSError:
        pass
    threading.Thread(target=serve, args=(f,), daemon=True).start()
threading.Event().wait(2)
"""
# A serving thread may read the broker's settle request before the runtime does: the notebook process then
# never ends and the sandbox is stopped at the last cell's time limit. The exercise's own cells take about a
# second: a 10 s limit shows the same as the default 30 s.
TAKEOVER_LIMITS = dataclasses.replace(LIMITS, cell_timeout=10)


def test_a_cell_cannot_answer_cases_in_the_runtimes_place(tmp_path, isolator):
    """An unedited exercise plus a cell that writes the runtime's frames and answers from a thread: 0 points.

    The only socket the notebook process holds is its channel to the broker (the grader's was closed in
    it before any cell ran). The forged ``cell_done``/``ready`` frames land there, and the broker finds
    the protocol broken when the cells are done and it asks the notebook process to settle: the sandbox
    ends and no case runs ("not run"). Were the frames not sent, the serving threads would still not
    survive the settle fork (a fork copies only the thread that forks), and each case answers on a
    socketpair of its own, made after the cells: either way every case is "not attempted" or "not run".
    """
    nb = _notebook("exercises", "a02_softmax.ipynb", last=TAKEOVER)
    result = _grade(tmp_path, nb, isolator, limits=TAKEOVER_LIMITS)
    assert_the_attack_cell_was_reached(result)
    assert _score(result) == 0, [(t.name, t.output) for t in result.tests if t.score]
    assert result.tests and all(t.status in ("not attempted", "not run") for t in result.tests), [
        t.output for t in result.tests
    ]


def test_the_broker_is_out_of_the_notebooks_reach(tmp_path, isolator):
    """The notebook's process is not pid 1; pid 1 (the broker) shows neither its files nor its memory."""
    probe = (  # from the case process: its parent is the broker
        "import os\n"
        "def add_arrays(a, b):\n"
        "    reached = []\n"
        "    for what in ('/proc/1/fd', '/proc/1/mem', '/proc/1/environ'):\n"
        "        try:\n"
        "            os.listdir(what) if what.endswith('fd') else open(what, 'rb').read(1)\n"
        "            reached.append(what)\n"
        "        except OSError:\n"
        "            pass\n"
        "    if os.getpid() == 1:\n"
        "        reached.append('pid 1')\n"
        "    if reached:\n"
        "        raise ValueError(f'reached {reached}')\n"
        "    return a + b\n"
    )
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "probe.ipynb", probe)
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


# --- 2. autograd in a thread a cell started ---------------------------------------------------------

POOL = r"""
import math
from concurrent.futures import ThreadPoolExecutor
import torch

POOL = ThreadPoolExecutor(1)
POOL.submit(lambda: None).result()  # its thread now runs, before any case

def _auto(q, k, v, grad_out):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
    return torch.autograd.grad(out, (q, k, v), grad_out)

def attention_backward(q, k, v, grad_out):
    return POOL.submit(_auto, q, k, v, grad_out).result()
"""
# Each case of the pool waits until it times out: a short case limit shows the same as the default 20 s (two
# timeouts, then "not run"), and the solution's other cases take well under a second each.
POOL_LIMITS = dataclasses.replace(LIMITS, case_timeout=5)


def test_autograd_in_a_pre_started_thread_gains_nothing(tmp_path, isolator):
    """The pool's thread was started by a cell, so it is not in the copy of the notebook process the cases
    start from (a fork copies only the thread that forks): work submitted to it never runs, the case times
    out with a note that names the threads the cells left, and after two such cases the rest are not run.
    (In strict mode the pool has no thread until a case submits to it: the tripwire follows that thread.)"""
    nb = _notebook("solutions", "a14_attention_backward.ipynb", last=POOL)
    result = _grade(tmp_path, nb, isolator, limits=POOL_LIMITS)
    backward = [t for t in result.tests if t.exercise == "attention_backward"]
    assert backward and all(t.score == 0 for t in backward), [(t.name, t.output) for t in backward if t.score]
    timed_out = [t.output for t in backward if t.status == "timeout"]
    assert timed_out and all("left 1 thread running" in o for o in timed_out), [t.output for t in backward]
    assert all(t.status in ("timeout", "not run") for t in backward), [t.output for t in backward]


# --- 3. the re-runs are no oracle -------------------------------------------------------------------

COUNTER = r"""
import numpy as np

def _log(x):
    x = np.asarray(x)
    with open("calls.log", "a") as f:  # the only state that could outlive a case process
        f.write((f"{float(x.ravel()[0]):.6f}" if x.size else "empty") + "\n")
    with open("calls.log") as f:
        calls = f.read().split()
    # newest first, so a cut message still shows the latest calls
    raise ValueError(f"calls so far: {len(calls)}: " + " ".join(reversed(calls)))

def softmax_np(x, axis=-1):
    _log(x)

def softmax(x, dim=-1):
    _log(x)
"""


def _first_values(case, seed):
    from mha_course.grading.engine import fresh_draws

    fresh = fresh_draws.fresh_inputs(case, seed)["x"]  # the grader's fresh inputs
    published = case.make_inputs()["x"]
    return {f"{float(v.ravel()[0]):.6f}" for v in (published, fresh) if v.size}


def test_visible_outputs_carry_nothing_about_hidden_cases(tmp_path, isolator):
    """Every visible case (and its fresh-input run) comes before any hidden one, failing cases are re-run too."""
    seed = 5
    result = _grade(tmp_path, _notebook("solutions", "a02_softmax.ipynb", last=COUNTER), isolator, seed=seed)
    exercises = [registry.find_exercise(k) for k in ("softmax_np", "softmax")]
    hidden = set().union(*(_first_values(c, seed) for e in exercises for c in e.cases if c.hidden))
    visible_values = set().union(*(_first_values(c, seed) for e in exercises for c in e.cases if not c.hidden))
    hidden -= visible_values  # a value a visible case shares tells nothing
    visible = [t for t in result.tests if not t.hidden]
    assert hidden and visible and all(t.score == 0 for t in result.tests)
    for row in visible:
        assert not any(v in row.output for v in hidden), row.output
    # each case process starts from an emptied scratch folder: no call of an earlier case is seen
    assert all(t.output.startswith("ValueError: calls so far: 1:") for t in result.tests), visible[1].output


# --- 4. no second copy of the course is readable ---------------------------------------------------


def test_a_second_installed_copy_is_hidden(tmp_path, isolator, monkeypatch):
    site = tmp_path / "venv" / "lib" / "python3.99" / "site-packages"
    copy = site / "mha_course"
    copy.mkdir(parents=True)
    shutil.copyfile(ROOT / "mha_course" / "core" / "softmax.py", copy / "softmax.py")
    (copy / "__init__.py").write_text("")
    (site / "mha_course-9.9.dist-info").mkdir()
    (site / "mha_course-9.9.dist-info" / "RECORD").write_text("mha_course/core/softmax.py,,\n")
    (site / "__editable__.mha_course-9.9.pth").write_text(str(ROOT) + "\n")
    (site / "other.pth").write_text("import mha_course_finder\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    cell = (
        "import os\n"
        f"SITE = {str(site)!r}\n"
        "def _seen():\n"
        "    found = []\n"
        "    for name in ('mha_course/core/softmax.py', 'mha_course-9.9.dist-info/RECORD', '__editable__.mha_course-9.9.pth', 'other.pth'):\n"
        "        try:\n"
        "            if open(os.path.join(SITE, name)).read():\n"
        "                found.append(name)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return found\n"
        "def add_arrays(a, b):\n"
        "    if _seen():\n"
        "        raise ValueError(f'read {_seen()}')\n"
        "    return a + b\n"
    )
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "copy.ipynb", cell)
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


# --- 5. nothing writable outside the scratch's size limit ----------------------------------------

WRITES = (  # from the notebook process (the cell) and from each case process (the function)
    "import os\n"
    "PATHS = ('/dev/shm/big', '/big', '/run/big', '/proc/1/fd/2')\n"
    "def write_all():\n"
    "    wrote = []\n"
    "    for path in PATHS:\n"
    "        try:\n"
    "            with open(path, 'ab') as f:\n"
    "                f.write(b'x' * 65536)\n"
    "            wrote.append(path)\n"
    "        except OSError:\n"
    "            pass\n"
    "    return wrote\n"
    "write_all()\n"
    "def add_arrays(a, b):\n"
    "    wrote = [p for p in PATHS if os.path.exists(p) and not p.startswith('/proc')] + write_all()\n"
    "    if wrote:\n"
    "        raise ValueError(f'wrote {wrote}')\n"
    "    return a + b\n"
)


def test_only_the_scratch_folders_are_writable(tmp_path, isolator):
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "writes.ipynb", WRITES)
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


def _root_only():
    import os

    if os.getuid() != 0:
        pytest.skip("the grader drops to a uid of its own only when it runs as root")


def test_as_root_host_permissions_hold_inside(tmp_path, isolator, monkeypatch):
    """A root-owned 0600 file in a mounted folder (an index token in a pip.conf) is not readable inside."""
    _root_only()
    site = tmp_path / "venv" / "lib" / "python3.99" / "site-packages"
    site.mkdir(parents=True)
    secret = site / "pip.conf"
    secret.write_text("[global]\nindex-url = https://token@example.invalid/simple\n")
    secret.chmod(0o600)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    cell = (
        "def add_arrays(a, b):\n"
        f"    try:\n        token = open({str(secret)!r}).read()\n    except OSError:\n        token = ''\n"
        "    if token:\n"
        "        raise ValueError(token)\n"
        "    return a + b\n"
    )
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "token.ipynb", cell)
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    assert ("own uid" if isolator.walls.tier in ("B", "C") else "a host uid of its own") in result.isolation["summary"]
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


THREADS = (  # in the case process, where the function under test runs
    "import threading\n"
    "def add_arrays(a, b):\n"
    "    threading.stack_size(64 * 1024)  # small stacks: the memory limit must not be what stops them\n"
    "    stop, started = threading.Event(), []\n"
    "    for _ in range(300):\n"
    "        try:\n"
    "            t = threading.Thread(target=stop.wait)\n"
    "            t.start()\n"
    "            started.append(t)\n"
    "        except RuntimeError:\n"
    "            break\n"
    "    stop.set()\n"
    "    for t in started:\n"
    "        t.join()\n"
    "    if len(started) > 100:\n"
    "        raise ValueError(f'{len(started)} threads started')\n"
    "    return a + b\n"
)


@pytest.mark.slow  # starts its own sandbox (no cgroup)
def test_as_root_without_a_cgroup_tasks_are_still_limited(tmp_path, monkeypatch):
    """No writable cgroup (a container): the sandbox's own uid makes RLIMIT_NPROC hold."""
    _root_only()
    require_sandbox()
    from mha_course.grading.walls import resources

    monkeypatch.setattr(resources, "cgroup_available", lambda: None)
    isolator = Isolator()
    try:
        assert not isolator.use_cgroup
        with registry.registered("grading_fake"):
            path = write_submission(tmp_path / "threads.ipynb", THREADS)
            result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    finally:
        isolator.close()
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


# --- 6. the idioms of an honest notebook -------------------------------------------------------------

IDIOMS_FIRST = (
    "from mha_course import check, assert_close\n"
    "import mha_course.testing\n"
    "import numpy as np\n"
    "assert_close(np.ones(2), np.ones(2))\n"
    "try:  # the reference answers stay out of reach\n"
    "    from mha_course import softmax_np as REFERENCE\n"
    "except ImportError:\n"
    "    REFERENCE = None\n"
)
IDIOMS_LAST = (
    "if REFERENCE is not None:\n"
    "    softmax_np = None\n"
    "display(softmax_np(np.array([1.0, 2.0])))\nprint(get_ipython())\ndef helper_after_display(x):\n    return x\n"
)


def test_display_and_the_self_check_helpers_work_while_grading(tmp_path, isolator):
    nb = _notebook("solutions", "a02_softmax.ipynb", first=IDIOMS_FIRST)
    for cell in nb["cells"]:  # display before the defs, in the same cell
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "def softmax_np" in source:
            cell["source"] = "display('a table')\n" + source
    nb["cells"].append(
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": IDIOMS_LAST}
    )
    result = _grade(tmp_path, nb, isolator)
    assert _score(result) == result.max_points == 29, [(t.name, t.output) for t in result.tests if not t.score]


# --- the broker's check outside bubblewrap too ------------------------------------------------------

LINGERING = (  # a cell's thread dies with the notebook process; the thread the case leaves is refused
    "import threading\n"
    "threading.Thread(target=threading.Event().wait, daemon=True).start()  # never ends\n"
    "def add_arrays(a, b):\n"
    "    threading.Thread(target=threading.Event().wait, daemon=True).start()  # never ends\n"
    "    return a + b\n"
    "def double(x):\n"
    "    return 2 * x\n"
)


def _check_lingering(tmp_path: Path, isolator: Isolator) -> None:
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "lingering.ipynb", LINGERING)
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    add = [t for t in result.tests if t.exercise == "fake_add"]
    assert add and all(t.score == 0 and "other thread" in t.output for t in add), [t.output for t in add]
    assert _score(result, "fake_double") == 2, [t.output for t in result.tests]


def test_a_thread_a_case_leaves_is_refused_and_one_a_cell_left_is_gone(tmp_path, isolator):
    _check_lingering(tmp_path, isolator)


@pytest.mark.slow  # starts the broker process without walls (about 7 s)
def test_without_isolation_a_lingering_thread_is_refused_too(tmp_path, monkeypatch):
    """``--unsafe-no-isolation``: the broker is a plain parent process, and still checks after each case."""
    if EXPECTED_TIER not in ("", "A"):
        pytest.skip("about the path without any tier; this run checks tier " + EXPECTED_TIER)
    from mha_course.grading.walls import bubblewrap as isolation

    monkeypatch.setattr(isolation, "probe", lambda: "bwrap is switched off for this test")
    isolator = Isolator(unsafe_no_isolation=True)
    try:
        assert not isolator.walls.isolated
        _check_lingering(tmp_path, isolator)
    finally:
        isolator.close()
