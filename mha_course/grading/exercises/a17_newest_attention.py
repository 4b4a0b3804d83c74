"""Assignment 17 (chapter 18): four pieces of the attention in 2025's open models.

    gated_attention(q, k, v, gate_logits, mask) -> (B, H, T, Dv): softmax(q k^T / sqrt(D)) v, then times
                                                   sigmoid(gate_logits), elementwise (Qwen3-Next's output gate)
    delta_rule_step(state, k, v, beta, g)       -> (B, H, Dk, Dv): S' = a S + beta k (v - k^T a S)^T, a = exp(g)
                                                   (one token of Gated DeltaNet, the library's state layout)
    top_k_mask(scores, k)                       -> (B, T, S) bool: each query's k best visible keys
                                                   (DeepSeek Sparse Attention's selection)
    chunked_mask(T, chunk_size)                 -> (T, T) bool: j <= i and j // C == i // C (Llama 4)

Graded against the library: core attention times the sigmoid (as ``GatedMultiHeadAttention``),
``gated_delta_rule_recurrent``, ``causal_top_k`` with ``selection_mask``, ``chunked_causal_mask``.
The cases catch the usual slips: the gate on the scores before the softmax, on the values or without
its sigmoid; the delta rule's sign, a missing or misplaced decay, a missing beta; the top k taken
over the future, the future removed after choosing, future keys kept when k exceeds what a query
sees; chunk borders one position off, a sliding window for a chunk, the diagonal left out.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a17_newest_attention as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._delta_twins import WRONG_STEPS, run_steps

# --- 1. the output gate ----------------------------------------------------------------------------


def _gate_inputs(*, B, H, T, S, D, Dv, seed, headwise=False, causal=False):
    def make():
        rng = case_inputs.rng(seed)
        mask = np.tril(np.ones((T, S), dtype=bool), S - T) if causal else None
        return {
            "q": rng.standard_normal((B, H, T, D)),
            "k": rng.standard_normal((B, H, S, D)),
            "v": rng.standard_normal((B, H, S, Dv)),
            "gate_logits": 2.0 * rng.standard_normal((B, H, T, 1 if headwise else Dv)),
            "mask": mask,
        }

    return make


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _attend(q, k, v, mask, score_factor=1.0):
    """softmax(q k^T / sqrt(D) * score_factor, masked) v in NumPy, float64 (the hints' wrong computations)."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]) * score_factor  # (B, H, T, S)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v  # (B, H, T, Dv)


def _reference_gate(inputs):
    import torch

    from mha_course.core.attention import scaled_dot_product_attention

    q, k, v, gate = (torch.from_numpy(inputs[n]) for n in ("q", "k", "v", "gate_logits"))
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"])
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, Dv)
    return (heads * torch.sigmoid(gate)).numpy()  # GatedMultiHeadAttention.gate_head_outputs, its gate given


def _diagnose_gate(got, expected, inputs):
    q, k, v, g, mask = (inputs[n] for n in ("q", "k", "v", "gate_logits", "mask"))
    gate = _sigmoid(g)
    heads = _attend(q, k, v, mask)
    alternatives = [
        (
            lambda: _attend(q, k, v, mask, score_factor=gate),
            "you gated the scores before the softmax: the gate scales each head's output after the "
            "attention, so the attention weights stay as the softmax made them",
        ),
        (
            lambda: _attend(q * gate, k, v, mask),
            "you gated the queries, which changes the scores: the gate scales each head's output after the attention",
        ),
        (
            lambda: _attend(q, k, v * gate, mask),
            "you gated the values before the weighted sum: the gate belongs to the query's position, "
            "so it scales the output row of each query after the sum over keys",
        ),
        (lambda: heads * g, "you used the gate logits as they are: the gate is their sigmoid, between 0 and 1"),
        (lambda: heads * (1.0 - gate), "you used one minus the sigmoid: the gate is the sigmoid of the logits itself"),
        (lambda: heads, "the heads are not gated: multiply them by the sigmoid of the gate logits"),
    ]
    if mask is not None:
        alternatives.append(
            (lambda: _attend(q, k, v, None) * gate, "the mask was ignored: block the keys it marks False")
        )
    return hints.compare(got, expected, "gated heads", "[B, H, T, Dv]", alternatives=alternatives)


def _gate_case(name, points, *, hidden=False, **sizes):
    """A gated_attention case; sizes: _gate_inputs' keywords."""
    return Case(name, points, _gate_inputs(**sizes), calls.gated_attention, _reference_gate, _diagnose_gate, hidden)


GATE = Exercise(
    key="gated_attention",
    target="gated_attention",
    title="The output gate",
    cases=(
        _gate_case("one gate per feature, B=2, H=3, T=S=6", 2, B=2, H=3, T=6, S=6, D=4, Dv=4, seed=0),
        _gate_case(
            "one gate per head, a causal mask", 1, B=1, H=2, T=5, S=5, D=4, Dv=3, seed=1, headwise=True, causal=True
        ),
        _gate_case("cross-attention, T=3 queries, S=7 keys", 1, B=2, H=2, T=3, S=7, D=4, Dv=5, seed=2),
        _gate_case("causal, per feature, hidden", 1, B=1, H=4, T=9, S=9, D=8, Dv=8, seed=3, causal=True, hidden=True),
    ),
    forbidden=(
        "mha_course.inference.gated_attention.GatedMultiHeadAttention",
        "mha_course.inference.gated_attention.GatedMultiHeadAttention.gate_head_outputs",
    ),
)

# --- 2. one step of the gated delta rule --------------------------------------------------------------


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _step_inputs(*, B, H, Dk, Dv, seed, decay=True, beta_one=False):
    def make():
        rng = case_inputs.rng(seed)
        return {
            "state": rng.standard_normal((B, H, Dk, Dv)),
            "k": _unit(rng.standard_normal((B, H, Dk))),  # L2-normalised, as Gated DeltaNet's keys
            "v": rng.standard_normal((B, H, Dv)),
            "beta": np.ones((B, H)) if beta_one else rng.uniform(0.2, 0.9, (B, H)),
            "g": rng.uniform(-1.0, -0.1, (B, H)) if decay else np.zeros((B, H)),
        }

    return make


def _steps_inputs(*, B, H, T, Dk, Dv, seed):
    def make():
        rng = case_inputs.rng(seed)
        return {
            "k": _unit(rng.standard_normal((B, H, T, Dk))),
            "v": rng.standard_normal((B, H, T, Dv)),
            "beta": rng.uniform(0.2, 0.9, (B, H, T)),
            "g": rng.uniform(-1.0, -0.1, (B, H, T)),
        }

    return make


def _reference_step(inputs):
    import torch

    from mha_course.models.delta_rule import gated_delta_rule_recurrent

    state, k, v, beta, g = (torch.from_numpy(inputs[n]) for n in ("state", "k", "v", "beta", "g"))
    _, new_state = gated_delta_rule_recurrent(
        torch.zeros_like(k)[:, :, None],
        k[:, :, None],
        v[:, :, None],
        beta[..., None],
        g[..., None],
        initial_state=state,
    )  # one token, T = 1
    return new_state.numpy()


def _diagnose_step(got, expected, inputs):
    S, k, v, b, g = (inputs[n] for n in ("state", "k", "v", "beta", "g"))
    alternatives = [(lambda step=step: step(S, k, v, b, g), hint) for step, hint in WRONG_STEPS]
    return hints.compare(got, expected, "new state", "[B, H, Dk, Dv]", alternatives=alternatives)


def _reference_steps(inputs):
    import torch

    from mha_course.models.delta_rule import gated_delta_rule_recurrent

    k, v, beta, g = (torch.from_numpy(inputs[n]) for n in ("k", "v", "beta", "g"))
    return gated_delta_rule_recurrent(torch.zeros_like(k), k, v, beta, g)[1].numpy()


def _diagnose_steps(got, expected, inputs):
    alternatives = [(lambda step=step: run_steps(step, inputs), hint) for step, hint in WRONG_STEPS]
    hint = hints.compare(got, expected, "final state", "[B, H, Dk, Dv]", alternatives=alternatives)
    return None if hint is None else hint + " (your step applied to each token in turn, from an empty state)"


def _step_case(name, points, *, hidden=False, **sizes):
    """A delta_rule_step case on one token; sizes: _step_inputs' keywords."""
    return Case(name, points, _step_inputs(**sizes), calls.delta_rule_step, _reference_step, _diagnose_step, hidden)


DELTA = Exercise(
    key="delta_rule_step",
    target="delta_rule_step",
    title="One step of the gated delta rule",
    cases=(
        _step_case("one token, B=2, H=2, Dk=4, Dv=3", 2, B=2, H=2, Dk=4, Dv=3, seed=0),
        _step_case(
            "no decay and beta = 1: the write replaces what k recalled",
            1,
            B=1,
            H=2,
            Dk=5,
            Dv=2,
            seed=1,
            decay=False,
            beta_one=True,
        ),
        Case(
            "8 tokens from an empty state, against the recurrent form",
            1,
            _steps_inputs(B=1, H=2, T=8, Dk=4, Dv=4, seed=2),
            calls.delta_rule_steps,
            _reference_steps,
            _diagnose_steps,
        ),
        _step_case("one token, Dk=8, Dv=6, hidden", 1, B=2, H=3, Dk=8, Dv=6, seed=3, hidden=True),
    ),
    forbidden=(
        "mha_course.models.delta_rule.gated_delta_rule_recurrent",
        "mha_course.models.delta_rule.gated_delta_rule_chunked",
    ),
)

# --- 3. causal top-k selection ------------------------------------------------------------------------


def _index_scores(*, B, T, S, k, seed, recency=False):
    def make():
        rng = case_inputs.rng(seed)
        if recency:  # later keys score higher (a recency bias): the future outscores everything visible
            scores = rng.uniform(0.0, 1.0, (B, T, S)) + np.arange(S)
        else:
            scores = rng.standard_normal((B, T, S))
        return {"scores": scores, "k": k}

    return make


def _visible(T, S, diagonal=None):
    """(T, S) bool: query i (at position i + S - T) sees key j <= its position (shifted by diagonal - (S - T))."""
    return np.tril(np.ones((T, S), dtype=bool), S - T if diagonal is None else diagonal)


def _top(scores, k, visible=None, largest=True):
    """The (B, T, S) bool selection of the top min(k, S) of scores, the invisible ones blocked first."""
    chosen = scores if visible is None else np.where(visible, scores, -np.inf)
    K = min(k, scores.shape[-1])
    order = np.argsort(-chosen if largest else chosen, axis=-1, kind="stable")  # blocked keys: first if not largest
    out = np.zeros(scores.shape, dtype=bool)
    np.put_along_axis(out, order[..., :K], True, axis=-1)
    return out


def _reference_top_k(inputs):
    import torch

    from mha_course.inference.lightning_indexer import causal_top_k, selection_mask

    scores = torch.from_numpy(inputs["scores"])
    return selection_mask(*causal_top_k(scores, int(inputs["k"])), scores.shape[-1]).numpy()


def _diagnose_top_k(got, expected, inputs):
    scores, k = inputs["scores"], int(inputs["k"])
    _, T, S = scores.shape
    visible = _visible(T, S)
    arr, hint = hints.as_array(got, "the selection")
    if hint:
        return hint
    if arr.shape == expected.shape and arr.dtype == np.bool_ and not np.array_equal(arr, expected):
        future = arr & ~visible
        if future.any() and np.array_equal(arr & visible, expected):
            return (
                f"the selection chose future keys where a query sees fewer than k = {k} keys: when k is "
                "larger than what a query sees, keep every visible key and no future one"
            )
    alternatives = [
        (
            lambda: _top(scores, k),
            "the selection chose future keys: block every key after the query's own position "
            "before taking the top k, whatever its score",
        ),
        (
            lambda: _top(scores, k) & visible,
            "you took the top k over all keys and removed the future ones afterwards, so some queries keep "
            "fewer than k: block the future first, then take the top k of the visible keys",
        ),
        (lambda: _top(scores, k, visible, largest=False) & visible, "you kept the lowest scores: keep the k highest"),
        (
            lambda: _top(scores, k, _visible(T, S, S - T - 1)) & _visible(T, S, S - T - 1),
            "a query may choose its own position: the key at the query's position is visible",
        ),
    ]
    if S > T:
        alternatives.append(
            (
                lambda: _top(scores, k, _visible(T, S, 0)) & _visible(T, S, 0),
                "the T queries are the last T of the S positions: query i sits at position i + S - T and "
                "sees every key up to it",
            )
        )
    return hints.compare(arr, expected, "selection", "[B, T, S]", alternatives=alternatives)


def _top_k_case(name, points, *, hidden=False, **sizes):
    """A top_k_mask case; sizes: _index_scores' keywords."""
    return Case(name, points, _index_scores(**sizes), calls.top_k_mask, _reference_top_k, _diagnose_top_k, hidden)


TOP_K = Exercise(
    key="top_k_mask",
    target="top_k_mask",
    title="Causal top-k selection",
    cases=(
        _top_k_case("k = 3 of T = S = 8, B = 2", 2, B=2, T=8, S=8, k=3, seed=0),
        _top_k_case(
            "decoding: 3 queries, the last of 10 positions, k = 4, later keys score higher",
            1,
            B=1,
            T=3,
            S=10,
            k=4,
            seed=1,
            recency=True,
        ),
        _top_k_case("k = 6, more than the 5 keys", 1, B=2, T=5, S=5, k=6, seed=2),
        _top_k_case("k = 5 of T = S = 12, hidden", 1, B=1, T=12, S=12, k=5, seed=3, hidden=True),
    ),
    forbidden=(
        "mha_course.inference.lightning_indexer.causal_top_k",
        "mha_course.inference.lightning_indexer.selection_mask",
    ),
)

# --- 4. Llama 4's chunked causal mask -----------------------------------------------------------------


def _chunk_sizes(*, T, chunk_size, seed, longer=False):
    def make():
        if not case_inputs.salting():
            return {"T": T, "chunk_size": chunk_size}
        rng = case_inputs.rng(seed)
        if chunk_size == 1:  # one token per chunk: another length
            return {"T": int(rng.integers(3, 9)), "chunk_size": 1}
        if longer:  # a chunk longer than the sequence: plain causal
            n = int(rng.integers(3, 8))
            return {"T": n, "chunk_size": n + int(rng.integers(1, 4))}
        C = int(rng.choice((3, 4, 5, 6)))  # at least two full chunks and part of a third
        return {"T": int(rng.integers(2 * C + 1, 3 * C + 1)), "chunk_size": C}

    return make


def _reference_chunked(inputs):
    from mha_course.inference.chunked_attention import chunked_causal_mask

    return chunked_causal_mask(int(inputs["T"]), int(inputs["chunk_size"])).numpy()


def _diagnose_chunked(got, expected, inputs):
    T, C = int(inputs["T"]), int(inputs["chunk_size"])
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    alternatives = [
        (
            lambda: (j <= i) & ((j + 1) // C == (i + 1) // C),
            f"the chunk borders are one position off: chunk c holds positions c C up to c C + C - 1, so "
            f"position {C} (a multiple of C = {C}) starts a new chunk and sees only itself",
        ),
        (lambda: (j < i) & (j // C == i // C), "a query must see itself: the diagonal belongs to the mask"),
        (
            lambda: (j <= i) & (j > i - i % C),
            "the first token of each chunk is left out: a query's chunk starts at the largest multiple of C "
            "not above it, and that key is visible",
        ),
        (
            lambda: j // C == i // C,
            "a query sees the later tokens of its chunk too: keep only the keys at or before the query",
        ),
        (
            lambda: (j <= i) & (i - j < C),
            "that is a sliding window of C tokens: a chunk starts again from nothing at every multiple of C",
        ),
        (
            lambda: (j <= i) & (i - j <= C),
            "that is a sliding window of C + 1 tokens: a chunk starts again from nothing at every multiple of C",
        ),
        (lambda: ~expected, "the mask is inverted: True means the query may attend to the key"),
    ]
    return hints.compare(got, expected, "mask", "[T, T]", alternatives=alternatives)


_chunk_heat = hints.single_heatmaps("chunked mask", value_name="may attend", axis_names=("query i", "key j"))


def _chunk_case(name, points, *, hidden=False, heatmap=False, **sizes):
    """A chunked_mask case; sizes: _chunk_sizes' keywords."""
    visualize = _chunk_heat if heatmap else None
    return Case(
        name,
        points,
        _chunk_sizes(**sizes),
        calls.chunked_mask,
        _reference_chunked,
        _diagnose_chunked,
        hidden,
        visualize,
    )


CHUNKED = Exercise(
    key="chunked_mask",
    target="chunked_mask",
    title="Llama 4's chunked causal mask",
    cases=(
        _chunk_case("10 tokens in chunks of 4", 2, T=10, chunk_size=4, seed=0, heatmap=True),
        _chunk_case("chunks of 1: each token sees itself", 1, T=5, chunk_size=1, seed=1),
        _chunk_case("a chunk longer than the sequence: plain causal", 1, T=6, chunk_size=8, seed=2, longer=True),
        _chunk_case("20 tokens in chunks of 6, hidden", 1, T=20, chunk_size=6, seed=3, hidden=True),
    ),
    forbidden=(
        "mha_course.inference.chunked_attention.chunked_causal_mask",
        "mha_course.inference.chunked_attention.chunked_visible_counts",
    ),
)

ASSIGNMENT = Assignment(
    key="a17_newest_attention",
    version=1,
    title="Assignment 17: an output gate, the gated delta rule, top-k selection and chunked masks",
    notebook="a17_newest_attention.ipynb",
    exercises=(GATE, DELTA, TOP_K, CHUNKED),
)
