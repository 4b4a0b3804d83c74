"""Attention sinks and the streaming KV cache (StreamingLLM, Xiao et al., 2024).

Softmax weights must sum to 1, so a head that has nothing useful to read still puts its weight
*somewhere*. Trained models learn to park it on the first tokens: in causal attention they are the
only keys *visible to every later query*, so they are where training can always put spare weight
(the "attention sink"; StreamingLLM shows that any fixed token there works, content aside).
Decoding with a sliding window evicts them as soon as the text is longer than the window, the
parked weight spreads over real tokens, and quality drops. Keeping the first few tokens forever,
beside the window, restores it. ``window`` has the meaning of
:func:`mha_course.inference.variants.sliding_window_mask`: how far back a query sees, so a window of w holds
w + 1 keys, the query's own included:

    key j is visible to query i  <=>  j <= i  and  (i - j <= window  or  j < sinks)

The cache then holds at most sinks + window + 1 entries, however long the text grows.

**Positions.** StreamingLLM numbers the cached keys by their *slot in the cache*, not by their
place in the text: it caches keys before the rotation (RoPE) and rotates them at every step by
their slot, the query by its own slot (the last). Positions then never exceed the cache size, which
training has seen; keeping the original positions instead puts the sinks ever further from the
query, at offsets no training sequence had. :func:`streaming_decode` runs a rotary
:class:`~mha_course.models.model.TinyTransformer` token by token both ways.
"""

from __future__ import annotations

import torch

from ..core.attention import scaled_dot_product_attention
from ..core.heads import gate_heads, merge_heads, split_heads
from ..core.masks import mask_to_bias
from ..validation import (
    check_mask,
    check_qkv,
    require_non_negative_int,
    require_non_negative_ints,
    require_positive_int,
    require_rank,
    require_tensor,
)


def streaming_mask(
    T: int, window: int, sinks: int = 0, S: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean mask (T, S) of sliding-window attention with ``sinks`` always-visible first keys.

    Query i sits at position p_i = i + S - T (the last T of S positions); key j is visible when
    j <= p_i and (p_i - j <= window or j < sinks). ``sinks=0`` is the causal
    ``sliding_window_mask(T, window, causal=True)``: window + 1 keys, the query's own included.

    Raises:
        TypeError: a size is not an int.
        ValueError: window, sinks or T negative, or S < T.
    """
    S = T if S is None else S
    require_non_negative_ints(T=T, S=S, sinks=sinks, window=window)
    if S < T:
        raise ValueError(f"S must be >= T (queries are the last T of S positions), got T={T}, S={S}")
    query_pos = torch.arange(S - T, S, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(S, device=device)[None, :]  # (1, S)
    past = key_pos <= query_pos  # (T, S)
    return past & ((query_pos - key_pos <= window) | (key_pos < sinks))  # (T, S)


def sink_mass(weights: torch.Tensor, sinks: int = 1, skip: int = 0) -> torch.Tensor:
    """Average attention weight that each head puts on the first ``sinks`` keys.

    Args:
        weights: (..., H, T, S) attention weights, e.g. a TinyTransformer's (L, B, H, T, S).
        sinks: how many first keys count as the sink.
        skip: leave out the first ``skip`` queries (they have few keys, so any weight is large there).

    Returns:
        (..., H): the weight on keys 0 .. sinks-1, summed, averaged over the queries; for a
        TinyTransformer's (L, B, H, T, S), take ``.mean(1)`` of the (L, B, H) result for (L, H).

    Raises:
        TypeError / ValueError: weights is not a tensor of rank >= 3, or skip leaves no query.
    """
    require_tensor(weights, "weights")
    if weights.dim() < 3:
        raise ValueError(f"weights must have shape (..., H, T, S) (at least 3 dims), got {tuple(weights.shape)}")
    require_positive_int(sinks, "sinks")
    require_non_negative_int(skip, "skip")
    if skip >= weights.shape[-2]:
        raise ValueError(f"skip={skip} leaves no query of T={weights.shape[-2]}")
    return weights[..., skip:, :sinks].sum(-1).mean(-1)  # (..., H)


class StreamingKVCache:
    """A KV cache that keeps the first ``sinks`` positions and the newest ``window + 1`` (the window).

    ``append(k, v)`` adds positions (B, G, T, D) and evicts the oldest non-sink entries beyond the
    window; ``keys``, ``values`` (B, G, S, D) and ``positions`` (S,) describe what is kept, with
    S <= sinks + window + 1. Attending the newest query to it equals attending over the whole past
    with :func:`streaming_mask`. ``positions`` are the entries' places in the text; ``slots``
    (0 .. S-1) are their places in the cache, the positions StreamingLLM rotates keys by.

    Raises:
        TypeError / ValueError: sizes that are not non-negative ints.
    """

    def __init__(self, window: int, sinks: int = 4):
        self.window = require_non_negative_int(window, "window")
        self.sinks = require_non_negative_int(sinks, "sinks")
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._positions = torch.zeros(0, dtype=torch.long)
        self.seen = 0  # positions appended so far, evicted ones included

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k (B, G, T, D) and v (B, G, T, Dv) at the next T positions; return the kept keys and values.

        Decode one position at a time (T = 1) to match :func:`streaming_mask` exactly: with a chunk,
        its earlier queries would also need keys that the chunk's end evicts.

        Raises:
            TypeError: k or v is not a tensor.
            ValueError: they are not 4-D, differ in T, or do not match the earlier entries' (B, G, D).
        """
        for name, x in (("k", k), ("v", v)):
            require_tensor(x, name)
            require_rank(x, 4, name, "(B, G, T, D)")
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(f"k and v must share (B, G, T), got {tuple(k.shape)} and {tuple(v.shape)}")
        if self._k is not None and (
            k.shape[:2] != self._k.shape[:2] or k.shape[3] != self._k.shape[3] or v.shape[3] != self._v.shape[3]
        ):
            raise ValueError(
                f"k and v must match the cache's (B, G, ., D) = {tuple(self._k.shape)}, "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        new_positions = torch.arange(self.seen, self.seen + k.shape[2])
        self.seen += k.shape[2]
        keys = k if self._k is None else torch.cat([self._k, k], dim=2)  # (B, G, S + T, D)
        values = v if self._v is None else torch.cat([self._v, v], dim=2)  # (B, G, S + T, Dv)
        positions = torch.cat([self._positions, new_positions])  # (S + T,)
        keep = (positions < self.sinks) | (positions >= self.seen - 1 - self.window)  # sinks, and the window
        self._k, self._v, self._positions = keys[:, :, keep], values[:, :, keep], positions[keep]
        return self._k, self._v

    @property
    def keys(self) -> torch.Tensor:
        """(B, G, S, D): the kept keys (S <= sinks + window)."""
        if self._k is None:
            raise ValueError("the cache is empty: append first")
        return self._k

    @property
    def values(self) -> torch.Tensor:
        """(B, G, S, Dv): the kept values."""
        if self._v is None:
            raise ValueError("the cache is empty: append first")
        return self._v

    @property
    def positions(self) -> torch.Tensor:
        """(S,) long: the original position of each kept entry, in order."""
        return self._positions

    @property
    def slots(self) -> torch.Tensor:
        """(S,) long: 0 .. S-1, each kept entry's place in the cache (StreamingLLM's positions)."""
        return torch.arange(len(self))

    def __len__(self) -> int:
        return int(self._positions.numel())

    def __repr__(self) -> str:
        return f"StreamingKVCache(sinks={self.sinks}, window={self.window}, kept={len(self)}, seen={self.seen})"


@torch.no_grad()
def streaming_decode(model, tokens: torch.Tensor, window: int, sinks: int, reindex: bool) -> torch.Tensor:
    """Logits (B, T, V) of a rotary, causal TinyTransformer decoding ``tokens`` (B, T) one at a time
    with a :class:`StreamingKVCache` per layer.

    Each layer caches its keys *before* rotation. At every step the cached keys are rotated by

        reindex=True:  their slots 0 .. S-1 in the cache, the query by its slot S-1 (StreamingLLM)
        reindex=False: their positions in the text, the query by its own position t

    then attended to, so ``reindex=False`` equals ``model(tokens, mask=streaming_mask(T, window, sinks))``.
    Within the window the two agree (a window is contiguous, so offsets are the same); they differ
    in the offset between the query and the sinks: t - j in the text, at most sinks + window in
    the cache. T may exceed the model's ``max_len`` (rotary positions have no table).

    Raises:
        TypeError: the model's attention is not rotary, or tokens is not a tensor.
        ValueError: tokens is not (B, T) with T >= 1; window or sinks negative.
    """
    from ..core.positions import apply_rotary
    from .rope_layouts import RotaryMultiHeadAttention

    require_tensor(tokens, "tokens")
    require_rank(tokens, 2, "tokens", "(B, T)")
    if tokens.shape[1] < 1:
        raise ValueError("tokens must hold at least one position")
    require_non_negative_ints(window=window, sinks=sinks)
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(type(b.attn) is RotaryMultiHeadAttention for b in blocks):
        raise TypeError("streaming_decode needs a TinyTransformer built with positions='rotary'")
    caches = [StreamingKVCache(window, sinks) for _ in blocks]
    logits = []
    for t in range(tokens.shape[1]):
        x = model.embed.tokens(tokens[:, t : t + 1])  # (B, 1, E): rotary models add no position vector
        for block, cache in zip(blocks, caches, strict=True):
            attn, h = block.attn, block.ln_attn(x)
            q = split_heads(attn.q_proj(h), attn.num_heads)  # (B, H, 1, D)
            k, v = (split_heads(proj(h), attn.num_heads) for proj in (attn.k_proj, attn.v_proj))  # (B, H, 1, D)
            keys, values = cache.append(k, v)  # (B, H, S, D): un-rotated keys
            key_pos = cache.slots if reindex else cache.positions  # (S,)
            query_pos = key_pos[-1:]  # the newest entry is the query's own
            heads, _ = scaled_dot_product_attention(apply_rotary(q, query_pos), apply_rotary(keys, key_pos), values)
            x = x + attn.out_proj(merge_heads(gate_heads(heads, attn.head_gate)))  # (B, 1, E)
            x = x + block.mlp(block.ln_mlp(x))
        logits.append(model.head(model.ln_out(x)))
    return torch.cat(logits, dim=1)  # (B, T, V)


def attention_with_sink_logits(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sink_logits: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with one learned "sink" logit per head in the softmax's denominator (as in gpt-oss).

        w_ij = exp(s_ij) / (exp(b_h) + sum_j' exp(s_ij')),      out_i = sum_j w_ij v_j

    The sink is a key no token owns: it takes weight exp(b_h) / (...) and contributes nothing, so a
    head's weights sum to *less* than 1 and the head can attend to nothing at all, with no first token
    to misuse. Equal to ordinary attention over one extra key whose score is b_h and whose value is 0.

    Args:
        q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv); sink_logits (H,) one logit b_h per head;
        mask: the course's mask (bool True = may attend, or float added), broadcastable to (B, H, T, S).

    Returns:
        out (B, H, T, Dv) and weights (B, H, T, S), each row summing to 1 - (the sink's share).

    Raises:
        TypeError / ValueError: as scaled_dot_product_attention; sink_logits not a (H,) tensor.
    """
    require_tensor(sink_logits, "sink_logits")
    require_rank(q, 4, "q", "(B, H, T, D)")
    if sink_logits.shape != (q.shape[1],):
        raise ValueError(f"sink_logits must be (H,) = ({q.shape[1]},), got {tuple(sink_logits.shape)}")
    T, S, D = check_qkv(q, k, v)
    check_mask(mask, T, S)
    scores = q @ k.transpose(-2, -1) * D**-0.5  # (B, H, T, S)
    bias = mask_to_bias(mask, scores.dtype)
    scores = scores if bias is None else scores + bias
    sink = sink_logits.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (B, H, T, 1)
    both = torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)  # (B, H, T, 1 + S): the sink first
    weights = both[..., 1:]  # (B, H, T, S): the sink's column dropped
    return weights @ v, weights  # (B, H, T, Dv), (B, H, T, S)


__all__ = ["streaming_mask", "sink_mass", "StreamingKVCache", "streaming_decode", "attention_with_sink_logits"]
