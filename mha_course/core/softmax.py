"""Numerically stable softmax, in torch and in NumPy.

softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m),  m = max_j x_j

Subtracting the row maximum m changes nothing mathematically (it cancels) but keeps every
exponent <= 0, so exp never overflows. Half-precision inputs are computed in float32 and cast
back. A row that is entirely -inf (every position masked) has no defined softmax; the course's
choice is an all-zero row, so that attention over nothing returns a zero vector instead of NaN.
"""

from __future__ import annotations

import numpy as np
import torch

from ..validation import require_floating, require_int, require_tensor

#: log2(e): e^x = 2^(x * LOG2E). The tiled loop and the Triton kernels compute exponentials in base 2
#: (exp2 is cheaper than exp) with this factor folded into the scale; one constant for the course.
LOG2E = 1.4426950408889634

_UPCAST = (torch.float16, torch.bfloat16)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stable softmax of ``x`` along ``dim``: exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j.

    Args:
        x: any shape, e.g. scores (..., T, S); floating dtype (float16/bfloat16 are computed in
            float32). A 0-dim tensor counts as one row of length 1, as in ``torch.softmax``.
        dim: the axis that sums to 1, e.g. -1 (the S axis of scores).

    Returns:
        same shape and dtype as ``x``; rows that are all -inf become all zeros (torch gives NaN).

    Raises:
        TypeError: ``x`` is not a floating-point torch.Tensor, or ``dim`` is not an int.
        ValueError: ``dim`` is out of range for ``x``'s shape.
    """
    require_tensor(x, "x")
    require_floating(x, "x")
    dim = require_int(dim, "dim")  # NumPy ints are fine, bools are not
    rank = max(x.dim(), 1)  # a 0-dim tensor accepts dim 0 or -1, like torch.softmax
    if not -rank <= dim < rank:
        raise ValueError(f"dim must be in [{-rank}, {rank - 1}] for x of shape {tuple(x.shape)}, got {dim}")
    if x.dim() and x.shape[dim] == 0:
        return x.clone()  # nothing to normalise (S = 0); amax would fail on an empty axis
    work = x.float() if x.dtype in _UPCAST else x
    row_max = work.amax(dim=dim, keepdim=True)
    # A fully masked row has max -inf; shifting by 0 instead keeps exp(-inf) = 0 and avoids inf - inf.
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    exps = torch.exp(work - row_max)
    total = exps.sum(dim=dim, keepdim=True)
    # total is 0 only for fully masked rows; dividing by 1 there leaves zeros.
    probs = exps / torch.where(total == 0, torch.ones_like(total), total)
    return probs.to(x.dtype)


def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """NumPy twin of :func:`softmax`: exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j; all -inf rows give zeros.

    Args:
        x: array of any shape, e.g. scores (..., T, S); floating dtype (float16 computed in float32).
        axis: the axis that sums to 1.

    Returns:
        array of the same shape and dtype.

    Raises:
        TypeError: ``x`` is not a floating-point NumPy array, or ``axis`` is not an int.
        ValueError: ``axis`` is out of range for ``x``'s shape.
    """
    if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"x must be a floating-point numpy.ndarray, got {type(x).__name__} {getattr(x, 'dtype', '')}")
    axis = require_int(axis, "axis")
    rank = max(x.ndim, 1)
    if not -rank <= axis < rank:
        raise ValueError(f"axis must be in [{-rank}, {rank - 1}] for x of shape {x.shape}, got {axis}")
    if x.ndim and x.shape[axis] == 0:
        return x.copy()  # nothing to normalise; max would fail on an empty axis
    work = x.astype(np.float32) if x.dtype == np.float16 else x
    row_max = work.max(axis=axis, keepdims=True)
    row_max = np.where(np.isneginf(row_max), 0.0, row_max)
    exps = np.exp(work - row_max)
    total = exps.sum(axis=axis, keepdims=True)
    return (exps / np.where(total == 0, 1.0, total)).astype(x.dtype)
