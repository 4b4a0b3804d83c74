"""RoPE's two layouts: interleaved pairs (the course's, RoFormer's) and rotate-half (most checkpoints).

Rotary positions rotate D/2 coordinate pairs of each query and key by p * theta_i,
theta_i = base^(-2i/D). Which coordinates form pair i is a convention, and two are in use:

* **interleaved**: pair i is (x[2i], x[2i+1]): RoFormer, the original LLaMA code, this course
  (:func:`mha_course.core.positions.apply_rotary`).
* **rotate-half**: pair i is (x[i], x[i + D/2]): GPT-NeoX, and Hugging Face's LLaMA, Mistral and
  Qwen code, written ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = [-x2, x1]``.

The two are the same rotation of *permuted* coordinates. With the permutation
P = [0, 2, 4, ..., D-2, 1, 3, ..., D-1] (evens first, then odds),

    apply_rotary_half(x[..., P]) == apply_rotary(x)[..., P]

and since a score is a dot product, permuting q and k the same way leaves every score unchanged.
So weights trained for one layout run in the other once the rows of W_Q and W_K (and their
biases) are permuted head by head: that is what checkpoint converters do. Loaded *without* the
permutation, nothing fails and the model runs; it just pairs the wrong coordinates and scores
every offset with the wrong angles.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..core.mha import MultiHeadAttention
from ..core.positions import apply_rotary, rotary_cos_sin
from ..validation import require_int, require_positive_int, require_tensor

LAYOUTS = ("interleaved", "half")


def apply_rotary_half(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the rotate-half layout: pair i is (x[i], x[i + D/2]), rotated by p * theta_i.

        y[p, i]       = x[p, i] cos(p theta_i) - x[p, i + D/2] sin(p theta_i)
        y[p, i + D/2] = x[p, i] sin(p theta_i) + x[p, i + D/2] cos(p theta_i),   theta_i = base^(-2i/D)

    Args:
        x: (..., T, D) queries or keys, D even.
        positions: (T,) positions of the rows; default 0 .. T-1.
        base: the wavelength constant.

    Returns:
        (..., T, D), same dtype as x.

    Raises:
        TypeError: x is not a floating tensor, or positions is not a tensor.
        ValueError: x has fewer than 2 dims, D is odd, or positions is not (T,).
    """
    cos, sin = rotary_cos_sin(x, positions, base)  # (T, D/2) each; checks x and positions
    D = x.shape[-1]
    first, second = x[..., : D // 2], x[..., D // 2 :]  # (..., T, D/2) each
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)  # (..., T, D)


def interleaved_to_half_permutation(D: int) -> torch.Tensor:
    """The permutation P (D,) with apply_rotary_half(x[..., P]) == apply_rotary(x)[..., P].

    P = [0, 2, ..., D-2, 1, 3, ..., D-1]: the first coordinates of all pairs, then the second ones.
    Its inverse, ``torch.argsort(P)``, goes back from rotate-half to interleaved.

    Raises:
        TypeError: D is not an int.
        ValueError: D is not a positive even number.
    """
    require_positive_int(D, "D")
    if D % 2:
        raise ValueError(f"D must be even (pairs of coordinates are rotated), got D={D}")
    return torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # (D,)


def convert_rope_rows(weight: torch.Tensor, num_heads: int, to: str = "half") -> torch.Tensor:
    """Permute the rows of a query or key projection, head by head, to run in the other RoPE layout.

    ``weight`` is W_Q or W_K as ``nn.Linear`` stores it, (H*D, E), or its bias (H*D,). Within each
    head's D rows, ``to="half"`` takes row P[j] to row j (evens first, then odds); ``to="interleaved"``
    undoes it. Equivalently, head by head: (D/2, 2) -> (2, D/2), the permutation that checkpoint
    converters apply to LLaMA's W_Q and W_K.

    Returns:
        a new tensor of the same shape.

    Raises:
        TypeError: weight is not a tensor, or num_heads is not an int.
        ValueError: weight is not 1-D or 2-D, its rows are not H blocks of an even D, or ``to`` is unknown.
    """
    require_tensor(weight, "weight")
    require_int(num_heads, "num_heads", 1)
    if to not in LAYOUTS:
        raise ValueError(f"to must be one of {LAYOUTS}, got {to!r}")
    if weight.dim() not in (1, 2):
        raise ValueError(f"weight must be (H*D, E) or a bias (H*D,), got {tuple(weight.shape)}")
    rows = weight.shape[0]
    if rows % num_heads or (rows // num_heads) % 2:
        raise ValueError(f"weight's {rows} rows must be H={num_heads} heads of an even D, got {tuple(weight.shape)}")
    D = rows // num_heads
    perm = interleaved_to_half_permutation(D)
    if to == "interleaved":
        perm = torch.argsort(perm)
    heads = weight.reshape(num_heads, D, *weight.shape[1:])  # (H, D, E) or (H, D)
    return heads[:, perm.to(weight.device)].reshape(weight.shape).clone()  # (H*D, E) or (H*D,)


class RotaryMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention with rotary positions: q and k of each head are rotated (RoPE) by position.

    Same parameters, arguments and returns as :class:`MultiHeadAttention`; queries sit at
    positions 0 .. T-1 and keys at 0 .. S-1, so the score of query m and key n depends on their
    offset n - m and on the content, never on m or n alone.
    """

    def place_queries_and_keys(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (B, H, T, D) and k (B, H, S, D) by their positions 0 .. T-1 and 0 .. S-1."""
        return apply_rotary(q), apply_rotary(k)


class RotateHalfMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention with rotary positions in the rotate-half layout (as most released checkpoints).

    Same parameters, arguments and returns as :class:`MultiHeadAttention`; q (B, H, T, D) and
    k (B, H, S, D) are rotated by :func:`apply_rotary_half` at positions 0 .. T-1 and 0 .. S-1.
    """

    def place_queries_and_keys(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (B, H, T, D) and k (B, H, S, D) in the rotate-half layout."""
        return apply_rotary_half(q), apply_rotary_half(k)


def with_rope_layout(model: nn.Module, layout: str, convert_weights: bool) -> nn.Module:
    """A copy of a rotary TinyTransformer whose attention uses ``layout`` ("interleaved" or "half").

    With ``convert_weights`` the rows of every W_Q and W_K (and biases) are permuted for the new
    layout (:func:`convert_rope_rows`), so the copy computes the same function; without it the
    weights are loaded as they are, which is what happens when a checkpoint's layout is mistaken.

    Raises:
        TypeError: the model's blocks do not use rotary attention.
        ValueError: unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    classes = {RotaryMultiHeadAttention: "interleaved", RotateHalfMultiHeadAttention: "half"}
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(type(b.attn) in classes for b in blocks):
        raise TypeError("with_rope_layout needs a TinyTransformer built with positions='rotary'")
    new_model = copy.deepcopy(model)
    target = RotaryMultiHeadAttention if layout == "interleaved" else RotateHalfMultiHeadAttention
    for block in new_model.blocks:
        old, source_layout = block.attn, classes[type(block.attn)]
        new = target(old.embed_dim, old.num_heads, bias=old.q_proj.bias is not None, dropout=old.dropout.p)
        state = old.state_dict()
        if convert_weights and source_layout != layout:
            for name in ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias"):
                if name in state:
                    state[name] = convert_rope_rows(state[name], old.num_heads, to=layout)
        new.load_state_dict(state)
        block.attn = new.to(old.q_proj.weight.device)
    return new_model


__all__ = [
    "LAYOUTS",
    "apply_rotary_half",
    "interleaved_to_half_permutation",
    "convert_rope_rows",
    "RotaryMultiHeadAttention",
    "RotateHalfMultiHeadAttention",
    "with_rope_layout",
]
