"""The course's tiny transformer, built on :class:`mha_course.MultiHeadAttention`.

    x_0 = Embed(tokens) + PE                       (PE omitted for "none" and "rotary")
    x   = x + MHA(LN(x))        for each block      (pre-LayerNorm residual blocks)
    x   = x + MLP(LN(x))        MLP(x) = W_2 GELU(W_1 x), hidden size 4E
    logits = W_out LN(x)

Positions are "none", "sinusoidal", "learned" (both added to the embeddings) or "rotary" (RoPE,
applied to queries and keys inside attention; see :mod:`mha_course.core.positions`). Rotary attention
is :class:`~mha_course.inference.rope_layouts.RotaryMultiHeadAttention` (re-exported here), a subclass that
only overrides the parent's ``place_queries_and_keys`` hook to rotate the split heads, so its
checks, dropout and head ablation (``head_gate``) are the parent's own. With ``num_kv_heads=G`` the
self-attention is grouped-query attention (:class:`GroupedSelfAttention`, G key/value heads shared
by the H query heads; multi-query when G = 1), for chapter 11's quality comparison.

Every forward also returns the attention weights of every layer, stacked (L, B, H, T, S), so the
chapters can look inside.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..core.heads import gate_heads, merge_heads, split_heads
from ..core.masks import causal_mask, padding_mask
from ..core.mha import MultiHeadAttention
from ..core.positions import LearnedPositions, SinusoidalPositions
from ..inference.rope_layouts import RotaryMultiHeadAttention
from ..inference.variants import GroupedQueryAttention, grouped_query_attention
from ..validation import require_rank, require_tensor

POSITIONS = ("none", "sinusoidal", "learned", "rotary")


@dataclass(frozen=True)
class ModelConfig:
    """A tiny transformer's sizes: the one set of defaults of the model, :func:`mha_course.models.train.train_task`
    and ``python -m mha_course.train``."""

    vocab_size: int
    max_len: int
    embed_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    positions: str = "learned"
    causal: bool = False
    mlp_ratio: int = 4
    num_kv_heads: int | None = None


DEFAULT_MODEL = ModelConfig(vocab_size=0, max_len=0)  # the defaults, read by signatures below


class GroupedSelfAttention(GroupedQueryAttention):
    """Grouped-query self-attention with :class:`MultiHeadAttention`'s call signature and ``head_gate``.

    H query heads share G = ``num_kv_heads`` key/value heads: ``k_proj`` and ``v_proj`` map E -> G*D,
    so the KV cache is H/G times smaller. forward(query (B, T, E), key=None, value=None, mask=None)
    -> (out (B, T, E), weights (B, H, T, T)); key and value, when given, must be ``query`` itself.

    Raises:
        ValueError: key or value is another tensor (this module does self-attention only), or the
            sizes are invalid (see :class:`mha_course.inference.variants.GroupedQueryAttention`).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int):
        super().__init__(embed_dim, num_heads, num_kv_heads)
        self.register_buffer("head_gate", torch.ones(num_heads), persistent=False)  # ablation, as in MHA

    def forward(self, query, key=None, value=None, mask=None):
        if any(x is not None and x is not query for x in (key, value)):
            raise ValueError("GroupedSelfAttention does self-attention only: pass key=value=query or None")
        require_tensor(query, "query")
        require_rank(query, 3, "query", "(B, T, E)")
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, 1, T, S)
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(query), self.num_kv_heads)  # (B, G, T, D)
        v = split_heads(self.v_proj(query), self.num_kv_heads)  # (B, G, T, D)
        heads, weights = grouped_query_attention(q, k, v, mask=mask)  # (B, H, T, D), (B, H, T, T)
        heads = gate_heads(heads, self.head_gate)  # ablation: zero switched-off heads
        return self.out_proj(merge_heads(heads)), weights  # (B, T, E), (B, H, T, T)


def _attention(embed_dim: int, num_heads: int, rotary: bool, num_kv_heads: int | None = None) -> nn.Module:
    if num_kv_heads is not None:
        if rotary:
            raise ValueError("num_kv_heads (grouped-query attention) is not combined with rotary positions here")
        return GroupedSelfAttention(embed_dim, num_heads, num_kv_heads)
    return (RotaryMultiHeadAttention if rotary else MultiHeadAttention)(embed_dim, num_heads)


class MLP(nn.Module):
    """Position-wise feed-forward network W_2 GELU(W_1 x + b_1) + b_2, (B, T, E) -> (B, T, E)."""

    def __init__(self, embed_dim: int, ratio: int = 4):
        super().__init__()
        self.fc = nn.Linear(embed_dim, ratio * embed_dim)
        self.proj = nn.Linear(ratio * embed_dim, embed_dim)

    def forward(self, x):
        return self.proj(torch.nn.functional.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + MHA(LN(x)), then x + MLP(LN(x)); optional cross-attention.

    With ``cross=True`` (a decoder block) a second attention reads the encoder's output ``memory``
    between the two: x + MHA(LN(x), memory, memory).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        rotary: bool = False,
        cross: bool = False,
        mlp_ratio: int = 4,
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        self.ln_attn = nn.LayerNorm(embed_dim)
        self.attn = _attention(embed_dim, num_heads, rotary, num_kv_heads)
        self.ln_cross = nn.LayerNorm(embed_dim) if cross else None
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads) if cross else None  # no positions across
        self.ln_mlp = nn.LayerNorm(embed_dim)
        self.mlp = MLP(embed_dim, mlp_ratio)

    def forward(self, x, mask=None, memory=None, memory_mask=None):
        """x (B, T, E); mask broadcastable to (B, H, T, T); memory (B, S, E), memory_mask to (B, H, T, S).

        Returns x (B, T, E), self-attention weights (B, H, T, T), cross weights (B, H, T, S) or None.
        """
        h = self.ln_attn(x)
        attended, weights = self.attn(h, h, h, mask=mask)
        x = x + attended
        cross_weights = None
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("a decoder block needs memory (B, S, E) from the encoder")
            attended, cross_weights = self.cross_attn(self.ln_cross(x), memory, memory, mask=memory_mask)
            x = x + attended
        x = x + self.mlp(self.ln_mlp(x))
        return x, weights, cross_weights


class _Embedding(nn.Module):
    """Token embedding plus additive positions (none for "none" and "rotary")."""

    def __init__(self, vocab_size: int, embed_dim: int, max_len: int, positions: str):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        self.tokens = nn.Embedding(vocab_size, embed_dim)
        self.max_len = max_len
        self.positions = {
            "sinusoidal": lambda: SinusoidalPositions(max_len, embed_dim),
            "learned": lambda: LearnedPositions(max_len, embed_dim),
        }.get(positions, lambda: None)()

    def forward(self, tokens):
        require_tensor(tokens, "tokens")
        require_rank(tokens, 2, "tokens", "(B, T)")
        if tokens.dtype != torch.long:
            raise TypeError(f"tokens must be a long tensor of ids, got dtype {tokens.dtype}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens (B, T) = {tuple(tokens.shape)} is longer than max_len={self.max_len}")
        x = self.tokens(tokens)  # (B, T, E)
        if self.positions is not None:
            x = x + self.positions(tokens.shape[1])  # (B, T, E) + (T, E)
        return x


class TinyTransformer(nn.Module):
    """A small encoder-only (or causal, GPT-style) transformer that predicts one token per position.

    Args:
        vocab_size: number of token ids (inputs and outputs share the vocabulary).
        max_len: longest sequence T.
        embed_dim: E. num_heads: H (must divide E). num_layers: L.
        positions: "none", "sinusoidal", "learned" or "rotary".
        causal: if True, position t attends only to positions <= t.
        mlp_ratio: MLP hidden size is mlp_ratio * E.
        num_kv_heads: None for ordinary multi-head attention, or G (dividing H) for grouped-query
            attention with G key/value heads (1 = multi-query); not with rotary positions.

    forward(tokens (B, T) long) -> (logits (B, T, vocab_size), attention (L, B, H, T, T)).

    Raises:
        ValueError: unknown positions, E not divisible by H, H not divisible by num_kv_heads, num_kv_heads
            with rotary positions, tokens longer than max_len.
        TypeError: tokens not a long tensor.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int = DEFAULT_MODEL.embed_dim,
        num_heads: int = DEFAULT_MODEL.num_heads,
        num_layers: int = DEFAULT_MODEL.num_layers,
        positions: str = DEFAULT_MODEL.positions,
        causal: bool = DEFAULT_MODEL.causal,
        mlp_ratio: int = DEFAULT_MODEL.mlp_ratio,
        num_kv_heads: int | None = DEFAULT_MODEL.num_kv_heads,
    ):
        super().__init__()
        self.config = ModelConfig(
            vocab_size, max_len, embed_dim, num_heads, num_layers, positions, causal, mlp_ratio, num_kv_heads
        )
        self.causal = causal
        self.embed = _Embedding(vocab_size, embed_dim, max_len, positions)
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, rotary=positions == "rotary", mlp_ratio=mlp_ratio, num_kv_heads=num_kv_heads)
            for _ in range(num_layers)
        )
        self.ln_out = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, vocab_size)

    def attention_modules(self) -> list[nn.Module]:
        """The self-attention module of each layer, in order (their ``head_gate`` switches heads)."""
        return [block.attn for block in self.blocks]

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, T) -> logits (B, T, V), attention (L, B, H, T, T).

        ``mask`` replaces the model's own self-attention mask (causal or none) in every layer, e.g.
        a sliding window to see how a model trained with full attention copes with a short one.
        """
        x = self.embed(tokens)  # (B, T, E)
        T = tokens.shape[1]
        if mask is None and self.causal:
            mask = causal_mask(T, device=tokens.device)  # (T, T)
        weights = []
        for block in self.blocks:
            x, w, _ = block(x, mask=mask)
            weights.append(w)
        return self.head(self.ln_out(x)), torch.stack(weights)  # (B, T, V), (L, B, H, T, T)


class EncoderDecoder(nn.Module):
    """A tiny encoder-decoder (the original transformer's shape) for the cross-attention chapter.

    The encoder reads the source with bidirectional self-attention (padding masked); each decoder
    block has causal self-attention, cross-attention from decoder positions (queries, T) to encoder
    outputs (keys/values, S) with the source padding masked, and an MLP.

    forward(source (B, S) long, inputs (B, T) long, source_lengths (B,) or None) ->
        (logits (B, T, vocab_size), {"encoder": (L, B, H, S, S), "decoder": (L, B, H, T, T),
        "cross": (L, B, H, T, S)}).

    Set ``mask_source_padding = False`` to see what happens when padding is not masked.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int = DEFAULT_MODEL.embed_dim,
        num_heads: int = DEFAULT_MODEL.num_heads,
        num_layers: int = 1,
        positions: str = DEFAULT_MODEL.positions,
        mlp_ratio: int = DEFAULT_MODEL.mlp_ratio,
    ):
        super().__init__()
        # one layer on each side by default: the copy-with-a-twist tasks of chapter 08 need no more
        self.config = ModelConfig(vocab_size, max_len, embed_dim, num_heads, num_layers, positions, mlp_ratio=mlp_ratio)
        rotary = positions == "rotary"
        self.mask_source_padding = True
        self.src_embed = _Embedding(vocab_size, embed_dim, max_len, positions)
        self.tgt_embed = _Embedding(vocab_size, embed_dim, max_len, positions)
        self.encoder = nn.ModuleList(
            Block(embed_dim, num_heads, rotary, mlp_ratio=mlp_ratio) for _ in range(num_layers)
        )
        self.ln_memory = nn.LayerNorm(embed_dim)
        self.decoder = nn.ModuleList(
            Block(embed_dim, num_heads, rotary, cross=True, mlp_ratio=mlp_ratio) for _ in range(num_layers)
        )
        self.ln_out = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, vocab_size)

    def attention_modules(self) -> list[MultiHeadAttention]:
        """The cross-attention module of each decoder layer (the ones chapter 08 ablates)."""
        return [block.cross_attn for block in self.decoder]

    def forward(self, source, inputs, source_lengths=None):
        S, T = source.shape[1], inputs.shape[1]
        pad = None
        if source_lengths is not None and self.mask_source_padding:
            pad = padding_mask(source_lengths.to(source.device), S)  # (B, 1, 1, S)
        memory = self.src_embed(source)  # (B, S, E)
        encoder_weights = []
        for block in self.encoder:
            memory, w, _ = block(memory, mask=pad)
            encoder_weights.append(w)
        memory = self.ln_memory(memory)
        x = self.tgt_embed(inputs)  # (B, T, E)
        decoder_weights, cross_weights = [], []
        for block in self.decoder:
            x, w, c = block(x, mask=causal_mask(T, device=inputs.device), memory=memory, memory_mask=pad)
            decoder_weights.append(w)
            cross_weights.append(c)
        attention = {
            "encoder": torch.stack(encoder_weights),
            "decoder": torch.stack(decoder_weights),
            "cross": torch.stack(cross_weights),
        }
        return self.head(self.ln_out(x)), attention


def build_model(task, **options) -> nn.Module:
    """A TinyTransformer (or EncoderDecoder for encoder-decoder tasks) sized for ``task``.

    ``options`` override the constructor's defaults (embed_dim, num_heads, num_layers, positions, ...).
    """
    cls = EncoderDecoder if task.encoder_decoder else TinyTransformer
    return cls(task.vocab_size, max(task.seq_len, task.source_len), **options)


def run_model(model: nn.Module, data) -> tuple[torch.Tensor, torch.Tensor]:
    """Call ``model`` on a :class:`mha_course.models.tasks.TaskData`; returns (logits, attention).

    For an EncoderDecoder the attention returned is the cross-attention, (L, B, H, T, S).
    """
    if isinstance(model, EncoderDecoder):
        logits, attention = model(data.source, data.inputs, data.source_lengths)
        return logits, attention["cross"]
    return model(data.inputs)
