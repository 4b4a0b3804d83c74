"""Red-team regressions against the static scan and the similarity check: code written to pass as honest.

The cases came from the class review (test_redteam_class.py before the tests mirrored the
package): runtime reach spelled in pieces (``getattr(self, 'grad' + 'ing')``, a descriptor number, code
handed to ``timeit``) must be flagged as tampering while the lectures' own idioms are not; a reference
pasted behind a one-line wrapper is still a copy; code nested too deep to parse is a syntax error in the
notes, never the grader's own failure. Pure AST work, no grading: fast. The pieces of the third review's
forging cell are in test_forge_replies_from_the_main_thread.py, beside the forger they make up.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from mha_course.grading.classroom import feedback
from mha_course.grading.engine import registry
from mha_course.grading.static import scan, similarity

ROOT = Path(__file__).resolve().parents[3]

WRAPPED_REFERENCE = (  # the library's softmax pasted as a helper, behind a one-line wrapper
    "import math\nimport torch\n\n"
    + inspect.getsource(importlib.import_module("mha_course.core.softmax").softmax).replace(
        "def softmax(", "def _ref(", 1
    )
    + "\n\ndef softmax(x, dim=-1):\n    return _ref(x, dim)\n"
)

WRAPPER_ONLY = "def softmax(x, dim=-1):\n    return _ref(x, dim)\n"


def test_a_reference_behind_a_wrapper_is_flagged():
    found = similarity.find_copies([(0, WRAPPED_REFERENCE)], ["softmax", "softmax_np"])
    assert found == ["_ref (used by softmax) is identical to mha_course.core.softmax.softmax (names ignored)"]
    assert similarity.find_copies([(0, WRAPPER_ONLY)], ["softmax"]) == []


HONEST = {
    "timeit with a lambda": "import timeit\nt = timeit.repeat(lambda: sum(range(9)), number=3, repeat=3)",
    "timeit with a function": "import timeit\n\ndef fn():\n    pass\n\nt = timeit.timeit(fn, number=3)",
    "timeit with a literal statement": "import timeit\nt = timeit.timeit('x = 1 + 1', number=3)",
    "inspect.getsource": "import inspect, json\nprint(inspect.getsource(json.dumps))",
    "inspect.getsourcelines": "import inspect, json\nlines, start = inspect.getsourcelines(json.dumps)",
    "gc.collect": "import gc\ngc.collect()",
    "getattr on self by an f-string": "class M:\n    def f(self, p):\n        return getattr(self, f'{p}_proj')",
    "open a file by name": "text = open('notes.txt').read()",
}

ATTACKS = {
    "getattr(self, 'grad' + 'ing')": ("def f(self):\n    return getattr(self, 'grad' + 'ing')", "'grading'"),
    "getattr(self, '_get' + 'frame')": ("def f(self):\n    return getattr(self, '_get' + 'frame')", "'_getframe'"),
    "through a constant": ("n = 'grad'\nm = n + 'ing'\ndef f(self):\n    return getattr(self, m)", "'grading'"),
    "through join": ("def f(self):\n    return getattr(self, ''.join(['mod', 'ules']))", "'modules'"),
    "attribute .grading": ("def f(pkg):\n    return pkg.grading.wire", ".grading"),
    "timeit hides code": ("import timeit\ntimeit.timeit('import sys; sys.modules')", "sys.modules"),
    "timeit statement built at run time": ("import timeit\ns = input()\ntimeit.timeit(s + '')", "built at run time"),
    "timeit passed around": ("import functools, timeit\nf = functools.partial(timeit.timeit, 'x')", "passed around"),
    "frames by inspect": ("import inspect\nf = inspect.currentframe()", "inspect.currentframe"),
    "gc.get_objects": ("import gc\nobjs = gc.get_objects()", "gc.get_objects"),
    "reply socket number": ("import sys\nfd = int(sys.argv[1])", "sys.argv"),
    "/proc/self/fd": ("import os\nos.listdir('/proc/self/fd')", "'/proc/'"),
    "/dev/fd": ("open('/dev/fd/3', 'wb')", "'/dev/fd'"),
    "os.fdopen": ("import os\nos.fdopen(3, 'wb')", "os.fdopen"),
    "open(3)": ("open(3, 'wb').write(b'{}')", "file descriptor number"),
    "open(fd) with fd = 3": ("fd = 3\nopen(fd, 'wb')", "file descriptor number"),
    "socket(fileno=3)": ("import socket\nsocket.socket(fileno=3)", "fileno="),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_lecture_idioms_are_not_tampering(name):
    report = scan.scan([(0, HONEST[name])], registry.get_assignment("a02_softmax"))
    assert not report.tampering, report.tampering


@pytest.mark.parametrize("name", list(ATTACKS))
def test_runtime_reach_is_tampering(name):
    source, expected = ATTACKS[name]
    report = scan.scan([(0, source)], registry.get_assignment("a02_softmax"))
    assert expected in " ".join(f.name for f in report.tampering), report.tampering


def test_lecture_notebooks_use_no_flagged_idiom_but_dispatch_modes():
    """Every chapter's code scans clean, except chapter 13's TorchDispatchMode (it could hide a call from
    the tripwire, so a submission may not use it)."""
    from mha_course.grading.engine import notebook

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        report = scan.scan(notebook.code_cells(notebook.load(path)), registry.get_assignment("a02_softmax"))
        names = {f.name for f in report.tampering if "_python_dispatch" not in f.name}
        assert not names, (path.name, names)


def test_code_too_deep_to_parse_is_a_syntax_error_everywhere():
    source = "flag = " + "not " * 140_000 + "True\n"
    with pytest.raises(SyntaxError, match="nested too deeply"):
        scan.parse(source)
    assert feedback.defining_cells([(0, source)], ["softmax"]) == {}
    assert similarity.find_copies([(0, source)], ["softmax"]) == []


def test_arithmetic_too_deep_costs_the_scan_nothing():
    """``open(1+1+...+1)`` 200,000 terms deep: a syntax error in the notes, never the grader's own failure."""
    report = scan.scan([(0, "x = open(" + "1+" * 200_000 + "1)")], registry.get_assignment("a02_softmax"))
    (error,) = report.syntax_errors
    assert error.startswith("cell 1, line 1: SyntaxError: nested too deeply for the grader to read")
