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

import math

import numpy as np

from .. import hints
from ..calls import a08_cross_attention as calls
from ._common import projection_weights
from ..spec import Assignment, Case, Exercise

_PROJ = calls.PROJ  # one home: the call module

# --- cross_attention_mask ---------------------------------------------------------------------------


def _mask_inputs(lengths, T, S, as_list=False):
    def make():
        lengths_, T_, S_ = np.asarray(lengths, dtype=np.int64), T, S
        if hints.salting():  # fresh sizes and lengths of the same kind (lengths stay in 1 .. S, T = 1 stays 1)
            rng = hints.rng(31 * T + S)
            T_, S_ = (1 if T == 1 else T + int(rng.integers(1, 4))), S + int(rng.integers(1, 4))
            if (lengths_ == S).all():
                lengths_ = np.full_like(lengths_, S_)
            else:
                lengths_ = rng.permutation(lengths_) + rng.integers(0, S_ - S + 1, size=lengths_.shape)
        return {"lengths": lengths_, "T": T_, "S": S_, "as_list": as_list}

    return make


def _ref_mask(inputs):
    from mha_course.masks import padding_mask

    B, T, S = len(inputs["lengths"]), int(inputs["T"]), int(inputs["S"])
    return np.array(padding_mask(inputs["lengths"].tolist(), S).expand(B, 1, T, S).numpy())  # (B, 1, T, S)


def _mask_alternatives(lengths, T, S):
    """(wrong (B, 1, T, S) mask, hint) pairs for the classic cross-attention mask mistakes."""
    B = len(lengths)
    source = np.arange(S)[None, None, :]  # key positions s
    target = np.arange(T)[None, :, None]  # query positions t
    L = np.asarray(lengths)[:, None, None]

    def full(m):
        return lambda: np.broadcast_to(m, (B, T, S))[:, None]  # (B, 1, T, S)

    return [
        (full(source >= L), "True and False are swapped: True marks a source position the target MAY read "
         "(s < source_lengths[b])"),
        (full(source <= L), "off by one: a source of length L has real positions 0 .. L-1 (use s < L)"),
        (full(source < L - 1), "off by one: a source of length L has real positions 0 .. L-1 (use s < L)"),
        (full((source < L) & (source <= target)), "cross-attention is not causal: the whole source is known "
         "before decoding starts, so every target position may read every real source position; the causal "
         "mask belongs to the decoder's self-attention"),
        (full(source <= target), "that is a causal mask; cross-attention needs the source padding mask instead "
         "(True where s < source_lengths[b]), with nothing causal"),
        (full(np.ones((1, T, S), dtype=bool)), "every entry is True: the source padding is not masked"),
        (full(target < L), "your mask hides queries, not keys: padding belongs on the key axis (the last one, S); "
         "every target position reads the same real source positions"),
    ]


def _diagnose_mask(got, expected, inputs):
    arr, hint = hints.as_array(got, "mask")
    if hint:
        return hint
    lengths, T, S = inputs["lengths"], int(inputs["T"]), int(inputs["S"])
    B = len(lengths)
    if arr.shape == (B, 1, 1, S) and T != 1:
        return (f"mask: shape ({B}, 1, 1, {S}) is assignment 04's padding mask, which only broadcasts; this "
                f"exercise asks for one row per target position: ({B}, 1, {T}, {S}) [B, 1, T, S] (.expand)")
    if arr.shape == (B, 1, S, T) and S != T:
        return (f"mask: shape ({B}, 1, {S}, {T}) puts the source on the query axis; rows are the T = {T} target "
                f"positions (queries), columns the S = {S} source positions (keys): ({B}, 1, {T}, {S})")
    if arr.shape == (B, T, S):
        return f"mask: shape ({B}, {T}, {S}): add the head axis, ({B}, 1, {T}, {S}), so it broadcasts over the heads"
    return hints.compare(arr, expected, "mask", "[B, 1, T, S]", alternatives=_mask_alternatives(lengths, T, S))


def _mask_picture(got, expected, inputs):
    """yours / expected / difference of the first sequence's (T, S) mask."""
    arr, hint = hints.as_array(got)
    if hint or np.shape(got) != np.shape(expected):
        return None
    return hints.single_heatmaps("cross-attention mask (True = may read)", value_name="may read")(
        arr[:, 0], np.asarray(expected)[:, 0], inputs)


MASK = Exercise(
    key="cross_attention_mask",
    target="cross_attention_mask",
    title="Cross-attention mask",
    cases=(
        Case("lengths [3, 5, 2], T = 4 targets, S = 5 sources -> (3, 1, 4, 5) bool", 2,
             _mask_inputs([3, 5, 2], 4, 5), calls.cross_attention_mask, _ref_mask, _diagnose_mask,
             visualize=_mask_picture),
        Case("more targets than sources (T = 6, S = 3)", 1, _mask_inputs([3, 1], 6, 3), calls.cross_attention_mask,
             _ref_mask, _diagnose_mask, visualize=_mask_picture),
        Case("T = S = 4, lengths as a Python list: square but not causal", 1, _mask_inputs([2, 4], 4, 4, True),
             calls.cross_attention_mask, _ref_mask, _diagnose_mask, visualize=_mask_picture),
        Case("one decoding step (T = 1)", 1, _mask_inputs([4, 2, 5], 1, 5), calls.cross_attention_mask, _ref_mask,
             _diagnose_mask, hidden=True),
        Case("every source at full length", 1, _mask_inputs([5, 5], 2, 5), calls.cross_attention_mask, _ref_mask,
             _diagnose_mask, hidden=True),
        Case("B = 4, T = 3, S = 8", 1, _mask_inputs([8, 1, 5, 3], 3, 8), calls.cross_attention_mask, _ref_mask,
             _diagnose_mask, hidden=True),
    ),
    forbidden=("mha_course.masks.padding_mask", "mha_course.padding_mask"),
)

# --- shared: a MultiHeadAttention with the grader's weights ----------------------------------------


def _module_inputs(B, T, S, E, H, seed, head=0, self_attention=False, memory=False, dtype=np.float32):
    """Weights of the four projections, query (B, T, E), key/value (B, S, E), source lengths, a head.

    ``memory``: key and value are the same (B, S, E) tensor, as in a decoder reading the encoder's output.
    """

    def make():
        rng = hints.rng(seed)
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
        inputs["lengths"] = lengths.astype(np.int64)
        inputs["head"] = int(rng.integers(H)) if hints.salting() else head
        return inputs

    return make


# --- cross_attention --------------------------------------------------------------------------------


def _ref_cross(inputs):
    import torch

    from mha_course.masks import padding_mask

    module = calls.library_module(inputs)
    mask = padding_mask(inputs["lengths"].tolist(), inputs["key"].shape[1])  # (B, 1, 1, S)
    with torch.no_grad():
        out, weights = module(torch.from_numpy(inputs["query"]), torch.from_numpy(inputs["key"]),
                              torch.from_numpy(inputs["value"]), mask=mask)
    return out.numpy(), weights.numpy()


def _diagnose_cross(got, expected, inputs):
    from ._common import np_mha

    arrays, hint = hints.unpack(got, ("out", "weights"))
    if hint:
        return hint
    B, T, _ = inputs["query"].shape
    S, H = inputs["key"].shape[1], inputs["H"]
    weights = arrays[1]
    if S != T and weights.shape == (B, H, S, T):
        return (f"weights: shape {weights.shape} [B, H, S, T]: the memory attended to the decoder; queries come "
                "from the decoder states (T), keys and values from the memory (S): "
                "attention(decoder_states, memory, memory, mask=...)")
    if S != T and weights.shape == (B, H, T, T):
        return (f"weights: shape {weights.shape} [B, H, T, T]: the keys came from the decoder states; in "
                "cross-attention keys and values are the memory (the encoder's output)")

    def with_mask(index, mask):
        return lambda: np_mha(dict(inputs, mask=mask))[index]

    def pairs(index):
        return [(with_mask(index, None), "the source padding is not masked: build the mask with your "
                 "cross_attention_mask and pass it to the module as mask=...")] + [
            (with_mask(index, alt()), hint) for alt, hint in _mask_alternatives(inputs["lengths"], T, S)]

    hint = hints.compare_pair(got, expected, legends=("[B, T, E]", "[B, H, T, S]"), alternatives=(pairs(0), pairs(1)))
    if hint and "values differ" in hint and weights.shape == np.asarray(expected[1]).shape:
        real = np.arange(S)[None, :] < inputs["lengths"][:, None]  # (B, S)
        hint = hints.mask_hint(weights, np.broadcast_to(real[:, None, None, :], weights.shape)) or hint
    return hint


def _diagnose_cross_dtype(got, expected, inputs):
    return _diagnose_cross(got, expected, inputs) or hints.compare_pair(got, expected, check_dtype=True)


CROSS = Exercise(
    key="cross_attention",
    target="cross_attention",
    title="Cross-attention with a MultiHeadAttention",
    cases=(
        Case("T = 4 target positions read S = 6 source positions (E = 12, H = 3)", 2, _module_inputs(2, 4, 6, 12, 3, 0, memory=True),
             calls.cross_attention, _ref_cross, _diagnose_cross,
             visualize=hints.pair_heatmaps(1, "cross-attention weights")),
        Case("more target positions than source positions (T = 7, S = 3)", 1, _module_inputs(3, 7, 3, 12, 3, 1, memory=True),
             calls.cross_attention, _ref_cross, _diagnose_cross,
             visualize=hints.pair_heatmaps(1, "cross-attention weights")),
        Case("one decoding step (T = 1)", 1, _module_inputs(3, 1, 5, 12, 2, 2, memory=True), calls.cross_attention, _ref_cross,
             _diagnose_cross, hidden=True),
        Case("E = 16, H = 4, B = 3 in float64", 1, _module_inputs(3, 5, 8, 16, 4, 3, memory=True, dtype=np.float64),
             calls.cross_attention, _ref_cross, _diagnose_cross_dtype, hidden=True),
    ),
    forbidden=("mha_course.masks.padding_mask", "mha_course.padding_mask"),
)

# --- without_head ---------------------------------------------------------------------------------


def _ablated(inputs, heads):
    """Grader side: the library's own ablation, head_gate[h] = 0, for each h in ``heads``: (len(heads), B, T, E)."""
    import torch

    module = calls.library_module(inputs)
    outs = []
    with torch.no_grad():
        for h in heads:
            module.head_gate.fill_(1.0)
            module.head_gate[h] = 0.0
            out, _ = module(*(torch.from_numpy(inputs[n]) for n in ("query", "key", "value")))
            outs.append(out.numpy())
    return np.stack(outs)


def _ref_without(inputs):
    return _ablated(inputs, [inputs["head"]])[0]


def _ref_every_head(inputs):
    return _ablated(inputs, range(inputs["H"]))


def _np_without(inputs, head, zero="head", scale=None, out_bias=True, out_proj=True, split="ok", merge="ok"):
    """Grader-side float64 multi-head attention with head ``head`` switched off, and knobs for the mistakes.

    zero: "head" (the right way: zero head h's output before out_proj), "none", "feature" (one feature h
    of the concatenated heads), "token" (row h of the concatenated heads), "after" (head h's features of
    the final output, after out_proj), "uniform" (zeroed queries or keys: head h attends uniformly),
    "v_bias" (zeroed v_proj weights: head h outputs its value bias), "keep_only" (every head but h off).
    """
    from mha_course.softmax import softmax_np

    E, H = inputs["E"], inputs["H"]
    D = E // H
    block = slice(head * D, (head + 1) * D)

    def lin(name, x, bias=True):
        y = np.asarray(x, dtype=np.float64) @ inputs[name + ".weight"].astype(np.float64).T
        return y + inputs[name + ".bias"].astype(np.float64) if bias else y

    def split_(x):
        B, T, _ = x.shape
        if split == "no_transpose":
            return x.reshape(B, H, T, D)
        return x.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)

    q, k, v = (split_(lin(p, inputs[n])) for p, n in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")))
    scores = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(D) if scale is None else scale)  # (B, H, T, S)
    if zero == "uniform":
        scores[:, head] = 0.0
    heads = softmax_np(scores, axis=-1) @ v  # (B, H, T, D)
    if zero == "head":
        heads[:, head] = 0.0
    elif zero == "v_bias":
        heads[:, head] = inputs["v_proj.bias"].astype(np.float64)[block]
    elif zero == "keep_only":
        kept = heads[:, head].copy()
        heads[:] = 0.0
        heads[:, head] = kept
    B, _, T, _ = heads.shape
    merged = heads.reshape(B, T, E) if merge == "no_transpose" else heads.transpose(0, 2, 1, 3).reshape(B, T, E)
    if zero == "feature":
        merged[..., head] = 0.0
    elif zero == "token":
        merged[:, head] = 0.0
    out = lin("out_proj", merged, bias=out_bias) if out_proj else merged
    if zero == "after":
        out[..., block] = 0.0
    return out


def _without_alternatives(inputs, heads):
    """(wrong output stacked over ``heads``, hint) pairs; the right computation has zero="head"."""
    E, H = inputs["E"], inputs["H"]

    def alt(shift=0, **kw):
        return lambda: np.stack([_np_without(inputs, (h + shift) % H, **kw) for h in heads])

    knobs = [
        (dict(zero="none"), "this is the full output: head h is still on"),
        (dict(zero="feature"), "you zeroed one feature (h .. h+1) of the concatenated heads; head h owns the D "
         "features h*D .. (h+1)*D - 1"),
        (dict(zero="token"), "you zeroed row h (a token) of the concatenated (B, T, E) heads; head h is the "
         "features h*D .. (h+1)*D - 1 of every token (the last axis)"),
        (dict(out_bias=False), "out_proj's bias b_O is missing (subtracting out_proj(head h alone) also subtracts "
         "b_O): out = sum over the other heads of head_g W_O^g, plus b_O once"),
        (dict(zero="after"), "you zeroed head h's features of the output, after out_proj; W_O mixes every head into "
         "every output feature, so zero the head before out_proj"),
        (dict(zero="uniform"), "head h still contributes: with its queries or keys zeroed it attends uniformly "
         "(softmax of equal scores), it is not switched off; zero the head's output"),
        (dict(zero="v_bias"), "head h still outputs its value bias b_V: zeroing v_proj's weights leaves the bias; "
         "zero the head's output (after attention) instead"),
        (dict(zero="keep_only"), "you kept only head h and switched the others off; switch off head h alone"),
        (dict(out_proj=False), "out_proj (W_O) is not applied after merging the heads"),
        (dict(split="no_transpose", merge="no_transpose"), "view(B, H, T, D) without a transpose mixes tokens into "
         "heads: view(B, T, H, D).transpose(1, 2), and transpose back before merging"),
        (dict(split="no_transpose"), "split without transpose: view(B, H, T, D) mixes tokens into heads; "
         "view(B, T, H, D).transpose(1, 2)"),
        (dict(merge="no_transpose"), "merge without transpose: transpose(1, 2) back to (B, T, H, D) before "
         "reshaping to (B, T, E)"),
        (dict(scale=1.0 / math.sqrt(E)), "the scores are scaled by 1/sqrt(E); each head works in D = E / H "
         "dimensions, so scale by 1/sqrt(D)"),
    ]
    found = [(alt(**kw), hint) for kw, hint in knobs]
    if H > 1:
        found += [(alt(shift=1), "you switched off head h + 1: heads count from 0"),
                  (alt(shift=-1), "you switched off head h - 1: heads count from 0")]
    return found


def _diagnose_without(got, expected, inputs, check_dtype=False):
    return hints.compare(got, expected, "output", "[B, T, E]",
                         alternatives=[(lambda a=a: a()[0], hint) for a, hint in
                                       _without_alternatives(inputs, [inputs["head"]])],
                         check_dtype=check_dtype)


def _diagnose_without_dtype(got, expected, inputs):
    return _diagnose_without(got, expected, inputs, check_dtype=True)


def _diagnose_every_head(got, expected, inputs):
    hint = hints.compare(got, expected, "outputs", "[H, B, T, E]",
                         alternatives=_without_alternatives(inputs, list(range(inputs["H"]))))
    return None if hint is None else hint + " (the outputs of without_head for h = 0 .. H-1, stacked)"


def _without_before(inputs):
    """What without_head_unchanged sends back, as it was before the call: calls.WATCHED, head_gate, query, key, value."""
    gate = np.ones(inputs["H"], dtype=inputs["query"].dtype)  # the module's head_gate, cast like its weights
    return (*(inputs[name] for name in calls.WATCHED), gate, inputs["query"], inputs["key"], inputs["value"])


_UNCHANGED = hints.unchanged_case(_ref_without, _diagnose_without, "your function changed mha (its weights or "
                                  "head_gate) or query, key, value in place: switch the head off in the heads you "
                                  "computed, never in mha itself", _without_before)
_out_heat = hints.single_heatmaps("output with the head switched off", value_name="value", axis_names=("query (T)", "feature (E)"))

WITHOUT = Exercise(
    key="without_head",
    target="without_head",
    title="Switch one head off by hand",
    cases=(
        Case("self-attention (E = 12, H = 3), head 1 off", 2, _module_inputs(2, 5, 5, 12, 3, 10, head=1,
                                                                              self_attention=True),
             calls.without_head, _ref_without, _diagnose_without, visualize=_out_heat),
        Case("cross-attention: T = 4 queries, S = 6 keys, key != value, head 0 off", 2,
             _module_inputs(2, 4, 6, 12, 3, 11, head=0), calls.without_head, _ref_without, _diagnose_without,
             visualize=_out_heat),
        Case("every head in turn (E = 16, H = 4)", 2, _module_inputs(2, 3, 5, 16, 4, 12), calls.without_every_head,
             _ref_every_head, _diagnose_every_head),
        Case("leaves the module and its inputs unchanged", 1, _module_inputs(2, 4, 4, 12, 3, 13, head=2),
             calls.without_head_unchanged, *_UNCHANGED),
        Case("one head (H = 1): only the bias b_O is left", 1, _module_inputs(2, 3, 4, 8, 1, 14), calls.without_head,
             _ref_without, _diagnose_without, hidden=True),
        Case("float64, E = 8, H = 4, the last head", 1, _module_inputs(2, 4, 6, 8, 4, 15, head=3, dtype=np.float64),
             calls.without_head, _ref_without, _diagnose_without_dtype, hidden=True),
        Case("B = 1, T = 1, E = 16, H = 8, head 5", 1, _module_inputs(1, 1, 4, 16, 8, 16, head=5), calls.without_head,
             _ref_without, _diagnose_without, hidden=True),
    ),
    # calling the module's own forward (also through a reference saved before the case) is the shortcut
    forbidden=("mha_course.mha.MultiHeadAttention.forward",),
)

ASSIGNMENT = Assignment(
    key="a08_cross_attention",
    version=1,
    title="Assignment 08: cross-attention masks and switching a head off",
    notebook="a08_cross_attention.ipynb",
    exercises=(MASK, CROSS, WITHOUT),
    # building blocks from assignments 03 and 05: attention, split/merge heads, and the module itself
    provided=("mha_course.attention", "mha_course.heads", "mha_course.mha"),
)
