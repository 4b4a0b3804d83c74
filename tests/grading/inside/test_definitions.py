"""The definitions rule (:mod:`mha_course.grading.inside.definitions`): what a case process loads of a notebook.

Each source below is one notebook cell (or several); a statement is *kept* when running it runs no
learner code. The last statement of each KEPT source must be kept, of each SKIPPED source skipped.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mha_course.grading.engine import notebook
from mha_course.grading.inside import runner as sandbox
from mha_course.grading.inside.definitions import Definitions, definitions

ROOT = Path(__file__).resolve().parents[3]


def _last_kept(*cells: str) -> bool:
    found = definitions(list(enumerate(cells)))
    last_cell = len(cells) - 1
    tree = ast.parse(cells[-1])
    last_line = tree.body[-1].lineno
    kept = [s.lineno for i, m in found.kept if i == last_cell for s in m.body]
    skipped = [s.line for s in found.skipped if s.cell == last_cell]
    assert (last_line in kept) != (last_line in skipped), (kept, skipped)
    return last_line in kept


PRELUDE = "import torch, math, functools, dataclasses, typing, abc\nimport numpy as np\nimport torch.nn as nn\n"

KEPT = {
    "import": "import torch",
    "from import": "from math import sqrt",
    "plain def": "def f(x):\n    return forge(x)",
    "async def": "async def f():\n    return 1",
    "def with inert defaults": "def f(x, scale=1 / math.sqrt(64), dims=(1, 2)):\n    return x",
    "def with a library default": "def f(x, fn=torch.softmax):\n    return fn(x)",
    "def with an alias default": "def g():\n    pass\ndef f(x, helper=g):\n    return helper(x)",
    "def with a class hint": "class Block:\n    pass\ndef f(x: Block, y: list[Block] | None = None) -> Block:\n    return x",
    "def with a string hint": "def f(x: 'Forge()') -> 'Anything':\n    return x",
    "library call with inert arguments": "W = torch.randn(4, 4)",
    "arithmetic of library values": "SCALE = 1 / math.sqrt(64)",
    "annotated assignment": "D: int = 64",
    "augmented assignment": "D = 3\nD += 1",
    "tuple of names": "a, b = 1, 2",
    "chained assignment": "a = b = 0",
    "alias of a function": "def f():\n    pass\ng = f",
    "list of functions": "def f():\n    pass\nFS = [f, f]",
    "dict of functions": "def f():\n    pass\nTABLE = {'f': f}",
    "lambda as the value": "F = lambda x: forge(x)",
    "lambdas in a display": "FS = [lambda x: x, lambda x: 2 * x]",
    "method of a library value": "W = torch.randn(4, 4).float().t()",
    "a comprehension": "XS = [i * 2 for i in range(4)]",
    "a thread pool (it has no thread until used)": (
        "from concurrent.futures import ThreadPoolExecutor\nPOOL = ThreadPoolExecutor(1)"
    ),
    "nn.Module subclass": (
        "class M(nn.Module):\n    '''doc'''\n    scale = 2\n    def __init__(self):\n        super().__init__()\n"
        "    def forward(self, x):\n        return x * self.scale"
    ),
    "class of a notebook base": "class A:\n    pass\nclass B(A):\n    x: int = 1",
    "dataclass": "@dataclasses.dataclass(frozen=True)\nclass P:\n    x: int\n    y: float = 0.5",
    "nested class": "class A:\n    class Config:\n        size = 3\n    pass",
    "class body alias": "class A:\n    def f(self):\n        pass\n    g = f",
    "class-body data used later": "class A:\n    x = 3\n    y = x + 1",
    "enum": "import enum\nclass Color(enum.Enum):\n    RED = 1",
}

DECORATED = {
    "staticmethod": "class A:\n    @staticmethod\n    def f():\n        pass",
    "classmethod": "class A:\n    @classmethod\n    def f(cls):\n        pass",
    "property and setter": (
        "class A:\n    @property\n    def x(self):\n        return 1\n    @x.setter\n    def x(self, v):\n        pass"
    ),
    "getter and deleter": (
        "class A:\n    @property\n    def x(self):\n        return 1\n    @x.getter\n    def x(self):\n        return 2\n"
        "    @x.deleter\n    def x(self):\n        pass"
    ),
    "functools.lru_cache": "@functools.lru_cache(maxsize=None)\ndef f():\n    pass",
    "functools.lru_cache bare": "@functools.lru_cache\ndef f():\n    pass",
    "functools.cache": "from functools import cache\n@cache\ndef f():\n    pass",
    "functools.wraps": "@functools.wraps(print)\ndef f():\n    pass",
    "dataclass bare": "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int = 0",
    "torch.no_grad": "@torch.no_grad()\ndef f(x):\n    return x",
    "torch.inference_mode": "@torch.inference_mode()\ndef f(x):\n    return x",
    "torch.enable_grad": "@torch.enable_grad()\ndef f(x):\n    return x",
    "torch.compile": "@torch.compile\ndef f(x):\n    return x",
    "torch.compile with options": "@torch.compile(mode='reduce-overhead')\ndef f(x):\n    return x",
    "typing.overload": "@typing.overload\ndef f(x: int) -> int: ...",
    "abc.abstractmethod": "class A(abc.ABC):\n    @abc.abstractmethod\n    def f(self):\n        pass",
    "an aliased import": "import functools as ft\n@ft.lru_cache\ndef f():\n    pass",
}

SKIPPED = {
    "expression statement": "forge()",
    "assigned call of a notebook function": "def forge():\n    pass\n_ = forge()",
    "call of an alias": "def forge():\n    pass\ng = forge\nX = g()",
    "call through a container": "def forge():\n    pass\nFS = [forge]\nX = FS[0]()",
    "call of a data name": "W = torch.nn.Linear(2, 2)\nY = W(torch.ones(2))",
    "sorted with a notebook key": "def forge(x):\n    return x\nX = sorted([1, 2], key=forge)",
    "map of a notebook function": "def forge(x):\n    return x\nX = list(map(forge, [1]))",
    "a called lambda": "X = (lambda: 1)()",
    "a lambda in an expression": "X = sorted([1, 2], key=lambda v: -v)",
    "a walrus": "X = (y := 3)",
    "for loop": "for i in range(3):\n    pass",
    "while loop": "while False:\n    pass",
    "if": "if True:\n    X = 1",
    "with": "with torch.no_grad():\n    X = 1",
    "try": "try:\n    import torch\nexcept ImportError:\n    pass",
    "exec of a string": "X = exec('forge()')",
    "eval of a string": "X = eval('1')",
    "compile": "X = compile('1', 'f', 'eval')",
    "__import__": "X = __import__('forged')",
    "importlib": "import importlib\nX = importlib.import_module('forged')",
    "runpy": "import runpy\nX = runpy.run_path('/scratch/x.py')",
    "sys.path changed through an assignment": "import sys\n_ = sys.path.insert(0, '/scratch')",
    "os": "import os\nX = os.getcwd()",
    "a figure": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()",
    "torch.load (a pickle a cell wrote)": "W = torch.load('w.pt', weights_only=False)",
    "np.load": "W = np.load('w.npy', allow_pickle=True)",
    "open": "X = open('f').read()",
    "getattr of a computed name": "X = getattr(torch, 'ran' + 'dn')",
    "a dunder attribute": "X = print.__self__",
    "timeit of a string": "import timeit\nX = timeit.timeit('forge()', number=1)",
    "operator.methodcaller": "import operator\nX = operator.methodcaller('run_path', 'x')",
    "assignment to an attribute": "import torch\ntorch.softmax = print",
    "assignment to a subscript": "D = {}\nD['x'] = 1",
    "starred target": "a, *b = [1, 2, 3]",
    "__builtins__ rebound": "def forge(*a):\n    pass\n__builtins__ = {'__import__': forge}",
    "module-level __getattr__": "def __getattr__(name):\n    return forge()",
    "augmented assignment of a class": "class A:\n    pass\nA += 1",
    "del": "X = 1\ndel X",
    "assert": "assert True",
    "global": "global X",
    "a rebound builtin decorator": "def property(f):\n    return forge(f)\nclass A:\n    @property\n    def x(self):\n        pass",
    "a shadowed import decorator": "import functools\nfunctools = None\n@functools.lru_cache\ndef f():\n    pass",
    "timeit.timeit as a decorator": "import timeit\n@timeit.timeit\ndef f():\n    pass",
    "operator.call as a decorator": "import operator\n@operator.call\ndef f():\n    pass",
    "a notebook decorator": "def deco(f):\n    return forge(f)\n@deco\ndef f():\n    pass",
    "a call of a notebook function as a default": "def forge():\n    pass\ndef f(x=forge()):\n    pass",
    "a lambda call as a default": "def f(x=(lambda: 1)()):\n    pass",
    "a call in a hint": "def forge():\n    pass\ndef f(x: forge()):\n    pass",
    "a notebook class subscripted in a hint": "class A:\n    pass\ndef f(x: A[int]):\n    pass",
    "a class body statement": "class A:\n    forge()",
    "a class body loop": "class A:\n    for i in range(2):\n        pass",
    "a class body call of a method": "class A:\n    def f():\n        pass\n    x = f()",
    "a base with __init_subclass__": (
        "class Base:\n    def __init_subclass__(cls, **kw):\n        forge()\nclass Sub(Base):\n    pass"
    ),
    "a base with __class_getitem__ two levels up": (
        "class Base:\n    __class_getitem__ = classmethod(lambda c, k: c)\nclass Mid(Base):\n    pass\nclass Sub(Mid):\n    pass"
    ),
    "a skipped base": "class Base:\n    forge()\nclass Sub(Base):\n    pass",
    "a notebook metaclass": "class Meta(type):\n    pass\nclass A(metaclass=Meta):\n    pass",
    "a called base": "def forge():\n    return object\nclass A(forge()):\n    pass",
    "a class keyword calling notebook code": "def forge():\n    pass\nclass A(x=forge()):\n    pass",
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_what_runs_no_learner_code_is_kept(name):
    assert _last_kept(PRELUDE + KEPT[name]), name


@pytest.mark.parametrize("name", sorted(DECORATED))
def test_each_allowed_decorator_is_kept(name):
    assert _last_kept(PRELUDE + DECORATED[name]), name


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_what_may_run_learner_code_is_skipped(name):
    assert not _last_kept(PRELUDE + SKIPPED[name]), name


def test_aliases_are_followed_across_cells():
    """``g = f`` in one cell, ``h = g`` in the next: calling ``h`` anywhere is still calling notebook code."""
    assert not _last_kept("def f():\n    pass", "g = f", "h = g", "X = h()")
    assert _last_kept("def f():\n    pass", "g = f", "h = g")


def test_a_name_bound_to_code_later_is_code_everywhere():
    found = definitions([(0, "X = print('hi')"), (1, "def print():\n    pass")])
    assert [s.cell for s in found.skipped] == [0] and [i for i, _ in found.kept] == [1]


def test_skipped_cells_and_cells_that_do_not_parse_are_left_out():
    found = definitions([(0, "def f():\n    pass"), (1, "def g(:"), (2, "def h():\n    pass")], skip={2})
    assert [i for i, _ in found.kept] == [0]


def test_the_name_error_sentence_names_the_cell_and_line():
    found = definitions([(0, "import torch"), (3, "x = 1\nfor i in range(3):\n    TABLE = i\n")])
    hint = found.name_error_hint("TABLE")
    assert "'TABLE' is set in cell 4, line 2" in hint and "compute 'TABLE' inside your function" in hint
    assert "loads only your notebook's definitions" in hint
    assert found.name_error_hint("i") is not None and found.name_error_hint("x") is None


def test_bad_cells_raise_type_error():
    with pytest.raises(TypeError, match="list of \\(int, str\\)"):
        definitions([("0", "x = 1")])
    with pytest.raises(TypeError, match="list of \\(int, str\\)"):
        definitions("x = 1")


def test_loading_runs_the_kept_statements_with_their_cell_and_line():
    """The case process's loader: kept statements only, each compiled as its own cell (tracebacks name it)."""
    cells = [
        (1, "from __future__ import annotations\nimport math\nLOG = []\nLOG.append(1)\n"),
        (4, "\n\ndef f():\n    return 1 / 0\n"),
    ]
    namespace: dict = {}
    found = sandbox.load_definitions(cells, set(), namespace)
    assert isinstance(found, Definitions)
    assert namespace["LOG"] == [] and namespace["math"].pi > 3
    with pytest.raises(ZeroDivisionError) as caught:
        namespace["f"]()
    assert sandbox.error_text(caught.value).endswith("(cell 5, line 4)")


def test_a_failing_definition_ends_its_cell_as_in_the_notebook_but_not_the_next_cell():
    namespace: dict = {}
    sandbox.load_definitions([(0, "import not_a_module_anywhere\nX = 1"), (1, "Y = 2")], set(), namespace)
    assert "X" not in namespace and namespace["Y"] == 2


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_target_of_every_solution_is_kept(path):
    """The functions under test of each solution notebook are definitions the grader loads."""
    from mha_course.grading.engine import registry

    nb = json.loads(path.read_text())
    key = nb["metadata"]["mha_course"]["assignment"]
    found = definitions(notebook.code_cells(nb))
    kept = {getattr(s, "name", None) for _, m in found.kept for s in m.body}
    kept |= {
        t.id
        for _, m in found.kept
        for s in m.body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Name)
    }
    targets = {e.target for e in registry.get_assignment(key).exercises}
    assert targets <= kept, targets - kept


def test_a_case_process_drops_the_writable_folders_from_sys_path(monkeypatch, tmp_path):
    import sys

    monkeypatch.setattr(sys, "path", ["", str(tmp_path), str(tmp_path / "sub"), "/usr/lib/python3"])
    sandbox._own_path(str(tmp_path))
    assert sys.path == ["/usr/lib/python3"]


@pytest.mark.parametrize(
    "source, kept",
    [
        ("X = getattr(torch, 'softmax')", True),
        ("X = getattr(torch, '__builtins__')", False),
        ("X = getattr(torch, 'load')", False),
        ("name = 'softmax'\nX = getattr(torch, name)", False),
        ("import json\nX = json.loads('[1, 2]')", True),
    ],
)
def test_getattr_of_a_plain_name_and_json(source, kept):
    assert _last_kept(PRELUDE + source) is kept


def test_a_skipped_rebinding_removes_the_earlier_definition():
    """``kernel = Lookalike()`` after ``def kernel`` is not run: the case must not call the replaced def."""
    cells = [
        (0, "def kernel():\n    return 'real'\nclass Lookalike:\n    pass\nkernel = Lookalike()\n"),
        (1, "def helper():\n    return 1\nif False:\n    helper = None\n"),
    ]
    namespace: dict = {}
    found = sandbox.load_definitions(cells, set(), namespace)
    assert "kernel" not in namespace and "Lookalike" in namespace
    assert namespace["helper"]() == 1  # a conditional rebinding may not have happened: the def stays
    assert "'kernel' is set in cell 1, line 5" in found.name_error_hint("kernel")


def test_a_read_only_mount_under_a_writable_folder_stays_on_the_path(tmp_path, monkeypatch):
    """A checkout under /tmp has its environment bound read-only into the sandbox's own /tmp: it must stay
    importable in a case process, while an ordinary folder there (a cell could have written it) is dropped."""
    import os
    from types import SimpleNamespace

    from mha_course.grading.inside import runner

    packages = tmp_path / "venv" / "site-packages"
    packages.mkdir(parents=True)
    writable = (str(tmp_path) + os.sep,)
    assert runner._under_writable(str(packages), writable)
    assert runner._under_writable(str(tmp_path / "gone"), writable)
    assert not runner._under_writable("/usr/lib", writable)
    real = os.statvfs
    monkeypatch.setattr(
        os, "statvfs", lambda p: SimpleNamespace(f_flag=os.ST_RDONLY) if str(p) == str(packages) else real(p)
    )
    assert not runner._under_writable(str(packages), writable)
