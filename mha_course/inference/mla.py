"""Multi-head latent attention (MLA, DeepSeek-V2, 2024): keys and values from one small shared latent.

GQA shrinks the KV cache by sharing key/value heads; MLA instead caches, per token, one latent
vector c (r numbers, r << H*D) from which every head's key and value are *re-created*:

    c_t   = x_t W_DKV                          (r,)     the latent: cached
    k_t^h = c_t W_UK^h,   v_t^h = c_t W_UV^h   (D,), (Dv,) per head: never cached
    q_t^h = x_t W_Q^h                          (D,)

Rotary positions cannot go through W_UK (a rotation between c and the key would depend on the
position and could not be merged into a fixed matrix), so MLA adds a small *decoupled* rotary
part: a per-head rotary query of Dr features and ONE rotary key shared by all heads, cached too:

    score(t, s) = (q_t^h . k_s^h + rope(x_t W_QR^h) . rope(x_s W_KR)) / sqrt(D + Dr)

Cache per token and layer: r + Dr numbers, against 2 H D for MHA, 2 G D for GQA, 2 D for MQA.

**The absorbed form.** q^h . (c W_UK^h) = (q^h W_UK^h^T) . c, so at decoding the query is mapped
into latent space once (W_Q^h W_UK^h^T is one fixed (E, r) matrix, in this row-vector convention)
and scored directly against the cached latents; likewise W_UV^h is folded into the output
projection. No key or value is ever rebuilt, and the cache stays small. The price is work: per head
and cached token, r + Dr multiply-adds for the score and r for the weighted sum of latents, 2r + Dr
(1088 for DeepSeek-V2's r = 512, Dr = 64) against MHA's 2D (256 for D = 128). Every head reads the
same small cache, so a decoding step moves far fewer bytes per FLOP: absorbed MLA trades bandwidth
for FLOPs and decodes near the compute-bound side of the roofline (:func:`decode_cost_per_token`).
(DeepSeek-V2 also compresses the queries through a latent and normalises the latents; both are
left out here, as they change nothing above.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.attention import scaled_dot_product_attention
from ..core.heads import merge_heads, split_heads
from ..core.masks import causal_mask, mask_to_bias
from ..core.positions import apply_rotary
from ..core.softmax import softmax
from ..validation import check_mask, require_non_negative_int, require_positive_int, require_rank, require_tensor


class LatentCache:
    """What MLA caches per token: the latent c (B, S, r) and the shared rotary key (B, S, Dr).

    ``append(latent, rope_key)`` adds T positions; ``nbytes()`` is what the cache holds.
    """

    def __init__(self):
        self.latent: torch.Tensor | None = None
        self.rope_key: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.latent is None else self.latent.shape[1]

    def append(self, latent: torch.Tensor, rope_key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add latent (B, T, r) and rotated rope_key (B, T, Dr); return the cached (B, S, r), (B, S, Dr)."""
        self.latent = latent if self.latent is None else torch.cat([self.latent, latent], dim=1)  # (B, S, r)
        self.rope_key = rope_key if self.rope_key is None else torch.cat([self.rope_key, rope_key], dim=1)
        return self.latent, self.rope_key

    def nbytes(self) -> int:
        """Bytes held: B * S * (r + Dr) * element size."""
        if self.latent is None:
            return 0
        return (self.latent.numel() + self.rope_key.numel()) * self.latent.element_size()


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention with decoupled rotary positions, in its naive and absorbed forms.

    Args:
        embed_dim: E. num_heads: H.
        latent_dim: r, the cached latent's size.
        head_dim: D, each head's content query/key size (default E / H).
        rope_dim: Dr, the decoupled rotary part (default D / 2; even).
        value_dim: Dv (default D).

    Parameters (no biases, as in DeepSeek-V2): ``q_proj`` E -> H*D, ``q_rope_proj`` E -> H*Dr,
    ``kv_down`` E -> r, ``k_up`` r -> H*D, ``v_up`` r -> H*Dv, ``k_rope_proj`` E -> Dr,
    ``out_proj`` H*Dv -> E.

    forward(x (B, T, E), mask=None) -> (out (B, T, E), weights (B, H, T, T)) builds every key and
    value (the naive form); :meth:`forward_absorbed` computes the same from the latents alone and
    :meth:`decode` runs it against a :class:`LatentCache`.

    Raises:
        TypeError / ValueError: sizes that are not positive ints, E not divisible by H without
            head_dim, or an odd rope_dim.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        latent_dim: int,
        head_dim: int | None = None,
        rope_dim: int | None = None,
        value_dim: int | None = None,
    ):
        super().__init__()
        require_positive_int(embed_dim, "embed_dim")
        require_positive_int(num_heads, "num_heads")
        require_positive_int(latent_dim, "latent_dim")
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}, or give head_dim")
            head_dim = embed_dim // num_heads
        require_positive_int(head_dim, "head_dim")
        rope_dim = max(2, head_dim // 2) if rope_dim is None else rope_dim
        require_positive_int(rope_dim, "rope_dim")
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (pairs are rotated), got {rope_dim}")
        value_dim = head_dim if value_dim is None else require_positive_int(value_dim, "value_dim")
        H, D, Dr, Dv, r = num_heads, head_dim, rope_dim, value_dim, latent_dim
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, H, D
        self.rope_dim, self.value_dim, self.latent_dim = Dr, Dv, r
        self.scale = 1.0 / math.sqrt(D + Dr)
        self.q_proj = nn.Linear(embed_dim, H * D, bias=False)
        self.q_rope_proj = nn.Linear(embed_dim, H * Dr, bias=False)
        self.kv_down = nn.Linear(embed_dim, r, bias=False)
        self.k_up = nn.Linear(r, H * D, bias=False)
        self.v_up = nn.Linear(r, H * Dv, bias=False)
        self.k_rope_proj = nn.Linear(embed_dim, Dr, bias=False)
        self.out_proj = nn.Linear(H * Dv, embed_dim, bias=False)

    # --- the pieces ---------------------------------------------------------------------------

    def _check_x(self, x: torch.Tensor) -> None:
        require_tensor(x, "x")
        require_rank(x, 3, "x", "(B, T, E)")
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, T, E={self.embed_dim}), got {tuple(x.shape)}")

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What is cached for tokens x (B, T, E) at ``positions`` (T,): latent (B, T, r), rotated rope key (B, T, Dr)."""
        return self.kv_down(x), apply_rotary(self.k_rope_proj(x), positions)

    def _queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, D)
        q_rope = apply_rotary(split_heads(self.q_rope_proj(x), self.num_heads), positions)  # (B, H, T, Dr)
        return q, q_rope

    def absorbed_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The two products the absorbed form uses instead of W_Q, W_UK, W_UV, W_O.

        Returns:
            query_to_latent (H, E, r) = W_Q^h^T W_UK^h (with W_Q^h (D, E) and W_UK^h (D, r) as
            nn.Linear stores them): maps a token x to head h's query in latent space;
            latent_to_output (H, r, E) = W_UV^h^T W_O^h^T, W_O^h (E, Dv) being head h's columns of
            W_O: maps head h's weighted latent straight to its share of the output.
        """
        H, D, Dv, r, E = self.num_heads, self.head_dim, self.value_dim, self.latent_dim, self.embed_dim
        w_q = self.q_proj.weight.reshape(H, D, E)  # q^h = W_q[h] x
        w_uk = self.k_up.weight.reshape(H, D, r)  # k^h = W_uk[h] c
        w_uv = self.v_up.weight.reshape(H, Dv, r)  # v^h = W_uv[h] c
        w_o = self.out_proj.weight.reshape(E, H, Dv).permute(1, 2, 0)  # (H, Dv, E): head h's columns of W_O
        query_to_latent = w_q.transpose(1, 2) @ w_uk  # (H, E, D) @ (H, D, r) -> (H, E, r)
        latent_to_output = w_uv.transpose(1, 2) @ w_o  # (H, r, Dv) @ (H, Dv, E) -> (H, r, E)
        return query_to_latent, latent_to_output

    # --- the two forms ------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Naive form: rebuild every head's keys and values from the latents, then ordinary attention.

        Args:
            x: (B, T, E), at positions 0 .. T-1.
            mask: optional course mask broadcastable to (B, H, T, T), e.g. ``causal_mask(T)``.

        Returns:
            out (B, T, E), weights (B, H, T, T).
        """
        self._check_x(x)
        B, T, _ = x.shape
        positions = torch.arange(T, device=x.device)
        latent, rope_key = self.latents(x, positions)  # (B, T, r), (B, T, Dr)
        q, q_rope = self._queries(x, positions)  # (B, H, T, D), (B, H, T, Dr)
        k = split_heads(self.k_up(latent), self.num_heads)  # (B, H, T, D): re-created from the latent
        v = split_heads(self.v_up(latent), self.num_heads)  # (B, H, T, Dv)
        k_rope = rope_key[:, None].expand(B, self.num_heads, T, self.rope_dim)  # (B, H, T, Dr): one key, all heads
        heads, weights = scaled_dot_product_attention(
            torch.cat([q, q_rope], -1), torch.cat([k, k_rope], -1), v, mask=mask, scale=self.scale
        )  # (B, H, T, Dv), (B, H, T, T)
        return self.out_proj(merge_heads(heads)), weights  # (B, T, E)

    def attend_latents(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        latent: torch.Tensor,
        rope_key: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Absorbed form: queries x (B, T, E) at ``positions`` attend to cached latents (B, S, r) and
        rotary keys (B, S, Dr) without re-creating any key or value.

            scores^h = ((x A_q^h) . c_s + q_rope^h . k_rope_s) / sqrt(D + Dr),   A_q^h = query_to_latent[h]
            out      = sum_h (softmax(scores^h) c) A_o^h,                        A_o^h = latent_to_output[h]

        Returns:
            out (B, T, E), weights (B, H, T, S).
        """
        self._check_x(x)
        require_tensor(latent, "latent")
        require_rank(latent, 3, "latent", "(B, S, r)")
        T, S = x.shape[1], latent.shape[1]
        if mask is not None:
            check_mask(mask, T, S)
        query_to_latent, latent_to_output = self.absorbed_matrices()  # (H, E, r), (H, r, E)
        q_latent = torch.einsum("bte,her->bhtr", x, query_to_latent)  # (B, H, T, r)
        _, q_rope = self._queries(x, positions)  # (B, H, T, Dr)
        scores = (
            q_latent @ latent[:, None].transpose(-1, -2)  # (B, H, T, S): content, in latent space
            + q_rope @ rope_key[:, None].transpose(-1, -2)
        ) * self.scale  # plus the shared rotary key
        bias = mask_to_bias(mask, scores.dtype)
        if bias is not None:
            scores = scores + bias
        weights = softmax(scores, dim=-1)  # (B, H, T, S)
        summary = weights @ latent[:, None]  # (B, H, T, r): a weighted latent per head
        return torch.einsum("bhtr,hre->bte", summary, latent_to_output), weights  # (B, T, E)

    def forward_absorbed(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The same result as :meth:`forward`, computed in latent space (:meth:`attend_latents`)."""
        self._check_x(x)
        positions = torch.arange(x.shape[1], device=x.device)
        latent, rope_key = self.latents(x, positions)
        return self.attend_latents(x, positions, latent, rope_key, mask=mask)

    def decode(self, x: torch.Tensor, cache: LatentCache) -> torch.Tensor:
        """Append the new tokens x (B, T, E) to ``cache`` and attend them (causally) to everything cached.

        Token by token from an empty cache this equals ``forward(x, causal_mask(T))``; the cache holds
        r + Dr numbers per token.

        Returns:
            out (B, T, E).
        """
        self._check_x(x)
        start, T = len(cache), x.shape[1]
        positions = torch.arange(start, start + T, device=x.device)
        latent, rope_key = cache.append(*self.latents(x, positions))  # (B, S, r), (B, S, Dr)
        S = latent.shape[1]
        mask = None if T == 1 else causal_mask(T, S, diagonal=S - T, device=x.device)
        return self.attend_latents(x, positions, latent, rope_key, mask=mask)[0]

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"rope_dim={self.rope_dim}, latent_dim={self.latent_dim}, value_dim={self.value_dim}"
        )


def cache_numbers_per_token(
    kind: str,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int | None = None,
    latent_dim: int | None = None,
    rope_dim: int | None = None,
) -> int:
    """Numbers cached per token and layer: "mha" 2 H D, "gqa" 2 G D, "mqa" 2 D, "mla" r + Dr.

    Multiply by the element size (2 bytes in bfloat16) for bytes.

    Raises:
        ValueError: unknown kind, or the sizes the kind needs are missing or not positive.
    """
    require_positive_int(num_heads, "num_heads")
    require_positive_int(head_dim, "head_dim")
    if kind == "mha":
        return 2 * num_heads * head_dim
    if kind == "mqa":
        return 2 * head_dim
    if kind == "gqa":
        if num_kv_heads is None:
            raise ValueError("kind='gqa' needs num_kv_heads")
        return 2 * require_positive_int(num_kv_heads, "num_kv_heads") * head_dim
    if kind == "mla":
        if latent_dim is None or rope_dim is None:
            raise ValueError("kind='mla' needs latent_dim and rope_dim")
        return require_positive_int(latent_dim, "latent_dim") + require_non_negative_int(rope_dim, "rope_dim")
    raise ValueError(f"kind must be 'mha', 'gqa', 'mqa' or 'mla', got {kind!r}")


def decode_cost_per_token(
    kind: str,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int | None = None,
    latent_dim: int | None = None,
    rope_dim: int | None = None,
    element_bytes: int = 2,
) -> dict[str, float]:
    """Work and traffic of one decoding query per cached token and layer, all heads together.

    Multiply-adds per head and cached token: "mha", "gqa", "mqa" 2 D (the score q . k and the term of
    the weighted sum of v); absorbed "mla" 2 r + Dr (the score against the latent and the rotary key,
    and the weighted sum of latents). Bytes: the cache entry, :func:`cache_numbers_per_token` times
    ``element_bytes``, read once per step. Returns ``macs``, ``flops`` (2 per multiply-add), ``bytes``
    and ``intensity`` (FLOPs per byte).

    Raises:
        ValueError: as :func:`cache_numbers_per_token`, or element_bytes < 1.
    """
    require_positive_int(element_bytes, "element_bytes")
    numbers = cache_numbers_per_token(kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim)
    per_head = 2 * latent_dim + rope_dim if kind == "mla" else 2 * head_dim
    macs = num_heads * per_head
    nbytes = numbers * element_bytes
    return {"macs": macs, "flops": 2 * macs, "bytes": nbytes, "intensity": 2 * macs / nbytes}


__all__ = ["LatentCache", "MultiHeadLatentAttention", "cache_numbers_per_token", "decode_cost_per_token"]
