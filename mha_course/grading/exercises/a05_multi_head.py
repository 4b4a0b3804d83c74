"""Assignment 05 (chapter 05): split and merge heads, and a MultiHeadAttention module.

    split_heads: (B, T, E) -> (B, H, T, D), head h = features h*D .. (h+1)*D - 1 of every token
    merge_heads: (B, H, T, D) -> (B, T, E), the inverse
    MultiHeadAttention(E, H): q_proj, k_proj, v_proj, out_proj = nn.Linear(E, E) each;
        forward(query, key=None, value=None, mask=None) -> (out (B, T, E), weights (B, H, T, S))

The module is graded with the grader's own weights copied into the four projections, so the
learner's output must match to float tolerance; wrong variants (no out_proj, 1/sqrt(E), q/k
swapped, keys as values, reshape without transpose) are recognised and named.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a05_multi_head as calls
from ..engine import case_inputs
from ..inside import convert
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._common import MHA_SHORTCUTS, np_mha, projection_weights

# --- split_heads / merge_heads --------------------------------------------------------------------


def _tokens(B, T, E, H, seed):
    def make():
        x = case_inputs.rng(seed).standard_normal((B, T, E)).astype(np.float32)
        return {"x": x, "num_heads": H}

    return make


def _heads(B, H, T, D, seed):
    def make():
        return {"x": case_inputs.rng(seed).standard_normal((B, H, T, D)).astype(np.float32)}

    return make


def _ref_split(inputs):
    import torch

    from mha_course.core.heads import split_heads

    return split_heads(torch.from_numpy(inputs["x"]), inputs["num_heads"]).numpy()


def _ref_merge(inputs):
    import torch

    from mha_course.core.heads import merge_heads

    return merge_heads(torch.from_numpy(inputs["x"])).numpy()


def _diagnose_split(got, expected, inputs):
    x, H = inputs["x"], inputs["num_heads"]
    B, T, E = x.shape
    D = E // H
    arr, hint = hints.as_array(got, "heads")
    if hint:
        return hint
    if arr.shape == (B, T, H, D):
        return f"heads: shape expected ({B}, {H}, {T}, {D}) [B, H, T, D], got {arr.shape} [B, T, H, D]: the head axis was never moved in front of T"
    return hints.compare(
        arr,
        expected,
        "heads",
        "[B, H, T, D]",
        alternatives=[
            (
                lambda: x.reshape(B, H, T, D),
                "reshaping straight to (B, H, T, D) without a transpose mixes tokens into heads: one token's features stay "
                "together; look at the order in which the axes are split and moved",
            ),
            (
                lambda: x.reshape(B, T, D, H).transpose(0, 3, 1, 2),
                "heads take every H-th feature; head h must be the "
                "consecutive features h*D .. (h+1)*D - 1: look at how the last axis E is split into (H, D)",
            ),
        ],
    )


def _diagnose_merge(got, expected, inputs):
    x = inputs["x"]
    B, H, T, D = x.shape
    return hints.compare(
        got,
        expected,
        "merged",
        "[B, T, E]",
        alternatives=[
            (
                lambda: x.reshape(B, T, H * D),
                "merging straight from (B, H, T, D) to (B, T, E) mixes heads into tokens: the head axis must sit "
                "next to D before the merge",
            ),
            (
                lambda: x.transpose(0, 1, 3, 2).reshape(B, T, H * D) if T == D else None,
                "you transposed the last two axes; the head and time axes are the ones to swap",
            ),
            (
                lambda: x.transpose(0, 2, 3, 1).reshape(B, T, H * D),
                "features are interleaved across heads; head h must "
                "fill features h*D .. (h+1)*D - 1: look at the order of the axes before the reshape",
            ),
        ],
    )


def _split_case(name, points, *, B, T, E, H, seed, hidden=False):
    """A split_heads case: x (B, T, E) into H heads."""
    return Case(name, points, _tokens(B, T, E, H, seed), calls.split_heads, _ref_split, _diagnose_split, hidden)


def _merge_case(name, points, *, B, H, T, D, seed, hidden=False):
    """A merge_heads case: x (B, H, T, D) back to (B, T, H*D)."""
    return Case(name, points, _heads(B, H, T, D, seed), calls.merge_heads, _ref_merge, _diagnose_merge, hidden)


SPLIT = Exercise(
    key="split_heads",
    target="split_heads",
    title="Split the model dimension into heads",
    cases=(
        _split_case("(B=2, T=5, E=12), H=3 -> (2, 3, 5, 4)", 2, B=2, T=5, E=12, H=3, seed=0),
        _split_case("head h holds features h*D .. (h+1)*D - 1 of every token", 2, B=1, T=4, E=8, H=2, seed=1),
        _split_case("H = 1 (one head, D = E)", 1, B=2, T=3, E=6, H=1, seed=2, hidden=True),
        _split_case("other sizes (B=3, T=7, E=10, H=5)", 1, B=3, T=7, E=10, H=5, seed=3, hidden=True),
    ),
    forbidden=("mha_course.split_heads", "mha_course.core.heads.split_heads"),
)

MERGE = Exercise(
    key="merge_heads",
    target="merge_heads",
    title="Merge heads back",
    cases=(
        _merge_case("(B=2, H=3, T=5, D=4) -> (2, 5, 12)", 2, B=2, H=3, T=5, D=4, seed=10),
        _merge_case("the inverse of split_heads (T = D = 4)", 2, B=2, H=2, T=4, D=4, seed=11),
        _merge_case("other sizes (B=1, H=4, T=6, D=2)", 1, B=1, H=4, T=6, D=2, seed=12, hidden=True),
    ),
    forbidden=("mha_course.merge_heads", "mha_course.core.heads.merge_heads"),
)

# --- MultiHeadAttention ---------------------------------------------------------------------------

_PROJ = calls.PROJ  # one home: the call module


def _mha_inputs(*, B, T, S, E, H, seed, mask_kind=None, self_attention=False, dtype=np.float32, value_is_key=False):
    def make():
        rng = case_inputs.rng(seed)
        inputs = projection_weights(rng, E, H, self_attention, _PROJ, dtype)
        inputs["query"] = rng.standard_normal((B, T, E)).astype(dtype)
        inputs["key"] = inputs["query"] if self_attention else rng.standard_normal((B, S, E)).astype(dtype)
        inputs["value"] = inputs["query"] if self_attention else rng.standard_normal((B, S, E)).astype(dtype)
        if value_is_key:  # forward(query, key): the value defaults to the key
            inputs["value"] = inputs["key"]
        S_ = T if self_attention else S
        if mask_kind is None:
            inputs["mask"] = None
        elif mask_kind == "causal":
            inputs["mask"] = np.arange(S_)[None, :] <= np.arange(T)[:, None]  # (T, S)
        elif mask_kind == "padding":
            lengths = rng.integers(1, S_ + 1, size=B)
            lengths[0] = max(1, S_ - 2)
            inputs["mask"] = (np.arange(S_)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
        return inputs

    return make


def _ref_layout(inputs):
    E = inputs["E"]
    return np.asarray([[E, E, E]] * 4, dtype=np.int64), np.asarray(4 * E * E + 4 * E, dtype=np.int64)


def _diagnose_layout(got, expected, inputs):
    arrays, hint = hints.unpack(got, ("layer shapes", "parameter count"))
    if hint:
        return hint
    shapes, count = arrays
    E = inputs["E"]
    if shapes.shape != (4, 3):
        return "could not read the four projections q_proj, k_proj, v_proj, out_proj"
    for name, (rows, cols, nbias) in zip(_PROJ, shapes.tolist(), strict=True):
        if (rows, cols) != (E, E):
            return f"{name}.weight has shape ({rows}, {cols}); every projection is nn.Linear(E, E) = ({E}, {E})"
        if nbias != E:
            return f"{name} has no bias: every projection of the reference has one (look at how the layer is built)"
    if int(count) != int(expected[1]):
        return (
            f"the module has {int(count)} parameters, expected 4*E*E + 4*E = {int(expected[1])}: "
            "only the four projections should hold parameters"
        )
    return None


def _ref_mha(inputs):
    import torch

    from mha_course.core.mha import MultiHeadAttention

    module = convert.build_module(MultiHeadAttention, inputs, _PROJ, sample="query")
    with torch.no_grad():
        mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"])
        out, weights = module(
            torch.from_numpy(inputs["query"]),
            torch.from_numpy(inputs["key"]),
            torch.from_numpy(inputs["value"]),
            mask=mask,
        )
    return out.numpy(), weights.numpy()


def _mha_alternatives(inputs):
    E, H = inputs["E"], inputs["H"]

    def pick(i, **kw):
        return lambda: np_mha(inputs, **kw)[i]

    common = [
        (
            dict(scale=1.0 / math.sqrt(E)),
            "the scores are scaled by 1/sqrt(E); each head works in D = E / H dimensions, so scale by 1/sqrt(D)",
        ),
        (dict(scale=1.0), "the scores are not scaled: multiply by 1/sqrt(D)"),
        (dict(scale=1.0 / (E // H)), "wrong scale: 1/D; use 1/sqrt(D)"),
        (dict(swap_qk=True), "q_proj and k_proj are swapped: queries go through q_proj, keys through k_proj"),
        (
            dict(split="no_transpose"),
            "the heads were split without moving the head axis: reshaping straight to (B, H, T, D) mixes tokens "
            "into heads; look at the order of the axes in the split",
        ),
    ]
    weights_alts = [(pick(1, **kw), hint) for kw, hint in common if H > 1 or "split" not in kw]
    out_alts = [
        (pick(0, out_proj=False), "out_proj (W_O) is not applied after merging the heads"),
        (pick(0, value_from_key=True), "the values come from the key input: v = v_proj(value)"),
        (
            pick(0, merge="no_transpose"),
            "merge without transpose: the head axis must be moved back next to D before reshaping to (B, T, E)",
        ),
    ] + [(pick(0, **kw), hint) for kw, hint in common]
    return out_alts, weights_alts


def _diagnose_mha(got, expected, inputs):
    hint = hints.compare_pair(
        got, expected, legends=("[B, T, E]", "[B, H, T, S]"), alternatives=_mha_alternatives(inputs)
    )
    if hint and "values differ" in hint and inputs["mask"] is not None:
        arrays, _ = hints.unpack(got, ("out", "weights"))
        weights = arrays[1]
        mask = inputs["mask"] if inputs["mask"].ndim != 3 else inputs["mask"][:, None]
        if weights.shape == np.asarray(expected[1]).shape:
            allowed = np.broadcast_to(mask, weights.shape)
            hint = hints.mask_hint(weights, allowed) or hint
    return hint


def _diagnose_mha_dtype(got, expected, inputs):
    return _diagnose_mha(got, expected, inputs) or hints.compare_pair(got, expected, check_dtype=True)


_heat = hints.pair_heatmaps(1, "attention weights (first head)")


def _forward_case(
    name, points, *, B, T, S=None, E, H, seed, mask=None, key_only=False, dtype=np.float32, hidden=False, heatmap=False
):
    """A MultiHeadAttention forward case: query (B, T, E), key and value (B, S, E), H heads.

    S left out: self-attention, forward(x) with key = value = query. mask: None, "causal" or "padding".
    key_only calls forward(query, key), leaving the value out. A dtype other than float32 (the module's
    own) is the case's point, so the output's dtype is judged too. heatmap draws the first head's weights.
    """
    sizes = dict(B=B, T=T, S=T if S is None else S, E=E, H=H, seed=seed, mask_kind=mask, self_attention=S is None)
    inputs = _mha_inputs(**sizes, dtype=dtype, value_is_key=key_only)
    call = calls.mha_forward_key_only if key_only else calls.mha_forward
    judge = _diagnose_mha if dtype == np.float32 else _diagnose_mha_dtype
    return Case(name, points, inputs, call, _ref_mha, judge, hidden, _heat if heatmap else None)


MHA = Exercise(
    key="multi_head_attention",
    target="MultiHeadAttention",
    title="MultiHeadAttention module",
    cases=(
        Case(
            "q_proj, k_proj, v_proj, out_proj are nn.Linear(E, E); 4E^2 + 4E parameters",
            1,
            _mha_inputs(B=2, T=5, S=5, E=12, H=3, seed=0),
            calls.mha_layout,
            _ref_layout,
            _diagnose_layout,
        ),
        _forward_case("self-attention: forward(x) with E=12, H=3", 3, B=2, T=5, E=12, H=3, seed=1, heatmap=True),
        _forward_case(
            "cross-attention: T=4 queries, S=6 keys, key != value", 2, B=2, T=4, S=6, E=12, H=3, seed=2, heatmap=True
        ),
        _forward_case(
            "forward(query, key): value left out defaults to key", 1, B=2, T=4, S=6, E=12, H=3, seed=9, key_only=True
        ),
        _forward_case("causal mask (T, T)", 1, B=2, T=5, E=12, H=3, seed=3, mask="causal", heatmap=True),
        _forward_case("padding mask (B, 1, 1, S)", 1, B=3, T=4, S=6, E=12, H=3, seed=4, mask="padding", heatmap=True),
        _forward_case("one head (H = 1)", 1, B=2, T=3, S=5, E=8, H=1, seed=5, hidden=True),
        _forward_case(
            "E = 8, H = 4 (D = 2) in float64", 1, B=2, T=6, S=3, E=8, H=4, seed=6, dtype=np.float64, hidden=True
        ),
        _forward_case("B = 1, T = 1", 1, B=1, T=1, S=4, E=12, H=2, seed=7, hidden=True),
        _forward_case(
            "E = 16, H = 8 with a padding mask", 1, B=2, T=3, S=5, E=16, H=8, seed=8, mask="padding", hidden=True
        ),
    ),
    forbidden=MHA_SHORTCUTS,
)

ASSIGNMENT = Assignment(
    key="a05_multi_head",
    version=1,
    title="Assignment 05: multi-head attention",
    notebook="a05_multi_head.ipynb",
    exercises=(SPLIT, MERGE, MHA),
    provided=("mha_course.core.attention",),  # scaled_dot_product_attention from assignment 03
)
