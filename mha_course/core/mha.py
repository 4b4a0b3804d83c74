"""Multi-head attention as an nn.Module, convertible to and from ``torch.nn.MultiheadAttention``.

    head_h = Attention(X_q W_Q^h, X_k W_K^h, X_v W_V^h)
    MultiHead(X_q, X_k, X_v) = Concat(head_1, ..., head_H) W_O

The per-head matrices W_Q^h are the column blocks of one (E, E) projection, so all heads are
computed with one matmul and a reshape (``split_heads``) instead of a Python loop over heads.
"""

from __future__ import annotations

import torch
from torch import nn

from ..validation import check_mask, require_floating, require_int, require_rank, require_tensor
from .attention import scaled_dot_product_attention
from .heads import gate_heads, merge_heads, split_heads


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, batch first: query (B, T, E), key/value (B, S, E).

        q, k, v = split_heads(X_q W_Q^T + b_Q), split_heads(X_k W_K^T + b_K), split_heads(X_v W_V^T + b_V)
        out = merge_heads(softmax(q k^T / sqrt(D) + mask) v) W_O^T + b_O       (B, T, E)

    with q (B, H, T, D), k and v (B, H, S, D), D = E / H; the weights returned are (B, H, T, S).
    Parameters live in four ``nn.Linear(E, E)`` submodules ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``: 4 * E * E weights plus 4 * E biases, independent of the head count.

    Args:
        embed_dim: E, the model dimension.
        num_heads: H; must divide E. Each head works in D = E / H dimensions.
        bias: whether the four projections have biases.
        dropout: dropout on the attention weights during training (0 disables it).

    Raises:
        TypeError: embed_dim or num_heads is not an int.
        ValueError: either is not positive, or E is not divisible by H.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        require_int(embed_dim, "embed_dim")
        require_int(num_heads, "num_heads")
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(
                f"embed_dim must be a positive multiple of num_heads, got embed_dim={embed_dim}, "
                f"num_heads={num_heads} (E = H * D needs E % H == 0)"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        # Per-head on/off switch used by head ablation (chapter 07); all ones means "no ablation".
        self.register_buffer("head_gate", torch.ones(num_heads), persistent=False)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Args:
            query: (B, T, E).
            key: (B, S, E); defaults to ``query``.
            value: (B, S, E); defaults to ``key``.
            mask: optional, course convention (bool True = may attend, or float added), broadcastable
                to (B, H, T, S): e.g. (T, S) causal, (B, 1, 1, S) padding. A (B, T, S) mask is
                applied to every head.

        Returns:
            out: (B, T, E); weights: (B, H, T, S).

        Raises:
            TypeError / ValueError: inputs of the wrong type, rank, or size (the message gives both shapes).
        """
        key, value, mask = self._check_inputs(query, key, value, mask)
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(key), self.num_heads)  # (B, H, S, D)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, H, S, D)
        q, k = self.place_queries_and_keys(q, k)  # a hook: unchanged here, rotated in RotaryMultiHeadAttention
        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, H, T, D), (B, H, T, S)
        if self.training and self.dropout.p > 0:
            heads = torch.matmul(self.dropout(weights), v)  # (B, H, T, D)
        heads = gate_heads(heads, self.head_gate)  # ablation: zero switched-off heads
        heads = self.gate_head_outputs(heads, query)  # a hook: unchanged here, gated in GatedMultiHeadAttention
        return self.out_proj(merge_heads(heads)), weights  # (B, T, E), (B, H, T, S)

    def place_queries_and_keys(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where position information enters attention, for subclasses: q (B, H, T, D), k (B, H, S, D) in and out.

        Unchanged here (positions, if any, were added to the embeddings); rotary attention rotates both.
        """
        return q, k

    def gate_head_outputs(self, heads: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """What each head passes to the output projection, for subclasses: heads (B, H, T, D) in and out.

        Unchanged here; :class:`mha_course.inference.gated_attention.GatedMultiHeadAttention` multiplies
        by a sigmoid gate computed from query (B, T, E).
        """
        return heads

    def _check_inputs(self, query, key, value, mask):
        """(key, value, mask) with defaults filled in, after checking types, ranks, sizes and the mask."""
        key = query if key is None else key
        value = key if value is None else value
        for name, x, legend in (
            ("query", query, "(B, T, E)"),
            ("key", key, "(B, S, E)"),
            ("value", value, "(B, S, E)"),
        ):
            require_tensor(x, name)
            require_floating(x, name)
            if x.dtype != self.q_proj.weight.dtype:
                raise TypeError(
                    f"{name} must have the module's dtype {self.q_proj.weight.dtype}, got {x.dtype} "
                    f"(convert one of them with .to(dtype))"
                )
            require_rank(x, 3, name, legend)
            if x.shape[-1] != self.embed_dim:
                raise ValueError(f"{name} must have shape {legend} with E={self.embed_dim}, got {tuple(x.shape)}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must have the same (B, S), got key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query and key must have the same batch B, got query {tuple(query.shape)} and key {tuple(key.shape)}"
            )
        if mask is not None:
            mask = self._check_mask(mask, query.shape[0], query.shape[1], key.shape[1])
        return key, value, mask

    def _check_mask(self, mask, B: int, T: int, S: int) -> torch.Tensor:
        """Validate a mask against scores (B, H, T, S); a 3-D (B, T, S) mask gets a head axis."""
        require_tensor(mask, "mask")
        expected, original = f"(B={B}, H={self.num_heads}, T={T}, S={S})", tuple(mask.shape)
        if mask.dim() > 4:
            raise ValueError(f"mask must broadcast to scores {expected}, got {original}")
        if mask.dim() == 3:
            if mask.shape[0] not in (1, B):
                raise ValueError(f"a 3-D mask must have shape (B={B}, T={T}, S={S}) (1s broadcast), got {original}")
            mask = mask.unsqueeze(1)  # (B, 1, T, S): same mask for every head
        try:
            check_mask(mask, T, S, batch_shape=(B, self.num_heads))
        except ValueError:
            raise ValueError(f"mask must broadcast to scores {expected}, got {original}") from None
        return mask

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` into a new MultiHeadAttention.

        Only the weights are copied: ours is always batch first, so a module built with
        ``batch_first=False`` expects (T, B, E) inputs where ours expects (B, T, E).

        torch packs W_Q, W_K, W_V as the rows of ``in_proj_weight`` (3E, E), in q, k, v order.

        Raises:
            TypeError: ``module`` is not an nn.MultiheadAttention.
            ValueError: it uses kdim/vdim != embed_dim, add_bias_kv or add_zero_attn (no counterpart here).
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if not module._qkv_same_embed_dim:
            raise ValueError(
                f"kdim/vdim must equal embed_dim={module.embed_dim}, got kdim={module.kdim}, vdim={module.vdim}"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn have no counterpart in MultiHeadAttention")
        has_bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, bias=has_bias, dropout=module.dropout)
        ours = ours.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        with torch.no_grad():
            w_q, w_k, w_v = module.in_proj_weight.chunk(3, dim=0)  # 3 x (E, E)
            for proj, weight in ((ours.q_proj, w_q), (ours.k_proj, w_k), (ours.v_proj, w_v)):
                proj.weight.copy_(weight)
            ours.out_proj.weight.copy_(module.out_proj.weight)
            if has_bias:
                b_q, b_k, b_v = module.in_proj_bias.chunk(3)  # 3 x (E,)
                for proj, b in ((ours.q_proj, b_q), (ours.k_proj, b_k), (ours.v_proj, b_v)):
                    proj.bias.copy_(b)
                ours.out_proj.bias.copy_(module.out_proj.bias)
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """Return a ``torch.nn.MultiheadAttention(batch_first=True)`` holding the same weights.

        Call it with ``average_attn_weights=False`` to get weights (B, H, T, S), and convert masks
        with :func:`mha_course.core.masks.to_torch_attn_mask` / :func:`to_key_padding_mask` (True = blocked there).
        in_proj_weight (3E, E) = [W_Q; W_K; W_V] stacked by rows, in_proj_bias (3E,) likewise.
        Every MultiHeadAttention has a torch twin, so this raises nothing of its own.
        """
        has_bias = self.q_proj.bias is not None
        theirs = nn.MultiheadAttention(
            self.embed_dim, self.num_heads, dropout=self.dropout.p, bias=has_bias, batch_first=True
        )
        theirs = theirs.to(device=self.q_proj.weight.device, dtype=self.q_proj.weight.dtype)
        with torch.no_grad():
            theirs.in_proj_weight.copy_(
                torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            )  # (3E, E)
            theirs.out_proj.weight.copy_(self.out_proj.weight)
            if has_bias:
                theirs.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))  # (3E,)
                theirs.out_proj.bias.copy_(self.out_proj.bias)
        return theirs

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}"
