"""Splitting the model dimension into heads and back: (B, T, E) <-> (B, H, T, D), E = H * D.

A head is a slice of D consecutive features. The reshape must be followed by a transpose: a bare
``view(B, H, T, D)`` would mix tokens and features (the classic bug in the debugging chapter).
"""

from __future__ import annotations

import torch

from ..validation import require_int, require_rank, require_tensor


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, E) -> (B, H, T, D) with H = num_heads and D = E / H: out[b, h, t, d] = x[b, t, h * D + d].

    Head h is the h-th slice of D consecutive features; the result is a view when x is contiguous.

    Raises:
        TypeError: x is not a tensor or num_heads not an int.
        ValueError: x is not 3-D, num_heads is not positive, or E is not divisible by num_heads.
    """
    require_tensor(x, "x")
    require_rank(x, 3, "x", "(B, T, E)")
    require_int(num_heads, "num_heads")
    B, T, E = x.shape
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got num_heads={num_heads} (x {tuple(x.shape)})")
    if E % num_heads:
        raise ValueError(f"embed dim E={E} of x {tuple(x.shape)} must be divisible by num_heads={num_heads}")
    D = E // num_heads
    return x.reshape(B, T, num_heads, D).transpose(1, 2)  # (B, H, T, D); reshape: x may be non-contiguous


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, E) with E = H * D: out[b, t, h * D + d] = x[b, h, t, d].

    The inverse of :func:`split_heads` (concatenates the heads' features, head 0 first).

    Raises:
        TypeError: x is not a tensor.
        ValueError: x is not 4-D.
    """
    require_tensor(x, "x")
    require_rank(x, 4, "x", "(B, H, T, D)")
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, E)


def gate_heads(heads: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Scale each head's output by its gate (1 keeps a head, 0 switches it off: head ablation).

    Args:
        heads: (B, H, T, D), one output per head before they are merged.
        gate: (H,).

    Returns:
        (B, H, T, D).
    """
    return heads * gate.to(heads.dtype)[:, None, None]  # (H, 1, 1) broadcasts over (B, H, T, D)
