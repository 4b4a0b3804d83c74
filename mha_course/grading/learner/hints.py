"""Diagnoses shared by the assignments: turn a wrong answer into a hint in the learner's terms.

A case's ``diagnose(got, expected, inputs)`` returns None when ``got`` is right, else one short
sentence saying what is wrong ("shape expected (2, 5, 7) [B, T, S], got (2, 7, 5): transposed?").
The helpers here are the building blocks; :func:`compare` is the usual pipeline:

    type -> shape -> NaN/inf -> known wrong variants (alternatives) -> another dtype -> values -> dtype

``alternatives`` are outputs of plausible *wrong* computations (no max subtraction, 1/D scale,
mask ignored, ...) made by the grader; when the learner's answer matches one of them the hint
names that mistake instead of printing numbers (NaN in the same places match: a mistake's NaN are its
signature). Values right only to the precision of the dtype they came back in are told the dtype.

Everything here runs in the grader (and in the learner's own kernel for the self-check), never in
the submission process: its sandbox holds the call functions (:mod:`mha_course.grading.calls`)
and the conversions they use (:mod:`mha_course.grading.inside.convert`), not this module.
Only NumPy is imported at module top; the ``visualize`` hooks import :mod:`mha_course.plots.figures`
(matplotlib) only when the self-check draws, in the learner's own kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# --- helpers for ``diagnose`` (run in the grader) ------------------------------------------------


def fmt_shape(shape: Sequence[int], legend: str | None = None) -> str:
    """(2, 5, 7) [B, T, S]"""
    text = str(tuple(int(s) for s in shape))
    return f"{text} {legend}" if legend else text


def as_array(got: Any, what: str = "the result") -> tuple[Any, str | None]:
    """(array, None) for numeric data, (None, hint) otherwise.

    The array is typed ``Any``: it is None exactly when the hint is set, which the tuple's type cannot
    say, and every caller returns the hint before it touches the array.
    """
    if isinstance(got, (list, tuple)) and got and all(isinstance(g, np.ndarray) for g in got):
        return None, f"{what} should be one array/tensor, got a {type(got).__name__} of {len(got)} arrays"
    try:
        arr = np.asarray(got)
    except Exception:  # noqa: BLE001 - any conversion failure is the learner's type error
        return None, f"{what} should be an array/tensor, got {type(got).__name__}"
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        return None, f"{what} should be a numeric array/tensor, got {type(got).__name__}"
    return arr, None


def unpack(got: Any, names: Sequence[str]) -> tuple[Any, str | None]:
    """Split a returned tuple into a list of arrays; (None, hint) when it is not a tuple of that length.

    Typed ``Any`` like :func:`as_array`'s array: None exactly when the hint is set.
    """
    if not isinstance(got, (list, tuple)) or len(got) != len(names):
        from ..inside.convert import count_of

        return None, f"expected {len(names)} values ({', '.join(names)}), got {count_of(got)}"
    arrays = []
    for item, name in zip(got, names, strict=True):
        arr, hint = as_array(item, name)
        if hint:
            return None, hint
        arrays.append(arr)
    return arrays, None


def close(got: np.ndarray, expected: np.ndarray, dtype: Any = None, atol: float | None = None) -> bool:
    """Same shape and allclose with the tolerance of ``dtype`` (default: expected's); NaNs never match.

    The tolerance is the library's one policy, :func:`mha_course.testing.tolerance`: per floating dtype
    from its table, exact for integers (a count off by one is wrong at any size). ``atol``, where a case
    knows a correct answer may land further off (a float32 kernel on large scores), raises the absolute
    tolerance to at least that much; it never lowers it.
    """
    from ...testing import tolerance  # imports torch: only when a diagnosis compares numbers

    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return False
    if expected.dtype == np.bool_ or got.dtype == np.bool_:
        return got.dtype == expected.dtype and bool(np.array_equal(got, expected))
    table_atol, rtol = tolerance(dtype if dtype is not None else expected.dtype)
    g, e = got.astype(np.float64), expected.astype(np.float64)
    if np.isnan(g).any() or np.isnan(e).any():
        return False
    return bool(np.allclose(g, e, atol=max(table_atol, atol or 0.0), rtol=rtol))


def shape_hint(got: np.ndarray, expected: np.ndarray, what: str, legend: str | None = None) -> str | None:
    """None when shapes agree; otherwise say what was expected and what came back, and guess why."""
    if got.shape == expected.shape:
        return None
    hint = f"{what}: shape expected {fmt_shape(expected.shape, legend)}, got {fmt_shape(got.shape)}"
    if (
        got.ndim == expected.ndim >= 2
        and got.shape[:-2] == expected.shape[:-2]
        and got.shape[-2:] == expected.shape[-2:][::-1]
    ):
        hint += " (the last two axes are swapped: transposed?)"
    elif got.ndim < expected.ndim:
        hint += " (a dimension is missing: did you drop an axis, or not keep the leading batch dims?)"
    elif got.ndim > expected.ndim:
        hint += " (an extra dimension: check your reshape/broadcasting)"
    return hint


def finite_hint(got: np.ndarray, expected: np.ndarray, what: str) -> str | None:
    """Hint when ``got`` has NaN/inf where ``expected`` is finite."""
    if not (np.issubdtype(got.dtype, np.floating) and np.issubdtype(expected.dtype, np.floating)):
        return None
    bad = ~np.isfinite(got) & np.isfinite(expected)
    if not bad.any():
        return None
    kind = "NaN" if np.isnan(got[bad]).any() else "inf"
    return (
        f"{what}: {kind} in {int(bad.sum())} of {got.size} entries where the expected values are finite "
        f"(exp of large numbers overflows: subtract the maximum first; a row with nothing to attend to "
        f"must give zeros, not 0/0)"
    )


# Why a floating result comes back in another floating dtype; the fix is the same either way.
_NEW_TENSORS = "create new arrays/tensors with dtype=x.dtype (and device=x.device)"
_WIDER = (
    "a {got} value promoted the result: NumPy's square root of D or a NumPy array made without dtype= (the math module's keeps "
    "float32), or a tensor made without dtype= once torch's default dtype is set to {got}"
)
_NARROWER = (
    "a tensor made without dtype= gets torch's default dtype (float32 unless torch.set_default_dtype changed it), "
    "and .float() casts to float32"
)


def dtype_hint(got: np.ndarray, expected: np.ndarray, what: str) -> str | None:
    """Hint when the dtype differs: which came back, which was expected, the likely cause and the fix.

    A floating result in another floating dtype usually comes from a tensor the learner created without
    ``dtype=`` (torch's default dtype, which ``torch.set_default_dtype`` changes) or a NumPy float64 scalar.
    """
    if got.dtype == expected.dtype:
        return None
    hint = f"{what}: dtype expected {expected.dtype}, got {got.dtype}"
    if expected.dtype == np.bool_:
        return hint + " (return a boolean mask: True where a query may attend)"
    if got.dtype.kind == "f" and expected.dtype.kind == "f":
        if expected.dtype.itemsize < 4:  # float16/bfloat16 in: computing in float32 is fine, returning it is not
            return hint + ": computing in float32 is fine, but return the input's dtype (.to(x.dtype))"
        cause = _WIDER if got.dtype.itemsize > expected.dtype.itemsize else _NARROWER
        return f"{hint}: {cause.format(got=got.dtype)}; {_NEW_TENSORS}"
    return hint


def value_hint(got: np.ndarray, expected: np.ndarray, what: str) -> str:
    """Describe the worst mismatch: where, got, expected."""
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    return (
        f"{what}: values differ from the expected ones; worst at index {tuple(int(i) for i in worst)}: "
        f"got {float(got[worst]):.5g}, expected {float(expected[worst]):.5g}"
    )


def first_match(got: np.ndarray, alternatives: Sequence[tuple[Any, str]], dtype: Any = None) -> str | None:
    """The hint of the first wrong-but-plausible output that ``got`` matches, else None.

    ``alternatives`` holds (array or zero-arg callable returning one, hint) pairs; callables are
    evaluated lazily and may raise (then they are skipped). NaN in the same places count as a match
    (:func:`same_nans`): a mistake that gives NaN is named, not only told "NaN".
    """
    for alt, hint in alternatives:
        try:
            with np.errstate(all="ignore"):
                value = alt() if callable(alt) else alt
        except Exception:  # noqa: BLE001 - an alternative that cannot be computed simply does not match
            continue
        if value is not None and (close(got, np.asarray(value), dtype) or same_nans(got, np.asarray(value), dtype)):
            return hint
    return None


def same_nans(got: np.ndarray, wrong: np.ndarray, dtype: Any = None) -> bool:
    """True when ``got`` has NaN exactly where the wrong computation ``wrong`` has it and matches it elsewhere.

    :func:`close` never lets NaN match (a right answer has none), but a mistake's NaN are its signature: a
    softmax shifted by the whole array's maximum gives 0/0 = NaN in the rows far below it, and nowhere else.
    An all-NaN output matches nothing: it would match every mistake that gives NaN everywhere.
    """
    got, wrong = np.asarray(got), np.asarray(wrong)
    if got.shape != wrong.shape or got.dtype.kind != "f" or wrong.dtype.kind != "f":
        return False
    nans = np.isnan(got)
    if not nans.any() or nans.all() or not np.array_equal(nans, np.isnan(wrong)):
        return False
    return close(got[~nans], wrong[~nans], dtype if dtype is not None else wrong.dtype)


def rows_sum_hint(weights: np.ndarray, axis: int = -1, what: str = "weights") -> str | None:
    """Hint when the rows along ``axis`` do not sum to 1 (and say so if another axis does).

    Rows that are all zero are allowed (fully masked queries, the course's convention).
    """
    if weights.ndim == 0 or not np.issubdtype(weights.dtype, np.floating):
        return None
    sums = weights.astype(np.float64).sum(axis=axis)
    ok = np.isclose(sums, 1.0, atol=1e-3) | np.isclose(sums, 0.0, atol=1e-6)
    if ok.all():
        return None
    for other in range(weights.ndim):
        if other != axis % weights.ndim and weights.shape[other] > 1:
            if np.allclose(weights.astype(np.float64).sum(axis=other), 1.0, atol=1e-3):
                return (
                    f"{what}: the values sum to 1 along axis {other}, not along axis {axis}: "
                    f"softmax over the wrong axis?"
                )
    finite = sums[np.isfinite(sums)]
    spread = f"from {finite.min():.4g} to {finite.max():.4g}" if finite.size else "are NaN/inf"
    return f"{what}: rows do not sum to 1 (row sums {spread})"


def mask_hint(weights: np.ndarray, allowed: np.ndarray, what: str = "weights") -> str | None:
    """Hint when attention weight falls on blocked keys (mask ignored) or only on them (inverted).

    ``allowed`` is the boolean mask broadcast to ``weights``' shape: True where attending is allowed.
    """
    if weights.shape != allowed.shape or not np.issubdtype(weights.dtype, np.floating):
        return None
    w = np.nan_to_num(weights.astype(np.float64), nan=0.0)
    leak = np.abs(w[~allowed]).sum() if (~allowed).any() else 0.0
    kept = np.abs(w[allowed]).sum() if allowed.any() else 0.0
    if leak <= 1e-3:
        return None
    if kept <= 1e-3:
        return f"{what}: the mask is inverted: all weight is on blocked keys (True means MAY attend)"
    return f"{what}: nonzero weight on keys the mask blocks: is the mask ignored, or applied after softmax?"


def compare(
    got: Any,
    expected: Any,
    what: str,
    legend: str | None = None,
    alternatives: Sequence[tuple[Any, str]] = (),
    check_dtype: bool = False,
    dtype: Any = None,
    atol: float | None = None,
) -> str | None:
    """The usual pipeline: type, shape, NaN/inf, known mistakes, values, (dtype).

    Args:
        got: the learner's output (plain data).
        expected: the reference output.
        what: how to call it in the hint ("weights", "output").
        legend: the axes' names for the shape hint, e.g. "[B, T, S]".
        alternatives: (wrong output, hint) pairs; see :func:`first_match`.
        check_dtype: also require the same dtype.
        dtype: tolerance dtype (default: expected's).
        atol: an absolute tolerance the case allows beyond the dtype's (see :func:`close`).
    """
    arr, hint = as_array(got, what)
    if hint:
        return hint
    exp = np.asarray(expected)
    hint = shape_hint(arr, exp, what, legend)
    if hint:
        return hint
    if exp.dtype == np.bool_ and arr.dtype != np.bool_:
        return dtype_hint(arr, exp, what)
    hint = finite_hint(arr, exp, what) if exp.dtype != np.bool_ else None
    if not close(arr, exp, dtype, atol):
        match = first_match(arr, alternatives, dtype if dtype is not None else exp.dtype)
        if match:
            return f"{what}: {match}"
        if hint is None and _only_dtype_differs(arr, exp):
            return dtype_hint(arr, exp, what)  # the values are right for the dtype they came back in
        if hint is None and arr.dtype == exp.dtype == np.float64 and close(arr, exp, np.float32):
            return (
                f"{what}: float64 result, but only float32-accurate: a step computed in float32 (a .float(), "
                "astype(np.float32), or a float32 tensor made without dtype=)? keep the input's precision"
            )
        return hint or value_hint(arr, exp, what)
    if check_dtype:
        return dtype_hint(arr, exp, what)
    return None


def _only_dtype_differs(got: np.ndarray, expected: np.ndarray) -> bool:
    """Two floating dtypes that differ, and values equal to the tolerance of the coarser one."""
    if got.dtype == expected.dtype or got.dtype.kind != "f" or expected.dtype.kind != "f":
        return False
    coarser = got.dtype if got.dtype.itemsize < expected.dtype.itemsize else expected.dtype
    return close(got, expected, coarser)


def compare_pair(
    got: Any,
    expected: Sequence[np.ndarray],
    names: tuple[str, str] = ("out", "weights"),
    legends: tuple[str | None, str | None] = (None, None),
    alternatives: tuple[Sequence, Sequence] = ((), ()),
    check_dtype: bool = False,
    dtype: Any = None,
) -> str | None:
    """:func:`compare` for a returned pair such as (out, weights); also spots the swapped order."""
    arrays, hint = unpack(got, names)
    if hint:
        return hint
    a, b = arrays
    ea, eb = (np.asarray(x) for x in expected)
    if a.shape != ea.shape and a.shape == eb.shape and b.shape == ea.shape and ea.shape != eb.shape:
        return f"the pair is in the wrong order: return ({names[0]}, {names[1]}), you returned ({names[1]}, {names[0]})"
    # weights first: their hint (mask, sums, scale) usually explains the output's too
    hint = compare(b, eb, names[1], legends[1], alternatives[1], check_dtype, dtype)
    if hint:
        return hint
    return compare(a, ea, names[0], legends[0], alternatives[0], check_dtype, dtype)


def _side_by_side(
    got: Any,
    expected: Any,
    title: str,
    value_name: str = "weight",
    axis_names: tuple[str, str] = ("query (T)", "key (S)"),
) -> Any:
    """viz.plot_side_by_side of the learner's and the expected (..., T, S) arrays, or None.

    None when ``got`` is not numeric, has another shape than ``expected`` (the shape hint says
    more than a picture could) or is less than 2-D.
    """
    arr, hint = as_array(got)
    exp = np.asarray(expected)
    if hint or arr.shape != exp.shape or arr.ndim < 2:
        return None
    from ...plots import (
        figures as viz,  # matplotlib is loaded in the learner's kernel only, never in the submission process
    )

    return viz.plot_side_by_side(arr, exp, title=title, value_name=value_name, axis_names=axis_names)


def pair_heatmaps(index: int, title: str = "attention weights") -> Callable[[Any, Any, Any], Any]:
    """A ``visualize`` hook: yours / expected / difference heatmaps of element ``index`` of a returned pair."""

    def visualize(got: Any, expected: Any, inputs: Any) -> Any:
        if not isinstance(got, (list, tuple)) or len(got) <= index:
            return None
        return _side_by_side(got[index], expected[index], title)

    return visualize


def single_heatmaps(
    title: str, value_name: str = "weight", axis_names: tuple[str, str] = ("query (T)", "key (S)")
) -> Callable[[Any, Any, Any], Any]:
    """A ``visualize`` hook: yours / expected / difference heatmaps of a single returned array.

    ``value_name`` and ``axis_names`` say what the colour and the (row, column) axes are, when the
    array is not attention weights.
    """
    return lambda got, expected, inputs: _side_by_side(got, expected, title, value_name, axis_names)
