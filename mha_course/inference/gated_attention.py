"""Gated attention (Qwen3-Next, 2025; Qiu et al., "Gated Attention for Large Language Models", 2025).

An elementwise sigmoid gate, computed from the layer's input, scales each head's attention output
before the output projection:

    heads = softmax(q k^T / sqrt(D) + mask) v               (B, H, T, D)   as in MultiHeadAttention
    gate  = sigmoid(split_heads(X W_g^T + b_g))             (B, H, T, D)   one gate per head and feature
    out   = merge_heads(heads * gate) W_O^T + b_O           (B, T, E)

The gate comes after the softmax: the attention weights are unchanged, but a head can now output
(nearly) nothing for a token without having to park its weight on a "sink" token, and the product
adds a non-linearity between W_V and W_O. The paper finds it mitigates the attention sink and the
massive activations that come with it.

Qwen3-Next computes the gate with the query: its ``q_proj`` has 2 H D outputs, laid out per head
as [q_h (D), gate_h (D)]; :func:`split_query_gate_weight` cuts such a weight into W_Q and W_g.
Checked against HF transformers' ``Qwen3NextAttention`` in ``tests/inference/test_gated_attention.py``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.heads import split_heads
from ..core.mha import MultiHeadAttention
from ..validation import require_positive_int, require_rank, require_tensor


class GatedMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention with Qwen3-Next's output gate: heads * sigmoid(X W_g^T + b_g) before W_O.

    Same arguments, forward and returns as :class:`~mha_course.core.mha.MultiHeadAttention`; adds the
    submodule ``gate_proj`` (``nn.Linear(E, E)``, with a bias when ``bias``). The gate is computed from
    ``query`` (the layer input in self-attention). The returned weights are the softmax's, ungated.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, bias=bias, dropout=dropout)
        self.gate_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def gate(self, query: torch.Tensor) -> torch.Tensor:
        """The gate sigmoid(query W_g^T + b_g) for query (B, T, E), split by head: (B, H, T, D), in (0, 1)."""
        require_tensor(query, "query")
        require_rank(query, 3, "query", "(B, T, E)")
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"query must have shape (B, T, E={self.embed_dim}), got {tuple(query.shape)}")
        return torch.sigmoid(split_heads(self.gate_proj(query), self.num_heads))  # (B, H, T, D)

    def gate_head_outputs(self, heads: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """Scale heads (B, H, T, D) elementwise by :meth:`gate` (query (B, T, E)), before the output projection."""
        return heads * self.gate(query)


def split_query_gate_weight(weight: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut Qwen3-Next's fused query-and-gate projection into W_Q and W_g.

    Its ``q_proj.weight`` is (2 H D, E) with rows laid out per head as [q_h (D rows), gate_h (D rows)]
    (``q_proj(x).view(..., H, 2 D)`` then ``torch.chunk(., 2, dim=-1)``). The same applies to a bias (2 H D,).

    Args:
        weight: (2 H D, E) or a bias (2 H D,).
        num_heads: H.

    Returns:
        W_Q and W_g, each (H D, E) (or (H D,)), in ``nn.Linear``'s layout, heads in order.

    Raises:
        TypeError / ValueError: not a 1-D or 2-D tensor, or its first size is not a multiple of 2 H.
    """
    require_tensor(weight, "weight")
    require_positive_int(num_heads, "num_heads")
    if weight.dim() not in (1, 2) or weight.shape[0] % (2 * num_heads):
        raise ValueError(f"weight must be (2 H D, E) or (2 H D,) with H={num_heads}, got shape {tuple(weight.shape)}")
    per_head = weight.reshape(num_heads, 2, weight.shape[0] // (2 * num_heads), *weight.shape[1:])  # (H, 2, D, ...)
    w_q, w_g = per_head[:, 0], per_head[:, 1]  # (H, D, ...) each
    return w_q.reshape(-1, *weight.shape[1:]), w_g.reshape(-1, *weight.shape[1:])


__all__ = ["GatedMultiHeadAttention", "split_query_gate_weight"]
