"""Red-team regressions, fourth review: learner code at definition-load time in a case process.

A case process loads only the notebook's definitions (:mod:`mha_course.grading.inside.definitions`),
then calls the function under test once. These attacks try to run learner code while the definitions
load anyway, or to carry something from the process that ran the cells into the cases:

* library metaclasses that call the class body's methods when the class is made (``enum.Enum``
  runs a member's ``__init__`` / ``__new__`` and ``_generate_next_value_`` at class creation);
* a library object changed in place by a kept augmented assignment (``from sys import path``;
  ``path += [...]``), with a module a cell wrote into the folder the broker keeps (matplotlib's
  config folder in the scratch folder);
* a denied module reached under a second binding (``import builtins`` then ``builtins = builtins``)
  or through a library that re-exports it (``from typing import sys``);
* statements that look like they could call back (``__set_name__``, f-string format specs,
  ``functools.singledispatch``, hints, star imports): these are skipped or run nothing.

Each forger puts a working ``add_arrays`` in place of the unfinished one if it runs (the static scan
is off): a score above 0 means learner code ran outside the call. That is strict mode
(``strict_definitions=True``); by default every cell runs before the cases, so each forger does run,
and the property is the review's instead: each ``..._by_default`` twin grades the attack with the
scan on and asserts the submission is flagged with the evidence (see tests/grading/redteam/test_run_code_while_definitions_load.py).

Where the cases came from: the fourth review (test_redteam_round4.py before the tests mirrored the
package).
"""

from __future__ import annotations

import ast

import pytest
from test_run_code_while_definitions_load import UNFINISHED, _grade, _score, assert_flagged, forger

from mha_course.grading.inside.definitions import definitions
from mha_course.grading.inside.messages import MPL_CONFIG

PATCH = forger("1")
# a cell that leaves a module in the folder the broker keeps between the cells and the cases
KEPT_MODULE = (
    "import os\n"
    f"os.makedirs({MPL_CONFIG!r}, exist_ok=True)\n"
    f"with open(os.path.join({MPL_CONFIG!r}, 'forged_mpl.py'), 'w') as f:\n"
    "    f.write(" + repr(PATCH + "forge()\n") + ")\n"
)

FORGERS = {
    "an enum member's __init__": "import enum\nclass E(enum.Enum):\n    def __init__(self, *a):\n        forge()\n    RED = 1",
    "an enum member's __new__": (
        "import enum\nclass E(int, enum.Enum):\n    def __new__(cls, v):\n        forge()\n"
        "        return int.__new__(cls, v)\n    RED = 1"
    ),
    "an enum's _generate_next_value_": (
        "import enum\nclass E(enum.Enum):\n    def _generate_next_value_(name, start, count, last):\n"
        "        return forge()\n    RED = enum.auto()"
    ),
    "an enum method aliased to notebook code": (
        "import enum\nclass E(enum.Enum):\n    _generate_next_value_ = forge\n    RED = enum.auto()"
    ),
    "an enum method given as a lambda": (
        "import enum\nclass E(enum.Enum):\n    _generate_next_value_ = lambda *a: forge()\n    RED = enum.auto()"
    ),
    "a notebook mixin of an enum": (
        "import enum\nclass Mixin:\n    def __init__(self, *a):\n        forge()\nclass E(Mixin, enum.Enum):\n    RED = 1"
    ),
    "an enum reached through re": (
        "import re\nclass E(re.enum.Enum):\n    def __init__(self, *a):\n        forge()\n    RED = 1"
    ),
    "sys.path extended in place": (
        KEPT_MODULE,
        f"from sys import path\npath += [{MPL_CONFIG!r}]\nimport forged_mpl",
    ),
    "sys.path reached through typing": (
        KEPT_MODULE,
        f"from typing import sys\nP = sys.path\nP += [{MPL_CONFIG!r}]\nimport forged_mpl",
    ),
    "a library __init_subclass__ calling a classmethod": (
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "class Mode(TorchDispatchMode):\n    @classmethod\n    def _should_skip_dynamo(cls):\n        return forge()"
    ),
    "builtins under a second binding": (
        "import builtins\nbuiltins = builtins\nX = builtins.getattr(builtins, 'ex' + 'ec')('forge()')"
    ),
    "sys under a second binding": (
        KEPT_MODULE,
        f"import sys\nsys = sys\nP = sys.path\nP += [{MPL_CONFIG!r}]\nimport forged_mpl",
    ),
}


HUB = (
    "import os\n"
    f"os.makedirs({MPL_CONFIG!r}, exist_ok=True)\n"
    f"with open(os.path.join({MPL_CONFIG!r}, 'hubconf.py'), 'w') as f:\n"
    "    f.write(" + repr(PATCH + "forge()\n") + ")\n"
)
# torch.package's unpickler imports the package's own modules (its find_class skips pickle's audit event)
PACKAGE = (
    "import os\nimport torch.package\n"
    f"os.makedirs({MPL_CONFIG!r}, exist_ok=True)\n"
    f"with torch.package.PackageExporter(os.path.join({MPL_CONFIG!r}, 'p.pt')) as e:\n"
    "    e.extern('sys')\n"
    "    e.save_source_string('forged', " + repr(PATCH + "forge()\nclass K:\n    pass\n") + ")\n"
    "    e.save_binary('p', 'o.pkl', b'\\x80\\x04cforged\\nK\\n.')\n"
)
FORGERS["torch.package's unpickler of a kept file"] = (
    PACKAGE,
    f"import torch\nX = torch.package.PackageImporter({MPL_CONFIG + '/p.pt'!r}).load_pickle('p', 'o.pkl')",
)
# code given as text, run by a library that resolves a callable from a dotted name in that text
STMT = (
    "import sys\nf = sys._getframe()\nwhile f is not None:\n    if 'add_arrays' in f.f_globals:\n"
    "        f.f_globals['add_arrays'] = lambda a, b: a + b\n    f = f.f_back"
)
FORGERS["logging.config's factory of a dotted name"] = (
    "import logging.config\nX = logging.config.dictConfig({'version': 1, 'handlers': {'h': "
    f"{{'()': 'timeit.timeit', 'stmt': {STMT!r}, 'number': 1}}}}}})"
)
FORGERS["pydoc.locate of a dotted name"] = f"import pydoc\nX = pydoc.locate('timeit.timeit')({STMT!r}, number=1)"
FORGERS["torch.hub's local loader of a kept folder"] = (
    HUB,
    f"import torch\nX = torch.hub._load_local({MPL_CONFIG!r}, 'x')",
)


# holes still open (see each reason)
OPEN: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OPEN[n])) if n in OPEN else n
        for n in sorted(FORGERS)
    ],
)
def test_no_learner_code_runs_while_definitions_load(tmp_path, isolator, no_scan, name):
    forger = FORGERS[name]
    cells = (UNFINISHED, PATCH, *((forger,) if isinstance(forger, str) else forger))
    result = _grade(tmp_path, isolator, *cells, strict=True)
    assert _score(result, "fake_add") == 0, [t.output for t in result.tests]


@pytest.mark.parametrize("name", sorted(FORGERS))
def test_a_forger_run_by_the_cells_is_flagged_by_default(tmp_path, isolator, name):
    """By default the forger runs with the cells (and may earn full marks): flagged on PATCH's frame walk."""
    forger = FORGERS[name]
    result = _grade(tmp_path, isolator, UNFINISHED, PATCH, *((forger,) if isinstance(forger, str) else forger))
    assert_flagged(result, "._getframe", 3, 3)


# the same routes with no visible forger: the only code that walks frames is text a library runs
HIDDEN_MODULE = (
    "import os\n"
    f"os.makedirs({MPL_CONFIG!r}, exist_ok=True)\n"
    f"with open(os.path.join({MPL_CONFIG!r}, 'forged_mpl.py'), 'w') as f:\n"
    "    f.write(" + repr(STMT + "\n") + ")\n"
)
HIDDEN = {
    "logging.config's factory of a dotted name": FORGERS["logging.config's factory of a dotted name"],
    "pydoc.locate of a dotted name": FORGERS["pydoc.locate of a dotted name"],
    "a module written to the kept folder": (
        HIDDEN_MODULE,
        f"import sys\nsys.path.append({MPL_CONFIG!r})\nimport forged_mpl",
    ),
}


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_a_forger_hidden_in_a_string_is_flagged_by_default(tmp_path, isolator, name):
    """Code a library runs from text (a dotted name resolved, a statement compiled, a module written then
    imported): the scan reads each string that is Python as code, so the frame walk in it is flagged on the
    line that holds the string. (Holes before this round: none of these was flagged by default.)"""
    attack = HIDDEN[name]
    result = _grade(tmp_path, isolator, UNFINISHED, *((attack,) if isinstance(attack, str) else attack))
    line = 4 if name.startswith("a module") else 2
    assert_flagged(result, "._getframe", 3, line)


# --- the folder the broker keeps: a channel from the cells, and from one case to the next ------------

# honest only when nothing of the cells or of an earlier case is found in the kept folder
MARKER = (
    "import os\n"
    "def add_arrays(a, b):\n"
    f"    seen = os.path.join({MPL_CONFIG!r}, 'seen')\n"
    "    found = os.path.exists(seen) or os.path.exists(os.path.join({0!r}, 'from_cells'))\n"
    "    with open(seen, 'w') as f:\n"
    "        f.write('x')\n"
    "    return a - b if found else a + b\n"
).replace("{0!r}", repr(MPL_CONFIG))
FROM_CELLS = f"import os\nos.makedirs({MPL_CONFIG!r}, exist_ok=True)\nopen(os.path.join({MPL_CONFIG!r}, 'from_cells'), 'w').close()"


def test_the_kept_matplotlib_folder_carries_nothing_into_a_case(tmp_path, isolator, no_scan):
    result = _grade(tmp_path, isolator, MARKER, FROM_CELLS, strict=True)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


def test_a_file_a_cell_wrote_is_seen_by_every_case_by_default(tmp_path, isolator, no_scan):
    """By default a file a cell wrote stays for every case, as in Jupyter: this target then answers wrong
    (a loss, never a gain); what one case writes still never reaches the next (the test below)."""
    result = _grade(tmp_path, isolator, MARKER, FROM_CELLS)
    assert _score(result, "fake_add") == 0, [t.output for t in result.tests]


def test_the_kept_matplotlib_folder_carries_nothing_from_case_to_case(tmp_path, isolator, no_scan):
    result = _grade(tmp_path, isolator, MARKER)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


# every folder a cell might write outside the scratch folder and /tmp (both emptied before the cases)
ELSEWHERE = ("/dev/shm", "/dev/mqueue", "/var/tmp", "/run", "/run/user", "/dev", "/home", "/root", "/")
LEAVE = (
    "import os\n"
    "WRITTEN = []\n"
    f"for d in {ELSEWHERE!r}:\n"
    "    try:\n"
    "        open(os.path.join(d, 'from_cells'), 'w').close()\n"
    "        WRITTEN.append(d)\n"
    "    except OSError:\n"
    "        pass\n"
)
FIND = (
    "import os\n"
    "def add_arrays(a, b):\n"
    f"    found = [d for d in {ELSEWHERE!r} if os.path.exists(os.path.join(d, 'from_cells'))]\n"
    "    return a - b if found else a + b\n"
)


def test_no_folder_outside_the_emptied_ones_carries_a_file_into_a_case(tmp_path, isolator, no_scan):
    result = _grade(tmp_path, isolator, FIND, LEAVE)
    assert _score(result, "fake_add") == 4, [t.output for t in result.tests]


# --- the definitions rule alone (no sandbox) -----------------------------------------------------

PRELUDE = "import torch\nimport functools\nimport typing\ndef forge(*a, **k):\n    return 1\n"

SKIPPED = {
    # a library base outside LIBRARY_BASES: its class-creation hook may call the subclass's methods
    "a library base whose hook calls the subclass": (
        "from torch.utils._python_dispatch import TorchDispatchMode\nclass Ops(TorchDispatchMode):\n    pass"
    ),
    # the forgers above, statement by statement
    "an enum with a method": "import enum\nclass E(enum.Enum):\n    def __init__(self, *a):\n        forge()\n    RED = 1",
    "an enum through an alias": "from enum import IntFlag as F\nclass E(F):\n    def _generate_next_value_(*a):\n        pass",
    "an enum metaclass keyword": (
        "import enum\nclass E(metaclass=enum.EnumMeta):\n    def __init__(self, *a):\n        forge()\n    RED = 1"
    ),
    "an enum with a notebook mixin": "import enum\nclass M:\n    pass\nclass E(M, enum.Enum):\n    RED = 1",
    "an imported list extended": "from sys import path\npath += ['x']",
    "an imported name extended in a class body": "from sys import path\nclass A:\n    path += ['x']",
    "a library's list extended": "import numpy\nnumpy += 1",
    "a module under a second binding": "import builtins\nbuiltins = builtins\nX = builtins.getattr",
    "a module imported twice": "import builtins as b\nimport math as b\nX = b.getattr",
    "a module a library re-exports": "from typing import sys as s\nX = s.modules",
    "a module as a library's attribute": "X = typing.sys.path",
    "a module as a private attribute": "import collections\nX = collections._sys.path",
    "torch.package's importer": "X = torch.package.PackageImporter('p.pt').load_pickle('p', 'o.pkl')",
    "torch.package imported": "from torch.package import PackageImporter as P\nX = P('p.pt')",
    "logging.config": "import logging.config\nX = logging.config.dictConfig({'version': 1})",
    "logging.config imported": "from logging.config import dictConfig as d\nX = d({'version': 1})",
    "pydoc": "import pydoc\nX = pydoc.locate('math.pi')",
    "torch.hub": "X = torch.hub.list('x')",
    "a private loader imported": "from torch.hub import _load_local as L\nX = L('.matplotlib', 'x')",
    "a private loader": "X = torch.hub._load_local('.matplotlib', 'x')",
    "a private name through getattr": "X = getattr(torch.hub, '_load_local')",
    "a module through getattr": "X = getattr(typing, 'sys')",
    "a star import's module": "from torch.nn.functional import *\nX = importlib.machinery",
    # statements that could call back into notebook code (skipped before this round too)
    "__set_name__ of a notebook descriptor": (
        "class D:\n    def __set_name__(self, owner, name):\n        forge()\nclass A:\n    x = D()"
    ),
    "an f-string format spec": "class B:\n    pass\nX = f'{B:>3}'",
    "format of a notebook class": "class B:\n    pass\nX = format(B, '>3')",
    "functools.singledispatch": "@functools.singledispatch\ndef f(x):\n    pass",
    "a singledispatch registration": "@f.register\ndef _(x: int):\n    pass",
    "a dataclass default_factory of notebook code": (
        "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = dataclasses.field(default_factory=forge)"
    ),
    "an augmented notebook function": "forge += 1",
    "a notebook name in an augmented value": "X = 1\nX += forge",
    "__class_getitem__ through a hint": "class B:\n    pass\ndef f(x: B[int]):\n    pass",
    "a decorator re-imported under an allowed name": "from operator import call as staticmethod\n@staticmethod\ndef f():\n    pass",
}

KEPT = {
    "an enum of plain values": "import enum\nclass Color(enum.Enum):\n    RED = 1\n    GREEN = enum.auto()",
    "an augmented plain value": "D = 64\nD //= 2",
    "a NamedTuple": "class P(typing.NamedTuple):\n    x: int = 1",
    "a dataclass with a plain default_factory": (
        "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: list = dataclasses.field(default_factory=list)"
    ),
    "a star import and a builtin": "from math import *\nX = max(1, 2)",
    "a module of the library's own layers": (
        "from torch.nn.modules.module import Module\nclass Block(Module):\n    def forward(self, x):\n        return x"
    ),
    "a logger": "import logging\nLOG = logging.getLogger('course')",
    "a public library attribute": "X = torch.nn.functional.softmax",
}


def _last_kept(source: str) -> bool:
    """The last statement of ``source`` is kept (it is the last one kept)."""
    kept = [stmt for _, module in definitions([(0, source)]).kept for stmt in module.body]
    return bool(kept) and ast.unparse(kept[-1]) == ast.unparse(ast.parse(source).body[-1])


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_what_may_run_learner_code_is_skipped(name):
    assert not _last_kept(PRELUDE + SKIPPED[name]), name


@pytest.mark.parametrize("name", sorted(KEPT))
def test_plain_definitions_are_still_kept(name):
    assert _last_kept(PRELUDE + KEPT[name]), name
