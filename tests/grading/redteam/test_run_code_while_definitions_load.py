"""Red-team regressions on the case processes: learner code that tries to run while definitions load.

In strict mode (``Limits(strict_definitions=True)``, an exam setting) each case runs in a fresh process
that loads only the notebook's definitions (:mod:`mha_course.grading.inside.definitions`), so the only
learner code it runs is the call under test. Each forger below would, if it ran at load time, put a
working ``add_arrays`` in place of the unfinished one (``raise NotImplementedError``): a score above 0
means learner code ran outside the call. The static scan is off (what is under test is the runtime);
tests/grading/walls/test_confined.py runs this file again in tier B.

By default each case starts from the notebook's state after ALL its cells ran (as in Jupyter): there
every forger below does run (in the notebook process, before the cases), so it may well put a working
``add_arrays`` in the namespace the cases see. The property there is the review's: a stub plus any
cell never reaches full marks unflagged. Each ``..._by_default`` twin grades the same attack with the
scan on and asserts no point was gained or the submission is flagged with the evidence (finding, cell,
line). With the scan off (``no_scan``) the default mode guarantees only what the OS wall does (no
secret, other student or host file is reached, nothing outlives the sandbox, each case's reply is plain
data compared in the grader); whether a forger's answer is credited is then only the tripwire's advice.

Where the cases came from: the review of strict definitions (test_redteam_defs.py before the tests
mirrored the package); the fourth review's attacks on the same load are in
test_smuggle_code_into_a_case_process.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from grading_fake import write_submission

from mha_course.grading import verdicts
from mha_course.grading.engine import pipeline as grader
from mha_course.grading.engine import registry
from mha_course.grading.engine.process import Isolator
from mha_course.grading.verdicts import Limits

LIMITS = Limits(case_timeout=20, cell_timeout=30, notebook_timeout=90, memory_mb=1024)
STRICT = dataclasses.replace(LIMITS, strict_definitions=True)

UNFINISHED = "def add_arrays(a, b):\n    raise NotImplementedError\n"


def forger(returns: str) -> str:
    """A ``forge`` that puts a working add_arrays in every namespace up the stack (the definitions' namespace
    included) and returns ``returns`` (what the place it is called from needs: a base class, a value)."""
    return (
        "import sys as _sys\n"
        "def forge(*args, **kwargs):\n"
        "    frame = _sys._getframe()\n"
        "    while frame is not None:\n"
        "        if 'add_arrays' in frame.f_globals:\n"
        "            frame.f_globals['add_arrays'] = lambda a, b: a + b\n"
        "        frame = frame.f_back\n"
        f"    return {returns}\n"
    )


PATCH = forger("object")

FORGERS = {
    "an assigned call": "_ = forge()",
    "a decorator": "@forge\ndef unused():\n    pass",
    "a default argument": "def unused(x=forge()):\n    pass",
    "a class body statement": "class Unused:\n    forge()",
    "a class body assignment": "class Unused:\n    x = forge()",
    "__init_subclass__ of a notebook base": (
        "class Base:\n    def __init_subclass__(cls, **kwargs):\n        forge()\nclass Sub(Base):\n    pass"
    ),
    "a sorted key": "X = sorted([2, 1], key=forge)",
    # a namespace is a dict, so this one is never called; kept as the reviewers asked about it
    "a module-level __getattr__": "def __getattr__(name):\n    forge()\n    raise AttributeError(name)\nX = missing_name",
    "a metaclass": "class Meta(type):\n    def __new__(m, *a):\n        forge()\n        return type.__new__(m, *a)\nclass A(metaclass=Meta):\n    pass",
    "exec of a string": "X = exec('forge()')",
    "a lambda called at once": "X = (lambda: forge())()",
    "__builtins__ with a notebook __import__": ("__builtins__ = {'__import__': forge}", "import math"),
}

MODULE = (
    "import sys\n"
    "with open('forged_module.py', 'w') as f:\n"
    "    f.write(" + repr(PATCH + "forge()\n") + ")\n"
    "sys.path.insert(0, '.')\n"
)


def _grade(tmp_path: Path, isolator: Isolator, *cells: str, strict: bool = False) -> verdicts.SubmissionResult:
    """Grade ``cells`` on the fake assignment; ``strict``: each case loads only the definitions."""
    with registry.registered("grading_fake"):
        path = write_submission(tmp_path / "submission.ipynb", *cells)
        result = grader.grade_notebook(path, limits=STRICT if strict else LIMITS, isolator=isolator, seed=None)
    assert result.error is None, result.error
    return result


def _score(result, exercise: str) -> float:
    return sum(t.score for t in result.tests if t.exercise == exercise)


def assert_flagged(result: verdicts.SubmissionResult, finding: str, cell: int, line: int) -> None:
    """The submission is flagged "likely tampering" with this evidence: a finding naming ``finding`` at (cell, line)."""
    evidence = [f.evidence() for f in result.flags]
    assert any(finding in f.finding and (f.cell, f.line) == (cell, line) for f in result.flags), evidence
    assert result.review_state == "to review (likely tampering)", (result.review_state, evidence)


@pytest.mark.parametrize("name", sorted(FORGERS))
def test_no_learner_code_runs_while_definitions_load(tmp_path, isolator, no_scan, name):
    forger = FORGERS[name]
    cells = (UNFINISHED, PATCH, *((forger,) if isinstance(forger, str) else forger))
    result = _grade(tmp_path, isolator, *cells, strict=True)
    assert _score(result, "fake_add") == 0, [t.output for t in result.tests]
    # the same forger does patch the namespace of the notebook process, which answers no case
    assert all(t.status == "not attempted" for t in result.tests if t.exercise == "fake_add"), [
        t.output for t in result.tests
    ]


@pytest.mark.parametrize("name", sorted(FORGERS))
def test_a_forger_run_by_the_cells_is_flagged_by_default(tmp_path, isolator, name):
    """By default the cells run before the cases, so a forger may well put a working add_arrays in the
    state the cases see (full marks): the frames it walks flag the submission, with the line that does it."""
    forger = FORGERS[name]
    result = _grade(tmp_path, isolator, UNFINISHED, PATCH, *((forger,) if isinstance(forger, str) else forger))
    assert_flagged(result, "._getframe", 3, 3)  # PATCH's `frame = _sys._getframe()` (cell 1 is markdown)


def test_a_module_a_cell_wrote_is_not_imported_by_a_case(tmp_path, isolator, no_scan):
    result = _grade(tmp_path, isolator, UNFINISHED, MODULE, "import forged_module", strict=True)
    assert _score(result, "fake_add") == 0, [t.output for t in result.tests]


def test_a_module_a_cell_wrote_and_imported_is_flagged_by_default(tmp_path, isolator):
    """The cells import it (full marks by default: its forger ran in the notebook process). The scan reads
    the literal it writes as code: the frame walk inside is flagged on the line that writes it.

    (A hole before this round: the forger's code was a string, which the scan did not read.)"""
    result = _grade(tmp_path, isolator, UNFINISHED, MODULE, "import forged_module")
    assert_flagged(result, "._getframe", 3, 3)  # `f.write(...)` of MODULE


def test_a_value_a_skipped_statement_sets_gets_the_sentence(tmp_path, isolator, no_scan):
    """An honest slip: a table built in a loop at the top level. The error says what to change."""
    cell = "TABLE = {}\nfor k in range(3):\n    TABLE[k] = k\ndef add_arrays(a, b):\n    return a + b + TABLE[0]\n"
    result = _grade(tmp_path, isolator, cell, strict=True)
    outputs = [t.output for t in result.tests if t.exercise == "fake_add"]
    assert _score(result, "fake_add") == 0
    assert all("'TABLE' is set in cell 2, line 1" not in o for o in outputs)  # TABLE itself is a plain value
    cell = "for k in range(3):\n    TABLE = k\ndef add_arrays(a, b):\n    return a + b + TABLE\n"
    result = _grade(tmp_path, isolator, cell, strict=True)
    outputs = [t.output for t in result.tests if t.exercise == "fake_add"]
    assert outputs and all("'TABLE' is set in cell 2, line 1" in o and "inside your function" in o for o in outputs)


def test_a_table_a_loop_fills_works_by_default(tmp_path, isolator):
    """The same notebooks by default: the cases see the state the loop left, as the learner's kernel did
    (TABLE[0] is 0: full marks; TABLE is 2 after the loop: a wrong sum), and nothing is flagged."""
    cell = "TABLE = {}\nfor k in range(3):\n    TABLE[k] = k\ndef add_arrays(a, b):\n    return a + b + TABLE[0]\n"
    result = _grade(tmp_path, isolator, cell)
    assert _score(result, "fake_add") == 4 and not result.flags, [t.output for t in result.tests]
    cell = "for k in range(3):\n    TABLE = k\ndef add_arrays(a, b):\n    return a + b + TABLE\n"
    result = _grade(tmp_path, isolator, cell)
    assert _score(result, "fake_add") == 0 and not result.flags, [t.output for t in result.tests]


SELF_FORGER = r"""
import io, json, os, stat, struct
import numpy as np

def _channel():
    for k in range(3, 64):
        try:
            if stat.S_ISSOCK(os.stat(k).st_mode):
                return open(k, "r+b", buffering=0)
        except OSError:
            pass

def add_arrays(a, b):
    out = io.BytesIO()
    np.save(out, np.einsum("ij->ij", a) + b, allow_pickle=False)  # forbidden: the reply says nothing of it
    blob = out.getvalue()
    f = _channel()
    data = json.dumps({"ok": True, "structure": {"t": "array", "i": 0, "n": len(blob)}, "forbidden": [], "ops": []})
    f.write(struct.pack(">Q", len(data)) + data.encode() + struct.pack(">Q", len(blob)) + blob)
    while True:  # and now answer the next cases too
        head = f.read(8)
        if not head:
            return None
        message = json.loads(f.read(struct.unpack(">Q", head)[0]))
        blob = f.read(struct.unpack(">Q", f.read(8))[0])
        f.write(struct.pack(">Q", len(data)) + data.encode() + struct.pack(">Q", 0))
"""


def test_a_target_that_forges_its_reply_answers_only_its_own_case(tmp_path, isolator, no_scan):
    """Without the scan a target can claim "no forbidden call" for its own case (the scan is the second
    source of that evidence), but it reaches no other case: each has its own process and channel."""
    result = _grade(tmp_path, isolator, SELF_FORGER)
    assert _score(result, "fake_double") == 0
    assert all("does not define 'double'" in t.output for t in result.tests if t.exercise == "fake_double")


def test_with_the_scan_a_self_forging_target_is_flagged(tmp_path, isolator):
    """The forbidden einsum in the target costs the exercise its points (a teaching verdict); the descriptor
    opened by number (a loop over a range) flags the submission for review with its evidence (it costs no points by
    itself, but is never credited in silence)."""
    result = _grade(tmp_path, isolator, SELF_FORGER)
    assert _score(result, "fake_add") == 0, [t.output for t in result.tests]
    assert all("numpy.einsum" in t.output for t in result.tests if t.exercise == "fake_add")
    flag = next(f for f in result.flags if "file descriptor number" in f.finding)
    assert (flag.cell, flag.line, flag.source) == (2, 9, 'return open(k, "r+b", buffering=0)'), flag
    assert result.review_state == "to review (likely tampering)" and result.on_tamper == "review"


BROKER_KILLER = r"""
import os, signal
TRIED = []
for attempt in ("kill", "pidfd", "mem"):
    try:
        if attempt == "kill":
            os.kill(1 if os.getppid() == 1 else os.getppid(), signal.SIGKILL)
        elif attempt == "pidfd":
            signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)
        else:
            with open(f"/proc/{os.getppid()}/mem", "r+b") as f:
                f.write(b"x")
        TRIED.append(attempt)
    except (OSError, PermissionError, AttributeError):
        pass
"""


def test_a_cell_that_attacks_the_broker_costs_only_itself(tmp_path, isolator, no_scan):
    """Signals and memory writes to the broker fail (pid 1 of a namespace, not dumpable); where a kill
    lands (outside a PID namespace) the cell is skipped and the notebook re-run: the honest cells still grade."""
    result = _grade(tmp_path, isolator, BROKER_KILLER, "def add_arrays(a, b):\n    return a + b\n")
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]
