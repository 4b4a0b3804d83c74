"""What a learner is told when a case is lost: the mistake by name, the line, and the fix.

* a softmax shifted by the whole array's maximum is told so, also where its rows turn to 0/0 = NaN;
* an output in another dtype names both dtypes and the likely cause (a tensor made without ``dtype=``,
  also after ``torch.set_default_dtype``); "computed in float32" only when the dtype is right;
* a target that returns the wrong number of values is told both counts, on every case;
* an error, a stub and a missing function in the self-check name the cell and line, and the fix.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_course.grading.engine.registry import find_exercise
from mha_course.grading.inside import convert
from mha_course.grading.learner import hints, selfcheck
from mha_course.grading.verdicts import Status

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the buggy softmaxes overflow on purpose


def _rows(key, obj):
    """case name -> row, hidden cases included."""
    result, _ = selfcheck.run_exercise(find_exercise(key), obj, include_hidden=True)
    return {row.case: row for row in result.rows}


def _define(source: str, name: str, filename: str = "<cell 4>"):
    namespace: dict = {"__name__": "__main__", "np": np, "torch": torch, "math": math}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the test's own snippets
    return namespace[name]


# --- a softmax shifted by the whole array's maximum ----------------------------------------------------

WHOLE_ARRAY = "maximum of the whole array"
# the cases whose rows lie so far apart that a whole-array shift underflows a row to 0/0
APART = ("float32 in, float32 out (rows from -80 to 100)", "rows of very different magnitude")


def _whole_max_np(x, axis=-1):
    e = np.exp(x - x.max())
    return e / e.sum(axis=axis, keepdims=True)


def _whole_max_torch(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize(("key", "softmax"), [("softmax_np", _whole_max_np), ("softmax", _whole_max_torch)])
def test_whole_array_maximum_is_named_where_its_rows_turn_to_nan(key, softmax):
    rows = _rows(key, softmax)
    for name in APART:
        assert not rows[name].passed and WHOLE_ARRAY in rows[name].hint, (name, rows[name].hint)
        assert "subtract the maximum first" not in rows[name].hint  # what the learner did already


def test_no_max_subtraction_is_not_mistaken_for_a_whole_array_sum():
    """The NaN of exp overflowing also match a softmax divided by the whole array's sum: the right mistake first."""

    def no_max(x, axis=-1):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)

    hint = _rows("softmax_np", no_max)["large logits (about 1000) give no NaN"].hint
    assert "exp overflowed" in hint and "subtract the maximum" in hint and "whole array" not in hint


def test_nan_matches_a_mistake_only_in_the_same_places_and_never_all_nan():
    wrong = np.array([[0.2, 0.8], [np.nan, np.nan]])
    assert hints.same_nans(wrong.copy(), wrong)
    assert not hints.close(wrong.copy(), wrong)  # a right answer never holds NaN
    assert not hints.same_nans(np.array([[np.nan, 0.8], [0.5, np.nan]]), wrong)  # other places
    assert not hints.same_nans(np.array([[0.3, 0.7], [np.nan, np.nan]]), wrong)  # other values
    everywhere = np.full((2, 2), np.nan)
    assert not hints.same_nans(everywhere, everywhere)
    assert hints.first_match(wrong.copy(), [(everywhere, "all NaN"), (wrong, "this one")]) == "this one"


# --- dtypes -------------------------------------------------------------------------------------------


def _softmax_into_new_tensor(x, dim=-1):
    """A learner's softmax that writes into a tensor made without dtype= (torch's default dtype)."""
    out = torch.empty(x.shape)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    out[...] = e / e.sum(dim=dim, keepdim=True)
    return out


@contextlib.contextmanager
def _default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def test_set_default_dtype_float64_is_named_for_a_float32_case():
    with _default_dtype(torch.float64):
        hint = _rows("softmax", _softmax_into_new_tensor)["float32 in, float32 out (rows from -80 to 100)"].hint
    assert "dtype expected float32, got float64" in hint, hint
    assert "default dtype is set to float64" in hint and "dtype=x.dtype" in hint
    assert "NumPy 2" not in hint


def test_float32_result_for_float64_inputs_names_the_dtype_not_a_float32_computation():
    hint = _rows("softmax", _softmax_into_new_tensor)["rows of a (3, 5) matrix sum to 1 and match"].hint
    assert "dtype expected float64, got float32" in hint, hint
    assert "made without dtype=" in hint and "dtype=x.dtype" in hint and "only float32-accurate" not in hint


def test_computed_in_float32_only_when_the_dtype_is_right():
    def float32_inside(x, dim=-1):
        work = x.float()
        e = torch.exp(work - work.amax(dim=dim, keepdim=True))
        return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)

    hint = _rows("softmax", float32_inside)["rows of a (3, 5) matrix sum to 1 and match"].hint
    assert "float64 result, but only float32-accurate" in hint and "dtype expected" not in hint, hint


def test_dtype_hint_says_which_came_back_and_which_was_expected():
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    wider = hints.dtype_hint(x, x.astype(np.float32), "out")
    assert wider.startswith("out: dtype expected float32, got float64") and "square root of D" in wider
    narrower = hints.dtype_hint(x.astype(np.float32), x, "out")
    assert narrower.startswith("out: dtype expected float64, got float32") and "set_default_dtype" in narrower
    half = hints.dtype_hint(x.astype(np.float32), x.astype(np.float16), "out")
    assert ".to(x.dtype)" in half
    assert hints.dtype_hint(x, x, "out") is None


# --- the wrong number of results ------------------------------------------------------------------


def _solution_namespace(key: str) -> dict:
    nb = json.loads((ROOT / "solutions" / f"{key}.ipynb").read_text())
    namespace: dict = {"__name__": "__main__"}
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "check(" not in source and ("def " in source or "import " in source):
            exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - the course's own solution
    return namespace


def test_a12_update_agrees_with_the_library_and_the_chapter():
    from mha_course.efficient.online_softmax import online_softmax_update

    assert all(row.passed for row in _rows("online_softmax_update", online_softmax_update).values())
    solution = _solution_namespace("a12_tiled_attention")
    for key in ("online_softmax_update", "tiled_attention"):
        assert all(row.passed for row in _rows(key, solution[key]).values()), key
    chapter = (ROOT / "notebooks" / "12_flash_attention_idea.ipynb").read_text()
    assert "m, l, correction = online_softmax_update(" in chapter


@pytest.mark.parametrize("count", [2, 4])
def test_a12_update_with_the_wrong_count_fails_every_case_with_one_sentence(count):
    from mha_course.efficient.online_softmax import online_softmax_update

    def update(m, l, x_block):
        m_new, l_new, correction = online_softmax_update(m, l, x_block)
        return (m_new, l_new, correction, correction)[:count]

    rows = _rows("online_softmax_update", update)
    expected = f"online_softmax_update returned {count} values; it must return 3: return m_new, l_new, correction"
    assert all(not r.passed and expected in r.hint for r in rows.values()), [r.hint for r in rows.values()]


def test_a12_correction_mistakes_are_named():
    from mha_course.efficient.online_softmax import online_softmax_update

    def nan_when_masked(m, l, x_block):
        m_new, l_new, _ = online_softmax_update(m, l, x_block)
        return m_new, l_new, torch.exp(m - m_new)  # -inf - (-inf) for a row that has seen only -inf

    def upside_down(m, l, x_block):
        m_new, l_new, _ = online_softmax_update(m, l, x_block)
        return m_new, l_new, torch.exp(m_new - m)

    masked = _rows("online_softmax_update", nan_when_masked)
    assert "NaN for a row that has seen only -inf" in masked["a row that starts masked (-inf)"].hint
    assert sum(r.passed for r in masked.values()) == len(masked) - 1  # 0 before the first block is right
    flipped = _rows("online_softmax_update", upside_down)
    assert "NaN for a row that has seen only -inf" in flipped.pop("a row that starts masked (-inf)").hint
    assert all("correction: upside down: exp(m - m_new)" in r.hint for r in flipped.values())


def test_every_tuple_target_names_both_counts():
    def attention_with_scores(q, k, v):
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        return weights @ v, weights, scores

    hint = next(iter(_rows("attention_np", attention_with_scores).values())).hint
    assert "attention_np returned 3 values; it must return 2: return out, weights" in hint

    def gradients_as_one_tensor(q, k, v, grad_out):
        return torch.zeros_like(q)

    row = next(iter(_rows("attention_backward", gradients_as_one_tensor).values()))
    assert "attention_backward returned one Tensor; it must return 3: return dq, dk, dv" in row.hint

    def softmax_and_max(x, axis=-1):
        top = x.max(axis=axis, keepdims=True)
        e = np.exp(x - top)
        return e / e.sum(axis=axis, keepdims=True), top

    row = next(iter(_rows("softmax_np", softmax_and_max).values()))
    assert "should be one array/tensor, got 2 values" in row.hint


def test_arity_sentence():
    assert convert.arity_problem((1, 2), ("a", "b")) is None
    assert convert.arity_problem([1, 2, 3], ("a", "b"), "f") == "f returned 3 values; it must return 2: return a, b"
    assert convert.arity_problem((1,), ("a", "b"), "f") == "f returned 1 value; it must return 2: return a, b"
    with pytest.raises(TypeError, match="f returned one int; it must return 2"):
        convert.returned(7, ("a", "b"), "f")


# --- where, and what to do: errors, stubs, a missing function ---------------------------------------------


def test_an_error_names_the_learners_cell_and_line():
    broken = _define(
        "def softmax_np(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdim=True)\n", "softmax_np"
    )
    hint = next(iter(_rows("softmax_np", broken).values())).hint
    assert hint.startswith("TypeError:") and "(cell 4, line 3)" in hint, hint

    undefined = _define("def softmax_np(x, axis=-1):\n    return np.exp(x) / totl\n", "softmax_np")
    hint = next(iter(_rows("softmax_np", undefined).values())).hint
    assert hint == (
        "NameError: name 'totl' is not defined (cell 4, line 2) -> define it, or run the cell that defines it, "
        "before check()"
    )


def test_the_broadcast_advice_keeps_the_line():
    forgot_keepdims = _define(
        "def softmax_np(x, axis=-1):\n    e = np.exp(x - x.max(axis=axis))\n    return e / e.sum(axis=axis)\n",
        "softmax_np",
    )
    hints_ = [r.hint for r in _rows("softmax_np", forgot_keepdims).values() if r.hint.startswith("ValueError")]
    assert hints_ and all("(cell 4, line 2)" in h and "keepdims" in h for h in hints_), hints_


def test_a_jupyter_cell_is_named_as_jupyter_names_it(monkeypatch):
    """IPython compiles each cell into a file of its own and maps it to In[n]: the hint uses that name."""
    filename = "/tmp/ipykernel_1/123456.py"

    class Compiler:
        @staticmethod
        def format_code_name(name):
            return ("Cell", "In[7]") if name == filename else None

    shell = types.SimpleNamespace(compile=Compiler())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    stub = _define(
        "def softmax_np(x, axis=-1):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n", "softmax_np", filename
    )
    row = next(iter(_rows("softmax_np", stub).values()))
    assert row.status == Status.NOT_ATTEMPTED
    assert row.hint == "not attempted yet: replace `raise NotImplementedError()` (cell In[7], line 3) with your code"


def test_a_library_not_implemented_error_is_not_called_a_stub():
    unsupported = _define(
        "def softmax_np(x, axis=-1):\n    raise NotImplementedError('float128 is not supported')\n", "softmax_np"
    )
    row = next(iter(_rows("softmax_np", unsupported).values()))
    assert (
        row.status == Status.NOT_ATTEMPTED
        and "float128 is not supported" in row.hint
        and "(cell 4, line 2)" in row.hint
    )


def test_a_missing_function_is_told_what_to_pass():
    result = selfcheck.check("softmax_np", None, show=False)
    assert result.score == 0 and result.rows
    assert all(
        "check got NoneType, not a function or class" in r.hint and "check('softmax_np', softmax_np)" in r.hint
        for r in result.rows
    )


def test_course_and_library_frames_are_never_named():
    def raise_in_numpy(x, axis=-1):
        return np.reshape(x, (7, 7, 7))

    row = next(iter(_rows("softmax_np", raise_in_numpy).values()))
    assert "test_learner_messages.py, line" in row.hint  # this file is the learner's code here, numpy is not
    assert "fromnumeric" not in row.hint and "calls/" not in row.hint
