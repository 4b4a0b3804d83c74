"""Layers without positions (NoPE) and their attention temperature, as Llama 4 interleaves them (2025).

Llama 4 drops rotary positions in every 4th layer (layers 3, 7, 11, ... counted from 0: HF's
``no_rope_layers[i] = int((i + 1) % no_rope_layer_interval != 0)``, 1 = RoPE). A NoPE layer sees
order only through the causal mask, so nothing in it is tied to a distance; Meta names length
generalisation as the aim of this interleaving ("iRoPE"). In Llama 4 the RoPE layers use chunked local attention
(:mod:`mha_course.inference.chunked_attention`) and the NoPE layers full causal attention, so the
NoPE layers are the ones that see the whole context.

Temperature. With more keys a softmax spreads thinner; a NoPE layer, which cannot sharpen with
positions, scales its queries up slowly with the query's position p (counted from 0; HF's code cites
Scalable-Softmax, Nakanishi 2025, arXiv 2501.19399):

    scale(p) = 1 + attn_scale * log(floor((p + 1) / floor_scale) + 1)     (floor_scale = 8192, attn_scale = 0.1)

which is exactly 1 for the first floor_scale - 1 positions and grows like log p after. Multiplying
q by scale(p) multiplies that query's scores by it (a lower softmax temperature).

Checked against HF transformers' ``Llama4TextAttention.forward`` (``attn_temperature_tuning``) and
``Llama4TextConfig`` (``no_rope_layers``) in ``tests/inference/test_llama4_reference.py``.
"""

from __future__ import annotations

import torch

from ..validation import require_floating, require_int, require_min_rank, require_positive_number, require_tensor


def rope_layers(num_layers: int, no_rope_interval: int = 4) -> list[bool]:
    """Which layers use RoPE (True) and which are NoPE (False): layer i is NoPE when (i + 1) % interval == 0.

    Llama 4: ``rope_layers(48)`` has NoPE at layers 3, 7, ..., 47. In Llama 4 the True layers also use
    chunked attention and the False layers full causal attention.

    Raises:
        TypeError / ValueError: num_layers < 0 or no_rope_interval < 1, or not ints.
    """
    require_int(num_layers, "num_layers", minimum=0)
    require_int(no_rope_interval, "no_rope_interval", minimum=1)
    return [(i + 1) % no_rope_interval != 0 for i in range(num_layers)]


def nope_query_scale(positions: torch.Tensor, floor_scale: float = 8192.0, attn_scale: float = 0.1) -> torch.Tensor:
    """Llama 4's NoPE-layer query scale 1 + attn_scale * log(floor((p + 1) / floor_scale) + 1) for positions (T,).

    Returns:
        (T,) float32 scales (>= 1).

    Raises:
        TypeError / ValueError: positions not a tensor, negative positions, or non-positive floor_scale /
            attn_scale.
    """
    require_tensor(positions, "positions")
    require_positive_number(floor_scale, "floor_scale")
    require_positive_number(attn_scale, "attn_scale")
    if positions.numel() and float(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got min {float(positions.min())}")
    p = positions.float()
    return torch.log(torch.floor((p + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0


def apply_nope_temperature(
    q: torch.Tensor, positions: torch.Tensor | None = None, floor_scale: float = 8192.0, attn_scale: float = 0.1
) -> torch.Tensor:
    """Scale queries q (..., T, D) by :func:`nope_query_scale` of their positions (default 0 .. T-1); same shape.

    Raises:
        TypeError / ValueError: q not a floating tensor of rank >= 2, positions not (T,), or as nope_query_scale.
    """
    require_tensor(q, "q")
    require_floating(q, "q")
    require_min_rank(q, 2, "q", "(..., T, D)")
    T = q.shape[-2]
    positions = torch.arange(T, device=q.device) if positions is None else positions
    require_tensor(positions, "positions")
    if tuple(positions.shape) != (T,):
        raise ValueError(f"positions must have shape (T={T},), got {tuple(positions.shape)}")
    scale = nope_query_scale(positions, floor_scale, attn_scale).to(device=q.device)  # (T,)
    return (q * scale[:, None]).to(q.dtype)


__all__ = ["rope_layers", "nope_query_scale", "apply_nope_temperature"]
