"""ALiBi: attention with linear biases instead of position vectors (Press et al., 2022).

No position is added to the tokens and nothing rotates; each head h instead subtracts from every
score a penalty proportional to the distance between query and key:

    scores[h, i, j] = q_i . k_j * scale - m_h * (i - j)          (causal: j <= i)

The slopes m_h form a geometric sequence, one per head: for H a power of two,
m_h = 2^(-8 (h + 1) / H), so with H = 8 the slopes are 1/2, 1/4, ..., 1/256. Steep heads look
only at the last few tokens, gentle ones far back. The bias is a float mask (added to the scores),
so it goes through the course's attention unchanged; and since it is defined for any distance, a
model trained on short sequences can be run on longer ones (the paper's "train short, test long").
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.masks import mask_to_bias
from ..core.mha import MultiHeadAttention
from ..validation import require_non_negative_ints, require_positive_int, require_tensor


def alibi_slopes(num_heads: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The geometric head slopes of ALiBi, shape (H,).

    For H a power of two: m_h = 2^(-8 (h + 1) / H), h = 0 .. H-1. Otherwise, with n the largest
    power of two below H, the n slopes of n heads followed by every other slope of 2n heads
    (the first H - n of them), as in the paper's reference code, so the slopes stay in (0, 1)
    and keep their geometric spacing.

    Raises:
        TypeError: num_heads is not an int.
        ValueError: num_heads is not positive.
    """
    require_positive_int(num_heads, "num_heads")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(n)
    if n < num_heads:
        slopes += power_of_two(2 * n)[0::2][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.float64).to(dtype)  # (H,)


def alibi_bias(
    num_heads: int,
    T: int,
    S: int | None = None,
    *,
    causal: bool = True,
    slopes: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The ALiBi float mask, shape (H, T, S): bias[h, i, j] = -m_h * (p_i - j), added to the scores.

    Query i sits at position p_i = i + S - T (the T queries are the *last* T of the S positions,
    as when decoding with a KV cache; p_i = i when T == S). With ``causal`` the future keys
    (j > p_i) get -inf, so the bias is the whole causal mask too; without it the penalty is
    symmetric, -m_h * |p_i - j| (a bidirectional variant).

    Args:
        num_heads: H.
        T, S: queries and keys (S defaults to T; S >= T).
        causal: block future keys with -inf.
        slopes: (H,) slopes; default :func:`alibi_slopes`.
        dtype, device: of the result.

    Raises:
        TypeError: a size is not an int, or slopes is not a tensor.
        ValueError: a size is negative, S < T, or slopes is not (H,).
    """
    S = T if S is None else S
    require_positive_int(num_heads, "num_heads")
    require_non_negative_ints(T=T, S=S)
    if S < T:
        raise ValueError(f"S must be >= T (queries are the last T of S positions), got T={T}, S={S}")
    if slopes is None:
        slopes = alibi_slopes(num_heads, torch.float64)
    require_tensor(slopes, "slopes")
    if tuple(slopes.shape) != (num_heads,):
        raise ValueError(f"slopes must have shape (H,) = ({num_heads},), got {tuple(slopes.shape)}")
    query_pos = torch.arange(S - T, S, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(S, device=device)[None, :]  # (1, S)
    distance = (query_pos - key_pos).to(torch.float64)  # (T, S): how far back key j is
    bias = -slopes.to(device=device, dtype=torch.float64)[:, None, None] * distance.abs()  # (H, T, S)
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    return bias.to(dtype)  # (H, T, S)


class AlibiMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention whose scores carry ALiBi's symmetric bias -m_h |i - j| (the given mask,
    e.g. a causal one, is added on top). Same parameters, arguments and returns as the parent.

    forward(query (B, T, E), key (B, S, E), value, mask) -> (out (B, T, E), weights (B, H, T, S)).
    """

    def forward(self, query, key=None, value=None, mask=None):
        require_tensor(query, "query")
        S = query.shape[-2] if key is None else key.shape[-2]
        T = query.shape[-2]
        if T > S:
            raise ValueError(f"ALiBi attention needs T <= S (queries are the last T positions), got T={T}, S={S}")
        bias = alibi_bias(self.num_heads, T, S, causal=False, dtype=query.dtype, device=query.device)[
            None
        ]  # (1, H, T, S)
        if mask is not None:
            require_tensor(mask, "mask")
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # (B, 1, T, S): same mask for every head
            mask = bias + mask_to_bias(mask, query.dtype)  # (B|1, H, T, S)
        else:
            mask = bias
        return super().forward(query, key, value, mask=mask)


def use_alibi(model: nn.Module) -> nn.Module:
    """Give a TinyTransformer (built with ``positions="none"``) ALiBi attention in every block, in place.

    Each block's self-attention becomes an :class:`AlibiMultiHeadAttention` with the same weights,
    so a fresh model trains with ALiBi and a trained one is re-run with it. Returns ``model``.

    Raises:
        TypeError: the model has no ``blocks`` of MultiHeadAttention, or it adds positions itself.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(type(b.attn) in (MultiHeadAttention, AlibiMultiHeadAttention) for b in blocks):
        raise TypeError("use_alibi needs a TinyTransformer whose blocks use plain MultiHeadAttention")
    if getattr(getattr(model, "embed", None), "positions", None) is not None:
        raise TypeError("use_alibi needs a model built with positions='none': ALiBi replaces position vectors")
    for block in blocks:
        old = block.attn
        new = AlibiMultiHeadAttention(
            old.embed_dim, old.num_heads, bias=old.q_proj.bias is not None, dropout=old.dropout.p
        )
        new.load_state_dict(old.state_dict())
        block.attn = new.to(old.q_proj.weight.device)
    return model


__all__ = ["alibi_slopes", "alibi_bias", "AlibiMultiHeadAttention", "use_alibi"]
