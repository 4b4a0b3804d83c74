"""The tripwire sees a forbidden computation by the operators it runs, not by the name it was called by.

Each evasion below is a learner's cell that computes the exercise's answer with a shortcut the
exercise forbids, under a name the forbidden list does not hold (TorchScript compiled from a string,
``torch.logcumsumexp``, ``F.cross_entropy``, ``np.logaddexp.reduce``, SDPA reached through
``nn.MultiheadAttention``...). A case counts only if the evasion passes it with the tripwire off
(:func:`_unarmed`), so a 0 is the tripwire's doing; armed, every such case must fail with the sentence
that names the op family and what the exercise asks. Every solution notebook's targets stay clean.
One slow test grades evasions through the real grader's sandbox (tier A).
"""

from __future__ import annotations

import json
import linecache
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from grading_fake import GOOD_ADD, write_submission

from mha_course.grading.engine import registry
from mha_course.grading.engine.registry import find_exercise
from mha_course.grading.inside import op_families
from mha_course.grading.inside.guard import Tripwire, explain
from mha_course.grading.learner import selfcheck
from mha_course.grading.learner.selfcheck import Status, run_case
from mha_course.grading.static.scan import scan
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]

# --- evasions: cells as a learner would write them ---------------------------------------------------

SOFTMAX_EVASIONS = {
    "torchscript from a string": (
        "import torch\n"
        "_unit = torch.jit.CompilationUnit('def f(x, dim: int):\\n    return torch.softmax(x, dim)\\n')\n"
        "def softmax(x, dim=-1):\n    return _unit.f(x, dim)\n"
    ),
    "torch.jit.script": (
        "import torch\n"
        "@torch.jit.script\ndef _f(x, dim: int):\n    return torch.softmax(x, dim)\n"
        "def softmax(x, dim=-1):\n    return _f(x, dim)\n"
    ),
    "torch.jit.trace": (
        "import torch\n"
        "_traced = torch.jit.trace(lambda x: torch.softmax(x, -1), torch.zeros(2, 3))\n"
        "def softmax(x, dim=-1):\n    return _traced(x.movedim(dim, -1)).movedim(-1, dim)\n"
    ),
    "logcumsumexp": (
        "import torch\n"
        "def softmax(x, dim=-1):\n"
        "    total = torch.logcumsumexp(x.double(), dim).narrow(dim, x.shape[dim] - 1, 1)\n"
        "    return (x.double() - total).exp().to(x.dtype)\n"
    ),
    "logsumexp then exp": (
        "import torch\ndef softmax(x, dim=-1):\n    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))\n"
    ),
    "log_softmax then exp": (
        "import torch.nn.functional as F\ndef softmax(x, dim=-1):\n    return F.log_softmax(x, dim).exp()\n"
    ),
    "cross_entropy per class": (
        "import torch\nimport torch.nn.functional as F\n"
        "def softmax(x, dim=-1):\n"
        "    y = x.movedim(dim, -1)\n    n = y.shape[-1]\n"
        "    rows = y.reshape(-1, n).float().repeat_interleave(n, 0)\n"
        "    labels = torch.arange(n).repeat(rows.shape[0] // n)\n"
        "    p = torch.exp(-F.cross_entropy(rows, labels, reduction='none'))\n"
        "    return p.reshape(y.shape).to(x.dtype).movedim(-1, dim)\n"
    ),
    "torch.special.softmax": "import torch\ndef softmax(x, dim=-1):\n    return torch.special.softmax(x, dim)\n",
    "Tensor.softmax": "def softmax(x, dim=-1):\n    return x.softmax(dim)\n",
    "nn.Softmax": "import torch\ndef softmax(x, dim=-1):\n    return torch.nn.Softmax(dim)(x)\n",
    "softmin of -x": "import torch.nn.functional as F\ndef softmax(x, dim=-1):\n    return F.softmin(-x, dim)\n",
    "SDPA with identity keys": (
        "import torch\nimport torch.nn.functional as F\n"
        "def softmax(x, dim=-1):\n"
        "    y = x.movedim(dim, -1)\n    n = y.shape[-1]\n"
        "    eye = torch.eye(n, dtype=y.dtype)\n"
        "    out = F.scaled_dot_product_attention(y.reshape(1, -1, n), eye[None], eye[None], scale=1.0)\n"
        "    return out.reshape(y.shape).movedim(-1, dim)\n"
    ),
}

_WEIGHTS = (
    "import math\nimport torch\n"
    "def _weights(q, k, scale):\n"
    "    s = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)\n"
    "    e = torch.exp(s - s.amax(-1, keepdim=True))\n"
    "    return e / e.sum(-1, keepdim=True)\n"
)
# one head of width E = D + Dv whose projections make it plain attention: q and k in the first D
# coordinates (scaled so that the module's 1/sqrt(E) becomes the asked scale), v in the last Dv
_MHA_WEIGHTS = _WEIGHTS + (
    "def _identity_heads(q, k, v, scale):\n"
    "    D, Dv, T, S = q.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2]\n"
    "    E, s = D + Dv, 1 / math.sqrt(D) if scale is None else scale\n"
    "    qq = torch.cat([q, q.new_zeros(*q.shape[:-1], Dv)], -1).reshape(-1, T, E)\n"
    "    kk, vv = k.reshape(-1, S, D), v.reshape(-1, S, Dv)\n"
    "    wq, wk, wv = q.new_zeros(E, E), q.new_zeros(E, D), q.new_zeros(E, Dv)\n"
    "    wq[:D, :D] = torch.eye(D, dtype=q.dtype) * s * math.sqrt(E)\n"
    "    wk[:D] = torch.eye(D, dtype=q.dtype)\n"
    "    wv[D:] = torch.eye(Dv, dtype=q.dtype)\n"
    "    return D, Dv, T, S, qq, kk, vv, wq, wk, wv, torch.eye(E, dtype=q.dtype)\n"
)
SDPA_EVASIONS = {
    "torchscript from a string": (
        _WEIGHTS + "_unit = torch.jit.CompilationUnit('def f(q, k, v, s: float):\\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=s)\\n')\n"
        "def scaled_dot_product_attention(q, k, v, scale=None):\n"
        "    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
        "    return _unit.f(q, k, v, s), _weights(q, k, scale)\n"
    ),
    "nn.MultiheadAttention": (
        _MHA_WEIGHTS + "def scaled_dot_product_attention(q, k, v, scale=None):\n"
        "    D, Dv, T, S, qq, kk, vv, wq, wk, wv, eye = _identity_heads(q, k, v, scale)\n"
        "    mha = torch.nn.MultiheadAttention(D + Dv, 1, bias=False, kdim=D, vdim=Dv, batch_first=True, dtype=q.dtype)\n"
        "    with torch.no_grad():\n"
        "        for p, w in ((mha.q_proj_weight, wq), (mha.k_proj_weight, wk), (mha.v_proj_weight, wv)):\n"
        "            p.copy_(w)\n"
        "        mha.out_proj.weight.copy_(eye)\n"
        "        out, _ = mha(qq, kk, vv, need_weights=False)\n"
        "    return out[..., D:].reshape(*q.shape[:-1], Dv), _weights(q, k, scale)\n"
    ),
    "F.multi_head_attention_forward": (
        _MHA_WEIGHTS + "import torch.nn.functional as F\n"
        "def scaled_dot_product_attention(q, k, v, scale=None):\n"
        "    D, Dv, T, S, qq, kk, vv, wq, wk, wv, eye = _identity_heads(q, k, v, scale)\n"
        "    out, _ = F.multi_head_attention_forward(qq.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1),\n"
        "        D + Dv, 1, None, None, None, None, False, 0.0, eye, None, training=False, need_weights=False,\n"
        "        use_separate_proj_weight=True, q_proj_weight=wq, k_proj_weight=wk, v_proj_weight=wv)\n"
        "    return out.transpose(0, 1)[..., D:].reshape(*q.shape[:-1], Dv), _weights(q, k, scale)\n"
    ),
}

SOFTMAX_NP_EVASIONS = {
    "np.logaddexp.reduce": (
        "import numpy as np\n"
        "def softmax_np(x, axis=-1):\n    return np.exp(x - np.logaddexp.reduce(x, axis=axis, keepdims=True))\n"
    ),
    "np.logaddexp.accumulate": (
        "import numpy as np\n"
        "def softmax_np(x, axis=-1):\n"
        "    total = np.take(np.logaddexp.accumulate(x, axis=axis), [-1], axis=axis)\n"
        "    return np.exp(x - total)\n"
    ),
    "torch's logcumsumexp on the array": (
        "import numpy as np\nimport torch\n"
        "def softmax_np(x, axis=-1):\n"
        "    total = torch.logcumsumexp(torch.from_numpy(x), axis).numpy()\n"
        "    return np.exp(x - np.take(total, [-1], axis=axis))\n"
    ),
}


def _define(source: str, name: str):
    """Run ``source`` as a notebook cell; returns what it defines as ``name``."""
    filename = f"<cell-{abs(hash(source))}>"
    # as IPython does for each cell: the source is findable, so torch.jit.script can read a cell's function
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"__name__": "__main__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the test's own cells
    return namespace[name]


def _unarmed(exercise, target, most: int = 4) -> list:
    """Up to ``most`` cases ``target`` passes with nothing forbidden (so a 0 when armed is the tripwire's)."""
    passing = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in exercise.cases:
            if len(passing) < most and run_case(case, target, ())[0].passed:
                passing.append(case)
    return passing


def _armed_rows(exercise, target, cases):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [run_case(c, target, exercise.forbidden)[0] for c in cases]


def _assert_caught(key: str, source: str, family: str, member: str | None = None) -> None:
    exercise = find_exercise(key)
    target = _define(source, exercise.target)
    passing = _unarmed(exercise, target)
    assert len(passing) >= 2, f"the evasion should be right on most cases, passed {len(passing)}"
    for row in _armed_rows(exercise, target, passing):
        assert row.status == Status.FAILED and row.score == 0, row
        assert "not allowed here" in row.hint and f"of the {family} family" in row.hint, row.hint
        assert "write it yourself (" in row.hint, row.hint  # what the exercise asks
        if member is not None:
            assert member in row.hint, row.hint


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "torch.jit.trace" else n for n in SOFTMAX_EVASIONS],  # seconds
)
def test_softmax_evasion_is_caught(name):
    _assert_caught("softmax", SOFTMAX_EVASIONS[name], "softmax")


def test_torchscript_from_a_string_is_seen_by_the_operator_it_runs():
    exercise = find_exercise("softmax")
    target = _define(SOFTMAX_EVASIONS["torchscript from a string"], "softmax")
    row = _armed_rows(exercise, target, _unarmed(exercise, target)[:1])[0]
    # no Python-level torch call: the dispatch layer alone, by the ATen operator
    assert "aten._softmax" in row.hint and "called" not in row.hint, row.hint


@pytest.mark.slow  # importing torch._dynamo takes seconds
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_runs_its_operators_where_the_tripwire_sees_them(backend):
    source = (
        "import torch\n"
        f"_compiled = torch.compile(lambda x, dim: torch.softmax(x, dim), backend={backend!r}, dynamic=True)\n"
        "def softmax(x, dim=-1):\n    return _compiled(x, dim)\n"
    )
    _assert_caught("softmax", source, "softmax", "aten._softmax")


@pytest.mark.parametrize("name", list(SDPA_EVASIONS))
def test_attention_evasion_is_caught(name):
    _assert_caught("sdpa", SDPA_EVASIONS[name], "attention")


@pytest.mark.parametrize("name", list(SOFTMAX_NP_EVASIONS))
def test_numpy_softmax_evasion_is_caught(name):
    _assert_caught("softmax_np", SOFTMAX_NP_EVASIONS[name], "softmax")


def test_a_fused_kernel_is_named_by_the_family_the_exercise_forbids():
    """SDPA in the softmax exercise is a softmax shortcut; in the attention exercise an attention one."""
    tripwire = Tripwire()
    q = torch.randn(1, 2, 3, 4)
    for key, family in (("softmax", "softmax"), ("sdpa", "attention")):
        with tripwire.armed(find_exercise(key).forbidden), torch._C.DisableTorchFunction():
            torch.nn.functional.scaled_dot_product_attention(q, q, q)  # the operator alone, as from TorchScript
        assert tripwire.ops == [f"aten._scaled_dot_product_flash_attention_for_cpu ({family} family)"], tripwire.ops
    with tripwire.armed(find_exercise("softmax").forbidden):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)  # also by the name the learner wrote
    assert tripwire.ops == [
        "torch.nn.functional.scaled_dot_product_attention (softmax family)",
        "aten._scaled_dot_product_flash_attention_for_cpu (softmax family)",
    ]
    assert "ran torch.nn.functional.scaled_dot_product_attention, aten." in tripwire.explanation()


def test_sdpa_math_path_is_seen_by_its_safe_softmax():
    """float64 or 3-D inputs take SDPA's math path, a composite the dispatch layer sees only in pieces."""
    tripwire = Tripwire()
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    with torch._C.DisableTorchFunction(), tripwire.armed(find_exercise("sdpa").forbidden):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert tripwire.hits == [] and tripwire.ops == ["aten._safe_softmax (attention family)"], tripwire.ops


def test_the_multi_head_fused_kernel_is_caught_where_the_module_is_forbidden():
    """The module's fast path runs aten._native_multi_head_attention (armed, torch's mode turns the fast path off,
    so the operator is reached here with the name layer switched off, as TorchScript would)."""
    tripwire = Tripwire()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 4, 8)
    args = (x, x, x, 8, 2, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    with torch.no_grad(), tripwire.armed(find_exercise("multi_head_attention").forbidden):
        with torch._C.DisableTorchFunction():
            torch.ops.aten._native_multi_head_attention(*args)
    assert tripwire.ops == ["aten._native_multi_head_attention (multi-head attention family)"], tripwire.ops
    with torch.no_grad(), tripwire.armed(find_exercise("multi_head_attention").forbidden):
        mha(x, x, x)  # the module itself: by name (and, in the grader, by its wrapped __init__/forward)
    assert tripwire.hits == ["torch.nn.functional.multi_head_attention_forward"], tripwire.hits


def test_scipy_members_are_wrapped_for_the_self_check(monkeypatch):
    """SciPy is not a course dependency: a stand-in module shows the route (wrapped while armed, restored after)."""
    import types

    special = types.ModuleType("scipy.special")

    def logsumexp(x, axis=None, keepdims=False):
        m = np.max(x, axis=axis, keepdims=True)
        out = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
        return out if keepdims else np.squeeze(out, axis=axis)

    special.logsumexp = logsumexp
    scipy = types.ModuleType("scipy")
    scipy.special = special
    monkeypatch.setitem(sys.modules, "scipy", scipy)
    monkeypatch.setitem(sys.modules, "scipy.special", special)
    source = (
        "import numpy as np\nimport scipy.special\n"
        "def softmax_np(x, axis=-1):\n    return np.exp(x - scipy.special.logsumexp(x, axis=axis, keepdims=True))\n"
    )
    # torch's exercise forbids no SciPy name: the softmax family it arms brings scipy.special.logsumexp
    assert not any(n.startswith("scipy") for n in find_exercise("softmax").forbidden)
    _assert_caught("softmax_np", source, "softmax", "scipy.special.logsumexp")
    assert special.logsumexp is logsumexp  # restored after each case


INSTALLED = r"""
import json, sys
import numpy as np
from mha_course.grading.inside.guard import Tripwire
from mha_course.grading.engine.registry import find_exercise
names = find_exercise("softmax_np").forbidden
tripwire = Tripwire()
tripwire.install(set(names))          # the grader's submission process, before learner code
from numpy import logaddexp           # the learner's cell: bound to the stand-in
x = np.arange(6.0).reshape(2, 3)
with tripwire.armed(names):
    out = np.exp(x - logaddexp.reduce(x, axis=-1, keepdims=True))
with tripwire.armed(names):
    honest = np.logaddexp(x, x)       # the ufunc itself is not a shortcut
print(json.dumps([tripwire.ops, bool(np.allclose(out.sum(-1), 1)), type(logaddexp).__name__]))
"""


@pytest.mark.slow  # two fresh interpreters
def test_install_wraps_the_ufunc_before_learner_imports_it():
    """``from numpy import logaddexp`` in a cell binds the ufunc before any case: only the grader's install sees it."""
    done = subprocess.run([sys.executable, "-c", INSTALLED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ops_after_honest, right, kind = json.loads(done.stdout.strip().splitlines()[-1])
    assert ops_after_honest == [] and right and kind == "ufunc"
    # the first block's report, printed before the honest block reset it
    first = subprocess.run(
        [sys.executable, "-c", INSTALLED.replace("with tripwire.armed(names):\n    honest", "if 0:\n    honest")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ops = json.loads(first.stdout.strip().splitlines()[-1])[0]
    assert ops == ["numpy.logaddexp.reduce (softmax family)"], first.stderr[-2000:]


def test_the_self_check_restores_numpy():
    tripwire = Tripwire()
    ufunc = np.logaddexp
    with tripwire.armed(find_exercise("softmax_np").forbidden):
        assert np.logaddexp is not ufunc
        np.logaddexp.reduce(np.zeros(3))
    assert np.logaddexp is ufunc and isinstance(np.logaddexp, np.ufunc)
    assert tripwire.ops == ["numpy.logaddexp.reduce (softmax family)"]


# --- honest code stays clean ----------------------------------------------------------------------

HONEST_SOFTMAX = {
    "exp over its sum": "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)\n",
    "max, exp, sum, where": (
        "import torch\ndef softmax(x, dim=-1):\n"
        "    m = x.amax(dim, keepdim=True)\n    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)\n"
        "    e = torch.exp(x.float() - m)\n    s = e.sum(dim, keepdim=True)\n"
        "    return (e / torch.where(s == 0, torch.ones_like(s), s)).to(x.dtype)\n"
    ),
    "log and cumsum": (
        "import torch\ndef softmax(x, dim=-1):\n"
        "    e = torch.exp(x - x.max(dim, keepdim=True).values)\n"
        "    return torch.exp(torch.log(e) - torch.log(e.cumsum(dim).narrow(dim, x.shape[dim] - 1, 1)))\n"
    ),
}


@pytest.mark.parametrize("name", list(HONEST_SOFTMAX))
def test_honest_softmax_idioms_never_trip(name):
    exercise = find_exercise("softmax")
    target = _define(HONEST_SOFTMAX[name], "softmax")
    rows = _armed_rows(exercise, target, exercise.cases)
    assert not [r.hint for r in rows if "not allowed here" in r.hint]
    assert any(r.passed for r in rows)  # it computes a softmax, so the check had something to see


def _solution_targets(assignment):
    nb = nbformat.read(ROOT / "solutions" / f"{assignment.key}.ipynb", as_version=4)
    namespace: dict = {"__name__": "__main__"}
    for cell in nb.cells:
        if cell.cell_type == "code" and "check(" not in cell.source:
            try:
                exec(compile(cell.source, "<cell>", "exec"), namespace)  # noqa: S102 - course files
            except Exception:
                pass
    return namespace


@pytest.mark.slow  # runs every solution notebook's cells (tests/grading/exercises/test_exercises_content.py runs the
# library's own implementations through every case in the fast run)
@pytest.mark.parametrize("assignment", [a.key for a in registry.assignments()])
def test_every_solution_is_clean_on_every_case(assignment, capsys):
    found = next(a for a in registry.assignments() if a.key == assignment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace = _solution_targets(found)
        for exercise in found.exercises:
            result = selfcheck.check(exercise.key, namespace[exercise.target], include_hidden=True, show=False)
            assert result.score == result.max_score, [(r.case, r.hint) for r in result.rows if not r.passed]


def test_solutions_that_need_a_family_member_do_not_arm_its_family():
    """Ring attention merges through torch.logsumexp; its exercises forbid no softmax, so nothing is armed."""
    for key in ("merge_partial_attention", "ring_step", "softmax_jacobian", "kv_decode_step"):
        assert op_families.armed(find_exercise(key).forbidden) == (), key


# --- the table ------------------------------------------------------------------------------------


def test_every_softmax_and_attention_operator_of_this_torch_is_in_a_family():
    """A new torch that adds a softmax or attention kernel must be classified here before it can slip by."""
    aten = {n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    relevant = {n for n in aten if re.search(r"softmax|logsumexp|logcumsumexp|attention|_sdp_", n)}
    softmax, attention = op_families.FAMILIES[0], op_families.FAMILIES[1]
    assert relevant - softmax.aten == set()
    assert {n for n in relevant if "attention" in n or "_sdp_" in n} - attention.aten == set()
    for family in op_families.FAMILIES:  # and the table names no operator this torch lacks (a typo)
        assert family.aten <= aten, family.aten - aten


def test_each_family_is_armed_by_the_exercises_that_forbid_it():
    assert [f.key for f in op_families.armed(find_exercise("softmax").forbidden)] == ["softmax"]
    assert [f.key for f in op_families.armed(find_exercise("softmax_np").forbidden)] == ["softmax"]
    assert "attention" in [f.key for f in op_families.armed(find_exercise("sdpa").forbidden)]
    assert [f.key for f in op_families.armed(find_exercise("multi_head_attention").forbidden)] == [
        "multi-head attention"
    ]


def test_the_sentence_names_the_family_and_what_the_exercise_asks():
    softmax = op_families.FAMILIES[0]
    text = explain([], [op_families.label(softmax, "aten.logcumsumexp")])
    assert text.startswith("this exercise asks you to write it yourself (the softmax, from exp, max and sum)")
    assert "ran aten.logcumsumexp, of the softmax family" in text and "0 points" in text
    assert "torch's fused kernel x" in explain([], ["x"])  # an operator name without a family still reads


# --- the static scan names the aliases ----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "cell", "name"),
    [
        (
            "softmax_np",
            "import numpy as np\nfrom numpy import logaddexp\n"
            "def softmax_np(x, axis=-1):\n    return np.exp(x - logaddexp.reduce(x, axis=axis, keepdims=True))\n",
            "numpy.logaddexp.reduce",
        ),
        (
            "softmax",
            "import torch\ndef softmax(x, dim=-1):\n    return (x - torch.logcumsumexp(x, dim)[..., -1:]).exp()\n",
            "torch.logcumsumexp",
        ),
        (
            "softmax",
            "import torch.nn.functional as F\ndef softmax(x, dim=-1):\n    return F.cross_entropy(x, x)\n",
            "torch.nn.functional.cross_entropy",
        ),
        (
            "sdpa",
            "import torch\ndef scaled_dot_product_attention(q, k, v, scale=None):\n"
            "    return torch.nn.MultiheadAttention(4, 1)(q, k, v)\n",
            "torch.nn.MultiheadAttention",
        ),
    ],
)
def test_scan_flags_family_aliases_in_the_target(key, cell, name):
    exercise = find_exercise(key)
    assignment = next(a for a in registry.assignments() if exercise in a.exercises)
    report = scan([(0, cell)], assignment)
    assert name in [f.name for f in report.forbidden.get(key, [])], report.forbidden


def test_scan_leaves_honest_logsumexp_alone_where_no_softmax_is_forbidden():
    exercise = find_exercise("merge_partial_attention")
    assignment = next(a for a in registry.assignments() if exercise in a.exercises)
    cell = "import torch\ndef merge_partial_attention(*args):\n    return torch.logsumexp(args[0], -1)\n"
    assert scan([(0, cell)], assignment).forbidden == {}


# --- through the real grader's sandbox ------------------------------------------------------------

LIMITS = Limits(case_timeout=30, cell_timeout=60, notebook_timeout=180, memory_mb=2048)
# log_softmax: zz_fake forbids torch.softmax by name, and the grader's wrapper of a name cannot be compiled
# (TorchScript fails on it: 0 with an error, not this sentence)
DOUBLE_TORCHSCRIPT = (
    "import torch\n\ndef double(x):\n"
    "    unit = torch.jit.CompilationUnit('def f(x):\\n    return torch.log_softmax(x, -1)\\n')\n"
    "    return 2 * x + 0 * unit.f(x)\n"
)
DOUBLE_LOGCUMSUMEXP = "import torch\n\ndef double(x):\n    return 2 * x + 0 * torch.logcumsumexp(x, 0)\n"


def _graded(tmp_path, isolator, name, *cells, fake=True):
    from mha_course.grading.engine import pipeline as grader

    path = tmp_path / f"{name}.ipynb"
    if fake:
        with registry.registered("grading_fake"):
            write_submission(path, *cells)
            result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    else:
        path.write_text(cells[0])
        result = grader.grade_notebook(path, limits=LIMITS, isolator=isolator, seed=None)
    assert result.error is None, result.error
    return result


def test_the_grader_catches_evasions_in_its_sandbox(tmp_path, isolator, no_scan):
    for name, cell in (("torchscript", DOUBLE_TORCHSCRIPT), ("logcumsumexp", DOUBLE_LOGCUMSUMEXP)):
        result = _graded(tmp_path, isolator, name, GOOD_ADD, cell)
        rows = [t for t in result.tests if t.exercise == "fake_double"]
        assert rows and all(t.score == 0 for t in rows), (name, rows)
        assert all("of the softmax family" in t.output for t in rows), (name, rows)
        assert sum(t.score for t in result.tests if t.exercise == "fake_add") == 4  # the batch went on
    # a real assignment: the ufunc bound by a cell's import before any case (the self-check cannot see it)
    nb = json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())
    cell = next(c for c in nb["cells"] if re.search(r"^def softmax_np\b", "".join(c["source"]), re.M))
    cell["source"] = (
        "from numpy import logaddexp\n\ndef softmax_np(x, axis=-1):\n"
        "    return np.exp(x - logaddexp.reduce(x, axis=axis, keepdims=True))\n"
    )
    result = _graded(tmp_path, isolator, "logaddexp", json.dumps(nb), fake=False)
    rows = [t for t in result.tests if t.exercise == "softmax_np"]
    assert rows and all(t.score == 0 for t in rows), rows
    assert any("numpy.logaddexp.reduce, of the softmax family" in t.output for t in rows), rows
    assert sum(t.score for t in result.tests if t.exercise == "softmax") == find_exercise("softmax").max_points
