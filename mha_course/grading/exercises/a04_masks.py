"""Assignment 04 (chapter 04): causal and padding masks, and attention that honours them.

Course convention: a boolean mask is True where a query MAY attend; a float mask is ADDED to the
scores (0 keeps, -inf blocks). Blocked scores become -inf (never -1e9, which does not fit in
float16), and a query whose keys are all blocked gets all-zero weights and a zero output.
"""

from __future__ import annotations

import numpy as np

from ..calls import a04_masks as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._common import SDPA_SHORTCUTS, attention_alternatives

# --- causal_mask ----------------------------------------------------------------------------------


def _sizes(T, S=None):
    def make():
        if case_inputs.salting() and T > 1:  # fresh sizes of the same kind (S - T kept; T = 1 stays the one-query edge)
            d = int(case_inputs.rng(T).integers(1, 5))
            return {"T": T + d, "S": None if S is None else S + d}
        return {"T": T, "S": S}

    return make


def _ref_causal(inputs):
    from mha_course.core.masks import causal_mask

    return causal_mask(inputs["T"], inputs["S"]).numpy()


def _diagnose_causal(got, expected, inputs):
    T = inputs["T"]
    S = T if inputs["S"] is None else inputs["S"]
    rows, cols = np.arange(T)[:, None], np.arange(S)[None, :]
    return hints.compare(
        got,
        expected,
        "mask",
        "[T, S]",
        alternatives=[
            # the off-by-one first: with T = S = 1 it is the swapped mask too, and "the diagonal" is then the truth
            (lambda: cols < rows, "off by one: query i must also see key i itself (the diagonal is allowed)"),
            (lambda: cols <= rows + 1, "off by one: query i also sees key i + 1, one step in its future"),
            (lambda: cols > rows, "True and False are swapped: True means MAY attend (query i sees keys j <= i)"),
            (lambda: cols >= rows, "upper triangle: that lets each query see the future; keep j <= i (lower triangle)"),
            (
                lambda: cols <= rows + (S - T),
                "aligned bottom-right; the course aligns top-left like torch's is_causal: query i sees keys j <= i",
            ),
            (lambda: np.ones((T, S), dtype=bool), "every entry is True: nothing is masked"),
        ],
    )


_mask_heat = hints.single_heatmaps("mask (True = may attend)", value_name="may attend")


def _causal_case(name, points, *, T, S=None, hidden=False, heatmap=False):
    """A causal_mask(T, S) case; heatmap draws the learner's mask beside the expected one."""
    visualize = _mask_heat if heatmap else None
    return Case(name, points, _sizes(T, S), calls.causal_mask, _ref_causal, _diagnose_causal, hidden, visualize)


CAUSAL = Exercise(
    key="causal_mask",
    target="causal_mask",
    title="Causal mask",
    cases=(
        _causal_case("T = 5: lower triangle with the diagonal, bool", 2, T=5, heatmap=True),
        _causal_case("T = 3 queries, S = 5 keys (top-left aligned)", 1, T=3, S=5, heatmap=True),
        _causal_case("S defaults to T", 1, T=4),
        _causal_case("T = 1", 1, T=1, hidden=True),
        _causal_case("T = 6, S = 4", 1, T=6, S=4, hidden=True),
    ),
)

# --- padding_mask ---------------------------------------------------------------------------------


def _lengths(lengths, S, as_list=False):
    def make():
        lengths_, S_ = np.asarray(lengths, dtype=np.int64), S
        if case_inputs.salting():  # fresh lengths: a longer S, lengths shuffled and grown
            rng = case_inputs.rng(S)
            S_ = S + int(rng.integers(1, 5))
            lengths_ = rng.permutation(lengths_) + rng.integers(0, S_ - S + 1, size=lengths_.shape)
        return {"lengths": lengths_, "S": S_, "as_list": as_list}

    return make


def _ref_padding(inputs):
    from mha_course.core.masks import padding_mask

    return padding_mask(inputs["lengths"].tolist(), inputs["S"]).numpy()


def _diagnose_padding(got, expected, inputs):
    arr, hint = hints.as_array(got, "mask")
    if hint:
        return hint
    B, S = len(inputs["lengths"]), inputs["S"]
    if arr.shape == (B, S):
        return (
            f"mask: shape expected ({B}, 1, 1, {S}) [B, 1, 1, S], got ({B}, {S}): the head and query axes are "
            "missing, so it cannot broadcast against scores (B, H, T, S)"
        )
    if arr.shape == (B, 1, S, 1):
        return f"mask: shape ({B}, 1, {S}, 1) puts the keys on the query axis; expected ({B}, 1, 1, {S})"
    pos, lengths = np.arange(S)[None, :], inputs["lengths"][:, None]
    return hints.compare(
        arr,
        expected,
        "mask",
        "[B, 1, 1, S]",
        alternatives=[
            (lambda: (pos >= lengths)[:, None, None, :], "True and False are swapped: True marks a REAL token"),
            (lambda: (pos <= lengths)[:, None, None, :], "off by one: a sequence of length L has real tokens 0 .. L-1"),
            (
                lambda: (pos < lengths - 1)[:, None, None, :],
                "off by one: a sequence of length L has real tokens 0 .. L-1",
            ),
        ],
    )


def _padding_case(name, points, *, lengths, S, as_list=False, hidden=False):
    """A padding_mask(lengths, S) case; as_list passes the lengths as a Python list."""
    return Case(
        name, points, _lengths(lengths, S, as_list), calls.padding_mask, _ref_padding, _diagnose_padding, hidden
    )


PADDING = Exercise(
    key="padding_mask",
    target="padding_mask",
    title="Padding mask",
    cases=(
        _padding_case("lengths [3, 5, 1], S = 5 -> (3, 1, 1, 5) bool", 2, lengths=[3, 5, 1], S=5),
        _padding_case("length 0 and full length", 1, lengths=[0, 6], S=6),
        _padding_case("lengths given as a Python list", 1, lengths=[2, 4], S=4, as_list=True),
        _padding_case("B = 1, S = 7", 1, lengths=[4], S=7, hidden=True),
        _padding_case("four sequences, S = 3", 1, lengths=[3, 1, 2, 3], S=3, hidden=True),
    ),
)

# --- masked scaled_dot_product_attention ----------------------------------------------------------


def _masked(lead, T, S, D, Dv, seed, mask_kind, dtype=np.float64, magnitude=1.0, scale=None):
    """mask_kind: None, "causal", "padding" (B, 1, 1, S) with one empty sequence when B > 2,
    "float" (additive biases with some -inf), "random" (B, 1, T, S) bool, "all_true"."""

    def make():
        rng = case_inputs.rng(seed)
        q = (rng.standard_normal((*lead, T, D)) * magnitude).astype(dtype)
        k = (rng.standard_normal((*lead, S, D)) * magnitude).astype(dtype)
        v = rng.standard_normal((*lead, S, Dv)).astype(dtype)
        rows, cols = np.arange(T)[:, None], np.arange(S)[None, :]
        mask: np.ndarray | None
        if mask_kind is None:
            mask = None
        elif mask_kind == "causal":
            mask = cols <= rows  # (T, S)
        elif mask_kind == "padding":
            B = lead[0]
            lengths = rng.integers(1, S + 1, size=B)
            lengths[0] = S - 2
            if B > 2:
                lengths[-1] = 0  # a sequence with no real token: its queries attend to nothing
            mask = (np.arange(S)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
        elif mask_kind == "float":
            mask = rng.standard_normal((T, S)) * 2.0
            mask[rng.random((T, S)) < 0.3] = -np.inf
            mask[:, 0] = 0.5  # every query keeps a key
            mask = mask.astype(dtype)
        elif mask_kind == "random":
            mask = rng.random((lead[0], 1, T, S)) < 0.6
            mask[..., 0] = True
        elif mask_kind == "all_true":
            mask = np.ones((T, S), dtype=bool)
        else:
            raise ValueError(mask_kind)
        return {"q": q, "k": k, "v": v, "mask": mask, "scale": scale}

    return make


def _ref_masked(inputs):
    import torch

    from mha_course.core.attention import scaled_dot_product_attention

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"])
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=inputs.get("scale"))
    return out.numpy(), weights.numpy()


def _diagnose_masked(got, expected, inputs, check_dtype=False):
    mask = inputs["mask"]
    arrays, hint = hints.unpack(got, ("out", "weights"))
    if hint:
        return hint
    weights, exp_w = arrays[1], np.asarray(expected[1])
    if mask is not None and weights.shape == exp_w.shape:
        allowed = np.broadcast_to(mask if mask.dtype == np.bool_ else np.isfinite(mask), exp_w.shape)
        empty = ~allowed.any(axis=-1)  # queries with nothing to attend to
        if empty.any():
            rows = weights[empty]
            if np.isnan(rows).any():
                return (
                    "weights: NaN for a query whose keys are all masked; the course's convention is all-zero "
                    "weights (and a zero output) there: make softmax return 0 for an all -inf row"
                )
            if np.abs(rows).sum() > 1e-3 and hints.close(weights[~empty], exp_w[~empty]):
                return (
                    "weights: a query whose keys are all masked must get all-zero weights (course convention); "
                    "a finite fill such as -1e9 or finfo.min gives it a uniform row instead: fill with -inf"
                )
    if mask is not None and mask.dtype != np.bool_ and weights.shape == exp_w.shape and np.isnan(weights).any():
        return (
            "weights: NaN with a float mask: a float mask is ADDED to the scores (0 keeps, -inf blocks); "
            "multiplying by -inf gives NaN"
        )
    alternatives = attention_alternatives(inputs, mask)[::-1]
    hint = hints.compare_pair(
        got, expected, legends=("[..., T, Dv]", "[..., T, S]"), alternatives=alternatives, check_dtype=check_dtype
    )
    if hint and "values differ" in hint and mask is not None and weights.shape == exp_w.shape:
        allowed = np.broadcast_to(mask if mask.dtype == np.bool_ else np.isfinite(mask), exp_w.shape)
        hint = hints.mask_hint(weights, allowed) or hints.rows_sum_hint(weights) or hint
    return hint


def _diagnose_masked_dtype(got, expected, inputs):
    return _diagnose_masked(got, expected, inputs, check_dtype=True)


_UNCHANGED = case_inputs.unchanged_case(
    _ref_masked,
    _diagnose_masked,
    "your function changed q, k, v or the mask in place (masked_fill_, ~=, *=, ...): work on new tensors",
    ("q", "k", "v", "mask"),
)


_heat = hints.pair_heatmaps(1)


def _masked_case(name, points, inputs, *, hidden=False, heatmap=False, judge_dtype=False):
    """A masked attention case on ``inputs`` (a _masked(...) maker).

    judge_dtype: the case is about a dtype other than float64, so the output's dtype is judged too;
    heatmap draws the learner's weights beside the expected ones.
    """
    judge = _diagnose_masked_dtype if judge_dtype else _diagnose_masked
    visualize = _heat if heatmap else None
    return Case(name, points, inputs, calls.masked_sdpa, _ref_masked, judge, hidden, visualize)


MASKED_SDPA = Exercise(
    key="masked_sdpa",
    target="scaled_dot_product_attention",
    title="Attention with a mask",
    cases=(
        _masked_case("no mask: plain attention", 1, _masked((2,), T=3, S=5, D=4, Dv=6, seed=0, mask_kind=None)),
        _masked_case(
            "causal bool mask (T, T)",
            2,
            _masked((2,), T=5, S=5, D=4, Dv=6, seed=1, mask_kind="causal"),
            heatmap=True,
        ),
        _masked_case(
            "padding mask (B, 1, 1, S) on (B, H, T, D)",
            2,
            _masked((2, 3), T=4, S=6, D=4, Dv=5, seed=2, mask_kind="padding"),
            heatmap=True,
        ),
        _masked_case(
            "float mask is added to the scores",
            1,
            _masked((2,), T=4, S=6, D=8, Dv=3, seed=3, mask_kind="float"),
            heatmap=True,
        ),
        _masked_case(
            "fully masked query: zero weights and zero output, no NaN",
            1,
            _masked((3, 2), T=3, S=4, D=4, Dv=5, seed=4, mask_kind="padding"),
            heatmap=True,
        ),
        _masked_case(
            "float16 q, k, v with a causal mask (no -1e9 overflow)",
            1,
            _masked((2,), T=4, S=4, D=8, Dv=4, seed=5, mask_kind="causal", dtype=np.float16),
            judge_dtype=True,
        ),
        Case(
            "does not change q, k, v or the mask",
            1,
            _masked((2,), T=5, S=5, D=4, Dv=6, seed=6, mask_kind="causal"),
            calls.masked_sdpa_unchanged,
            *_UNCHANGED,
        ),
        _masked_case(
            "causal mask with more keys than queries (T = 3, S = 6)",
            1,
            _masked((2,), T=3, S=6, D=4, Dv=5, seed=7, mask_kind="causal"),
            hidden=True,
        ),
        _masked_case(
            "per-example (B, 1, T, S) bool mask",
            1,
            _masked((3, 2), T=4, S=5, D=6, Dv=3, seed=8, mask_kind="random"),
            hidden=True,
        ),
        _masked_case(
            "all-True mask equals no mask",
            1,
            _masked((2,), T=4, S=5, D=4, Dv=4, seed=9, mask_kind="all_true"),
            hidden=True,
        ),
        _masked_case(
            "large scores with a causal mask",
            1,
            _masked((2,), T=5, S=5, D=4, Dv=6, seed=10, mask_kind="causal", magnitude=20.0),
            hidden=True,
        ),
        _masked_case(
            "an explicit scale (0.8) with a padding mask",
            1,
            _masked((3,), T=4, S=5, D=4, Dv=3, seed=11, mask_kind="padding", scale=0.8),
            hidden=True,
        ),
    ),
    forbidden=SDPA_SHORTCUTS,
)

ASSIGNMENT = Assignment(
    key="a04_masks",
    version=1,
    title="Assignment 04: causal and padding masks",
    notebook="a04_masks.ipynb",
    exercises=(CAUSAL, PADDING, MASKED_SDPA),
    provided=("mha_course.core.softmax",),  # the stable softmax from assignment 02
)
