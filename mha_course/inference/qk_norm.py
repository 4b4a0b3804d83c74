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

Both compute the mean of squares in float32 (float64 stays float64), so bfloat16 inputs do not lose it.
Where the gain is applied differs between Hugging Face's RMSNorm classes, which changes bfloat16 results:

* Qwen3 (LlamaRMSNorm): cast back to the input dtype, *then* times the gain (``gain_before_cast=False``,
  the default per head);
* OLMo 2 (Olmo2RMSNorm): times the gain in float32, *then* cast back (``gain_before_cast=True``, the
  default over the projection);
* Gemma 3 (Gemma3RMSNorm): stores w and multiplies by 1 + w in float32, then casts back: pass
  ``gain=1 + w.float()`` and ``gain_before_cast=True``.
"""

from __future__ import annotations

import math

import torch

from ..validation import require_min_rank, require_positive_int, require_tensor

PER_HEAD = "head"  # Gemma 3, Qwen3
WHOLE_PROJECTION = "projection"  # OLMo 2
OVER = (PER_HEAD, WHOLE_PROJECTION)


def _rms_normalise(x: torch.Tensor, gain: torch.Tensor | None, eps: float, gain_before_cast: bool) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, computed in float32 (or float64), times gain.

    ``gain_before_cast``: multiply by the gain in float32, then cast back (OLMo 2, Gemma 3); else cast back,
    then multiply (Llama, Qwen3). In bfloat16 the two round differently.
    """
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if not isinstance(gain_before_cast, bool):
        raise TypeError(f"gain_before_cast must be a bool, got {type(gain_before_cast).__name__}")
    if gain is not None:
        require_tensor(gain, "gain")
        if gain.shape != (x.shape[-1],):
            raise ValueError(f"gain must be ({x.shape[-1]},), one per normalised feature, got {tuple(gain.shape)}")
    wide = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    if gain is None:
        return normed.to(x.dtype)
    if gain_before_cast:
        return (normed * gain.to(normed.dtype)).to(x.dtype)
    return normed.to(x.dtype) * gain


def _require_floating(x: torch.Tensor, name: str) -> None:
    require_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")


def qk_norm(
    x: torch.Tensor, gain: torch.Tensor | None = None, eps: float = 1e-6, gain_before_cast: bool = False
) -> torch.Tensor:
    """RMS-normalise queries or keys per head (Gemma 3, Qwen3): x / sqrt(mean(x^2) + eps) * gain over D.

    Args:
        x: (..., D) queries or keys, one head per row (e.g. (B, H, T, D)).
        gain: (D,) learned scale (default ones).
        gain_before_cast: False (Qwen3): cast back to x's dtype, then times the gain; True (Gemma 3, with
            ``gain=1 + w.float()``): times the gain in float32, then cast back.

    Returns:
        (..., D): each row of RMS 1 (norm sqrt(D)) before the gain, so a score of two normalised rows
        obeys |q . k| <= D * max|gain_q| * max|gain_k| (Cauchy-Schwarz), whatever the size of x.

    Raises:
        TypeError: x or gain is not a floating tensor.
        ValueError: gain is not (D,), or eps is not positive.
    """
    _require_floating(x, "x")
    require_min_rank(x, 1, "x", "(..., D)")
    return _rms_normalise(x, gain, eps, gain_before_cast)


def qk_norm_heads(
    projected: torch.Tensor,
    num_heads: int,
    over: str = PER_HEAD,
    gain: torch.Tensor | None = None,
    eps: float = 1e-6,
    gain_before_cast: bool | None = None,
) -> torch.Tensor:
    """Normalise a query or key projection and split it into heads, where a given model normalises.

    Args:
        projected: (B, T, H*D), the output of W_Q (or W_K, with H = G key/value heads), not yet split.
        num_heads: H.
        over: ``"head"`` (Gemma 3, Qwen3): split, then normalise each head's D features; ``gain`` is (D,),
            shared by the heads. ``"projection"`` (OLMo 2): normalise the H*D features as one vector,
            then split; ``gain`` is (H*D,).
        gain: the learned scale (default ones).
        gain_before_cast: multiply by the gain in float32 and then cast back to projected's dtype (True), or
            cast back and then multiply (False). Default: as the model that normalises there does, True over
            the projection (OLMo 2), False per head (Qwen3); pass True per head for Gemma 3.

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
    if gain_before_cast is None:
        gain_before_cast = over == WHOLE_PROJECTION
    if over == WHOLE_PROJECTION:
        projected = _rms_normalise(projected, gain, eps, gain_before_cast)  # (B, T, H*D): one vector per token
    heads = projected.reshape(B, T, num_heads, width // num_heads).transpose(1, 2)  # (B, H, T, D)
    return _rms_normalise(heads, gain, eps, gain_before_cast) if over == PER_HEAD else heads


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
