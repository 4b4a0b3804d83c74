"""Assignment 08's ``cross_attention_mask``, grader side: the classic mask mistakes, each paired with
its hint, the diagnosis of a learner's mask, and its picture.

``a08_cross_attention`` uses the mistakes twice: for the mask itself, and for ``cross_attention``
when a wrong mask reaches the module.
"""

from __future__ import annotations

import numpy as np

from ..learner import hints


def mask_alternatives(lengths, T, S):
    """(wrong (B, 1, T, S) mask, hint) pairs for the classic cross-attention mask mistakes."""
    B = len(lengths)
    source = np.arange(S)[None, None, :]  # key positions s
    target = np.arange(T)[None, :, None]  # query positions t
    L = np.asarray(lengths)[:, None, None]

    def full(m):
        return lambda: np.broadcast_to(m, (B, T, S))[:, None]  # (B, 1, T, S)

    return [
        (
            full(source >= L),
            "True and False are swapped: True marks a source position the target MAY read (s < source_lengths[b])",
        ),
        (full(source <= L), "off by one: a source of length L has real positions 0 .. L-1"),
        (full(source < L - 1), "off by one: a source of length L has real positions 0 .. L-1"),
        (
            full((source < L) & (source <= target)),
            "cross-attention is not causal: the whole source is known "
            "before decoding starts, so every target position may read every real source position; the causal "
            "mask belongs to the decoder's self-attention",
        ),
        (
            full(source <= target),
            "that is a causal mask; cross-attention needs the source padding mask instead "
            "(True where s < source_lengths[b]), with nothing causal",
        ),
        (full(np.ones((1, T, S), dtype=bool)), "every entry is True: the source padding is not masked"),
        (
            full(target < L),
            "your mask hides queries, not keys: padding belongs on the key axis (the last one, S); "
            "every target position reads the same real source positions",
        ),
    ]


def diagnose_mask(got, expected, inputs):
    arr, hint = hints.as_array(got, "mask")
    if hint:
        return hint
    lengths, T, S = inputs["lengths"], int(inputs["T"]), int(inputs["S"])
    B = len(lengths)
    if arr.shape == (B, 1, 1, S) and T != 1:
        return (
            f"mask: shape ({B}, 1, 1, {S}) is assignment 04's padding mask, which only broadcasts; this "
            f"exercise asks for one row per target position: ({B}, 1, {T}, {S}) [B, 1, T, S] (.expand)"
        )
    if arr.shape == (B, 1, S, T) and S != T:
        return (
            f"mask: shape ({B}, 1, {S}, {T}) puts the source on the query axis; rows are the T = {T} target "
            f"positions (queries), columns the S = {S} source positions (keys): ({B}, 1, {T}, {S})"
        )
    if arr.shape == (B, T, S):
        return f"mask: shape ({B}, {T}, {S}): add the head axis, ({B}, 1, {T}, {S}), so it broadcasts over the heads"
    return hints.compare(arr, expected, "mask", "[B, 1, T, S]", alternatives=mask_alternatives(lengths, T, S))


def mask_picture(got, expected, inputs):
    """yours / expected / difference of the first sequence's (T, S) mask."""
    arr, hint = hints.as_array(got)
    if hint or np.shape(got) != np.shape(expected):
        return None
    return hints.single_heatmaps("cross-attention mask (True = may read)", value_name="may read")(
        arr[:, 0], np.asarray(expected)[:, 0], inputs
    )
