"""Scaled dot-product attention, the heart of the course.

    Attention(Q, K, V) = softmax(Q K^T * scale + mask) V,   scale = 1 / sqrt(D) by default

Each of the T queries scores all S keys (a (T, S) matrix), softmax turns each row of scores into
weights that sum to 1, and the output is the weighted average of the value rows.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ._validate import broadcast_leading, require_floating, require_min_rank, require_tensor
from .masks import mask_to_bias
from .softmax import softmax, softmax_np


def check_qkv(q, k, v) -> tuple[int, int, int]:
    """Validate query/key/value shapes (..., T, D), (..., S, D), (..., S, Dv); return (T, S, D).

    Raises:
        TypeError: an input is not a floating torch.Tensor, or dtypes differ.
        ValueError: a rank is below 2, D or S disagree, or the leading dims do not broadcast.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(x, name)
        require_floating(x, name)
    require_min_rank(q, 2, "q", "(..., T, D)")
    require_min_rank(k, 2, "k", "(..., S, D)")
    require_min_rank(v, 2, "v", "(..., S, Dv)")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dim D: q {tuple(q.shape)} is (..., T, {q.shape[-1]}), "
                         f"k {tuple(k.shape)} is (..., S, {k.shape[-1]})")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length S: k {tuple(k.shape)} has S={k.shape[-2]}, "
                         f"v {tuple(v.shape)} has S={v.shape[-2]}")
    broadcast_leading({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]), "v": tuple(v.shape[:-2])})
    return q.shape[-2], k.shape[-2], q.shape[-1]


def check_mask(mask, T: int, S: int, batch_shape: tuple[int, ...] | None = None) -> None:
    """Validate a course mask against scores (..., T, S).

    Any shape that broadcasts against the scores is accepted, e.g. (T, S), (S,), (1, S),
    (B, 1, 1, S), (B, 1, T, S). When ``batch_shape`` (the broadcast leading dims of q, k, v) is
    given, the mask's leading dims must broadcast with it too.

    Raises:
        TypeError: not a tensor, or neither bool nor floating.
        ValueError: its last two dims are not broadcastable to (T, S), or its leading dims not to
            ``batch_shape``.
    """
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask must be bool (True = may attend) or floating (added to scores), got dtype {mask.dtype}")
    trailing = tuple(mask.shape[-2:])  # the (T, S) part; a 1-D mask is (S,)
    expected = (T, S)[-len(trailing):] if trailing else ()
    if any(m not in (1, e) for m, e in zip(trailing, expected, strict=True)):
        raise ValueError(f"mask must broadcast to scores (..., T={T}, S={S}), got {tuple(mask.shape)}")
    if batch_shape is not None and mask.dim() > 2:
        try:
            torch.broadcast_shapes(tuple(batch_shape), tuple(mask.shape[:-2]))
        except RuntimeError:
            raise ValueError(f"mask must broadcast to scores {(*batch_shape, T, S)} (..., T, S), "
                             f"got {tuple(mask.shape)}") from None


def resolve_scale(scale: float | None, D: int) -> float:
    """Return ``scale`` or the default 1/sqrt(D).

    Any finite real is accepted, as in torch's SDPA: 0 gives uniform weights, a negative scale
    prefers the keys least like the query (odd, but well defined).

    Raises:
        TypeError: ``scale`` is not a real number (bools, strings and tensors are refused).
        ValueError: ``scale`` is NaN or infinite, or it is None while D == 0 (no default exists).
    """
    if scale is None:
        if D <= 0:
            raise ValueError(f"the default scale 1/sqrt(D) needs D >= 1, got D={D}; pass scale explicitly")
        return 1.0 / math.sqrt(D)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise TypeError(f"scale must be a real number (a float), got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale + mask) v, returning the output and the attention weights.

    Args:
        q: (..., T, D) queries.
        k: (..., S, D) keys.
        v: (..., S, Dv) values.
        mask: optional, broadcastable to (..., T, S). bool: True where a query may attend;
            float: added to the scores (use -inf to block).
        scale: multiplies the scores; default 1/sqrt(D).

    Returns:
        out: (..., T, Dv), weights: (..., T, S), both in q's dtype, with the same leading dims
        (q's, k's, v's and the mask's leading dims broadcast together).
        A query whose every key is masked gets all-zero weights and an all-zero output
        (torch's own SDPA returns NaN or zeros there, depending on version and backend).

    Raises:
        TypeError: inputs are not floating tensors of one dtype; mask of a wrong dtype.
        ValueError: mismatched D or S, rank < 2, unbroadcastable batch dims or mask, bad scale.
    """
    T, S, D = check_qkv(q, k, v)
    if mask is not None:
        lead = broadcast_leading({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]), "v": tuple(v.shape[:-2])})
        check_mask(mask, T, S, batch_shape=lead)
    scale = resolve_scale(scale, D)
    # Scores in float32 at least: float16 q.k overflows long before the softmax could help.
    work = torch.promote_types(q.dtype, torch.float32)
    scores = torch.matmul(q.to(work), k.to(work).transpose(-2, -1)) * scale  # (..., T, S)
    bias = mask_to_bias(mask, work)
    if bias is not None:
        scores = scores + bias
    weights = softmax(scores, dim=-1)  # (..., T, S)
    out = torch.matmul(weights, v.to(work))  # (..., T, Dv)
    # v's leading dims may broadcast further than q's and k's: weights get out's leading dims too.
    weights = weights.expand(*out.shape[:-2], T, S)  # (..., T, S)
    return out.to(q.dtype), weights.to(q.dtype)


def scaled_dot_product_attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                    mask: np.ndarray | None = None,
                                    scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`scaled_dot_product_attention` (same shapes, mask convention and zero rows).

    Args:
        q: (..., T, D), k: (..., S, D), v: (..., S, Dv) floating arrays.
        mask: optional bool (True = may attend) or float (added), broadcastable to (..., T, S).
        scale: default 1/sqrt(D).

    Returns:
        out (..., T, Dv), weights (..., T, S).

    Raises:
        TypeError: inputs are not floating NumPy arrays; mask neither bool nor floating.
        ValueError: mismatched D or S, rank < 2, a mask that does not broadcast, bad scale.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating numpy.ndarray, got {type(x).__name__}")
        if x.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., length, dim), got {x.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dim D, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length S, got k {k.shape} and v {v.shape}")
    scale = resolve_scale(scale, q.shape[-1])
    out_dtype = np.result_type(q, k, v)
    # float16 scores overflow (max 65504) long before the softmax could help: work in float32.
    work = np.float32 if out_dtype == np.float16 else out_dtype
    q, k, v = (x.astype(work) for x in (q, k, v))
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., T, S)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool and not np.issubdtype(mask.dtype, np.floating):
            raise TypeError(f"mask must be bool (True = may attend) or floating (added), got dtype {mask.dtype}")
        try:
            np.broadcast_shapes(mask.shape, scores.shape)
        except ValueError:
            raise ValueError(f"mask must broadcast to scores {scores.shape} (..., T, S), got {mask.shape}") from None
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask.astype(work)
    weights = softmax_np(scores, axis=-1)  # (..., T, S)
    return (weights @ v).astype(out_dtype), weights.astype(out_dtype)
