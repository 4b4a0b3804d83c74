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
from ..engine.spec import Assignment, Case, Exercise
from ..inside import convert
from ..learner import hints
from ._common import np_mha, projection_weights

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


SPLIT = Exercise(
    key="split_heads",
    target="split_heads",
    title="Split the model dimension into heads",
    cases=(
        Case(
            "(B=2, T=5, E=12), H=3 -> (2, 3, 5, 4)",
            2,
            _tokens(2, 5, 12, 3, 0),
            calls.split_heads,
            _ref_split,
            _diagnose_split,
        ),
        Case(
            "head h holds features h*D .. (h+1)*D - 1 of every token",
            2,
            _tokens(1, 4, 8, 2, 1),
            calls.split_heads,
            _ref_split,
            _diagnose_split,
        ),
        Case(
            "H = 1 (one head, D = E)",
            1,
            _tokens(2, 3, 6, 1, 2),
            calls.split_heads,
            _ref_split,
            _diagnose_split,
            hidden=True,
        ),
        Case(
            "other sizes (B=3, T=7, E=10, H=5)",
            1,
            _tokens(3, 7, 10, 5, 3),
            calls.split_heads,
            _ref_split,
            _diagnose_split,
            hidden=True,
        ),
    ),
    forbidden=("mha_course.split_heads", "mha_course.core.heads.split_heads"),
)

MERGE = Exercise(
    key="merge_heads",
    target="merge_heads",
    title="Merge heads back",
    cases=(
        Case(
            "(B=2, H=3, T=5, D=4) -> (2, 5, 12)",
            2,
            _heads(2, 3, 5, 4, 10),
            calls.merge_heads,
            _ref_merge,
            _diagnose_merge,
        ),
        Case(
            "the inverse of split_heads (T = D = 4)",
            2,
            _heads(2, 2, 4, 4, 11),
            calls.merge_heads,
            _ref_merge,
            _diagnose_merge,
        ),
        Case(
            "other sizes (B=1, H=4, T=6, D=2)",
            1,
            _heads(1, 4, 6, 2, 12),
            calls.merge_heads,
            _ref_merge,
            _diagnose_merge,
            hidden=True,
        ),
    ),
    forbidden=("mha_course.merge_heads", "mha_course.core.heads.merge_heads"),
)

# --- MultiHeadAttention ---------------------------------------------------------------------------

_PROJ = calls.PROJ  # one home: the call module


def _mha_inputs(B, T, S, E, H, seed, mask_kind=None, self_attention=False, dtype=np.float32, value_is_key=False):
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

MHA = Exercise(
    key="multi_head_attention",
    target="MultiHeadAttention",
    title="MultiHeadAttention module",
    cases=(
        Case(
            "q_proj, k_proj, v_proj, out_proj are nn.Linear(E, E); 4E^2 + 4E parameters",
            1,
            _mha_inputs(2, 5, 5, 12, 3, 0),
            calls.mha_layout,
            _ref_layout,
            _diagnose_layout,
        ),
        Case(
            "self-attention: forward(x) with E=12, H=3",
            3,
            _mha_inputs(2, 5, 5, 12, 3, 1, self_attention=True),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            visualize=_heat,
        ),
        Case(
            "cross-attention: T=4 queries, S=6 keys, key != value",
            2,
            _mha_inputs(2, 4, 6, 12, 3, 2),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            visualize=_heat,
        ),
        Case(
            "forward(query, key): value left out defaults to key",
            1,
            _mha_inputs(2, 4, 6, 12, 3, 9, value_is_key=True),
            calls.mha_forward_key_only,
            _ref_mha,
            _diagnose_mha,
        ),
        Case(
            "causal mask (T, T)",
            1,
            _mha_inputs(2, 5, 5, 12, 3, 3, "causal", self_attention=True),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            visualize=_heat,
        ),
        Case(
            "padding mask (B, 1, 1, S)",
            1,
            _mha_inputs(3, 4, 6, 12, 3, 4, "padding"),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            visualize=_heat,
        ),
        Case(
            "one head (H = 1)",
            1,
            _mha_inputs(2, 3, 5, 8, 1, 5),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            hidden=True,
        ),
        Case(
            "E = 8, H = 4 (D = 2) in float64",
            1,
            _mha_inputs(2, 6, 3, 8, 4, 6, dtype=np.float64),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha_dtype,
            hidden=True,
        ),
        Case(
            "B = 1, T = 1", 1, _mha_inputs(1, 1, 4, 12, 2, 7), calls.mha_forward, _ref_mha, _diagnose_mha, hidden=True
        ),
        Case(
            "E = 16, H = 8 with a padding mask",
            1,
            _mha_inputs(2, 3, 5, 16, 8, 8, "padding"),
            calls.mha_forward,
            _ref_mha,
            _diagnose_mha,
            hidden=True,
        ),
    ),
    forbidden=(
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "mha_course.MultiHeadAttention",
        "mha_course.core.mha.MultiHeadAttention",
    ),
)

ASSIGNMENT = Assignment(
    key="a05_multi_head",
    version=1,
    title="Assignment 05: multi-head attention",
    notebook="a05_multi_head.ipynb",
    exercises=(SPLIT, MERGE, MHA),
    provided=("mha_course.core.attention",),  # scaled_dot_product_attention from assignment 03
)
