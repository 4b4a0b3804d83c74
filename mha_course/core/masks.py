"""Attention masks and the two boolean conventions.

The course's convention (as in ``torch.nn.functional.scaled_dot_product_attention`` and JAX):
a **boolean mask is True where a query may attend**; a **float mask is added to the scores**
(0 to keep, -inf to block). ``torch.nn.MultiheadAttention`` uses the opposite boolean meaning
(True = blocked) for ``attn_mask`` and ``key_padding_mask``; the adapters below convert.

Blocked scores become -inf, never a magic -1e9: -1e9 overflows float16 (max 65504) to -inf
anyway and, worse, in float32 a "blocked" score of -1e9 still wins when all scores are blocked.
"""

from __future__ import annotations

import torch

from ..validation import require_int, require_rank, require_tensor


def causal_mask(
    T: int, S: int | None = None, *, diagonal: int = 0, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean causal mask, True where query i may attend to key j, i.e. j <= i + diagonal.

    With ``diagonal=0`` the mask is aligned top-left, like ``is_causal=True`` in torch's SDPA:
    query 0 sees key 0 only. When the T queries are the *last* T of S positions (decoding with a
    KV cache) pass ``diagonal=S - T`` so that the last query sees every key.

    Args:
        T: number of queries (rows).
        S: number of keys (columns); defaults to T.
        diagonal: how far above the main diagonal attention is still allowed.
        device: where to create the mask.

    Returns:
        bool tensor of shape (T, S).

    Raises:
        TypeError: T, S or diagonal is not an int.
        ValueError: T or S is negative.
    """
    S = T if S is None else S
    for name, n in (("T", T), ("S", S), ("diagonal", diagonal)):
        require_int(n, name)
    if T < 0 or S < 0:
        raise ValueError(f"T and S must be >= 0, got T={T}, S={S}")
    rows = torch.arange(T, device=device).unsqueeze(1)  # (T, 1)
    cols = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
    return cols <= rows + diagonal  # (T, S)


def padding_mask(lengths, S: int) -> torch.Tensor:
    """Boolean key-padding mask, True for real tokens, False for padding: mask[b, 0, 0, j] = j < lengths[b].

    Args:
        lengths: (B,) ints, the number of real tokens in each sequence (a list, array or tensor).
        S: padded key length.

    Returns:
        bool tensor of shape (B, 1, 1, S), which broadcasts against scores (B, H, T, S).

    Raises:
        TypeError: lengths are not integers, or S is not an int.
        ValueError: lengths is not 1-D, or a length is negative or larger than S.
    """
    require_int(S, "S")
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"lengths must be a (B,) sequence of ints, got {lengths!r}") from None
    if lengths.numel() == 0:
        lengths = lengths.long()  # torch.as_tensor([]) is float32; an empty batch is still valid
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    require_rank(lengths, 1, "lengths", "(B,)")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > S):
        raise ValueError(f"every length must be in [0, S={S}], got {lengths.tolist()}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    real = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    return real[:, None, None, :]  # (B, 1, 1, S)


def invert_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """Flip a boolean mask between the two conventions (True=attend <-> True=blocked): returns ~mask.

    Args:
        mask: bool, any shape, e.g. (T, S) or (B, 1, 1, S).

    Returns:
        bool tensor of the same shape.

    Raises:
        TypeError: ``mask`` is not a bool tensor.
    """
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    return ~mask


def to_torch_attn_mask(mask: torch.Tensor) -> torch.Tensor:
    """Course mask -> ``nn.MultiheadAttention``'s ``attn_mask``: bool is inverted (~mask), float kept.

    A course mask of shape (B, T, S) becomes torch's (B*H, T, S) with
    ``to_torch_attn_mask(mask).repeat_interleave(H, dim=0)``.

    Args:
        mask: (T, S) or (B*H, T, S); bool True=attend, or float added to scores.

    Returns:
        tensor of the same shape: bool True=blocked, or the same float mask.

    Raises:
        TypeError: ``mask`` is not a tensor, or neither bool nor floating.
    """
    return _flip_attn_mask(mask, "mask")


def from_torch_attn_mask(attn_mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention``'s ``attn_mask`` -> course mask: bool is inverted (~attn_mask), float kept.

    Args:
        attn_mask: (T, S) or (B*H, T, S); bool True=blocked, or float added to scores.

    Returns:
        tensor of the same shape: bool True=may attend, or the same float mask.

    Raises:
        TypeError: ``attn_mask`` is not a tensor, or neither bool nor floating.
    """
    return _flip_attn_mask(attn_mask, "attn_mask")  # the mapping is its own inverse


def _flip_attn_mask(mask, name: str) -> torch.Tensor:
    require_tensor(mask, name)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"{name} must be bool or floating, got dtype {mask.dtype}")
    return ~mask if mask.dtype == torch.bool else mask


def to_key_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """Course padding mask (B, 1, 1, S) or (B, S), True=real -> torch's ``key_padding_mask`` (B, S), True=pad.

    Computes ~mask, squeezed to (B, S).

    Raises:
        TypeError: ``mask`` is not bool.
        ValueError: the shape is neither (B, S) nor (B, 1, 1, S).
    """
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    if mask.dim() == 4 and mask.shape[1] == mask.shape[2] == 1:
        mask = mask[:, 0, 0, :]  # (B, S)
    if mask.dim() != 2:
        raise ValueError(f"padding mask must have shape (B, S) or (B, 1, 1, S), got {tuple(mask.shape)}")
    return ~mask


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """torch's ``key_padding_mask`` (B, S), True=pad -> course padding mask (B, 1, 1, S), True=real.

    Computes (~key_padding_mask)[:, None, None, :].

    Raises:
        TypeError: ``key_padding_mask`` is not a bool tensor.
        ValueError: it is not 2-D (B, S).
    """
    require_tensor(key_padding_mask, "key_padding_mask")
    require_rank(key_padding_mask, 2, "key_padding_mask", "(B, S)")
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be a bool tensor, got dtype {key_padding_mask.dtype}")
    return (~key_padding_mask)[:, None, None, :]  # (B, 1, 1, S)


def mask_to_bias(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Turn a course mask into an additive bias: bool True -> 0, False -> -inf; float kept (cast to dtype).

    Args:
        mask: None, or bool/float broadcastable to scores (..., T, S); assumed already validated
            (see :func:`mha_course.core.attention.check_mask`).
        dtype: the scores' dtype.

    Returns:
        None, or a tensor of ``mask``'s shape and ``dtype`` to add to the scores.
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        zeros = torch.zeros((), dtype=dtype, device=mask.device)
        blocked = torch.full((), float("-inf"), dtype=dtype, device=mask.device)
        return torch.where(mask, zeros, blocked)
    return mask.to(dtype)
