"""Assignment 06 (chapter 05): debug a published PyTorch MultiHeadAttention, graded by behaviour.

The repaired class keeps the published interface and its "E*H" layout, which is a design choice,
not a bug: every head works in the full model dimension D = E.

    query, key, value = nn.Linear(E, E*H)   (weights (H*E, E)); combine = nn.Linear(E*H, E)
    forward(queries (B, T, E), keys (B, S, E), values (B, S, E), mask=None) -> output (B, T, E)

    Q = query(queries) viewed (B, T, H, E) and transposed to (B, H, T, E)  -- head h uses output
        features h*E .. (h+1)*E - 1; the same for K and V with S positions
    A = softmax(Q K^T / sqrt(E) + mask) over the keys       (B, H, T, S); scale 1/sqrt(E) since D = E
    output = combine(concat_h(A V))                         heads transposed back to (B, T, H*E)

``mask`` follows the course convention (bool True = may attend, float added), broadcastable to
(B, H, T, S): a (T, S) causal mask or a (B, 1, 1, S) padding mask. The grader copies its own
weights into the four layers and compares the output with its own computation of the above.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a06_debug_mha as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._common import MHA_SHORTCUTS, np_attention

_LAYERS = calls.LAYERS  # one home: the call module


def _inputs(*, B, T, S, E, H, seed, mask_kind=None, dtype=np.float32, same_kv=False):
    def make():
        rng = case_inputs.rng(seed)
        inputs = {"E": E, "H": H}
        for name in _LAYERS:
            fan_in = E * H if name == "combine" else E
            shape = (E, E * H) if name == "combine" else (E * H, E)
            inputs[name + ".weight"] = (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(dtype)
            inputs[name + ".bias"] = (rng.standard_normal(shape[0]) * 0.5).astype(dtype)
        inputs["queries"] = rng.standard_normal((B, T, E)).astype(dtype)
        inputs["keys"] = rng.standard_normal((B, S, E)).astype(dtype)
        inputs["values"] = inputs["keys"] if same_kv else rng.standard_normal((B, S, E)).astype(dtype)
        if mask_kind is None:
            inputs["mask"] = None
        elif mask_kind == "causal":
            inputs["mask"] = np.arange(S)[None, :] <= np.arange(T)[:, None]  # (T, S)
        elif mask_kind == "padding":
            lengths = rng.integers(1, S + 1, size=B)
            lengths[0] = max(1, S - 2)
            inputs["mask"] = (np.arange(S)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
        elif mask_kind == "all_true":
            inputs["mask"] = np.ones((T, S), dtype=bool)
        return inputs

    return make


def _ref_layout(inputs):
    E, H = inputs["E"], inputs["H"]
    return np.asarray([[E * H, E], [E * H, E], [E * H, E], [E, E * H]], dtype=np.int64)


def _diagnose_layout(got, expected, inputs):
    return hints.compare(
        got,
        expected,
        "layer weight shapes [query, key, value, combine]",
        alternatives=[
            (
                lambda: np.asarray([[inputs["E"], inputs["E"]]] * 4),
                "you changed the layers to nn.Linear(E, E): keep the "
                "printed E*H layout (query/key/value: nn.Linear(E, E*H), combine: nn.Linear(E*H, E)) and fix forward",
            ),
        ],
    )


def expected_output(
    inputs, scale=None, split="ok", merge="ok", transpose_kv=True, mask_mode="add", value_from_keys=False
):
    """The grader's computation of the repaired module (float64), with knobs for wrong repairs."""
    E, H = inputs["E"], inputs["H"]

    def lin(name, x):
        return x.astype(np.float64) @ inputs[name + ".weight"].astype(np.float64).T + inputs[name + ".bias"]

    def heads(x, transpose=True):
        B, L, _ = x.shape
        if split == "no_transpose" or not transpose:
            return x.reshape(B, H, L, E)  # the published mistake for keys/values
        return x.reshape(B, L, H, E).transpose(0, 2, 1, 3)  # (B, H, L, E)

    q = heads(lin("query", inputs["queries"]))
    k = heads(lin("key", inputs["keys"]), transpose_kv)
    v = heads(lin("value", inputs["keys"] if value_from_keys else inputs["values"]), transpose_kv)
    heads_out, _ = np_attention(
        q, k, v, 1.0 / math.sqrt(E) if scale is None else scale, inputs["mask"], mask_mode=mask_mode
    )
    B, _, T, _ = heads_out.shape
    if merge == "no_transpose":
        merged = heads_out.reshape(B, T, H * E)
    else:
        merged = heads_out.transpose(0, 2, 1, 3).reshape(B, T, H * E)  # (B, T, H*E)
    return lin("combine", merged)


def _reference(inputs):
    import torch

    from mha_course.core.attention import scaled_dot_product_attention
    from mha_course.core.heads import merge_heads, split_heads

    E, H = inputs["E"], inputs["H"]
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}

    def lin(name, x):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    q = split_heads(lin("query", t["queries"]), H)  # (B, H, T, E): split_heads with D = E
    k = split_heads(lin("key", t["keys"]), H)  # (B, H, S, E)
    v = split_heads(lin("value", t["values"]), H)  # (B, H, S, E)
    out, _ = scaled_dot_product_attention(q, k, v, mask=t.get("mask"), scale=1.0 / math.sqrt(E))
    return lin("combine", merge_heads(out)).numpy()  # (B, T, E)


def _diagnose(got, expected, inputs):
    E, H = inputs["E"], inputs["H"]
    alts = [
        (
            lambda: expected_output(inputs, scale=1.0 / math.sqrt(E // H) if E % H == 0 else None),
            "you changed the scale to 1/sqrt(E/H); in this layout every head has D = E features, so 1/sqrt(E) was right",
        ),
        (
            lambda: expected_output(inputs, scale=1.0),
            "the scores are not scaled: divide by sqrt(E) (the head size here)",
        ),
        (
            lambda: expected_output(inputs, split="no_transpose"),
            "heads split straight into (B, H, T, E) with no transpose: "
            "the head axis must move in front of T, for queries, keys AND values",
        ),
        (
            lambda: expected_output(inputs, transpose_kv=False),
            "keys and values are not split into heads like the queries: look at how k and v are reshaped",
        ),
        (
            lambda: expected_output(inputs, merge="no_transpose"),
            "heads merged without transposing back: the head axis must be moved next to the features before the merge",
        ),
        (lambda: expected_output(inputs, value_from_keys=True), "the values are computed from the keys input"),
    ]
    if inputs["mask"] is not None:
        alts += [
            (lambda: expected_output(inputs, mask_mode="ignore"), "the mask is ignored"),
            (lambda: expected_output(inputs, mask_mode="invert"), "the mask is inverted: True means MAY attend"),
            (
                lambda: expected_output(inputs, mask_mode="after"),
                "the mask is applied after softmax; block the scores with -inf before softmax",
            ),
        ]
    hint = hints.compare(got, expected, "output", "[B, T, E]", alternatives=alts)
    if hint and inputs["mask"] is not None and "NaN" in hint:
        hint = (
            "output: NaN, so some query has every key blocked: is the mask inverted? (True means MAY attend; "
            "look at which entries the mask fill blocks)"
        )
    return hint


def _diagnose_dtype(got, expected, inputs):
    return _diagnose(got, expected, inputs) or hints.compare(got, expected, "output", check_dtype=True)


def _forward_case(name, points, *, B, T, S=None, E, H, seed, mask=None, dtype=np.float32, hidden=False):
    """A forward case: queries (B, T, E), keys and values (B, S, E), H heads.

    S left out: self-attention's sizes, S = T with keys and values one array. mask: None, "causal", "padding"
    or "all_true". A dtype other than float32 (the module's own) is the case's point, so the output's dtype is
    judged too.
    """
    sizes = dict(B=B, T=T, S=T if S is None else S, E=E, H=H, seed=seed, mask_kind=mask, same_kv=S is None)
    inputs = _inputs(**sizes, dtype=dtype)
    judge = _diagnose if dtype == np.float32 else _diagnose_dtype
    return Case(name, points, inputs, calls.mha_forward, _reference, judge, hidden)


FIXED_MHA = Exercise(
    key="debug_mha",
    target="MultiHeadAttention",
    title="The published MultiHeadAttention, repaired",
    cases=(
        Case(
            "keeps the published layers: query/key/value (E*H, E), combine (E, E*H)",
            1,
            _inputs(B=2, T=4, S=4, E=8, H=2, seed=0),
            calls.mha_layout,
            _ref_layout,
            _diagnose_layout,
        ),
        _forward_case("self-attention (queries = keys = values): output (B, T, E)", 3, B=2, T=5, E=8, H=2, seed=1),
        _forward_case("cross-attention: T=3 queries, S=6 keys, keys != values", 2, B=2, T=3, S=6, E=8, H=2, seed=2),
        _forward_case("causal mask (T, T)", 1, B=2, T=5, S=5, E=8, H=2, seed=3, mask="causal"),
        _forward_case("padding mask (B, 1, 1, S)", 1, B=3, T=4, S=6, E=8, H=2, seed=4, mask="padding"),
        _forward_case("three heads, E = 6, float64", 1, B=2, T=4, S=5, E=6, H=3, seed=5, dtype=np.float64, hidden=True),
        _forward_case(
            "a single example and a single query (B = 1, T = 1)", 1, B=1, T=1, S=5, E=8, H=2, seed=6, hidden=True
        ),
        _forward_case(
            "all-True mask equals no mask; four heads", 1, B=2, T=4, S=4, E=4, H=4, seed=7, mask="all_true", hidden=True
        ),
        _forward_case("one head (H = 1)", 1, B=2, T=3, S=4, E=8, H=1, seed=8, hidden=True),
    ),
    forbidden=MHA_SHORTCUTS,
)

ASSIGNMENT = Assignment(
    key="a06_debug_mha",
    version=1,
    title="Assignment 06: debug a multi-head attention module",
    notebook="a06_debug_mha.ipynb",
    exercises=(FIXED_MHA,),
)
