"""QK-norm (OLMo 2, Gemma 3, Qwen3): queries and keys RMS-normalised per head before the dot product.

A score q . k grows with the sizes of q and k; as training drifts the projections W_Q, W_K larger, the
scores grow like their product, the softmax saturates into one-hot weights (and overflows in 16 bits),
a known cause of loss spikes. Normalising each head's query and key to RMS 1, then scaling by a learned
gain per coordinate, bounds every score:

    q^ = q / rms(q) * g_q,   k^ = k / rms(k) * g_k,   |q^ . k^| <= D max|g_q| max|g_k|

whatever the projections do (each normalised row has norm sqrt(D); Cauchy-Schwarz).
"""

from __future__ import annotations

import torch

from ..validation import require_min_rank, require_tensor


def qk_norm(x: torch.Tensor, gain: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMS-normalise queries or keys per head: x / sqrt(mean(x^2) + eps) * gain, over the last dim D.

    Args:
        x: (..., D) queries or keys, one head per row.
        gain: (D,) learned scale (default ones).

    Returns:
        (..., D): each row of RMS 1 (norm sqrt(D)) before the gain, so a score of two normalised rows
        obeys |q . k| <= D * max|gain_q| * max|gain_k| (Cauchy-Schwarz), whatever the size of x.

    Raises:
        TypeError: x or gain is not a floating tensor.
        ValueError: gain is not (D,), or eps is not positive.
    """
    require_tensor(x, "x")
    require_min_rank(x, 1, "x", "(..., D)")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got {x.dtype}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., D)
    if gain is None:
        return normed
    require_tensor(gain, "gain")
    if gain.shape != (x.shape[-1],):
        raise ValueError(f"gain must be (D,) = ({x.shape[-1]},), got {tuple(gain.shape)}")
    return normed * gain


__all__ = ["qk_norm"]
