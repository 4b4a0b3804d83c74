"""QK-norm: queries and keys RMS-normalised before the dot product, per head or over the whole projection.

A score q . k grows with the sizes of q and k; as training drifts the projections W_Q, W_K larger, the
scores grow like their product, the softmax saturates into one-hot weights (and overflows in 16 bits),
a known cause of loss spikes. RMS-normalising queries and keys, then scaling by a learned gain per
coordinate, bounds every score. Released models do it in one of two places:

* **per head** (Gemma 3, Qwen3): each head's D features are normalised on their own, after the split
  into heads. Each head's row then has norm sqrt(D), so by Cauchy-Schwarz

      |q^_h . k^_h| <= D max|g_q| max|g_k|.

* **over the whole projection** (OLMo 2): the flattened (H*D) output of W_Q (and the (G*D) output of
  W_K) is normalised as one vector, *before* the split. Only the whole row has norm sqrt(H*D): one
  head may hold all of it, so one head's score is bounded only by

      |q^_h . k^_h| <= sqrt(H D) sqrt(G D) max|g_q| max|g_k|   (H D when G = H),

  H times the per-head bound with G = H, and which heads get the size depends on the others.

Both compute in float32 (float64 stays float64) and cast back before the gain, as Hugging Face's
RMSNorm classes do, so bfloat16 inputs do not lose the mean of squares. Gemma 3 stores its gain as
w with the scale 1 + w; pass ``1 + w`` as ``gain``.
"""

from __future__ import annotations

import math

import torch

from ..validation import require_min_rank, require_positive_int, require_tensor

PER_HEAD = "head"  # Gemma 3, Qwen3
WHOLE_PROJECTION = "projection"  # OLMo 2
OVER = (PER_HEAD, WHOLE_PROJECTION)


def _rms_normalise(x: torch.Tensor, gain: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, computed in float32 (or float64), cast back, times gain."""
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    wide = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    normed = (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    if gain is None:
        return normed
    require_tensor(gain, "gain")
    if gain.shape != (x.shape[-1],):
        raise ValueError(f"gain must be ({x.shape[-1]},), one per normalised feature, got {tuple(gain.shape)}")
    return normed * gain


def _require_floating(x: torch.Tensor, name: str) -> None:
    require_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")


def qk_norm(x: torch.Tensor, gain: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMS-normalise queries or keys per head (Gemma 3, Qwen3): x / sqrt(mean(x^2) + eps) * gain over D.

    Args:
        x: (..., D) queries or keys, one head per row (e.g. (B, H, T, D)).
        gain: (D,) learned scale (default ones).

    Returns:
        (..., D): each row of RMS 1 (norm sqrt(D)) before the gain, so a score of two normalised rows
        obeys |q . k| <= D * max|gain_q| * max|gain_k| (Cauchy-Schwarz), whatever the size of x.

    Raises:
        TypeError: x or gain is not a floating tensor.
        ValueError: gain is not (D,), or eps is not positive.
    """
    _require_floating(x, "x")
    require_min_rank(x, 1, "x", "(..., D)")
    return _rms_normalise(x, gain, eps)


def qk_norm_heads(
    projected: torch.Tensor,
    num_heads: int,
    over: str = PER_HEAD,
    gain: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Normalise a query or key projection and split it into heads, where a given model normalises.

    Args:
        projected: (B, T, H*D), the output of W_Q (or W_K, with H = G key/value heads), not yet split.
        num_heads: H.
        over: ``"head"`` (Gemma 3, Qwen3): split, then normalise each head's D features; ``gain`` is (D,),
            shared by the heads. ``"projection"`` (OLMo 2): normalise the H*D features as one vector,
            then split; ``gain`` is (H*D,).
        gain: the learned scale (default ones).

    Returns:
        (B, H, T, D). Per head, a score of two such outputs obeys |q . k| <= D max|g_q| max|g_k|;
        over the projection only <= sqrt(H_q D) sqrt(H_k D) max|g_q| max|g_k| (see :func:`score_bound`).

    Raises:
        TypeError: projected or gain is not a floating tensor, num_heads not an int.
        ValueError: projected is not (B, T, H*D), H does not divide its last dim, ``over`` unknown,
            gain of the wrong shape, or eps not positive.
    """
    _require_floating(projected, "projected")
    require_min_rank(projected, 3, "projected", "(B, T, H*D)")
    if projected.dim() != 3:
        raise ValueError(f"projected must be (B, T, H*D), got shape {tuple(projected.shape)}")
    require_positive_int(num_heads, "num_heads")
    B, T, width = projected.shape
    if width % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide the projection's width {width}")
    if over not in OVER:
        raise ValueError(f"over must be one of {OVER}, got {over!r}")
    if over == WHOLE_PROJECTION:
        projected = _rms_normalise(projected, gain, eps)  # (B, T, H*D): one vector per token
    heads = projected.reshape(B, T, num_heads, width // num_heads).transpose(1, 2)  # (B, H, T, D)
    return _rms_normalise(heads, gain, eps) if over == PER_HEAD else heads


def score_bound(
    head_dim: int,
    over: str = PER_HEAD,
    num_heads: int = 1,
    num_kv_heads: int | None = None,
    max_gain_q: float = 1.0,
    max_gain_k: float = 1.0,
) -> float:
    """The largest |q . k| one head can reach after QK-norm (before the 1/sqrt(D) scale).

    Per head: D * max|g_q| * max|g_k|. Over the whole projection (OLMo 2): sqrt(H D) * sqrt(G D) *
    max|g_q| * max|g_k|, with G = ``num_kv_heads`` (default H): one head may hold the whole row's norm.
    Both are reached (up to eps) by rows parallel to each other that are zero outside that head.

    Raises:
        TypeError / ValueError: sizes that are not positive ints, ``over`` unknown, a negative gain.
    """
    require_positive_int(head_dim, "head_dim")
    require_positive_int(num_heads, "num_heads")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    require_positive_int(num_kv_heads, "num_kv_heads")
    if over not in OVER:
        raise ValueError(f"over must be one of {OVER}, got {over!r}")
    if min(max_gain_q, max_gain_k) < 0:
        raise ValueError(f"max gains are absolute values, >= 0; got {max_gain_q} and {max_gain_k}")
    if over == PER_HEAD:
        return head_dim * max_gain_q * max_gain_k
    return math.sqrt(num_heads * num_kv_heads) * head_dim * max_gain_q * max_gain_k


__all__ = ["qk_norm", "qk_norm_heads", "score_bound", "PER_HEAD", "WHOLE_PROJECTION"]
