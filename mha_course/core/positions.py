"""Positional information: sinusoidal, learned and rotary (RoPE) positions.

Self-attention alone is permutation-equivariant: shuffle the tokens and the outputs shuffle the
same way, so "the bank approved the loan" and "the loan approved the bank" look alike. Three
ways to tell the model where each token sits:

* sinusoidal (added to the embeddings, no parameters):
      PE[p, 2i] = sin(p / base^(2i/E)),   PE[p, 2i+1] = cos(p / base^(2i/E))
* learned (added to the embeddings): one trainable vector per position, PE[p] = W_pos[p]
* rotary (applied to queries and keys inside attention, no parameters): each pair of
  coordinates (x[2i], x[2i+1]) of a query or key at position p is rotated by the angle
  p * theta_i, theta_i = base^(-2i/D). Since R(a)^T R(b) = R(b - a), the score
  q_m . k_n = q^T R(n - m) k depends on the positions only through the offset n - m.
"""

from __future__ import annotations

import torch
from torch import nn

from ..validation import require_min_rank, require_positive_int, require_tensor


def sinusoidal_positions(T: int, E: int, base: float = 10000.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The fixed sinusoidal table of "Attention Is All You Need", shape (T, E).

        PE[p, 2i] = sin(p / base^(2i/E)),   PE[p, 2i+1] = cos(p / base^(2i/E))

    Low coordinates turn fast (period 2*pi), high ones slowly (period up to 2*pi*base), so every
    position gets a distinct pattern, and PE[p + k] is a fixed linear function of PE[p].

    Args:
        T: number of positions (0 .. T-1).
        E: model dimension; must be even.
        base: the wavelength constant (10000 in the paper).

    Raises:
        TypeError: T or E is not an int.
        ValueError: T or E is not positive, or E is odd.
    """
    require_positive_int(T, "T")
    require_positive_int(E, "E")
    if E % 2:
        raise ValueError(f"E must be even (sin/cos pairs), got E={E}")
    position = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    two_i = torch.arange(0, E, 2, dtype=torch.float64)  # (E/2,)
    angle = position / base ** (two_i / E)  # (T, E/2)
    table = torch.empty(T, E, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.to(dtype)  # (T, E)


class SinusoidalPositions(nn.Module):
    """Adds nothing trainable: ``forward(T)`` returns the (T, E) table of :func:`sinusoidal_positions`,
    PE[p, 2i] = sin(p / base^(2i/E)), PE[p, 2i+1] = cos(p / base^(2i/E)), for p < max_len.

    Raises:
        TypeError / ValueError: as :func:`sinusoidal_positions` (max_len, E positive ints, E even).
    """

    def __init__(self, max_len: int, embed_dim: int, base: float = 10000.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positions(max_len, embed_dim, base), persistent=False)

    def forward(self, T: int) -> torch.Tensor:
        """Return the first T rows, (T, E); ValueError when T exceeds max_len."""
        if T > self.table.shape[0]:
            raise ValueError(f"sequence length T={T} exceeds max_len={self.table.shape[0]}")
        return self.table[:T]


class LearnedPositions(nn.Module):
    """One trainable vector per position, PE[p] = W_pos[p]; ``forward(T)`` returns (T, E).

    Learned positions cannot say anything about positions never seen in training (p >= max_len).

    Raises:
        TypeError / ValueError: max_len or embed_dim is not a positive int.
    """

    def __init__(self, max_len: int, embed_dim: int):
        super().__init__()
        require_positive_int(max_len, "max_len")
        require_positive_int(embed_dim, "embed_dim")
        self.weight = nn.Parameter(torch.randn(max_len, embed_dim) * 0.02)  # (max_len, E)

    def forward(self, T: int) -> torch.Tensor:
        """Return the first T rows, (T, E); ValueError when T exceeds max_len."""
        if T > self.weight.shape[0]:
            raise ValueError(f"sequence length T={T} exceeds max_len={self.weight.shape[0]}")
        return self.weight[:T]


def rotary_angles(positions: torch.Tensor, D: int, base: float = 10000.0) -> torch.Tensor:
    """Rotation angles p * theta_i with theta_i = base^(-2i/D), shape (T, D/2).

    Args:
        positions: (T,) integer or float positions.
        D: per-head dimension; must be even.

    Raises:
        TypeError: positions is not a tensor, D is not an int.
        ValueError: D is odd or not positive, positions is not 1-D.
    """
    require_tensor(positions, "positions")
    require_positive_int(D, "D")
    if D % 2:
        raise ValueError(f"D must be even (pairs of coordinates are rotated), got D={D}")
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (T,), got {tuple(positions.shape)}")
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64, device=positions.device) / D)  # (D/2,)
    return positions.to(torch.float64)[:, None] * theta[None, :]  # (T, D/2)


def rotary_cos_sin(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, D/2) of every pair's angle for x (..., T, D), in x's dtype, after checking both inputs.

    Shared by both RoPE layouts (this module's interleaved pairs, :mod:`mha_course.inference.rope_layouts`' halves).

    Raises:
        TypeError: x is not a floating tensor, or positions is not a tensor.
        ValueError: x has fewer than 2 dims, D is odd, or positions is not (T,).
    """
    require_tensor(x, "x")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    require_min_rank(x, 2, "x", "(..., T, D)")
    T, D = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    require_tensor(positions, "positions")
    if positions.shape != (T,):
        raise ValueError(f"positions must have shape (T,) = ({T},), got {tuple(positions.shape)}")
    angle = rotary_angles(positions, D, base)  # (T, D/2); raises for odd D
    return torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)


def apply_rotary(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate each coordinate pair of x by its position's angle (RoPE), same shape as x.

        y[p, 2i]   = x[p, 2i] cos(p theta_i) - x[p, 2i+1] sin(p theta_i)
        y[p, 2i+1] = x[p, 2i] sin(p theta_i) + x[p, 2i+1] cos(p theta_i),   theta_i = base^(-2i/D)

    Apply it to queries and keys (not values). Then (R_m q) . (R_n k) = q^T R_{n-m} k: the score
    depends on the two positions only through their offset n - m.

    Args:
        x: (..., T, D) queries or keys, D even.
        positions: (T,) positions of the T rows; default 0 .. T-1.
        base: the wavelength constant.

    Raises:
        TypeError: x is not a floating tensor, or positions is not a tensor.
        ValueError: x has fewer than 2 dims, D is odd, or positions has the wrong length.
    """
    cos, sin = rotary_cos_sin(x, positions, base)  # (T, D/2) each
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., T, D/2, 2)
    return rotated.flatten(-2)  # (..., T, D)
