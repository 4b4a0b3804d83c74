"""Assignment 11 (chapter 11): one decoding step with a key/value cache.

    kv_decode_step(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)

    q (B, H, 1, D)            the newest token's query
    k_new, v_new (B, H, 1, D) its key and value
    k_cache, v_cache (B, H, S, D), the S earlier tokens' keys and values (S may be 0)
    returns out (B, H, 1, D) = softmax(q K^T / sqrt(D)) V over all S + 1 keys, and the caches
    grown to (B, H, S + 1, D) with the new token at the END.

Run token by token from an empty cache, the outputs must equal full causal attention. The hidden
bonus case gives k/v with G < H heads (grouped-query attention: query head h uses kv head
h // (H / G)). Diagnoses name the usual mistakes: attending before appending, a top-left causal
mask on the single query, no scaling, the new token put first.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a11_kv_cache as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

_NAMES = calls.NAMES  # one home: the call module
_LEGENDS = ("[B, H, 1, D]", "[B, G, S + 1, D]", "[B, G, S + 1, D]")

# --- inputs ---------------------------------------------------------------------------------------


def _step_inputs(B, H, S, D, seed, G=None, dtype=np.float64):
    """One step: a cache of S positions and one new token."""
    G = H if G is None else G

    def make():
        rng = case_inputs.rng(seed)
        return {
            "q": rng.standard_normal((B, H, 1, D)).astype(dtype),
            "k_new": rng.standard_normal((B, G, 1, D)).astype(dtype),
            "v_new": rng.standard_normal((B, G, 1, D)).astype(dtype),
            "k_cache": rng.standard_normal((B, G, S, D)).astype(dtype),
            "v_cache": rng.standard_normal((B, G, S, D)).astype(dtype),
        }

    return make


def _sequence_inputs(B, H, N, D, seed, G=None, dtype=np.float64):
    """N steps from an empty cache: q (B, H, N, D), k and v (B, G, N, D)."""
    G = H if G is None else G

    def make():
        rng = case_inputs.rng(seed)
        return {
            "q": rng.standard_normal((B, H, N, D)).astype(dtype),
            "k": rng.standard_normal((B, G, N, D)).astype(dtype),
            "v": rng.standard_normal((B, G, N, D)).astype(dtype),
        }

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _attend(q, k, v, mask=None, scale=None):
    """float64 attention of q (B, H, T, D) over k, v (B, G, S, D), G dividing H; mask (T, S) or None."""
    H, G = q.shape[1], k.shape[1]
    k, v = np.repeat(k, H // G, axis=1), np.repeat(v, H // G, axis=1)  # (B, H, S, D)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale  # (B, H, T, S)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    w = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(axis=-1, keepdims=True)
    return (w / np.where(total > 0, total, 1.0)) @ v.astype(np.float64)  # (B, H, T, D); empty rows give 0


def _ref_step(inputs):
    import torch

    from mha_course.inference.kv_cache import KVCache, decode_step

    q, k_new, v_new, k_cache, v_cache = (
        torch.from_numpy(inputs[n]) for n in ("q", "k_new", "v_new", "k_cache", "v_cache")
    )
    B, G, S, D = k_cache.shape
    cache = KVCache(B, G, D, dtype=k_cache.dtype)
    if S:
        cache.append(k_cache, v_cache)
    out = decode_step(q, k_new, v_new, cache)
    dtype = inputs["q"].dtype
    return out.numpy().astype(dtype), cache.keys.numpy().astype(dtype), cache.values.numpy().astype(dtype)


def _ref_sequence(inputs):
    import torch

    from mha_course.core.masks import causal_mask
    from mha_course.inference.variants import grouped_query_attention

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    out, _ = grouped_query_attention(q, k, v, mask=causal_mask(q.shape[2]))
    return out.numpy(), inputs["k"], inputs["v"]


def _step_alternatives(inputs):
    """Wrong-but-plausible outputs of one step, with the hint for each."""
    q, k_new, v_new, kc, vc = (inputs[n] for n in ("q", "k_new", "v_new", "k_cache", "v_cache"))
    S, D = kc.shape[2], q.shape[-1]
    k_all, v_all = np.concatenate([kc, k_new], axis=2), np.concatenate([vc, v_new], axis=2)
    alts = [
        (lambda: _attend(q, k_all, v_all, scale=1.0), "the scores are not scaled: multiply q k^T by 1/sqrt(D)"),
        (lambda: _attend(q, k_all, v_all, scale=1.0 / D), "wrong scale: 1/D; use 1/sqrt(D)"),
        (
            lambda: _attend(q, k_new, v_new),
            "the new query attended only to its own key: it must see every "
            "cached key too (concatenate the cache and the new k, v along the sequence axis)",
        ),
    ]
    old_only = (
        "the query attended to the OLD cache only: append the new k, v first, then attend (a token may "
        "attend to itself)"
    )
    if not S:
        alts.append((lambda: np.zeros_like(q), old_only))
    if S:
        alts += [
            (
                lambda: _attend(q, kc, vc),
                "the query attended to the OLD cache only: append the new k, v "
                "first, then attend (a token may attend to itself)",
            ),
            (
                lambda: _attend(q, k_all, v_all, mask=np.arange(S + 1)[None, :] <= 0),
                "a top-left causal mask for one query lets the newest query see key 0 only; the newest "
                "token may see every cached key: no mask is needed for one new query",
            ),
        ]
    return alts


def _compare_triple(got, expected, out_alts, k_first, v_first):
    arrays, hint = hints.unpack(got, _NAMES)
    if hint:
        return hint
    out, k_cache, v_cache = arrays
    for name, arr, exp, legend, first in (
        ("k_cache", k_cache, expected[1], _LEGENDS[1], k_first),
        ("v_cache", v_cache, expected[2], _LEGENDS[2], v_first),
    ):
        alternatives = (
            [
                (
                    first,
                    "the new token is at the start of the cache; it belongs at the end (look at the order of the concatenation)",
                )
            ]
            if first is not None
            else []
        )
        hint = hints.compare(arr, exp, name, legend, alternatives=alternatives)
        if hint:
            return hint
    return hints.compare(out, expected[0], "out", _LEGENDS[0], alternatives=out_alts)


def _cache_shapes(got, expected, inputs):
    """Only the caches' shapes: each grown by one position along the sequence axis (dim 2)."""
    arrays, hint = hints.unpack(got, _NAMES)
    if hint:
        return hint
    for name, arr, exp in zip(_NAMES[1:], arrays[1:], expected[1:], strict=True):
        if arr.shape != np.shape(exp):
            S = inputs["k_cache"].shape[2]
            return (
                f"{name} has shape {tuple(arr.shape)}, expected {tuple(np.shape(exp))}: the cache of S = {S} "
                "positions must come back with S + 1 (one new position along the sequence axis, dim 2)"
            )
    return None


def _cache_contents(got, expected, inputs):
    """Only the caches' values: the old positions kept, the new token's k and v appended at the end."""
    kc, vc = inputs["k_cache"], inputs["v_cache"]
    arrays, hint = hints.unpack(got, _NAMES)
    if hint:
        return hint
    for name, arr, exp, legend, new, old in (
        ("k_cache", arrays[1], expected[1], _LEGENDS[1], inputs["k_new"], kc),
        ("v_cache", arrays[2], expected[2], _LEGENDS[2], inputs["v_new"], vc),
    ):
        first = np.concatenate([new, old], axis=2)
        alternatives = [
            (lambda first=first: first, "the new token is at the start of the cache; append it at the END (dim 2)")
        ]
        hint = hints.compare(arr, exp, name, legend, alternatives=alternatives)
        if hint:
            return hint
    return None


def _out_only(alternatives):
    """A diagnose that judges ``out`` alone, so that a wrong cache and a wrong output lose different points."""

    def diagnose(got, expected, inputs):
        arrays, hint = hints.unpack(got, _NAMES)
        if hint:
            return hint
        return hints.compare(arrays[0], expected[0], "out", _LEGENDS[0], alternatives=alternatives(inputs))

    return diagnose


_step_out = _out_only(_step_alternatives)


def _diagnose_step(got, expected, inputs):
    kc, vc = inputs["k_cache"], inputs["v_cache"]
    k_first = np.concatenate([inputs["k_new"], kc], axis=2) if kc.shape[2] else None
    v_first = np.concatenate([inputs["v_new"], vc], axis=2) if vc.shape[2] else None
    return _compare_triple(got, expected, _step_alternatives(inputs), k_first, v_first)


def _sequence_alternatives(inputs):
    """Wrong-but-plausible stacked outputs of N steps, with the hint for each."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    N = q.shape[2]
    return [
        (
            lambda: _attend(q, k, v),
            "later tokens leak into earlier outputs (no causal structure): each step "
            "must attend only to the cache, i.e. the tokens so far",
        ),
        (
            lambda: _attend(q, k, v, mask=np.eye(N, dtype=bool)),
            "each step attended only to its own token: "
            "keep the cache returned by the previous step and attend to all of it",
        ),
        (
            lambda: _attend(q, k, v, scale=1.0, mask=np.tril(np.ones((N, N), dtype=bool))),
            "the scores are not scaled: multiply q k^T by 1/sqrt(D)",
        ),
        (
            lambda: _attend(q, k, v, mask=np.tril(np.ones((N, N), dtype=bool), k=-1)),
            "each step attended to the earlier tokens only: append the new k, v first, then attend "
            "(a token may attend to itself)",
        ),
        (
            lambda: _attend(q, k, v, mask=np.broadcast_to(np.arange(N) <= 0, (N, N))),
            "every step saw key 0 only: a top-left causal mask for one query is wrong for the newest "
            "query; no mask is needed for one new query",
        ),
    ]


def _diagnose_sequence(got, expected, inputs):
    k, v, N = inputs["k"], inputs["v"], inputs["q"].shape[2]
    out_alts = _sequence_alternatives(inputs)
    hint = _compare_triple(
        got, expected, out_alts, np.flip(k, axis=2) if N > 1 else None, np.flip(v, axis=2) if N > 1 else None
    )
    if hint and hint.startswith("out"):
        hint = hint.replace("[B, H, 1, D]", "[B, H, N, D] (all steps stacked)")
    return hint


def _sequence_out(got, expected, inputs):
    """The stacked outputs of N steps alone (the caches are judged by the one-step cases)."""
    hint = _out_only(_sequence_alternatives)(got, expected, inputs)
    return hint.replace("[B, H, 1, D]", "[B, H, N, D] (all steps stacked)") if hint else None


def _cases():
    def step(name, points, inputs, judge, hidden=False):
        # out, the caches' shapes and their contents are judged by separate cases (exact_shape=False lets each
        # look at its own part): the right output with a cache in the wrong order loses only the order's point
        part_only = judge is not _diagnose_step and judge is not _cache_contents
        return Case(
            name, points, inputs, calls.kv_decode_step, _ref_step, judge, hidden=hidden, exact_shape=not part_only
        )

    def seq(name, points, inputs, judge, hidden=False):
        part_only = judge is _sequence_out
        return Case(
            name,
            points,
            inputs,
            calls.kv_decode_sequence,
            _ref_sequence,
            judge,
            hidden=hidden,
            exact_shape=not part_only,
        )

    return (
        step("one step: out over the cache and the new token", 2, _step_inputs(1, 2, 5, 4, 0), _step_out),
        step("one step: caches grown to S + 1", 1, _step_inputs(1, 2, 5, 4, 0), _cache_shapes),
        step("one step: the new k, v at the END of the caches", 1, _step_inputs(1, 3, 4, 4, 8), _cache_contents),
        step("first step (empty cache): the token attends to itself", 1, _step_inputs(1, 2, 0, 4, 1), _step_out),
        step("one step equals the last row of causal attention (D = 16)", 1, _step_inputs(2, 3, 7, 16, 2), _step_out),
        seq(
            "8 steps from an empty cache equal full causal attention", 2, _sequence_inputs(1, 2, 8, 4, 3), _sequence_out
        ),
        seq("batch > 1, 4 heads, 6 steps", 1, _sequence_inputs(3, 4, 6, 8, 4), _sequence_out),
        seq(
            "float32 cache, 12 steps (outputs and caches)",
            1,
            _sequence_inputs(2, 2, 12, 8, 5, dtype=np.float32),
            _diagnose_sequence,
            hidden=True,
        ),
        step("one step with a long cache (S = 40)", 1, _step_inputs(2, 2, 40, 8, 6), _diagnose_step, hidden=True),
        seq(
            "bonus: grouped-query cache (H = 4 query heads, G = 2 kv heads)",
            1,
            _sequence_inputs(2, 4, 5, 4, 7, G=2),
            _diagnose_sequence,
            hidden=True,
        ),
    )


KV_DECODE_STEP = Exercise(
    key="kv_decode_step",
    target="kv_decode_step",
    title="A decoding step with a KV cache",
    cases=_cases(),
    forbidden=("mha_course.inference.kv_cache.decode_step", "mha_course.inference.kv_cache.KVCache.append"),
)

ASSIGNMENT = Assignment(
    key="a11_kv_cache",
    version=1,
    title="Assignment 11: a KV-cache decoding step",
    notebook="a11_kv_cache.ipynb",
    exercises=(KV_DECODE_STEP,),
)
