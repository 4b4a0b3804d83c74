"""Cheaper attention: fewer key/value heads, a local window, or a low-rank summary of the keys.

Grouped-query attention (GQA) keeps H query heads but only G key/value heads (G divides H); query
head h reads key/value head h // (H / G). Multi-query attention (MQA) is G = 1; G = H is ordinary
multi-head attention. The KV cache shrinks by H / G:

    KV-cache bytes = 2 (k and v) * B * G * S * D * bytes_per_element   (per layer)

Sliding-window (local) attention, as in Longformer: query i sees only keys within ``window``
positions, |i - j| <= window (or 0 <= i - j <= window when causal). The banded implementation
computes only those scores, O(T * window * D) work and memory instead of O(T * S * D).

Low-rank (Linformer-style) attention projects the S keys and values down to r << S rows with
(r, S) matrices E and F before attending:

    out = softmax(q (E k)^T * scale) (F v),    scores (T, r) instead of (T, S)

It approximates full attention well when the weight matrix is close to low rank (e.g. smooth
sequences), and cannot express causality (every summary row mixes all positions).

Two more pieces of today's models live here. *Interleaved local and global layers* (Mistral's
sliding window in every layer; Gemma 2 alternating 1 local : 1 global, Gemma 3 5 : 1) keep a short
cache in the local layers: :func:`interleaved_kv_cache_numbers`. QK-norm lives in :mod:`mha_course.inference.qk_norm`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.attention import scaled_dot_product_attention
from ..core.heads import merge_heads, split_heads
from ..validation import (
    check_qkv,
    require_int,
    require_min_rank,
    require_non_negative_int,
    require_rank,
    require_tensor,
    resolve_scale,
)

# ----------------------------------------------------------------------------- grouped-query


def repeat_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, G, S, D) -> (B, H, S, D): repeat each of the G key/value heads H / G times, in place order.

    out[..., h, :, :] = x[..., h // (H / G), :, :], so query head h lines up with key/value head
    h // (H / G), as in GQA.

    Raises:
        TypeError: x is not a tensor, or num_heads is not an int.
        ValueError: x has fewer than 3 dims, or H is not a positive multiple of G.
    """
    require_tensor(x, "x")
    require_min_rank(x, 3, "x", "(..., G, S, D)")
    require_int(num_heads, "num_heads")
    G = x.shape[-3]
    if G == 0 or num_heads <= 0 or num_heads % G:
        raise ValueError(
            f"num_heads H={num_heads} must be a positive multiple of the G={G} key/value heads of x {tuple(x.shape)}"
        )
    return x.repeat_interleave(num_heads // G, dim=-3)  # (..., H, S, D)


def grouped_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with H query heads sharing G key/value heads (GQA; MQA when G = 1).

    out[:, h] = softmax(q[:, h] k[:, g]^T * scale + mask) v[:, g] with g = h // (H / G); equivalent to
    ``scaled_dot_product_attention(q, repeat_kv(k, H), repeat_kv(v, H), mask, scale)`` but without
    copying k and v: q is viewed as (B, G, H/G, T, D) and k, v broadcast over the group.

    Args:
        q: (B, H, T, D); k: (B, G, S, D); v: (B, G, S, Dv), with H a multiple of G.
        mask: optional, broadcastable to (B, H, T, S) (course convention, True = may attend).
        scale: default 1/sqrt(D).

    Returns:
        out (B, H, T, Dv), weights (B, H, T, S).

    Raises:
        TypeError: inputs are not floating tensors of one dtype.
        ValueError: inputs are not 4-D, D or S disagree, batch sizes differ, H is not a multiple of G,
            or the mask does not broadcast to (B, H, T, S).
    """
    for name, x, legend in (("q", q, "(B, H, T, D)"), ("k", k, "(B, G, S, D)"), ("v", v, "(B, G, S, Dv)")):
        require_tensor(x, name)
        require_rank(x, 4, name, legend)
    B, H, T, D = q.shape
    G = k.shape[1]
    if v.shape[1] != G or G == 0 or H % G:
        raise ValueError(
            f"k and v must share G key/value heads dividing H={H}: q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"batch sizes differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[-1] != D or v.shape[2] != k.shape[2]:
        raise ValueError(
            f"need q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) with one D and one S, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    check_qkv(q, k[:, :1], v[:, :1])  # dtypes (G is broadcast below, not here)
    R = H // G  # query heads per key/value head
    qg = q.reshape(B, G, R, T, D)  # (B, G, H/G, T, D): heads h = g * R + r
    if mask is not None:
        require_tensor(mask, "mask")
        if mask.dim() > 4:
            raise ValueError(f"mask must broadcast to (B, H, T, S), got {tuple(mask.shape)}")
        if mask.dim() >= 3:
            mask4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (B|1, H|1, T|1, S|1)
            if mask4.shape[1] not in (1, H):
                raise ValueError(f"mask's head dim must be 1 or H={H}, got {tuple(mask.shape)}")
            mask = (
                mask4.reshape(mask4.shape[0], G, R, *mask4.shape[2:]) if mask4.shape[1] == H else mask4.unsqueeze(2)
            )  # (B|1, G|1, R|1, T, S)
    out, weights = scaled_dot_product_attention(qg, k.unsqueeze(2), v.unsqueeze(2), mask=mask, scale=scale)
    S = k.shape[2]
    return out.reshape(B, H, T, v.shape[-1]), weights.reshape(B, H, T, S)  # (B, H, T, Dv), (B, H, T, S)


def kv_cache_bytes(
    batch: int, num_kv_heads: int, seq_len: int, head_dim: int, dtype: torch.dtype = torch.float16, num_layers: int = 1
) -> int:
    """Bytes a KV cache holds: 2 (k and v) * layers * B * G * S * D * element size.

    The cached keys and values are (B, G, S, D) each, per layer.

    Raises:
        ValueError: a size is negative or not an int.
    """
    sizes = {
        "batch": batch,
        "num_kv_heads": num_kv_heads,
        "seq_len": seq_len,
        "head_dim": head_dim,
        "num_layers": num_layers,
    }
    for name, n in sizes.items():
        require_non_negative_int(n, name)
    item = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * batch * num_kv_heads * seq_len * head_dim * item


class GroupedQueryAttention(nn.Module):
    """Multi-head attention with ``num_kv_heads`` key/value heads (GQA; MQA when it is 1).

    Parameters: ``q_proj`` (E -> E), ``k_proj`` and ``v_proj`` (E -> G*D), ``out_proj`` (E -> E),
    so out = merge_heads(grouped_query_attention(x W_Q, x W_K, x W_V)) W_O with q (B, H, T, D) and
    k, v (B, G, T, D).

    Raises:
        TypeError: a size is not an int.
        ValueError: a size is not positive, E is not divisible by H, or H by G.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, bias: bool = True):
        super().__init__()
        for name, n in (("embed_dim", embed_dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            require_int(n, name)
        if embed_dim <= 0 or num_heads <= 0 or num_kv_heads <= 0 or embed_dim % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"need E % H == 0 and H % G == 0, got E={embed_dim}, H={num_heads}, G={num_kv_heads}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        kv_dim = num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention over x (B, T, E); mask broadcastable to (B, H, T, T). Returns (B, T, E), (B, H, T, T).

        Raises:
            TypeError / ValueError: x is not a (B, T, E) floating tensor with the module's E, or a
                bad mask (as :func:`grouped_query_attention`).
        """
        require_tensor(x, "x")
        require_rank(x, 3, "x", "(B, T, E)")
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, T, E={self.embed_dim}), got {tuple(x.shape)}")
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, G, T, D)
        v = split_heads(self.v_proj(x), self.num_kv_heads)  # (B, G, T, D)
        heads, weights = grouped_query_attention(q, k, v, mask=mask)  # (B, H, T, D), (B, H, T, T)
        return self.out_proj(merge_heads(heads)), weights  # (B, T, E)

    @classmethod
    def from_mha(cls, mha: nn.Module, num_kv_heads: int) -> GroupedQueryAttention:
        """Convert a MultiHeadAttention (q/k/v/out_proj, num_heads) by mean-pooling the key and value
        projection heads of each group, as the GQA paper does before "uptraining":
        W_K^g = mean of W_K^h over the H / G heads h of group g, (D, E) each (likewise W_V).

        Raises:
            TypeError / ValueError: num_kv_heads is not a positive int dividing mha.num_heads.
        """
        H, E = mha.num_heads, mha.q_proj.in_features
        bias = mha.q_proj.bias is not None
        gqa = cls(E, H, num_kv_heads, bias=bias)
        D, G = E // H, num_kv_heads
        with torch.no_grad():
            for name in ("q_proj", "out_proj"):
                getattr(gqa, name).load_state_dict(getattr(mha, name).state_dict())
            for name in ("k_proj", "v_proj"):
                src = getattr(mha, name)
                w = src.weight.reshape(G, H // G, D, E).mean(dim=1)  # (G, D, E): average the group's heads
                getattr(gqa, name).weight.copy_(w.reshape(G * D, E))
                if bias:
                    getattr(gqa, name).bias.copy_(src.bias.reshape(G, H // G, D).mean(dim=1).reshape(G * D))
        return gqa

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}"


# ----------------------------------------------------------------------------- sliding window


def sliding_window_mask(
    T: int, window: int, S: int | None = None, causal: bool = False, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean local-attention mask (T, S): True where |i - j| <= window (0 <= i - j <= window if causal).

    Raises:
        TypeError: window, T or S is not an int.
        ValueError: window, T or S is negative.
    """
    S = T if S is None else S
    for name, n in (("T", T), ("S", S), ("window", window)):
        require_int(n, name)
    if min(T, S, window) < 0:
        raise ValueError(f"T, S and window must be >= 0, got T={T}, S={S}, window={window}")
    offset = torch.arange(T, device=device)[:, None] - torch.arange(S, device=device)[None, :]  # (T, S): i - j
    if causal:
        return (offset >= 0) & (offset <= window)
    return offset.abs() <= window


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    causal: bool = False,
    scale: float | None = None,
    method: str = "banded",
) -> torch.Tensor:
    """Local (Longformer-style) self-attention: query i attends to keys j with |i - j| <= window.

    ``method="banded"`` cuts the sequence into blocks of c = max(window, 16) queries; each block
    attends only to the c + 2*window keys around it (a strided view, no copy), so work and memory are
    O(T * (c + 2 * window) * D). ``method="mask"`` is the reference: full attention with
    :func:`sliding_window_mask`, O(T^2).

    Args:
        q: (B, H, T, D); k: (B, H, T, D); v: (B, H, T, Dv) (self-attention: S = T).
        window: how far each query sees, >= 0.
        causal: only keys at or before the query (0 <= i - j <= window).
        scale: default 1/sqrt(D).
        method: "banded" or "mask".

    Returns:
        out (B, H, T, Dv) in q's dtype.

    Raises:
        TypeError / ValueError: as scaled_dot_product_attention; S != T; negative window; bad method.
    """
    T, S, D = check_qkv(q, k, v)
    require_rank(q, 4, "q", "(B, H, T, D)")
    if S != T:
        raise ValueError(f"sliding-window attention is self-attention: k must have S == T, got T={T}, S={S}")
    require_non_negative_int(window, "window")
    if method == "mask":
        mask = sliding_window_mask(T, window, causal=causal, device=q.device)
        return scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)[0]
    if method != "banded":
        raise ValueError(f"method must be 'banded' or 'mask', got {method!r}")
    scale = resolve_scale(scale, D)
    B, H = q.shape[0], q.shape[1]
    Dv = v.shape[-1]
    c = max(window, 16)  # queries per block
    nb = -(-T // c)  # number of blocks
    width = c + 2 * window  # keys visible to a block
    work = torch.promote_types(q.dtype, torch.float32)
    pad_q = nb * c - T
    qb = nn.functional.pad(q.to(work), (0, 0, 0, pad_q)).reshape(B, H, nb, c, D)  # (B, H, nb, c, D)
    # keys padded by `window` before and enough after that block b sees padded rows [b*c, b*c + width)
    kp = nn.functional.pad(k.to(work), (0, 0, window, pad_q + window))  # (B, H, nb*c + 2w, D)
    vp = nn.functional.pad(v.to(work), (0, 0, window, pad_q + window))  # (B, H, nb*c + 2w, Dv)
    kb = kp.unfold(2, width, c).transpose(-1, -2)  # (B, H, nb, width, D), a view
    vb = vp.unfold(2, width, c).transpose(-1, -2)  # (B, H, nb, width, Dv)
    scores = torch.matmul(qb, kb.transpose(-1, -2)) * scale  # (B, H, nb, c, width)
    # query a of block b is position b*c + a; key m of its window is position b*c - window + m
    a = torch.arange(c, device=q.device)[:, None]
    m = torch.arange(width, device=q.device)[None, :]
    offset = a + window - m  # (c, width): i - j
    allowed = (offset >= 0) & (offset <= window) if causal else offset.abs() <= window
    key_pos = torch.arange(nb, device=q.device)[:, None] * c - window + m  # (nb, width)
    real_key = (key_pos >= 0) & (key_pos < T)
    allowed = allowed[None, :, :] & real_key[:, None, :]  # (nb, c, width)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # every real query sees itself, so no row is all -inf
    out = torch.matmul(weights, vb)  # (B, H, nb, c, Dv)
    out = out.reshape(B, H, nb * c, Dv)[:, :, :T]  # (B, H, T, Dv); padded query rows dropped
    return out.to(q.dtype)


# ----------------------------------------------------------------------------- low rank


def linformer_projections(
    S: int,
    rank: int,
    kind: str = "gaussian",
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (r, S) matrices E (for keys) and F (for values) of Linformer-style attention.

    kind="gaussian": independent N(0, 1/r) entries (a random Johnson-Lindenstrauss projection, the
    untrained starting point of Linformer's learned E, F); kind="pool": row i averages a contiguous
    segment of about S / r positions (fixed mean-pooling, one of the projections the paper compares).
    In Linformer both are *learned*; here they are fixed so the approximation can be studied alone.

    Returns:
        E, F: (r, S) each, in ``dtype``.

    Raises:
        TypeError: S or rank is not an int.
        ValueError: rank is not in [1, S], or kind is unknown.
    """
    for name, n in (("S", S), ("rank", rank)):
        require_int(n, name)
    if not 1 <= rank <= S:
        raise ValueError(f"rank must be in [1, S={S}], got {rank}")
    if kind == "gaussian":
        E = torch.randn(rank, S, generator=generator, dtype=dtype) / rank**0.5
        F = torch.randn(rank, S, generator=generator, dtype=dtype) / rank**0.5
        return E, F
    if kind == "pool":
        segment = torch.arange(S) * rank // S  # (S,): which summary row each position feeds
        P = (segment[None, :] == torch.arange(rank)[:, None]).to(dtype)  # (r, S)
        P = P / P.sum(dim=1, keepdim=True)
        return P, P.clone()
    raise ValueError(f"kind must be 'gaussian' or 'pool', got {kind!r}")


def linformer_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, E: torch.Tensor, F: torch.Tensor, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q (E k)^T * scale) (F v): attention over r projected keys instead of S keys.

    Args:
        q: (..., T, D); k: (..., S, D); v: (..., S, Dv).
        E, F: (r, S) projections along the sequence axis (shared by all heads here).
        scale: default 1/sqrt(D).

    Returns:
        out (..., T, Dv) and weights (..., T, r).

    Raises:
        TypeError / ValueError: as scaled_dot_product_attention; E or F not (r, S) or of different r.
    """
    T, S, D = check_qkv(q, k, v)
    for name, P in (("E", E), ("F", F)):
        require_tensor(P, name)
        require_rank(P, 2, name, "(r, S)")
        if P.shape[1] != S:
            raise ValueError(f"{name} must have shape (r, S={S}), got {tuple(P.shape)}")
    if E.shape[0] != F.shape[0]:
        raise ValueError(f"E and F must have the same rank r, got {tuple(E.shape)} and {tuple(F.shape)}")
    k_low = torch.matmul(E.to(k.dtype), k)  # (..., r, D)
    v_low = torch.matmul(F.to(v.dtype), v)  # (..., r, Dv)
    return scaled_dot_product_attention(q, k_low, v_low, scale=scale)


# ----------------------------------------------------------------------------- today's models


def interleaved_kv_cache_numbers(
    T: int, num_layers: int, local_per_global: int | None, window: int, num_kv_heads: int, head_dim: int
) -> int:
    """Numbers a KV cache holds for one sequence of T positions when local and global layers interleave.

    Layers come in groups of ``local_per_global`` sliding-window layers then one global layer
    (``None``: every layer local, as in Mistral 7B; 0: every layer global). A local layer keeps the
    last window + 1 positions (``window`` as in :func:`sliding_window_mask`: how far back a query sees),
    a global one all T; each keeps 2 (k and v) * G * D numbers per position.

    Raises:
        TypeError / ValueError: a size that is not a non-negative int (T, num_layers, G, D positive).
    """
    for name, n in (("T", T), ("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        require_int(n, name, 1)
    require_non_negative_int(window, "window")
    if local_per_global is None:
        local_layers = num_layers
    else:
        require_non_negative_int(local_per_global, "local_per_global")
        local_layers = num_layers * local_per_global // (local_per_global + 1)
    positions = local_layers * min(T, window + 1) + (num_layers - local_layers) * T
    return 2 * num_kv_heads * head_dim * positions


__all__ = [
    "interleaved_kv_cache_numbers",
    "repeat_kv",
    "grouped_query_attention",
    "kv_cache_bytes",
    "GroupedQueryAttention",
    "sliding_window_mask",
    "sliding_window_attention",
    "linformer_projections",
    "linformer_attention",
]
