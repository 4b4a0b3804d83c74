"""Tiled (FlashAttention-style) attention: online softmax over blocks, O(T) extra memory.

Naive attention materialises the (T, S) score matrix. Here queries are processed in blocks of
``block_q`` rows and, for each, keys and values stream past in blocks of ``block_k``; the running
statistics of the online softmax (see :mod:`mha_course.online_softmax`) make the result exact.
Only one (block_q, block_k) tile of scores exists at a time, per head.

Two engineering choices make this Python loop about as fast as torch's fused CPU kernel
(the mathematics is unchanged; softmax does not care which shift c is subtracted):

1. **The shift rides inside the matmul.** Each query row gets an extra column holding -c and
   each key an extra 1, so one matmul yields s - c directly. Per tile that leaves two
   elementwise passes (``exp_`` in place, and the row sum) between two matmuls.
2. **The shift is updated lazily.** Instead of moving c to the running maximum at every tile,
   c stays put while the running sum l stays within [2^-60, 2^60] (no overflow, no underflow);
   only when a tile breaks that bound is it recomputed with c raised to the true maximum
   (FlashAttention-4 calls this conditional rescaling). Typical inputs never need it.

Memory beyond the output: copies of q and k with one extra column (O((T + S) D); v is copied
only to upcast or broadcast it), one tile of scores (B*H*block_q*block_k) and O(B*H*block_q*D)
accumulators; never anything of size T*S.
"""

from __future__ import annotations

import math

import torch

from .attention import check_qkv, resolve_scale

#: With block_size=None, tiles hold about this many scores across all B*H heads (4 MiB in float32):
#: block_k = 1024 keys and block_q = TILE_SCORES / (B*H*1024) queries, clamped to [64, 1024].
#: Measured on a 2-core AVX-512 CPU, fp32, B=1, H=8, T=4096, D=64: (128, 1024) tiles were as fast as
#: any of 64..1024 square and oblong tiles, and fewer, larger tiles keep a Python loop's per-op
#: overhead (and thread start-up inside each op) small when B*H is small.
TILE_SCORES = 2**20
_LOW, _HIGH = 2.0**-60, 2.0**60  # the running sum l may roam here before the shift is recomputed


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    block_size: int | tuple[int, int] | None = None, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False):
    """softmax(q k^T * scale) v computed tile by tile with the online softmax; never builds (T, S).

    Args:
        q: (..., T, D) queries; k: (..., S, D) keys; v: (..., S, Dv) values. Leading dims
            broadcast (e.g. (B, H, T, D) with k, v of shape (B, 1, S, D) for multi-query attention).
        block_size: an int for square (block, block) tiles, a pair (block_q, block_k), or None for
            tiles of about :data:`TILE_SCORES` scores (see there). Any positive size works, 1
            included; T and S need not be multiples of it.
        causal: query i may attend key j only when j <= i (top-left aligned, like torch's
            ``is_causal=True`` and :func:`mha_course.causal_mask`); tiles wholly in the future are skipped.
        scale: multiplies the scores; default 1/sqrt(D).
        return_lse: also return the log-sum-exp of each row's scores, lse_i = log sum_j exp(s_ij),
            (..., T) float32 (float64 for float64 inputs), -inf for a row with no visible key.

    Returns:
        out (..., T, Dv) in q's dtype (float16/bfloat16 accumulate in float32), or (out, lse).
        A row with no visible key (S = 0) is all zeros, as in the rest of the library.
        If an input requires grad, out is differentiable: the backward pass is
        :func:`mha_course.attention_backward` (which does build (T, S) per call).

    Raises:
        TypeError: inputs are not floating tensors of one dtype; block_size of a wrong type.
        ValueError: mismatched D or S, rank < 2, unbroadcastable leading dims, block_size < 1,
            non-positive scale.
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    block_q, block_k = _blocks(block_size, q, k, v)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        out, lse = _TiledAttention.apply(q, k, v, block_q, block_k, bool(causal), scale)
    else:
        out, lse = _tiled_forward(q, k, v, block_q, block_k, bool(causal), scale)
    return (out, lse) if return_lse else out


def _tiled_forward(q, k, v, block_q: int, block_k: int, causal: bool, scale: float):
    """The loop itself; returns out (..., T, Dv) in q's dtype and lse (..., T) in the work dtype."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    Dv = v.shape[-1]
    lead = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    N = math.prod(lead)
    work = torch.promote_types(q.dtype, torch.float32)  # float16/bfloat16 accumulate in float32
    dev = q.device
    with torch.no_grad():
        # Augmented copies (one extra column or row); the copy also broadcasts and upcasts.
        q_aug = torch.empty(*lead, T, D + 1, dtype=work, device=dev)  # (..., T, D+1)
        q_aug[..., :D] = q
        q_aug[..., :D] *= scale
        q_aug[..., D] = 0.0  # -c, the shift of each row; c = 0 until a tile says otherwise
        # K^T with rows padded to a stride of 16 (mod 32) floats: a row stride that is a multiple of
        # 4 KiB (S = 4096, 16384, ...) maps every row of a key block to the same cache sets.
        stride = S + 16 + (-S) % 32
        k_aug = torch.empty(N, D + 1, stride, dtype=work, device=dev)[..., :S]  # (N, D+1, S): K^T
        k_aug.view(*lead, D + 1, S)[..., :D, :] = k.transpose(-2, -1)
        k_aug[:, D, :] = 1.0
        q_aug = q_aug.reshape(N, T, D + 1)  # (N, T, D+1)
        v3 = v.to(work).expand(*lead, S, Dv).reshape(N, S, Dv)  # (N, S, Dv): a view when nothing broadcasts

        out = torch.zeros(N, T, Dv, dtype=q.dtype, device=dev)  # (N, T, Dv)
        lse = torch.full((N, T), -math.inf, dtype=work, device=dev)  # (N, T)
        if N * T * S == 0:
            return out.reshape(*lead, T, Dv), lse.reshape(*lead, T)  # nothing to attend: zeros
        bq, bk = min(block_q, T), min(block_k, S)
        tile = torch.empty(N, bq, bk, dtype=work, device=dev)  # reused: no allocation per tile
        acc = torch.empty(N, bq, Dv, dtype=work, device=dev)  # sum_j exp(s_j - c) v_j
        l_run = torch.empty(N, bq, dtype=work, device=dev)  # sum_j exp(s_j - c)
        tile_sum = torch.empty_like(l_run)
        for i0 in range(0, T, bq):
            i1 = min(T, i0 + bq)
            q_blk, a, l = q_aug[:, i0:i1], acc[:, : i1 - i0], l_run[:, : i1 - i0]  # (N, nq, .)
            a.zero_()
            l.zero_()
            key_end = min(S, i1) if causal else S  # keys j > i1 - 1 are everyone's future
            for j0 in range(0, key_end, bk):
                j1 = min(key_end, j0 + bk)
                diagonal = causal and j1 - 1 > i0  # some (i, j) in this tile has j > i
                _add_tile(q_blk, k_aug[:, :, j0:j1], v3[:, j0:j1], a, l, tile, tile_sum[:, : i1 - i0],
                          (i0, j0) if diagonal else None, j0 == 0)
            out[:, i0:i1] = a / torch.where(l == 0, 1.0, l).unsqueeze(-1)  # l = 0: no key, zeros
            torch.sub(torch.log(l), q_blk[..., D], out=lse[:, i0:i1])  # lse = c + log l, c = -q_aug[..., D]
    return out.reshape(*lead, T, Dv), lse.reshape(*lead, T)


def _add_tile(q_blk, kT_blk, v_blk, acc, l, tile, tile_sum, diagonal_at, first: bool) -> None:
    """acc += exp(s - c) v and l += rowsum(exp(s - c)) for one tile, recomputing the shift c if needed."""
    nq, nk = q_blk.shape[1], kT_blk.shape[2]
    full = nq == tile.shape[1] and nk == tile.shape[2]
    s = torch.bmm(q_blk, kT_blk, out=tile) if full else torch.bmm(q_blk, kT_blk)  # (N, nq, nk) = s - c
    if diagonal_at is not None:
        s.masked_fill_(_future(diagonal_at, nq, nk, s.device), -math.inf)
    s.exp_()
    torch.sum(s, dim=-1, out=tile_sum)  # (N, nq)
    low, high = torch.aminmax(tile_sum)
    # Accept unless a sum overflows, or (first tile, l = 0) underflows; later tiles keep l >= 2^-60.
    if high.item() <= _HIGH and (not first or low.item() >= _LOW):  # NaN fails too
        acc.baddbmm_(s, v_blk)
        l.add_(tile_sum)
        return
    # Slow path: raise each row's shift to its true maximum (rows that saw nothing yet may lower it).
    s = torch.bmm(q_blk, kT_blk)  # (N, nq, nk) = s - c, recomputed
    if diagonal_at is not None:
        s.masked_fill_(_future(diagonal_at, nq, nk, s.device), -math.inf)
    seen = l > 0  # (N, nq); an empty row has nothing to rescale (and 0 * inf = NaN)
    delta = s.amax(dim=-1)  # (N, nq), the tile maximum relative to the current shift
    delta = torch.where(seen, delta.clamp(min=0.0), delta)
    delta = torch.where(torch.isneginf(delta), 0.0, delta)  # a row with no visible key here
    s.sub_(delta.unsqueeze(-1)).exp_()
    rescale = torch.where(seen, torch.exp(-delta), 1.0)  # exp(c_old - c_new)
    acc.mul_(rescale.unsqueeze(-1)).baddbmm_(s, v_blk)
    l.mul_(rescale).add_(s.sum(dim=-1))
    q_blk[..., -1] -= delta  # later tiles of this query block use the new shift


def _future(at: tuple[int, int], nq: int, nk: int, device) -> torch.Tensor:
    """(nq, nk) bool, True where key j0 + c lies in the future of query i0 + r (j > i)."""
    i0, j0 = at
    rows = torch.arange(i0, i0 + nq, device=device).unsqueeze(1)  # (nq, 1)
    cols = torch.arange(j0, j0 + nk, device=device).unsqueeze(0)  # (1, nk)
    return cols > rows


def _blocks(block_size, q, k, v) -> tuple[int, int]:
    if block_size is None:
        heads = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        return min(1024, max(64, TILE_SCORES // (max(heads, 1) * 1024))), 1024
    pair = (block_size, block_size) if isinstance(block_size, int) and not isinstance(block_size, bool) \
        else block_size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or \
            any(isinstance(b, bool) or not isinstance(b, int) for b in pair):
        raise TypeError(f"block_size must be an int, a pair of ints (block_q, block_k) or None, got {block_size!r}")
    if min(pair) < 1:
        raise ValueError(f"block sizes must be >= 1, got {block_size!r}")
    return int(pair[0]), int(pair[1])


class _TiledAttention(torch.autograd.Function):
    """Tiled forward; the hand-derived backward of :mod:`mha_course.backward`."""

    @staticmethod
    def forward(ctx, q, k, v, block_q, block_k, causal, scale):
        out, lse = _tiled_forward(q, k, v, block_q, block_k, causal, scale)
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.scale = causal, scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        from .backward import attention_backward

        q, k, v = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, grad_out, scale=ctx.scale, causal=ctx.causal)
        return dq, dk, dv, None, None, None, None
