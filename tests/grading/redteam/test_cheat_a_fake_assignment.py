"""Cheats gain nothing and never stop a batch (on the fake assignment in grading_fake.py).

Every cheat below is graded in ONE command-line run over a folder (``python -m mha_course.grading.grade
FOLDER --json ... --results-dir ...``), as an instructor would, with short limits. Each cheating
submission pairs its trick with a wrong or missing answer, so any point it gets is a point gained
by cheating; the honest submission graded alongside shows the batch went on.

Code the static scan finds reaching into the grader or the interpreter no longer scores 0 by itself
(``--on-tamper review``, the default): such a cheat scores what its honest cells earn, which the
sandbox keeps from rising, and it is flagged for review with its evidence (``FLAGGED``), never
credited in silence.

Where the cases came from: the first cheats, on the fake assignment (test_cheats.py before the tests
mirrored the package); the same kind of cheats on the real assignments are in test_cheat_the_real_assignments.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.engine import registry

WRONG_ADD = "import numpy as np\n\ndef add_arrays(a, b):\n    return a - b\n"
FULL = 6  # zz_fake's max score: fake_add 4 (one hidden), fake_double 2 (one hidden)

CHEATS = {
    # trick -> (cells, the most the submission may score)
    "honest": ([GOOD_ADD, GOOD_DOUBLE], FULL),
    "print_passed": ([WRONG_ADD, "print('All tests passed! 6/6')", GOOD_DOUBLE], 2),
    "patch_allclose": (
        [
            WRONG_ADD,
            "import numpy as np, torch\nnp.allclose = lambda *a, **k: True\n"
            "torch.allclose = lambda *a, **k: True\nnp.testing.assert_allclose = lambda *a, **k: None\n"
            "np.array_equal = lambda *a, **k: True",
            GOOD_DOUBLE,
        ],
        2,
    ),
    "lying_ndarray": (
        [
            "import numpy as np\nclass Always(np.ndarray):\n    def __eq__(self, other):\n"
            "        return np.ones(np.shape(other), bool)\n    def __array_finalize__(self, obj):\n"
            "        pass\n\ndef add_arrays(a, b):\n    return np.zeros_like(a).view(Always)",
            GOOD_DOUBLE,
        ],
        2,
    ),
    "lying_tensor": (
        [
            GOOD_ADD,
            "import torch\nclass Liar(torch.Tensor):\n    def __eq__(self, other):\n"
            "        return True\n    def numpy(self):\n        return (2 * self.as_subclass(torch.Tensor)).numpy()\n\n"
            "def double(x):\n    return torch.zeros_like(x).as_subclass(Liar)",
        ],
        4,
    ),
    "sys_exit_in_target": (["import sys\n\ndef add_arrays(a, b):\n    sys.exit(0)", GOOD_DOUBLE], 2),
    "sys_exit_top_level": ([WRONG_ADD, "import sys\nsys.exit('graded: 100')", GOOD_DOUBLE], 2),
    "os_exit_in_target": (["import os\n\ndef add_arrays(a, b):\n    os._exit(0)", GOOD_DOUBLE], 2),
    "os_exit_top_level": ([WRONG_ADD, "import os\nos._exit(0)", GOOD_DOUBLE], 2),
    "infinite_loop_in_target": (["def add_arrays(a, b):\n    while True:\n        pass", GOOD_DOUBLE], 2),
    # a cell that never returns ends the notebook there, as in Jupyter: the cells after it are not run, so
    # GOOD_DOUBLE (after the loop) is never defined and scores nothing; the same loop as the LAST cell
    # costs nothing (the state before it is graded)
    "infinite_loop_top_level": ([WRONG_ADD, "while True:\n    pass", GOOD_DOUBLE], 0),
    "infinite_loop_last_cell": ([WRONG_ADD, GOOD_DOUBLE, "while True:\n    pass"], 2),
    "memory_hog": (
        [
            "def add_arrays(a, b):\n    hog = []\n    while True:\n        hog.append(bytearray(50 * 2**20))",
            GOOD_DOUBLE,
        ],
        2,
    ),
    "huge_allocation": (
        ["import numpy as np\n\ndef add_arrays(a, b):\n    return np.ones((2**16, 2**16)) + a.sum()", GOOD_DOUBLE],
        2,
    ),
    "nan_output": (["import numpy as np\n\ndef add_arrays(a, b):\n    return np.full_like(a, np.nan)", GOOD_DOUBLE], 2),
    "extra_broadcast_dim": (["def add_arrays(a, b):\n    return (a + b)[None]", GOOD_DOUBLE], 2),
    # naming the grader's files, or reaching for attributes by computed names: flagged for review (FLAGGED);
    # the points are what the honest cells earn (the good double), never more
    "fake_results_json": (
        [
            WRONG_ADD,
            "import json\nfor p in ['results.json', '/autograder/results/results.json', "
            "RESULTS_PATH]:\n    try:\n        open(p, 'w').write(json.dumps({'score': 100, "
            "'max_score': 6, 'tests': []}))\n    except OSError:\n        pass",
            GOOD_DOUBLE,
        ],
        2,
    ),
    "forbidden_in_target": (
        [
            GOOD_ADD,
            "import torch\nimport torch.nn.functional as F\n\ndef double(x):\n"
            "    q = x[None, None, :, None]\n"
            "    return 2 * x + 0 * F.scaled_dot_product_attention(q, q, q)[0, 0, :, 0]",
        ],
        4,
    ),
    "forbidden_via_helper": (
        [
            GOOD_ADD,
            "import torch\nshortcut = getattr(torch, 'softmax')\n\n"
            "def helper(x):\n    return shortcut(x, 0)\n\ndef double(x):\n"
            "    return 2 * x + 0 * helper(x)",
        ],
        4,
    ),
    "multihead_module": (
        [
            GOOD_ADD,
            "import torch\nfrom torch import nn\n\ndef make():\n"
            "    return nn.MultiheadAttention(1, 1)\n\ndef double(x):\n    make()\n    return 2 * x",
        ],
        4,
    ),
    "tamper_sys_modules": (
        [
            "import sys\nsys.modules['mha_course.grading.engine.scoring'].judge = lambda *a: None\n" + WRONG_ADD,
            GOOD_DOUBLE,
        ],
        2,
    ),
    "tamper_grader_module": (
        ["import mha_course.grading.learner.selfcheck as sc\nsc.GRADING = False\n" + WRONG_ADD, GOOD_DOUBLE],
        2,
    ),
    "escaped_grandchild": (
        [
            "import os, time\nif getattr(os, 'fo' + 'rk')() == 0:\n    getattr(os, 'set' + 'sid')()\n"
            "    time.sleep(8)\n    os._exit(0)\n",
            "def add_arrays(a, b):\n    while True:\n        pass",
            GOOD_DOUBLE,
        ],
        2,
    ),
    "kill_the_parent": ([WRONG_ADD, "import os\ngetattr(os, 'ki' + 'll')(os.getppid(), 9)", GOOD_DOUBLE], 2),
    "redefine_check": (
        [
            WRONG_ADD,
            "def check(*a, **k):\n    print('6/6 passed')\n    return True\ncheck('fake_add', add_arrays)",
            GOOD_DOUBLE,
        ],
        2,
    ),
}
#: Cheats the static scan flags for review: name -> (what the flag names, its cell, line, label). Every other
#: cheat must carry no flag (the runtime's verdicts explain those).
FLAGGED = {
    # numpy's function replaced: the grader's runtime calls numpy after the target returns (packing the reply)
    "patch_allclose": ("numpy.allclose (a library function replaced)", 3, 2, "likely tampering"),
    "fake_results_json": ("the string 'results.json'", 3, 2, "review"),
    "tamper_sys_modules": ("sys.modules (written)", 2, 2, "likely tampering"),
    "tamper_grader_module": ("mha_course.grading.learner.selfcheck.GRADING (written)", 2, 2, "likely tampering"),
    "escaped_grandchild": (
        "getattr() with a computed attribute name ('fork', built from pieces)",
        2,
        2,
        "likely tampering",
    ),
    "kill_the_parent": (
        "getattr() with a computed attribute name ('kill', built from pieces)",
        3,
        2,
        "likely tampering",
    ),
}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    from mha_course.grading.grade import main

    require_sandbox()
    root = tmp_path_factory.mktemp("cheats")
    results_path = root / "results" / "results.json"
    folder = root / "subs"
    folder.mkdir()
    for name, (cells, _) in CHEATS.items():
        cells = [c.replace("RESULTS_PATH", repr(str(results_path))) for c in cells]
        write_submission(folder / f"{name}.ipynb", *cells)
    with registry.registered("grading_fake"):
        status = main(
            [
                str(folder),
                "--json",
                str(results_path),
                "--results-dir",
                str(root / "each"),
                "--csv",
                str(root / "grades.csv"),
                "--quiet",
                "--case-timeout",
                "2",
                "--cell-timeout",
                "3",
                "--notebook-timeout",
                "60",  # honest notebooks start in 5.5 s at a load of 10; no cheat here waits on this limit
                "--memory-mb",
                "512",
                "--workers",
                "2",
            ]
        )
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in (root / "each").iterdir())
    }
    return status, json.loads(results_path.read_text()), each


@pytest.mark.slow
def test_batch_finishes_with_exit_zero(outcome):
    status, _, each = outcome
    assert status == 0 and set(each) == set(CHEATS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHEATS))
def test_cheat_gains_nothing(outcome, name):
    data = outcome[2][name]
    assert data["extra_data"]["max_score"] == FULL
    assert data["score"] == CHEATS[name][1], json.dumps(data["tests"], indent=1)


@pytest.mark.slow
def test_results_json_is_the_graders_own(outcome):
    _, merged, each = outcome
    assert merged["score"] == sum(d["score"] for d in each.values()) < 100
    assert merged["extra_data"]["max_score"] == FULL * len(CHEATS)


@pytest.mark.slow
def test_cheats_are_explained(outcome):
    each = outcome[2]

    def outputs(name, exercise):
        return " ".join(t["output"] for t in each[name]["tests"] if t["name"].startswith(exercise))

    assert "subclass of numpy.ndarray" in outputs("lying_ndarray", "fake_add")
    assert "subclass of torch.Tensor" in outputs("lying_tensor", "fake_double")
    assert "timed out after 2 s" in outputs("infinite_loop_in_target", "fake_add")
    assert "crashed" in outputs("os_exit_in_target", "fake_add")
    assert "SystemExit" in outputs("sys_exit_in_target", "fake_add")
    assert "MemoryError" in outputs("huge_allocation", "fake_add")
    assert all(t["score"] == 0 for t in each["memory_hog"]["tests"] if t["name"].startswith("fake_add"))
    assert "shape expected (2, 5), got (1, 2, 5)" in outputs("extra_broadcast_dim", "fake_add")
    assert "scaled_dot_product_attention" in outputs("forbidden_in_target", "fake_double")
    assert "torch.softmax" in outputs("forbidden_via_helper", "fake_double")
    assert "torch.nn.MultiheadAttention" in outputs("multihead_module", "fake_double")
    assert "cell 3" in each["infinite_loop_top_level"]["output"] and "skipped" in each["os_exit_top_level"]["output"]
    assert "it and the 1 cell after it were not run" in each["infinite_loop_top_level"]["output"]
    assert "cell 4" in each["infinite_loop_last_cell"]["output"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHEATS))
def test_code_that_reaches_into_the_grader_is_flagged_with_its_evidence(outcome, name):
    """Not 0 by itself any more: flagged for review, with what was found, where and the line as written,
    in results.json (extra_data for the instructor, a neutral sentence in the output for the student)."""
    data = outcome[2][name]
    review = data["extra_data"]["review"]
    assert data["extra_data"]["on_tamper"] == "review"
    if name not in FLAGGED:
        assert review["flags"] == [] and review["state"] == "", review
        return
    finding, cell, line, label = FLAGGED[name]
    flag = next((f for f in review["flags"] if f["finding"] == finding), None)
    assert flag is not None, [f["finding"] for f in review["flags"]]
    assert (flag["cell"], flag["line"], flag["label"]) == (cell, line, label), flag
    assert flag["source"][:20] in CHEATS[name][0][cell - 2], flag  # the line as written (cell 1 is markdown)
    assert review["state"].startswith("to review (")
    assert f"Your notebook uses {review['flags'][0]['finding']} (cell " in data["output"]
    assert "the instructor will review it" in data["output"]
