"""A hybrid stack: Gated DeltaNet layers with a full-attention layer every few (Qwen3-Next's 3 : 1).

A linear layer keeps a fixed (Dk, Dv) state per head (:mod:`mha_course.models.delta_rule`), cheap at any
length but lossy; a full-attention layer keeps every key and value, exact but with a cache that grows
with T. Qwen3-Next interleaves them, three Gated DeltaNet layers then one full (gated) attention layer.

:class:`GatedDeltaNet` is the linear layer, (B, T, E) -> (B, T, E), as Qwen3-Next builds it without its
short causal convolution: q, k, v = SiLU(W x) in H heads, q and k L2-normalised; beta = sigmoid(W_b x);
g = -exp(A_log) softplus(W_a x + dt_bias) <= 0 (Mamba-2's decay, one per head and token); o from
:func:`~mha_course.models.delta_rule.gated_delta_rule_chunked`; out = W_o (RMSNorm(o) * SiLU(W_z x)).
:class:`HybridTransformer` is the course's causal :class:`~mha_course.models.model.TinyTransformer` with
the attention of every layer but each ``full_every``-th replaced by a GatedDeltaNet, so the course's
tasks and training loop run it unchanged.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..core.masks import causal_mask
from ..validation import require_positive_int
from .delta_rule import gated_delta_rule_chunked
from .model import TinyTransformer


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet self-attention with MultiHeadAttention's call signature: (out (B, T, E), None).

    Args:
        embed_dim: E. num_heads: H (must divide E); Dk = Dv = E / H. chunk_size: C of the chunked form.
        delta: False drops the delta rule's read-back (gated linear attention), for comparison.
        gate: False drops the decay (alpha = 1: the plain delta rule, DeltaNet), for comparison.

    forward(query (B, T, E), key=None, value=None, mask=None): self-attention only (key and value, if
    given, must be query itself); always causal, so ``mask`` must be None. Returns no attention weights:
    the layer never forms them.

    Raises:
        TypeError / ValueError: sizes that are not positive ints, H not dividing E, cross-attention, a mask.
    """

    def __init__(self, embed_dim: int, num_heads: int, chunk_size: int = 16, delta: bool = True, gate: bool = True):
        super().__init__()
        require_positive_int(embed_dim, "embed_dim")
        require_positive_int(num_heads, "num_heads")
        self.chunk_size = require_positive_int(chunk_size, "chunk_size")
        if embed_dim % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide embed_dim={embed_dim}")
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.delta, self.gate = bool(delta), bool(gate)
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.beta_proj = nn.Linear(embed_dim, num_heads)
        if self.gate:
            self.decay_proj = nn.Linear(embed_dim, num_heads, bias=False)
            self.dt_bias = nn.Parameter(torch.zeros(num_heads))
            self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, num_heads)))  # per head, as Mamba-2
        self.gate_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.norm = nn.RMSNorm(self.head_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, query, key=None, value=None, mask=None):
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("GatedDeltaNet is self-attention only: pass key and value as query itself, or None")
        if mask is not None:
            raise ValueError("GatedDeltaNet is always causal: pass mask=None")
        x = query  # (B, T, E)
        B, T, _ = x.shape
        H, D = self.num_heads, self.head_dim

        def heads(y):  # (B, T, H * X) -> (B, H, T, X)
            return y.reshape(B, T, H, -1).transpose(1, 2)

        q, k, v = (heads(y) for y in F.silu(self.qkv_proj(x)).chunk(3, dim=-1))  # (B, H, T, D) each
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (B, H, T)
        g = None
        if self.gate:
            g = (-self.A_log.exp() * F.softplus(self.decay_proj(x) + self.dt_bias)).transpose(1, 2)  # (B, H, T), <= 0
        o, _ = gated_delta_rule_chunked(
            q, k, v, beta, g, chunk_size=self.chunk_size, normalize_qk=True, delta=self.delta
        )  # (B, H, T, D)
        o = self.norm(o.transpose(1, 2)) * F.silu(heads(self.gate_proj(x)).transpose(1, 2))  # (B, T, H, D)
        return self.out_proj(o.reshape(B, T, H * D)), None


class HybridTransformer(TinyTransformer):
    """A causal TinyTransformer whose layers are GatedDeltaNet but every ``full_every``-th (full attention).

    Args:
        as TinyTransformer (always causal), and full_every: layer i is full attention when
            (i + 1) % full_every == 0 (4: three linear layers then one full, Qwen3-Next's ratio; more
            than num_layers: no full layer at all); chunk_size, delta, gate: the linear layers' (see
            :class:`GatedDeltaNet`).

    forward(tokens (B, T) long) -> (logits (B, T, V), attention of the full layers (F, B, H, T, T), or
    None when there are none). ``full_layers`` lists their indices.

    Raises:
        TypeError / ValueError: as TinyTransformer; full_every or chunk_size not a positive int.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 4,
        full_every: int = 4,
        positions: str = "rotary",
        mlp_ratio: int = 4,
        chunk_size: int = 16,
        delta: bool = True,
        gate: bool = True,
    ):
        require_positive_int(full_every, "full_every")
        super().__init__(vocab_size, max_len, embed_dim, num_heads, num_layers, positions, True, mlp_ratio)
        self.full_layers = tuple(i for i in range(num_layers) if (i + 1) % full_every == 0)
        for i, block in enumerate(self.blocks):
            if i not in self.full_layers:
                block.attn = GatedDeltaNet(embed_dim, num_heads, chunk_size, delta, gate)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None):
        if mask is not None:
            raise ValueError("HybridTransformer is always causal: pass mask=None")
        x = self.embed(tokens)  # (B, T, E)
        causal = causal_mask(tokens.shape[1], device=tokens.device)  # (T, T), for the full layers only
        weights = []
        for i, block in enumerate(self.blocks):
            x, w, _ = block(x, mask=causal if i in self.full_layers else None)
            if w is not None:
                weights.append(w)
        return self.head(self.ln_out(x)), torch.stack(weights) if weights else None


__all__ = ["GatedDeltaNet", "HybridTransformer"]
