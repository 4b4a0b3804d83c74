"""Assignment 08 (chapters 07 and 08): cross-attention masks, and switching one head off by hand.

    cross_attention_mask(source_lengths, T, S) -> bool (B, 1, T, S), mask[b, 0, t, s] = s < source_lengths[b]
        (every target position may read every real source position: padding on the key axis, nothing causal)
    cross_attention(decoder_states, memory, source_lengths, attention) -> out (B, T, E), weights (B, H, T, S)
        = attention(decoder_states, memory, memory, mask=cross_attention_mask(source_lengths, T, S))
    without_head(mha, query, key, value, head) -> out (B, T, E) with head ``head`` switched off:
        Concat(head_1, ..., 0 * head_h, ..., head_H) W_O + b_O  =  out - head_h W_O^h

``without_head`` is graded against the library's own ablation (``MultiHeadAttention.head_gate``).
The learner gets a library ``MultiHeadAttention`` and must compute from its four projections:
while a ``without_head`` case runs, ``MultiHeadAttention.forward`` raises, so neither ``mha(...)``
(with ``head_gate`` set) nor a fresh copy of the module can stand in for the computation. The
tripwire cannot do this one: the module is a building block this assignment provides (importable
in the submission process), and its forward is not a torch function.
"""

from __future__ import annotations

import numpy as np

from ..calls import a08_cross_attention as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._common import np_mha, projection_weights
from ._cross_mask import diagnose_mask, mask_alternatives, mask_picture
from ._head_ablation import (
    diagnose_every_head,
    diagnose_without,
    diagnose_without_dtype,
    ref_every_head,
    ref_without,
    without_before,
)

_PROJ = calls.PROJ  # one home: the call module

# --- cross_attention_mask ---------------------------------------------------------------------------


def _mask_inputs(lengths, T, S, as_list=False):
    def make():
        lengths_, T_, S_ = np.asarray(lengths, dtype=np.int64), T, S
        if case_inputs.salting():  # fresh sizes and lengths of the same kind (lengths stay in 1 .. S, T = 1 stays 1)
            rng = case_inputs.rng(31 * T + S)
            T_, S_ = (1 if T == 1 else T + int(rng.integers(1, 4))), S + int(rng.integers(1, 4))
            if (lengths_ == S).all():
                lengths_ = np.full_like(lengths_, S_)
            else:
                lengths_ = rng.permutation(lengths_) + rng.integers(0, S_ - S + 1, size=lengths_.shape)
        return {"lengths": lengths_, "T": T_, "S": S_, "as_list": as_list}

    return make


def _ref_mask(inputs):
    from mha_course.core.masks import padding_mask

    B, T, S = len(inputs["lengths"]), int(inputs["T"]), int(inputs["S"])
    return np.array(padding_mask(inputs["lengths"].tolist(), S).expand(B, 1, T, S).numpy())  # (B, 1, T, S)


# the mistakes, their hints and the picture: ._cross_mask


def _mask_case(name, points, *, lengths, T, S, as_list=False, hidden=False):
    """A cross_attention_mask case: B = len(lengths) sources of S positions read by T targets.

    A visible case draws the learner's mask beside the expected one (hidden cases never run in check()).
    """
    inputs = _mask_inputs(lengths, T, S, as_list)
    visualize = None if hidden else mask_picture
    return Case(name, points, inputs, calls.cross_attention_mask, _ref_mask, diagnose_mask, hidden, visualize)


MASK = Exercise(
    key="cross_attention_mask",
    target="cross_attention_mask",
    title="Cross-attention mask",
    cases=(
        _mask_case(
            "lengths [3, 5, 2], T = 4 targets, S = 5 sources -> (3, 1, 4, 5) bool", 2, lengths=[3, 5, 2], T=4, S=5
        ),
        _mask_case("more targets than sources (T = 6, S = 3)", 1, lengths=[3, 1], T=6, S=3),
        _mask_case(
            "T = S = 4, lengths as a Python list: square but not causal", 1, lengths=[2, 4], T=4, S=4, as_list=True
        ),
        _mask_case("one decoding step (T = 1)", 1, lengths=[4, 2, 5], T=1, S=5, hidden=True),
        _mask_case("every source at full length", 1, lengths=[5, 5], T=2, S=5, hidden=True),
        _mask_case("B = 4, T = 3, S = 8", 1, lengths=[8, 1, 5, 3], T=3, S=8, hidden=True),
    ),
    forbidden=("mha_course.core.masks.padding_mask", "mha_course.padding_mask"),
)

# --- shared: a MultiHeadAttention with the grader's weights ----------------------------------------


def _module_inputs(*, B, T, S, E, H, seed, head=0, self_attention=False, memory=False, dtype=np.float32):
    """Weights of the four projections, query (B, T, E), key/value (B, S, E), source lengths, a head.

    ``memory``: key and value are the same (B, S, E) tensor, as in a decoder reading the encoder's output.
    """

    def make():
        rng = case_inputs.rng(seed)
        inputs = projection_weights(rng, E, H, self_attention, _PROJ, dtype)
        S_ = T if self_attention else S
        inputs["query"] = rng.standard_normal((B, T, E)).astype(dtype)
        inputs["key"] = inputs["query"] if self_attention else rng.standard_normal((B, S_, E)).astype(dtype)
        if self_attention or memory:
            inputs["value"] = inputs["key"]
        else:
            inputs["value"] = rng.standard_normal((B, S_, E)).astype(dtype)
        lengths = rng.integers(1, S_ + 1, size=B)
        lengths[0] = max(1, S_ - 2)  # at least one sequence with padding
        if B > 1:  # and one without: with every length 1 a wrong mask on keys 1.. would change nothing
            lengths[-1] = S_
        inputs["lengths"] = lengths.astype(np.int64)
        inputs["head"] = int(rng.integers(H)) if case_inputs.salting() else head
        return inputs

    return make


# --- cross_attention --------------------------------------------------------------------------------


def _ref_cross(inputs):
    import torch

    from mha_course.core.masks import padding_mask

    module = calls.library_module(inputs)
    mask = padding_mask(inputs["lengths"].tolist(), inputs["key"].shape[1])  # (B, 1, 1, S)
    with torch.no_grad():
        out, weights = module(
            torch.from_numpy(inputs["query"]),
            torch.from_numpy(inputs["key"]),
            torch.from_numpy(inputs["value"]),
            mask=mask,
        )
    return out.numpy(), weights.numpy()


def _diagnose_cross(got, expected, inputs):
    arrays, hint = hints.unpack(got, ("out", "weights"))
    if hint:
        return hint
    B, T, _ = inputs["query"].shape
    S, H = inputs["key"].shape[1], inputs["H"]
    weights = arrays[1]
    if S != T and weights.shape == (B, H, S, T):
        return (
            f"weights: shape {weights.shape} [B, H, S, T]: the memory attended to the decoder; queries come "
            "from the decoder states (T), keys and values from the memory (S): look at the order of the "
            "arguments of the attention call"
        )
    if S != T and weights.shape == (B, H, T, T):
        return (
            f"weights: shape {weights.shape} [B, H, T, T]: the keys came from the decoder states; in "
            "cross-attention keys and values are the memory (the encoder's output)"
        )

    def with_mask(index, mask):
        return lambda: np_mha(dict(inputs, mask=mask))[index]

    def pairs(index):
        return [
            (
                with_mask(index, None),
                "the source padding is not masked: build the mask with your "
                "cross_attention_mask and pass it to the module as mask=...",
            )
        ] + [(with_mask(index, alt()), hint) for alt, hint in mask_alternatives(inputs["lengths"], T, S)]

    hint = hints.compare_pair(got, expected, legends=("[B, T, E]", "[B, H, T, S]"), alternatives=(pairs(0), pairs(1)))
    if hint and "values differ" in hint and weights.shape == np.asarray(expected[1]).shape:
        real = np.arange(S)[None, :] < inputs["lengths"][:, None]  # (B, S)
        hint = hints.mask_hint(weights, np.broadcast_to(real[:, None, None, :], weights.shape)) or hint
    return hint


def _diagnose_cross_dtype(got, expected, inputs):
    return _diagnose_cross(got, expected, inputs) or hints.compare_pair(got, expected, check_dtype=True)


_cross_heat = hints.pair_heatmaps(1, "cross-attention weights")


def _cross_case(name, points, *, B, T, S, E, H, seed, dtype=np.float32, hidden=False):
    """A cross_attention case: T targets (B, T, E) read a memory (B, S, E) that is both key and value.

    A dtype other than float32 (the module's own) is the case's point, so the output's dtype is judged too;
    a visible case draws the weights (hidden cases never run in check()).
    """
    inputs = _module_inputs(B=B, T=T, S=S, E=E, H=H, seed=seed, memory=True, dtype=dtype)
    judge = _diagnose_cross if dtype == np.float32 else _diagnose_cross_dtype
    visualize = None if hidden else _cross_heat
    return Case(name, points, inputs, calls.cross_attention, _ref_cross, judge, hidden, visualize)


CROSS = Exercise(
    key="cross_attention",
    target="cross_attention",
    title="Cross-attention with a MultiHeadAttention",
    cases=(
        _cross_case(
            "T = 4 target positions read S = 6 source positions (E = 12, H = 3)", 2, B=2, T=4, S=6, E=12, H=3, seed=0
        ),
        _cross_case("more target positions than source positions (T = 7, S = 3)", 1, B=3, T=7, S=3, E=12, H=3, seed=1),
        _cross_case("one decoding step (T = 1)", 1, B=3, T=1, S=5, E=12, H=2, seed=2, hidden=True),
        _cross_case(
            "E = 16, H = 4, B = 3 in float64", 1, B=3, T=5, S=8, E=16, H=4, seed=3, dtype=np.float64, hidden=True
        ),
    ),
    forbidden=("mha_course.core.masks.padding_mask", "mha_course.padding_mask"),
)

# --- without_head ---------------------------------------------------------------------------------


# the reference, the float64 twin with its mistake knobs and the hints: ._head_ablation

_UNCHANGED = case_inputs.unchanged_case(
    ref_without,
    diagnose_without,
    "your function changed mha (its weights or "
    "head_gate) or query, key, value in place: switch the head off in the heads you "
    "computed, never in mha itself",
    without_before,
)
_out_heat = hints.single_heatmaps(
    "output with the head switched off", value_name="value", axis_names=("query (T)", "feature (E)")
)


def _without_case(name, points, *, B, T, S=None, E, H, seed, head=0, dtype=np.float32, hidden=False):
    """A without_head case: the module's output with head ``head`` switched off; S left out: self-attention.

    A dtype other than float32 (the module's own) is the case's point, so the output's dtype is judged too;
    a visible case draws the output (hidden cases never run in check()).
    """
    sizes = dict(B=B, T=T, S=T if S is None else S, E=E, H=H, seed=seed, head=head, self_attention=S is None)
    judge = diagnose_without if dtype == np.float32 else diagnose_without_dtype
    visualize = None if hidden else _out_heat
    return Case(
        name, points, _module_inputs(**sizes, dtype=dtype), calls.without_head, ref_without, judge, hidden, visualize
    )


WITHOUT = Exercise(
    key="without_head",
    target="without_head",
    title="Switch one head off by hand",
    cases=(
        _without_case("self-attention (E = 12, H = 3), head 1 off", 2, B=2, T=5, E=12, H=3, seed=10, head=1),
        _without_case(
            "cross-attention: T = 4 queries, S = 6 keys, key != value, head 0 off", 2, B=2, T=4, S=6, E=12, H=3, seed=11
        ),
        Case(
            "every head in turn (E = 16, H = 4)",
            2,
            _module_inputs(B=2, T=3, S=5, E=16, H=4, seed=12),
            calls.without_every_head,
            ref_every_head,
            diagnose_every_head,
        ),
        Case(
            "leaves the module and its inputs unchanged",
            1,
            _module_inputs(B=2, T=4, S=4, E=12, H=3, seed=13, head=2),
            calls.without_head_unchanged,
            *_UNCHANGED,
        ),
        _without_case("one head (H = 1): only the bias b_O is left", 1, B=2, T=3, S=4, E=8, H=1, seed=14, hidden=True),
        _without_case(
            "float64, E = 8, H = 4, the last head",
            1,
            B=2,
            T=4,
            S=6,
            E=8,
            H=4,
            seed=15,
            head=3,
            dtype=np.float64,
            hidden=True,
        ),
        _without_case("B = 1, T = 1, E = 16, H = 8, head 5", 1, B=1, T=1, S=4, E=16, H=8, seed=16, head=5, hidden=True),
    ),
    # calling the module's own forward (also through a reference saved before the case) is the shortcut
    forbidden=("mha_course.core.mha.MultiHeadAttention.forward",),
)

ASSIGNMENT = Assignment(
    key="a08_cross_attention",
    version=1,
    title="Assignment 08: cross-attention masks and switching a head off",
    notebook="a08_cross_attention.ipynb",
    exercises=(MASK, CROSS, WITHOUT),
    # building blocks from assignments 03 and 05: attention, split/merge heads, and the module itself
    provided=("mha_course.core.attention", "mha_course.core.heads", "mha_course.core.mha"),
)
