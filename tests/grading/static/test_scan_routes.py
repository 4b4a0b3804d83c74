"""Red-team findings that need no grading run: the static scan flags each route to the grader, the
interpreter or another process before anything runs, and the course's own notebooks are not
flagged; writing results never replaces a device file.

Pure AST work, no grading: fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mha_course.grading.engine import notebook, registry
from mha_course.grading.static import scan

ROOT = Path(__file__).resolve().parents[3]


def _findings(*sources: str, assignment: str = "a03_attention") -> scan.ScanReport:
    return scan.scan(list(enumerate(sources)), registry.get_assignment(assignment))


TAMPERING = {
    # attribute access by a computed name (the usual way around a name-based scan)
    "computed getattr": ("import torch\nf = getattr(torch, 'soft' + 'max')", "computed attribute name"),
    "computed setattr": ("import mha_course\nsetattr(mha_course, 'x' + 'y', 1)", "computed attribute name"),
    "getattr as a value": ("import functools, torch\nf = functools.reduce(getattr, ['nn'], torch)", "passed around"),
    "vars of a module": ("import mha_course\nvars(mha_course)['grading']", "vars"),
    "globals()": ("g = globals()['__builtins__']", "globals"),
    # literal getattr reads as the attribute it names
    "literal getattr private torch": ("import torch\nf = getattr(torch, '_softmax')", "torch._softmax"),
    "literal getattr sys.meta_path": ("import sys\nm = getattr(sys, 'meta_path')", "sys.meta_path"),
    "literal getattr dunder": ("def f(): pass\ng = getattr(f, '__globals__')", "__globals__"),
    # introspection attributes
    "__globals__": ("from mha_course import check\ncheck.__globals__['sys']", ".__globals__"),
    "__closure__": ("import torch\ntorch.softmax.__closure__", ".__closure__"),
    "__wrapped__": ("import torch.nn.functional as F\nF.scaled_dot_product_attention.__wrapped__", ".__wrapped__"),
    "__self__ (builtins)": ("e = print.__self__", ".__self__"),
    "__subclasses__": ("object.__subclasses__()", ".__subclasses__"),
    "frames": ("try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_back", ".tb_frame"),
    # private torch names and raw operators
    "torch private": ("import torch\ntorch._scaled_dot_product_attention_math", "torch._scaled_dot_product"),
    "autograd engine": ("from torch.autograd import graph\ngraph._engine_run_backward", "_engine_run_backward"),
    "torch.ops": ("import torch\ntorch.ops.aten.softmax", "torch.ops"),
    # modules that run code from strings or bytes, or find modules by name
    "pkgutil": (
        "import pkgutil\npkgutil.resolve_name('mha_course.core.attention:scaled_dot_product_attention')",
        "pkgutil",
    ),
    "pickle": ("import pickle\npickle.loads(b'')", "pickle"),
    "timeit statement built at run time": ("import timeit\ntimeit.timeit('imp' + 'ort os')", "built at run time"),
    "timeit literal statement is scanned": ("import timeit\ntimeit.timeit('import pickle')", "pickle"),
    "inspect": ("import inspect\ninspect.getmodule(len)", "inspect"),
    "operator.attrgetter": ("import operator\noperator.attrgetter('x')", "operator.attrgetter"),
    # processes and file descriptors, also through a module that re-exports os
    "pathlib.os.kill": ("import pathlib\npathlib.os.kill(1, 9)", "os.kill"),
    "os.write": ("import os\nos.write(5, b'x')", "os.write"),
    "process pool": ("from concurrent.futures import ProcessPoolExecutor", "ProcessPoolExecutor"),
    "asyncio subprocess": ("import asyncio\nasyncio.create_subprocess_exec('sleep', '1')", "create_subprocess_exec"),
    "alias by assignment": ("import os\nmy_os = os\nmy_os.fork()", "os.fork"),
    # the grader's files and other processes
    "results.json": ("open('results.json', 'w')", "'results.json'"),
    "/proc": ("open('/proc/1/cmdline').read()", "'/proc/'"),
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_tampering_is_flagged(name):
    source, expected = TAMPERING[name]
    report = _findings(source)
    found = " ".join(f.name for f in report.tampering)
    assert expected in found, (name, found)


def test_literal_getattr_inside_the_target_is_forbidden():
    report = _findings(
        "import torch.nn.functional as F\n\ndef scaled_dot_product_attention(q, k, v, scale=None):\n"
        "    return getattr(F, 'scaled_dot_product_attention')(q, k, v), None"
    )
    assert [f.name for f in report.forbidden["sdpa"]] == ["torch.nn.functional.scaled_dot_product_attention"]
    assert not report.tampering


@pytest.mark.parametrize(
    "source",
    [
        "class M:\n    def __init__(self):\n        super().__init__()\n        self.q_proj = 1\n"
        "    def f(self, name):\n        return getattr(self, name)",  # getattr(self, computed): allowed
        "import numpy as np\nx = getattr(np, 'float32')",
        "import torch\nx = torch.finfo(torch.float16).min\ny = hasattr(torch, 'compile')",
        "import math\nscale = math.sqrt\nprint(scale(4.0))",
    ],
)
def test_ordinary_code_is_not_flagged(source):
    report = _findings(source)
    assert not report.tampering and not report.forbidden


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_course_notebooks_scan_clean(folder):
    for path in sorted((ROOT / folder).glob("a*.ipynb")):
        nb = notebook.load(path)
        report = scan.scan(notebook.code_cells(nb), registry.identify(nb))
        assert not (report.tampering or report.forbidden or report.imports), (path.name, report)


def test_results_written_to_a_device_leave_the_device_alone(tmp_path):
    """``--json /dev/null`` once replaced /dev/null with a regular file (rename over it); checked
    through a symlink, so a regression breaks the link, not the machine."""
    import os

    from mha_course.grading.classroom.results import write_json

    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    write_json(link, {"score": 1})
    assert link.is_symlink() and not Path(os.devnull).is_file()
