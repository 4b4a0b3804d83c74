"""A key/value cache for autoregressive decoding.

A decoder produces one token at a time, and token t may attend to tokens 0..t. Recomputing the
keys and values of the whole prefix at every step repeats work: the k and v of an old token never
change. The cache keeps them, so a decoding step only projects the *new* token and attends its
single query to the S cached keys:

    cache.k <- [cache.k ; k_t],  cache.v <- [cache.v ; v_t]          (B, G, S, D), S grows by 1
    out_t   = softmax(q_t cache.k^T * scale) cache.v                 (B, H, 1, D)

No mask is needed for one new query: every cached key is in its past. For a chunk of T new queries
at the end of S positions the causal mask is ``causal_mask(T, S, diagonal=S - T)``.
The cost of step t drops from O(t * E^2 + t^2 * E) (recompute the prefix) to O(E^2 + t * E).
"""

from __future__ import annotations

import torch

from ..core.attention import scaled_dot_product_attention
from ..core.heads import gate_heads, merge_heads, split_heads
from ..core.masks import causal_mask
from ..validation import require_non_negative_int, require_positive_ints, require_rank, require_tensor
from .variants import grouped_query_attention


class KVCache:
    """Keys and values of the tokens seen so far, (B, G, S, D), with S growing as steps are appended.

    Args:
        batch, num_kv_heads, head_dim: B, G (the number of key/value heads: H for ordinary multi-head
            attention, fewer for GQA/MQA) and D. ``value_dim`` defaults to D.
        max_len: if given, buffers of (B, G, max_len, D) are preallocated and filled in place (no copy
            per step; appending past max_len raises). If None, the cache grows by concatenation
            (simple, but each step copies the whole cache: O(S) per step).
        dtype, device: of the buffers.

    Raises:
        ValueError: a size is not positive.
    """

    def __init__(
        self,
        batch: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int | None = None,
        value_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        value_dim = head_dim if value_dim is None else value_dim
        require_positive_ints(batch=batch, num_kv_heads=num_kv_heads, head_dim=head_dim, value_dim=value_dim)
        if max_len is not None:
            require_non_negative_int(max_len, "max_len")
        self.batch, self.num_kv_heads, self.head_dim, self.value_dim = batch, num_kv_heads, head_dim, value_dim
        self.max_len = max_len
        capacity = 0 if max_len is None else max_len
        self._k = torch.empty(batch, num_kv_heads, capacity, head_dim, dtype=dtype, device=device)  # (B, G, cap, D)
        self._v = torch.empty(batch, num_kv_heads, capacity, value_dim, dtype=dtype, device=device)  # (B, G, cap, Dv)
        self.length = 0

    @property
    def keys(self) -> torch.Tensor:
        """(B, G, S, D): the cached keys (a view, valid until the next append)."""
        return self._k[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor:
        """(B, G, S, Dv): the cached values (a view)."""
        return self._v[:, :, : self.length]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add T new positions, k (B, G, T, D) and v (B, G, T, Dv) (T = 1 when decoding, more for a
        prompt), and return all cached keys and values, (B, G, S, D) and (B, G, S, Dv).

        Raises:
            TypeError: k or v is not a tensor.
            ValueError: shapes do not match the cache, k and v differ in T, or a preallocated cache is full.
        """
        for name, x, dim in (("k", k, self.head_dim), ("v", v, self.value_dim)):
            require_tensor(x, name)
            require_rank(x, 4, name, "(B, G, T, D)")
            expected = (self.batch, self.num_kv_heads, x.shape[2], dim)
            if tuple(x.shape) != expected:
                raise ValueError(
                    f"{name} must have shape (B={self.batch}, G={self.num_kv_heads}, T, {dim}), got {tuple(x.shape)}"
                )
        if k.shape[2] != v.shape[2]:
            raise ValueError(
                f"k and v must add the same number of positions, got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        new = k.shape[2]
        if self.max_len is None:
            self._k = torch.cat([self._k, k.to(self._k.dtype)], dim=2)  # (B, G, S + T, D)
            self._v = torch.cat([self._v, v.to(self._v.dtype)], dim=2)  # (B, G, S + T, Dv)
        else:
            if self.length + new > self.max_len:
                raise ValueError(f"cache is full: {self.length} + {new} positions exceed max_len={self.max_len}")
            self._k[:, :, self.length : self.length + new] = k
            self._v[:, :, self.length : self.length + new] = v
        self.length += new
        return self.keys, self.values

    def reset(self) -> None:
        """Forget every position: S becomes 0 (preallocated buffers are kept)."""
        self.length = 0
        if self.max_len is None:
            self._k, self._v = self._k[:, :, :0], self._v[:, :, :0]

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (the used part): (B*G*S*D + B*G*S*Dv) * element size."""
        return (self.keys.numel() + self.values.numel()) * self._k.element_size()

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        kind = "growing" if self.max_len is None else f"max_len={self.max_len}"
        return (
            f"KVCache(B={self.batch}, G={self.num_kv_heads}, S={self.length}, D={self.head_dim}, {kind}, "
            f"dtype={self._k.dtype})"
        )


def decode_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache, scale: float | None = None
) -> torch.Tensor:
    """Append the new positions' k, v to ``cache`` and attend the new queries to every cached key.

    Args:
        q: (B, H, T, D), the queries of the T newest positions (T = 1 when decoding token by token).
        k: (B, G, T, D), v: (B, G, T, Dv), their keys and values; G divides H (G < H is GQA/MQA).
        cache: the KVCache holding the S - T earlier positions; it grows to S.
        scale: default 1/sqrt(D).

    Returns:
        out (B, H, T, Dv). Equal to full causal attention's last T rows over all S positions.

    Raises:
        TypeError / ValueError: shapes that do not match each other or the cache.
    """
    require_tensor(q, "q")
    require_rank(q, 4, "q", "(B, H, T, D)")
    require_tensor(k, "k")
    require_rank(k, 4, "k", "(B, G, T, D)")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k must hold the same new positions T, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    keys, values = cache.append(k, v)  # (B, G, S, D), (B, G, S, Dv)
    T, S = q.shape[2], keys.shape[2]
    # one new query sees all of its past; a chunk of T needs the causal mask aligned to the end
    mask = None if T == 1 else causal_mask(T, S, diagonal=S - T, device=q.device)
    if keys.shape[1] == q.shape[1]:
        return scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), mask=mask, scale=scale)[0]
    return grouped_query_attention(q, keys.to(q.dtype), values.to(q.dtype), mask=mask, scale=scale)[0]


def decode_self_attention(
    mha: torch.nn.Module, x: torch.Tensor, use_cache: bool = True, max_len: int | None = None
) -> torch.Tensor:
    """Run causal self-attention over x one position at a time, as a decoder does.

    With ``use_cache`` each step projects only the new token and calls :func:`decode_step`; without
    it each step recomputes the projections and attention of the whole prefix and keeps the last row.
    Either way the result equals ``mha(x, mask=causal_mask(N))[0]`` (up to float rounding).

    Args:
        mha: a MultiHeadAttention (q_proj/k_proj/v_proj/out_proj, num_heads, head_gate) or a
            GroupedQueryAttention (it has num_kv_heads), in eval mode.
        x: (B, N, E), the token embeddings in decoding order.
        use_cache: decode with a KVCache (preallocated when ``max_len`` is given) or by recomputation.

    Returns:
        (B, N, E), the attention outputs of every position.

    Raises:
        ValueError: x is not (B, N, E) with mha's E.
    """
    require_tensor(x, "x")
    require_rank(x, 3, "x", "(B, N, E)")
    B, N, E = x.shape
    if E != mha.embed_dim:
        raise ValueError(f"x must have shape (B, N, E={mha.embed_dim}), got {tuple(x.shape)}")
    H = mha.num_heads
    G = getattr(mha, "num_kv_heads", H)
    gate = getattr(mha, "head_gate", None)
    outputs = []
    if use_cache:
        cache = KVCache(B, G, E // H, max_len=max_len, dtype=x.dtype, device=x.device)
        for t in range(N):
            x_t = x[:, t : t + 1]  # (B, 1, E)
            q = split_heads(mha.q_proj(x_t), H)  # (B, H, 1, D)
            k = split_heads(mha.k_proj(x_t), G)  # (B, G, 1, D)
            v = split_heads(mha.v_proj(x_t), G)  # (B, G, 1, D)
            heads = decode_step(q, k, v, cache)  # (B, H, 1, D)
            if gate is not None:
                heads = gate_heads(heads, gate)  # ablation, as in the module's own forward
            outputs.append(mha.out_proj(merge_heads(heads)))  # (B, 1, E)
    else:
        for t in range(N):
            prefix = x[:, : t + 1]  # (B, t + 1, E)
            out = mha(prefix, mask=causal_mask(t + 1, device=x.device))[0]  # (B, t + 1, E)
            outputs.append(out[:, -1:])  # (B, 1, E): only the newest row is new
    return torch.cat(outputs, dim=1)  # (B, N, E)


__all__ = ["KVCache", "decode_step", "decode_self_attention"]
