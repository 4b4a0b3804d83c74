"""Assignment 02 (chapter 02): a numerically stable softmax, in NumPy and in torch.

softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m),  m = max_j x_j

The cases catch the classic mistakes: no max subtraction (NaN for large logits), the wrong axis,
a global instead of a per-row maximum, missing keepdims, mutating the input, changing the dtype,
and NaN for a row that is entirely -inf (the course's convention: such a row is all zeros).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..calls import a02_softmax as calls
from ..engine import case_inputs
from ..inside import op_families
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- inputs ---------------------------------------------------------------------------------------


def _random(shape, seed, scale=1.0, shift=0.0, dtype=np.float64, axis=-1):
    def make():
        rng = case_inputs.rng(seed)
        x = (rng.standard_normal(shape) * scale + shift).astype(dtype)
        return {"x": x, "axis": axis}

    return make


def _rows_apart(shape, seed, dtype=np.float64):
    """Rows around 100, 40, -20 and -80 (noise of 3): the lowest row sits about 180 below the top one, so a
    softmax shifted by the global maximum instead of each row's underflows that row to 0/0 on every draw
    (rows drawn around one mean were sometimes too close together to tell)."""

    def make():
        rng = case_inputs.rng(seed)
        centres = np.linspace(100.0, -80.0, shape[0])[:, None]
        return {"x": (rng.standard_normal(shape) * 3.0 + centres).astype(dtype), "axis": -1}

    return make


def _fixed(rows, dtype=np.float64, axis=-1):
    def make():
        x = np.array(rows, dtype=np.float64)
        if case_inputs.salting():  # fresh inputs of the same kind: shift each row, shuffle the columns
            rng = case_inputs.rng(x.size)
            x = (x + rng.uniform(-20.0, 20.0, size=(x.shape[0], 1)))[:, rng.permutation(x.shape[1])]
        return {"x": x.astype(dtype), "axis": axis}

    return make


def _with_neg_inf(shape, seed, fully_masked_row: int | None, dtype=np.float64):
    def make():
        rng = case_inputs.rng(seed)
        x = rng.standard_normal(shape).astype(dtype)
        blocked = rng.random(shape) < 0.4
        blocked[..., 0] = False  # every row keeps one finite entry ...
        x[blocked] = -np.inf
        if fully_masked_row is not None:
            x[fully_masked_row] = -np.inf  # ... except this one
        return {"x": x, "axis": -1}

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _reference(inputs):
    from mha_course.core.softmax import softmax_np

    return softmax_np(inputs["x"], axis=inputs["axis"])


def _naive(x, axis):
    with np.errstate(all="ignore"):
        e = np.exp(x.astype(np.float64))
        return e / e.sum(axis=axis, keepdims=True)


def _alternatives(inputs):
    from mha_course.core.softmax import softmax_np

    x, axis = inputs["x"], inputs["axis"]
    # (zero-argument callable giving a wrong output, its hint); NaN at the same places match, so the mistake
    # that makes them comes first: no max subtraction gives the NaN that a whole-array sum also gives
    alts: list[tuple[Any, str]] = [
        (
            lambda: _naive(x, axis),
            "exp overflowed (inf / inf = NaN): subtract the maximum of each row before exp",
        )
    ]
    for other in range(x.ndim):
        if other != axis % x.ndim:
            alts.append(
                (
                    lambda o=other: softmax_np(x, axis=o),
                    f"softmax over axis {other}, expected axis {axis}: wrong axis (or the axis argument is ignored)",
                )
            )
    alts += [
        (lambda: np.exp(x), "exp without dividing by the sum: the rows must sum to 1"),
        (
            lambda: _naive(x, None) if x.ndim > 1 else None,
            "you divided by the sum over the whole array; "
            "each row must be divided by its own sum (look at the axis of the sum)",
        ),
        *[
            (
                lambda guard=guard: _global_max(x, axis, guard),
                "you subtracted the maximum of the whole array: a row much smaller than the largest one underflows "
                "to 0/0; subtract each row's own maximum (look at the axis of the max)",
            )
            for guard in (False, True)
        ],
        (
            lambda: _no_keepdims(x, axis),
            "the row maxima/sums lost their reduced axis and were broadcast along the wrong axis",
        ),
    ]
    return alts


def _global_max(x, axis, guard_zero_sum):
    """Softmax shifted by the whole array's maximum; with the guard, an underflowed row gives zeros, not NaN."""
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max())
        total = e.sum(axis=axis, keepdims=True)
        return e / (np.where(total == 0, 1.0, total) if guard_zero_sum else total)


def _no_keepdims(x, axis):
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        return None
    e = np.exp(x - x.max(axis=axis))
    return e / e.sum(axis=axis)


def _diagnose(got, expected, inputs):
    arr, hint = hints.as_array(got, "softmax")
    if hint:
        return hint
    exp = np.asarray(expected)
    if arr.shape != exp.shape:
        return hints.shape_hint(arr, exp, "softmax", "(same shape as x)")
    x = inputs["x"]
    fully_masked = np.isneginf(x).all(axis=inputs["axis"], keepdims=True) & np.ones_like(x, dtype=bool)
    if fully_masked.any() and np.isnan(arr[fully_masked]).any():
        return (
            "softmax: NaN for a row that is entirely -inf (every key masked); the course's convention is a row "
            "of zeros. Follow one such row through your code by hand: which step first gives NaN, and what must "
            "it give instead?"
        )
    hint = hints.compare(arr, exp, "softmax", alternatives=_alternatives(inputs))
    if hint and "values differ" in hint:
        return hints.rows_sum_hint(arr, inputs["axis"], "softmax") or hint
    return hint


def _diagnose_dtype(got, expected, inputs):
    return _diagnose(got, expected, inputs) or hints.dtype_hint(np.asarray(got), np.asarray(expected), "softmax")


_UNCHANGED = case_inputs.unchanged_case(
    _reference,
    _diagnose,
    "your function changed its input x (an in-place operation such as x -= ... or x.sub_()): work on a new array",
    ("x",),
)


# --- cases ----------------------------------------------------------------------------------------

_heat = hints.single_heatmaps("softmax", value_name="probability", axis_names=("row", "entry"))


def _cases(call, call_unchanged, torch_version: bool):
    def softmax(name, points, inputs, *, hidden=False, heatmap=False, judge_dtype=False):
        # judge_dtype: the case is about the output keeping the input's dtype
        judge = _diagnose_dtype if judge_dtype else _diagnose
        return Case(name, points, inputs, call, _reference, judge, hidden, _heat if heatmap else None)

    cases = [
        softmax("rows of a (3, 5) matrix sum to 1 and match", 2, _random((3, 5), seed=0), heatmap=True),
        softmax("the axis argument is honoured (axis=0)", 1, _random((3, 5), seed=1, axis=0), heatmap=True),
        softmax("large logits (about 1000) give no NaN", 2, _fixed([[1000.0, 1001.0, 1002.0], [-3.0, 999.0, 1000.0]])),
        softmax("very negative logits (about -1000) give no NaN", 1, _fixed([[-1000.0, -1001.0, -1002.0]])),
        softmax(
            "float32 in, float32 out (rows from -80 to 100)",
            1,
            _rows_apart((4, 6), seed=2, dtype=np.float32),
            judge_dtype=True,
        ),
        Case("does not change its input", 1, _random((3, 4), seed=3), call_unchanged, *_UNCHANGED),
        softmax(
            "a row of all -inf gives zeros (course convention)", 1, _with_neg_inf((3, 5), seed=4, fully_masked_row=1)
        ),
        softmax("rows of very different magnitude", 1, _fixed([[1000.0, 1001.0, 1003.0], [0.0, 1.0, 2.0]])),
        # hidden: what a learner could overfit to
        softmax("3-D input along axis 1", 1, _random((2, 3, 4), seed=5, axis=1), hidden=True),
        softmax("square matrix (4, 4)", 1, _random((4, 4), seed=6, scale=3.0), hidden=True),
        softmax("-inf entries get zero weight", 1, _with_neg_inf((4, 6), seed=7, fully_masked_row=None), hidden=True),
        softmax("a single vector (5,)", 1, _random((5,), seed=8, scale=2.0), hidden=True),
    ]
    if torch_version:
        cases.insert(
            5,
            softmax(
                "float16 in, float16 out, no overflow (logits up to 15)",
                1,
                _random((3, 8), seed=9, scale=3.0, shift=12.0, dtype=np.float16),
                judge_dtype=True,
            ),
        )
    return tuple(cases)


_TORCH_SHORTCUTS = op_families.TORCH_SOFTMAX_NAMES  # every spelling of torch's own softmax

SOFTMAX_NP = Exercise(
    key="softmax_np",
    target="softmax_np",
    title="Stable softmax in NumPy",
    cases=_cases(calls.softmax_np, calls.softmax_np_unchanged, torch_version=False),
    forbidden=(
        "scipy.special.softmax",
        "scipy.special.log_softmax",
        "scipy.special.logsumexp",
        "mha_course.softmax_np",
        "mha_course.core.softmax.softmax_np",
        *_TORCH_SHORTCUTS,
    ),
)

SOFTMAX = Exercise(
    key="softmax",
    target="softmax",
    title="Stable softmax in torch",
    cases=_cases(calls.softmax, calls.softmax_unchanged, torch_version=True),
    forbidden=(*_TORCH_SHORTCUTS, "mha_course.core.softmax.softmax"),
)

ASSIGNMENT = Assignment(
    key="a02_softmax",
    version=1,
    title="Assignment 02: a numerically stable softmax",
    notebook="a02_softmax.ipynb",
    exercises=(SOFTMAX_NP, SOFTMAX),
)
