"""Chunked local attention (Llama 4, 2025): the sequence is cut into chunks of C tokens, and a query sees
only the earlier tokens of its own chunk.

    mask[i, j] = (j <= i) and (j // C == i // C)        (positions counted from 0)

Unlike a sliding window (:func:`mha_course.inference.variants.sliding_window_mask`), the first query
of each chunk starts again from nothing: a query sees between 1 and C tokens, on average (C + 1) / 2,
and a layer's KV cache never needs more than the current chunk's C entries. Llama 4 uses it in its
RoPE layers (C = 8192) and full causal attention in its NoPE layers
(:mod:`mha_course.inference.nope_layers`), so information crosses chunk borders in those.

Checked against HF transformers' ``chunked_overlay`` and ``causal_mask_function``
(``src/transformers/masking_utils.py``), the masks of ``Llama4TextModel``'s chunked layers, in
``tests/inference/test_llama4_reference.py``.
"""

from __future__ import annotations

import torch

from ..validation import require_int


def chunked_causal_mask(
    T: int, chunk_size: int, S: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean chunked causal mask (T, S), True where query i may attend to key j (course convention).

    The T queries are the last T of S positions (decoding with a cache: pass S > T), so query i sits
    at position p = i + S - T and sees key j when j <= p and j // chunk_size == p // chunk_size.

    Args:
        T: number of queries. chunk_size: C (>= 1). S: number of keys (default T; S >= T).
        device: where to create the mask.

    Raises:
        TypeError: T, S or chunk_size is not an int.
        ValueError: chunk_size < 1, T or S negative, or S < T.
    """
    S = T if S is None else S
    require_int(T, "T", minimum=0)
    require_int(S, "S", minimum=0)
    require_int(chunk_size, "chunk_size", minimum=1)
    if S < T:
        raise ValueError(f"S must be >= T (queries are the last T of S positions), got T={T}, S={S}")
    query_pos = torch.arange(S - T, S, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(S, device=device)[None, :]  # (1, S)
    return (key_pos <= query_pos) & (key_pos // chunk_size == query_pos // chunk_size)  # (T, S)


def chunked_visible_counts(T: int, chunk_size: int) -> torch.Tensor:
    """How many keys each query t < T sees under the chunked mask: t % C + 1, shape (T,).

    Raises:
        TypeError / ValueError: as :func:`chunked_causal_mask`.
    """
    require_int(T, "T", minimum=0)
    require_int(chunk_size, "chunk_size", minimum=1)
    return torch.arange(T) % chunk_size + 1


__all__ = ["chunked_causal_mask", "chunked_visible_counts"]
