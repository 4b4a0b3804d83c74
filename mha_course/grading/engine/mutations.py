"""Generic mutations: classic attention bugs, each made from a case's own reference.

A mutation turns a case's reference (inputs -> the expected output) into a buggy implementation of
the exercise's target, as the grader sees it (the output a submission with that bug would send
back): most rewrite the inputs before the reference runs (q scaled by sqrt(D) is attention without
the 1/sqrt(D); float64 inputs cast to float32 and the output cast back is a float32 computation);
attention's softmax over the queries and a softmax shifted by the global max are computed here
(no rewrite of the inputs reaches them).
:mod:`.fresh_draws` judges every applicable mutation on a fresh draw of a case's inputs, with the
case's own judge, and keeps the draw only if each verdict is the one on the published inputs.

    got = mutation.output(case.reference, inputs, expected)   # None: not applicable to these inputs
    verdict = judge(case, got, inputs, expected=expected) is None

Grader side (and the learner's own kernel); never in the submission process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Inputs = dict[str, Any]
Reference = Callable[[Inputs], Any]
# (reference, inputs, expected) -> the buggy output, or None when the inputs lack what the bug changes
Output = Callable[[Reference, Inputs, Any], Any]


@dataclass(frozen=True)
class Mutation:
    """One generic bug: ``output`` makes it from a case's reference, for the cases of ``exercises`` (keys)."""

    id: str
    what: str
    exercises: frozenset[str]
    output: Output


# --- the two kinds of transformation ---------------------------------------------------------------


def rewritten(rewrite: Callable[[Inputs], Inputs | None], after: Callable[[Any], Any] | None = None) -> Output:
    """The reference run on ``rewrite(inputs)`` (then ``after`` applied to its output)."""

    def output(reference: Reference, inputs: Inputs, expected: Any) -> Any:
        changed = rewrite(inputs)
        if changed is None:
            return None
        got = reference(changed)
        return got if after is None else after(got)

    return output


def _softmax(x: np.ndarray, axis: int, global_max: bool = False) -> np.ndarray:
    """float64 softmax along ``axis``; ``global_max`` shifts by the whole array's max, not each row's.

    A row with nothing but -inf (or, with the global max, a row far below it) sums to 0: it gives zeros,
    the course's convention for an empty row, so only the slip itself differs from the reference.
    """
    x = np.asarray(x, dtype=np.float64)
    top = np.max(x) if global_max else np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    exps = np.exp(x - top)
    total = np.sum(exps, axis=axis, keepdims=True)
    return exps / np.where(total == 0, 1.0, total)


def _global_max_softmax(reference: Reference, inputs: Inputs, expected: Any) -> Any:
    """A softmax case's output (x, axis -> array, x's dtype) shifted by the global maximum."""
    x = inputs.get("x")
    if not (isinstance(expected, np.ndarray) and isinstance(x, np.ndarray) and "axis" in inputs):
        return None
    return _softmax(x, int(inputs["axis"]), global_max=True).astype(x.dtype)


def _attention_over_queries(reference: Reference, inputs: Inputs, expected: Any) -> Any:
    """An attention case's (out, weights) from q, k, v, mask, scale, with the softmax over the queries (axis -2)."""
    if not _attention_pair(inputs, expected):
        return None
    q, k, v = (np.asarray(inputs[n], dtype=np.float64) for n in "qkv")
    scale = inputs.get("scale")
    scores = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    mask = inputs.get("mask")
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    weights = _softmax(scores, -2)
    out = weights @ v
    weights = np.broadcast_to(weights, (*out.shape[:-2], *weights.shape[-2:]))
    return out.astype(inputs["q"].dtype), weights.astype(inputs["q"].dtype)


def _attention_pair(inputs: Inputs, expected: Any) -> bool:
    """The case is plain attention: q, k, v (mask, scale) in, (out (..., T, Dv), weights (..., T, S)) out."""
    if not all(isinstance(inputs.get(n), np.ndarray) for n in "qkv"):
        return False
    if not (isinstance(expected, (tuple, list)) and len(expected) == 2):
        return False
    out, weights = expected
    return (
        isinstance(out, np.ndarray)
        and isinstance(weights, np.ndarray)
        and out.shape[-1] == inputs["v"].shape[-1]
        and weights.shape[-2:] == (inputs["q"].shape[-2], inputs["k"].shape[-2])
    )


# --- the rewrites ---------------------------------------------------------------------------------


def scores_scaled(factor: Callable[[int], float]) -> Callable[[Inputs], Inputs | None]:
    """The scores multiplied by ``factor(D)`` (D the head size) where the default scale 1/sqrt(D) applies.

    q (..., T, D) when the case passes q and no explicit scale; a module's query projection
    (weight and bias: q_proj with D = E / H, or a05's debug layout ``query`` with D = E) otherwise.
    """

    def rewrite(inputs: Inputs) -> Inputs | None:
        q = inputs.get("q")
        if isinstance(q, np.ndarray) and inputs.get("scale") is None:
            return {**inputs, "q": (q * factor(q.shape[-1])).astype(q.dtype)}
        for name, heads in (("q_proj", True), ("query", False)):
            if f"{name}.weight" in inputs and "E" in inputs and "H" in inputs:
                D = inputs["E"] // inputs["H"] if heads else inputs["E"]
                c = factor(D)
                return {
                    **inputs,
                    f"{name}.weight": (inputs[f"{name}.weight"] * c).astype(inputs[f"{name}.weight"].dtype),
                    f"{name}.bias": (inputs[f"{name}.bias"] * c).astype(inputs[f"{name}.bias"].dtype),
                }
        return None

    return rewrite


def _transposed_weights(inputs: Inputs) -> Inputs | None:
    """Every square ``*.weight`` matrix transposed: ``x @ W`` where nn.Linear computes ``x @ W.T``."""
    square = [
        n
        for n, w in inputs.items()
        if n.endswith(".weight") and isinstance(w, np.ndarray) and w.ndim == 2 and w.shape[0] == w.shape[1]
    ]
    if not square:
        return None
    return {**inputs, **{n: np.ascontiguousarray(inputs[n].T) for n in square}}


def _query_positions(shift: int) -> Callable[[Inputs], Inputs | None]:
    """A causal mask in absolute positions off by one: query i sees keys j <= i + shift."""

    def rewrite(inputs: Inputs) -> Inputs | None:
        if not inputs.get("causal") or "q_offset" not in inputs:
            return None
        return {**inputs, "q_offset": int(inputs["q_offset"]) + shift}

    return rewrite


def _causal_output(shift: int) -> Output:
    """A causal mask (T, S) off by one: True where j <= i + shift."""

    def output(reference: Reference, inputs: Inputs, expected: Any) -> Any:
        if not (isinstance(expected, np.ndarray) and expected.dtype == np.bool_ and expected.ndim == 2):
            return None
        T, S = expected.shape
        return np.arange(S)[None, :] <= np.arange(T)[:, None] + shift

    return output


def _float64_to_float32(inputs: Inputs) -> Inputs | None:
    """Every float64 array computed in float32."""
    changed = {
        n: a.astype(np.float32) for n, a in inputs.items() if isinstance(a, np.ndarray) and a.dtype == np.float64
    }
    return {**inputs, **changed} if changed else None


def _float32_to_float64(got: Any) -> Any:
    """...and the output cast back to float64, as a function that downcasts internally returns it."""
    if isinstance(got, np.ndarray):
        return got.astype(np.float64) if got.dtype == np.float32 else got
    if isinstance(got, (tuple, list)):
        return type(got)(_float32_to_float64(g) for g in got)
    return got


def _other_axis(inputs: Inputs) -> Inputs | None:
    """A softmax case's axis moved: -1 -> -2, any other -> -1 (a 1-D input has no other axis)."""
    x = inputs.get("x")
    if not isinstance(x, np.ndarray) or "axis" not in inputs or x.ndim < 2:
        return None
    last = int(inputs["axis"]) % x.ndim == x.ndim - 1
    return {**inputs, "axis": -2 if last else -1}


# --- the catalogue ---------------------------------------------------------------------------------

_SOFTMAX = frozenset({"softmax_np", "softmax"})
_ATTENTION = frozenset({"attention_np", "sdpa", "masked_sdpa"})
_SCORES = _ATTENTION | {
    "scaled_dot_scores_np",
    "kv_decode_step",
    "tiled_attention",
    "attention_backward",
    "ring_step",
    "multi_head_attention",
    "debug_mha",
    "cross_attention",
    "without_head",
}
_FLOAT64 = (
    _SOFTMAX
    | _ATTENTION
    | {
        "apply_rotary",
        "kv_decode_step",
        "online_softmax_update",
        "tiled_attention",
        "softmax_jacobian",
        "attention_backward",
        "merge_partial_attention",
        "ring_step",
        "to_rotate_half",
        "paged_lookup",
    }
)

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("missing_scale", "no 1/sqrt(D)", _SCORES, rewritten(scores_scaled(math.sqrt))),
    Mutation("scale_by_D", "1/D instead of 1/sqrt(D)", _SCORES, rewritten(scores_scaled(lambda D: 1 / math.sqrt(D)))),
    Mutation("softmax_axis", "softmax over the wrong axis", _SOFTMAX, rewritten(_other_axis)),
    Mutation("softmax_over_queries", "attention's softmax over the queries", _ATTENTION, _attention_over_queries),
    # a02 only: a03 and a04 provide the course's softmax, so a shift by the global max cannot happen there
    Mutation(
        "softmax_global_max", "softmax shifted by the whole array's max, not each row's", _SOFTMAX, _global_max_softmax
    ),
    Mutation(
        "transposed_weights",
        "x @ W instead of x @ W.T",
        frozenset({"multi_head_attention", "debug_mha", "cross_attention", "without_head"}),
        rewritten(_transposed_weights),
    ),
    Mutation("causal_diagonal_excluded", "causal mask j < i", frozenset({"causal_mask"}), _causal_output(-1)),
    Mutation("causal_one_future_key", "causal mask j <= i + 1", frozenset({"causal_mask"}), _causal_output(1)),
    Mutation(
        "causal_positions_diagonal_excluded",
        "causal mask j < i in absolute positions",
        frozenset({"ring_step"}),
        rewritten(_query_positions(-1)),
    ),
    Mutation(
        "causal_positions_one_future_key",
        "causal mask j <= i + 1 in absolute positions",
        frozenset({"ring_step"}),
        rewritten(_query_positions(1)),
    ),
    Mutation(
        "float32_compute",
        "float64 inputs computed in float32, cast back",
        _FLOAT64,
        rewritten(_float64_to_float32, _float32_to_float64),
    ),
)


def for_exercise(key: str) -> tuple[Mutation, ...]:
    """The mutations that apply to exercise ``key`` (a case may still find one not applicable: None)."""
    return tuple(m for m in MUTATIONS if key in m.exercises)
