"""Red-team regressions, fifth review: each case starts from the notebook's state after ALL its cells ran.

By default the notebook process runs every cell, forks once to settle (the threads the cells left do not
follow), and forks one case process per case from that copy (:mod:`mha_course.grading.inside.broker`). So
learner code may run before, around and after the function under test inside a case process: at fork
(``os.register_at_fork``), in a finalizer, a signal handler, a profiler, a library function it replaced,
a module it wrote, text a library evaluates. What the OS wall guarantees is unchanged (no secret, other
student or host file is reached; nothing outlives the sandbox; replies are plain data compared in the
grader); the tripwire inside the case process is advice. The property under test is the review's:

    an unedited exercise plus any cell never reaches an undeserved point unflagged.

Each attack below is appended as cells to an unedited exercise (``exercises/a02_softmax.ipynb``, and
``exercises/a05_multi_head.ipynb`` for a sample) and graded in tier A with the static scan ON. A payload
that would earn points is the forbidden shortcut (``torch.softmax``) reached through a helper, which the
tripwire alone catches (the control); each attack tries to keep the tripwire from seeing it, or to forge
the reply, or to carry something from one case to the next. Each test asserts either that no point is
gained, or that the submission is flagged with the evidence (finding, cell, line) that a reviewer reads.
Honest controls (the a02 solution with common idioms) keep full marks and no "likely tampering" flag.

Holes this round closed (each is an attack below): a module a cell wrote as text and imported, and the
other text a library runs as Python (the scan now reads every string literal that is Python as code);
a library function replaced (``numpy.save``, ``json.dumps``, ``torch.Tensor.numpy``: the runtime calls
them after the target returns); TorchScript (its operators run below the API the tripwire watches).

Where the cases came from: the fifth review (test_redteam_round5.py before the tests mirrored the
package).
"""

from __future__ import annotations

import codecs
import dataclasses
import json
from pathlib import Path

import pytest

from mha_course.grading import verdicts
from mha_course.grading.engine import pipeline as grader
from mha_course.grading.engine.process import Isolator
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]
LIMITS = Limits(case_timeout=20, cell_timeout=30, notebook_timeout=120, memory_mb=1024)
A02 = ("exercises", "a02_softmax.ipynb")
A05 = ("exercises", "a05_multi_head.ipynb")


def _notebook(base: tuple[str, str], cells: tuple[str, ...]) -> tuple[dict, int]:
    """The notebook ``base`` with ``cells`` appended; returns it and the Jupyter number of the first one."""
    nb = json.loads((ROOT / base[0] / base[1]).read_text())
    first = len(nb["cells"]) + 1
    for source in cells:
        nb["cells"].append(
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
        )
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    return nb, first


def _grade(
    tmp_path: Path,
    isolator: Isolator,
    base: tuple[str, str],
    *cells: str,
    seed: int | None = 11,
    limits: Limits = LIMITS,
) -> tuple[verdicts.SubmissionResult, int]:
    nb, first = _notebook(base, cells)
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(nb))
    result = grader.grade_notebook(path, limits=limits, isolator=isolator, seed=seed)
    assert result.error is None, result.error
    return result, first


def _score(result: verdicts.SubmissionResult) -> float:
    return sum(t.score for t in result.tests)


def _line(source: str, marker: str) -> int:
    """The 1-based line of ``source`` that holds ``marker``."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def assert_flagged(result: verdicts.SubmissionResult, cells: tuple[str, ...], first: int, evidence: tuple) -> None:
    """Flagged with ``evidence`` = (finding substring, which appended cell (0-based), a text on the flagged line,
    label): the reviewer is shown what, where, and the line as written."""
    finding, which, marker, label = evidence
    cell, line = first + which, _line(cells[which], marker)
    shown = [f.evidence() + f" [{f.label}]" for f in result.flags]
    match = [f for f in result.flags if finding in f.finding and (f.cell, f.line) == (cell, line)]
    assert match, (finding, cell, line, shown)
    assert match[0].label == label and marker in match[0].source, (match[0], shown)
    assert result.review_state.startswith("to review ("), (result.review_state, shown)


# --- payloads -------------------------------------------------------------------------------------------

# the forbidden shortcut through a helper: the scan sees no forbidden name in either target; the tripwire does
SHORTCUT = """import numpy as np
import torch

def _shortcut(x, dim):
    return torch.nan_to_num(torch.softmax(torch.as_tensor(x), dim), nan=0.0)

def softmax(x, dim=-1):
    return _shortcut(x, dim)

def softmax_np(x, axis=-1):
    return _shortcut(x, axis).numpy()
"""

# the tripwire's recorder silenced, wherever a frame above holds it (the case's _run_case does)
DISARM = """import sys

def _disarm(frame=None):
    frame = frame if frame is not None else sys._getframe()
    while frame is not None:
        found = frame.f_locals.get("tripwire")
        if found is not None and hasattr(found, "hits"):
            found.__dict__["hit"] = lambda name: None
        frame = frame.f_back
"""

# a correct softmax in plain NumPy (earned, when it is the learner's own): used where an attack on the
# sandbox, not the shortcut, is what would turn it into points
NUMPY_SOFTMAX = """import numpy as np

def _np_softmax(x, axis=-1):
    x = np.asarray(x)
    top = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(top), top, 0))
    total = e.sum(axis=axis, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(x.dtype)
"""


def _rot13(text: str) -> str:
    return codecs.encode(text, "rot13")


HIDDEN = DISARM + "import os\nos.register_at_fork(after_in_child=_disarm)\n"  # what the text-run attacks run

# name -> (cells appended to a02, evidence (finding, appended cell, line marker, label))
FLAGGED = {
    "os.register_at_fork runs in each case process": (
        (SHORTCUT, DISARM + "import os\nos.register_at_fork(after_in_child=_disarm)\n"),
        ("os.register_at_fork", 1, "register_at_fork", "likely tampering"),
    ),
    "a finalizer, weakref.finalize and atexit in the settled copy": (
        (
            SHORTCUT,
            DISARM + "import atexit, gc, weakref\n"
            "class _Loop:\n    def __del__(self):\n        _disarm()\n"
            "_a, _b = _Loop(), _Loop()\n_a.other, _b.other = _b, _a\ndel _a, _b\n"
            "class _Kept:\n    pass\n_KEPT = _Kept()\nweakref.finalize(_KEPT, _disarm)\natexit.register(_disarm)\n",
        ),
        ("._getframe", 1, "sys._getframe()", "likely tampering"),
    ),
    "a signal handler and an itimer set in a cell": (
        (
            SHORTCUT,
            DISARM + "import signal\nsignal.signal(signal.SIGALRM, lambda s, frame: _disarm(frame))\n"
            "signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)\n",
        ),
        ("signal.signal", 1, "signal.signal(", "review"),
    ),
    "sys.setprofile and sys.settrace installed in a cell": (
        (
            SHORTCUT,
            DISARM + "sys.setprofile(lambda frame, event, arg: _disarm(frame))\nsys.settrace(lambda *a: None)\n",
        ),
        ("sys.setprofile", 1, "sys.setprofile(", "likely tampering"),
    ),
    "the runtime's _run_case replaced": (
        (
            SHORTCUT,
            "import contextlib\nimport mha_course.grading.inside.runner as _runtime\n"
            "class _Blind:\n    hits, ops = [], []\n    def armed(self, names):\n        return contextlib.nullcontext([])\n"
            "_original = _runtime._run_case\n"
            "_runtime._run_case = lambda request, namespace, inputs, tripwire, *a, **k: _original(request, namespace, inputs, _Blind(), *a, **k)\n",
        ),
        ("mha_course.grading.inside.runner._run_case (written)", 1, "_runtime._run_case =", "likely tampering"),
    ),
    "wire.send and guard.Tripwire replaced": (
        (
            SHORTCUT,
            "from mha_course.grading.inside import guard, wire\n_send = wire.send\n"
            "wire.send = lambda sock, message, blob=b'': _send(sock, {**message, 'forbidden': []}, blob)\n"
            "guard.Tripwire.hit = lambda self, name: None\n",
        ),
        ("mha_course.grading.inside.wire.send (written)", 1, "wire.send =", "likely tampering"),
    ),
    "builtins rebound (next, so the watch finds no forbidden family)": (
        (
            SHORTCUT.replace("torch.softmax(torch.as_tensor(x), dim)", "torch.as_tensor(x).softmax(dim)"),
            "import builtins\n_next = next\nbuiltins.next = lambda it, *default: default[0] if default else _next(it)\n",
        ),
        ("builtins.next (written)", 1, "builtins.next =", "likely tampering"),
    ),
    "numpy.save replaced: the reply rewritten after the target returns": (
        (
            "import numpy as np\nimport torch\n_save, _AXIS = np.save, {}\n"
            "def _forged(file, arr, *a, **k):\n"
            "    if _AXIS and arr.dtype.kind == 'f':\n"
            "        arr = torch.nan_to_num(torch.softmax(torch.as_tensor(arr), _AXIS['axis']), nan=0.0).numpy()\n"
            "    return _save(file, arr, *a, **k)\n"
            "np.save = _forged\n"
            "def softmax_np(x, axis=-1):\n    _AXIS['axis'] = axis\n    return x.copy()\n"
            "def softmax(x, dim=-1):\n    _AXIS['axis'] = dim\n    return x.clone()\n",
        ),
        ("numpy.save (a library function replaced)", 0, "np.save = _forged", "likely tampering"),
    ),
    "torch functions replaced globally (torch.softmax, Tensor.__eq__)": (
        (
            SHORTCUT,
            "import torch\n_raw = torch.softmax\ntorch.softmax = lambda x, dim: _raw(x, dim)\ntorch.Tensor.__eq__ = lambda a, b: True\n",
        ),
        ("torch.Tensor.__eq__ (a library function replaced)", 1, "torch.Tensor.__eq__ =", "likely tampering"),
    ),
    "a module written as text and imported": (
        (
            SHORTCUT,
            "import os, sys\nsys.path.insert(0, os.getcwd())\n"
            f"with open('helper_forger.py', 'w') as f:\n    f.write({HIDDEN!r})\n",
            "import helper_forger",
        ),
        ("os.register_at_fork", 1, "f.write(", "likely tampering"),
    ),
    "a module written from encoded text and imported": (
        (
            SHORTCUT,
            "import codecs, os, sys\nsys.path.insert(0, os.getcwd())\n"
            f"with open('helper_hidden.py', 'w') as f:\n    f.write(codecs.decode({_rot13(HIDDEN)!r}, 'rot13'))\n",
            "import helper_hidden",
        ),
        ("import of 'helper_hidden'", 2, "import helper_hidden", "review"),
    ),
    "yaml's unsafe loader runs a tag": (
        (
            SHORTCUT,
            "import codecs, json, yaml\n"
            f"yaml.unsafe_load('!!python/object/apply:exec [' + json.dumps(codecs.decode({_rot13(HIDDEN)!r}, 'rot13')) + ']')\n",
        ),
        ("yaml.unsafe_load", 1, "yaml.unsafe_load(", "review"),
    ),
    "a pickle (numpy's allow_pickle) runs code": (
        (
            SHORTCUT,
            "import codecs, io, pickle\nimport numpy as np\n"
            "class _Payload:\n    def __reduce__(self):\n"
            f"        return (exec, (codecs.decode({_rot13(HIDDEN)!r}, 'rot13'),))\n"
            "np.save('payload.npy', np.array([_Payload()], dtype=object), allow_pickle=True)\n"
            "np.load('payload.npy', allow_pickle=True)\n",
        ),
        ("allow_pickle=True", 1, "np.load('payload.npy'", "review"),
    ),
    "torch.package runs a module it holds": (
        (
            SHORTCUT,
            "import codecs, torch.package\n"
            "with torch.package.PackageExporter('p.pt') as e:\n"
            f"    e.save_source_string('forged', codecs.decode({_rot13(HIDDEN)!r}, 'rot13'))\n"
            "torch.package.PackageImporter('p.pt').import_module('forged')\n",
        ),
        ("torch.package", 1, "import codecs, torch.package", "review"),
    ),
    "sympy evaluates a string": (
        (
            SHORTCUT,
            f"import codecs, sympy\nsympy.sympify('exec(' + repr(codecs.decode({_rot13(HIDDEN)!r}, 'rot13')) + ')')\n",
        ),
        ("sympy", 1, "sympy.sympify(", "review"),
    ),
    "unittest.mock patches the runtime by a dotted name": (
        (
            SHORTCUT,
            "import contextlib, unittest.mock\n"
            "class _Blind:\n    hits, ops = [], []\n    def armed(self, names):\n        return contextlib.nullcontext([])\n"
            "unittest.mock.patch('.'.join(['mha_course', 'grad' + 'ing', 'inside', 'guard', 'Tripwire']), lambda: _Blind()).start()\n",
        ),
        ("unittest.mock", 1, "unittest.mock.patch(", "review"),
    ),
    "TorchScript compiled from a string": (
        (
            "import torch\n"
            "_cu = torch.jit.CompilationUnit('def f(x, dim: int):\\n    return x.softmax(dim)\\n')\n"
            "def softmax(x, dim=-1):\n    return torch.nan_to_num(_cu.f(x, dim), nan=0.0)\n"
            "def softmax_np(x, axis=-1):\n    return softmax(torch.as_tensor(x), axis).numpy()\n",
        ),
        ("torch.jit.CompilationUnit", 0, "torch.jit.CompilationUnit(", "review"),
    ),
    "a TorchScript helper calls the forbidden method": (
        (
            "import torch\n"
            "@torch.jit.script\ndef _sm(x: torch.Tensor, dim: int) -> torch.Tensor:\n    return x.softmax(dim)\n"
            "def softmax(x, dim=-1):\n    return torch.nan_to_num(_sm(x, dim), nan=0.0)\n"
            "def softmax_np(x, axis=-1):\n    return softmax(torch.as_tensor(x), axis).numpy()\n",
        ),
        (".softmax in TorchScript", 0, "return x.softmax(dim)", "review"),
    ),
    "the case socket stolen in the settled copy (recv_fds)": (
        (
            SHORTCUT,
            "import os, socket\n"
            "def _steal():\n"
            "    for fd in os.listdir('/proc/self/fd'):\n"
            "        try:\n"
            "            socket.recv_fds(socket.socket(fileno=int(fd)), 1, 4, socket.MSG_DONTWAIT)\n"
            "        except OSError:\n"
            "            pass\n"
            "os.register_at_fork(after_in_child=_steal)\n",
        ),
        ("a file descriptor passed as fileno=", 1, "socket.recv_fds(", "likely tampering"),
    ),
}


# Attacks after which the settled copy never answers the broker (its sockets closed by the theft): the sandbox is
# stopped at the last cell's time limit. The exercise's own cells take about a second: 10 s shows the same as 30 s.
HANGS = frozenset({"the case socket stolen in the settled copy (recv_fds)"})
SHORT_CELLS = dataclasses.replace(LIMITS, cell_timeout=10)


def test_the_shortcut_alone_is_caught_by_the_tripwire(tmp_path, isolator):
    """The control: the helper's torch.softmax is seen while the case runs (0, "forbidden"), nothing flagged."""
    result, _ = _grade(tmp_path, isolator, A02, SHORTCUT)
    assert _score(result) == 0, [(t.name, t.output) for t in result.tests if t.score]
    assert any(t.status == "forbidden" and "torch.softmax" in t.output for t in result.tests)
    assert not result.flags, [f.evidence() for f in result.flags]


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_an_attack_on_the_settled_state_gains_nothing_unflagged(tmp_path, isolator, name):
    cells, evidence = FLAGGED[name]
    result, first = _grade(tmp_path, isolator, A02, *cells, limits=SHORT_CELLS if name in HANGS else LIMITS)
    # whatever it scored, the reviewer is shown the line that does it
    assert_flagged(result, cells, first, evidence)


# --- attacks the sandbox stops by itself (no point gained, flag or not) -----------------------------------

PROC_PROBE = """import os
REACHED = []
for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd", f"/proc/{os.getppid()}/environ", f"/proc/{os.getppid()}/mem"):
    try:
        os.listdir(path) if path.endswith("fd") else open(path, "rb").read(1)
        REACHED.append(path)
    except OSError:
        pass

def softmax_np(x, axis=-1):
    raise ValueError(f"reached {REACHED}")
"""


def test_the_broker_s_proc_is_out_of_reach_of_the_cells(tmp_path, isolator):
    """The broker (pid 1) and the notebook process's parent are not dumpable: nothing of theirs is read.
    The "/proc/" strings flag the submission for review too."""
    result, first = _grade(tmp_path, isolator, A02, PROC_PROBE)
    outputs = [t.output for t in result.tests if t.exercise == "softmax_np"]
    assert outputs and all("reached []" in o for o in outputs), outputs
    assert_flagged(result, (PROC_PROBE,), first, ("the string '/proc/'", 0, '"/proc/1/environ"', "review"))


# each case writes a marker in every writable place it knows; it answers only if an earlier case's is there
CASE_TO_CASE = """import os, tempfile
PLACES = [os.getcwd(), tempfile.gettempdir(), "/tmp", os.path.join(os.getcwd(), ".matplotlib")]

def _earlier():
    seen = [p for p in PLACES if os.path.exists(os.path.join(p, "case_marker"))]
    for p in PLACES:
        try:
            with open(os.path.join(p, "case_marker"), "w") as f:
                f.write("x")
        except OSError:
            pass
    return seen
"""
CASE_TO_CASE_A02 = (
    NUMPY_SOFTMAX
    + CASE_TO_CASE
    + "def softmax_np(x, axis=-1):\n    seen = _earlier()\n    if not seen:\n        raise ValueError('no marker')\n"
    "    return _np_softmax(x, axis)\n"
)
CASE_TO_CASE_A05 = (
    CASE_TO_CASE + "def split_heads(x, num_heads):\n    if not _earlier():\n        raise ValueError('no marker')\n"
    "    B, T, E = x.shape\n    return x.view(B, T, num_heads, E // num_heads).transpose(1, 2)\n"
)


@pytest.mark.parametrize(
    "base,cell,exercise", [(A02, CASE_TO_CASE_A02, "softmax_np"), (A05, CASE_TO_CASE_A05, "split_heads")]
)
def test_a_file_one_case_writes_never_reaches_the_next(tmp_path, isolator, base, cell, exercise):
    result, _ = _grade(tmp_path, isolator, base, cell)
    rows = [t for t in result.tests if t.exercise == exercise]
    assert rows and all(t.score == 0 and "no marker" in t.output for t in rows), [(t.name, t.output) for t in rows]


LEAVES_A_THREAD = "import threading, time\n_START = threading.Thread\n"
LEAVES_A_THREAD_A02 = (
    NUMPY_SOFTMAX
    + LEAVES_A_THREAD
    + "def softmax_np(x, axis=-1):\n    _START(target=time.sleep, args=(30,), daemon=True).start()\n    return _np_softmax(x, axis)\n"
)
LEAVES_A_THREAD_A05 = (
    LEAVES_A_THREAD + "def split_heads(x, num_heads):\n    _START(target=time.sleep, args=(30,), daemon=True).start()\n"
    "    B, T, E = x.shape\n    return x.view(B, T, num_heads, E // num_heads).transpose(1, 2)\n"
)


@pytest.mark.parametrize(
    "base,cell,exercise,seed",
    [(A02, LEAVES_A_THREAD_A02, "softmax_np", 11), (A05, LEAVES_A_THREAD_A05, "split_heads", None)],
)
def test_a_case_that_leaves_a_thread_running_is_not_graded(tmp_path, isolator, base, cell, exercise, seed):
    """BACKGROUND: the case process must end its reply alone on one thread (a right answer then scores 0).

    a02 is graded as a class is, with a seed (each case again on fresh inputs); a05 without one: the broker
    gives each such case a second to end its thread, and the second run of a refused case shows nothing new."""
    result, _ = _grade(tmp_path, isolator, base, cell, seed=seed)
    rows = [t for t in result.tests if t.exercise == exercise]
    assert rows and all(t.score == 0 for t in rows), [(t.name, t.output) for t in rows]
    assert all("still running when this test ended" in t.output for t in rows if t.status != "not run"), [
        t.output for t in rows
    ]


FILLER = """import os
try:
    with open("filler.bin", "wb") as f:
        while True:
            f.write(b"0" * 2**20)
except OSError:
    pass
"""


def test_a_cell_that_fills_the_scratch_gains_nothing_and_the_cases_still_run(tmp_path, isolator):
    """Its own notebook's cases still run (each replies on its socket, not through the scratch); the unedited
    exercise scores 0, as it would without the filler."""
    result, _ = _grade(tmp_path, isolator, A02, FILLER)
    assert result.tests and _score(result) == 0, [(t.name, t.output) for t in result.tests if t.score]
    assert all(t.status in ("not attempted", "not run") for t in result.tests), [t.output for t in result.tests]


def test_the_a05_runtime_forger_is_flagged(tmp_path, isolator):
    """The runtime replaced from a cell of a module assignment: flagged on the line that writes it."""
    cells = FLAGGED["the runtime's _run_case replaced"][0][1:]
    result, first = _grade(tmp_path, isolator, A05, *cells)
    assert_flagged(
        result,
        cells,
        first,
        ("mha_course.grading.inside.runner._run_case (written)", 0, "_runtime._run_case =", "likely tampering"),
    )
    assert _score(result) == 0, [(t.name, t.output) for t in result.tests if t.score]


# --- honest controls: full marks, no "likely tampering" flag ------------------------------------------------

HONEST = {
    "the solution alone": (),
    "a globals() self-check loop": (
        "for name in ['softmax_np', 'softmax']:\n    assert callable(globals()[name]), name\n",
    ),
    "a thread pool used and shut down in a cell": (
        "from concurrent.futures import ThreadPoolExecutor\nimport numpy as np\n"
        "with ThreadPoolExecutor(2) as pool:\n    sums = list(pool.map(lambda r: float(np.sum(softmax_np(r))), np.eye(3)))\n",
    ),
    "a helper module written with open().write and imported": (
        "with open('helpers.py', 'w') as f:\n    f.write('def row_sums(x):\\n    return x.sum(-1)\\n')\n",
        "import helpers\nTOTALS = helpers.row_sums(softmax_np(__import__('numpy').eye(3)))\n".replace(
            "__import__('numpy')", "np"
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idioms_keep_full_marks_and_no_likely_tampering_flag(tmp_path, isolator, name):
    nb = json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())
    for source in HONEST[name]:
        nb["cells"].append(
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
        )
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(nb))
    result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=11)
    assert result.error is None, result.error
    assert result.tests and _score(result) == sum(t.points for t in result.tests), [
        (t.name, t.output) for t in result.tests if t.score < t.points
    ]
    assert not any(f.likely_tampering for f in result.flags), [f.evidence() for f in result.flags]
    assert not any(" raised " in note for note in result.notes), result.notes  # the idiom itself works
