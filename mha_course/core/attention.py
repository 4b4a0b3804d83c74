"""Scaled dot-product attention, the heart of the course.

    Attention(Q, K, V) = softmax(Q K^T * scale + mask) V,   scale = 1 / sqrt(D) by default

Each of the T queries scores all S keys (a (T, S) matrix), softmax turns each row of scores into
weights that sum to 1, and the output is the weighted average of the value rows.
"""

from __future__ import annotations

import numpy as np
import torch

from ..validation import broadcast_leading, check_mask, check_qkv, resolve_scale
from .masks import mask_to_bias
from .softmax import softmax, softmax_np


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
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


def scaled_dot_product_attention_np(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
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
    _check_qkv_np(q, k, v)
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


def _check_qkv_np(q, k, v) -> None:
    """:func:`mha_course.validation.check_qkv` for NumPy: floating arrays, rank >= 2, matching D and S."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating numpy.ndarray, got {type(x).__name__}")
        if x.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., length, dim), got {x.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dim D, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length S, got k {k.shape} and v {v.shape}")
