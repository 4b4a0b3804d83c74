"""Tiled (FlashAttention-style) attention: online softmax over blocks, O(T) extra memory.

Naive attention materialises the (T, S) score matrix. Here queries are processed in blocks of
``block_q`` rows and, for each, keys and values stream past in blocks of ``block_k``, every tile
batched over all B*H heads. Per query row two running sums are kept, l = sum_j exp(s_j - c) and
acc = sum_j exp(s_j - c) v_j, and out = acc / l at the end: one (block_q, block_k) tile of scores
exists at a time, never anything of size T*S. The mathematics is that of
:func:`mha_course.efficient.online_softmax_attention`; four engineering choices make this Python loop about
as fast as torch's fused CPU kernel:

1. **Base-2 exponentials**: q is scaled once by scale * log2(e) and each tile takes ``exp2_``
   (torch's CPU exp2 is several times faster than its exp); lse = ln 2 * (c + log2 l).
2. **A fixed shift c = 0, checked once per query block**: no running maximum, no rescaling of acc.
   If l ends inside [2^-60, 2^60] and acc is finite, nothing overflowed and the sums are exact to
   float32; otherwise the block is redone in two passes with c = its exact row maxima.
3. **Causal tiles in three kinds**: keys in every query's past (no mask), in every query's future
   (skipped), and the diagonal band, cut into :data:`mha_course.efficient.tiled.plan.DIAGONAL_SPLIT` narrower
   tiles and masked after the exponentials with ``tril_``.
4. **Threads of its own**: with two or more intra-op threads the work is cut into items (a few
   heads, one query block) that single-threaded workers (:mod:`mha_course.efficient.tiled.workers`) take one at
   a time, so a worker whose core is shared simply takes fewer; small problems
   (:data:`mha_course.efficient.tiled.plan.PARALLEL_MIN_WORK`) run one loop in the calling thread.

Memory beyond the output: copies of k and v only to upcast or broadcast them (O(S D)), per worker
one tile buffer (heads * block_q * block_k scores) and O(heads * block_q * (D + Dv)) for a scaled
block of q and the sums; the backward adds a dK and dV (O(S D)) per extra worker.

Why each choice, its measurements and the designs rejected: docs/design/tiled_cpu.md.
"""

from __future__ import annotations

import math

import torch

from ...core.softmax import LOG2E
from ...validation import broadcast_shapes, check_qkv, resolve_scale
from .backward import tiled_backward
from .plan import blocks_from, causal_diagonal, drop_future, key_tiles, plan, tile_scores, work_items
from .workers import run_items

_LOW, _HIGH = 2.0**-60, 2.0**60  # where l must end for the unshifted pass to be exact


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int | tuple[int, int] | None = None,
    causal: bool = False,
    scale: float | None = None,
    return_lse: bool = False,
    causal_align: str = "top_left",
):
    """softmax(q k^T * scale) v computed tile by tile with the online softmax; never builds (T, S).

    Args:
        q: (..., T, D) queries; k: (..., S, D) keys; v: (..., S, Dv) values. Leading dims
            broadcast (e.g. (B, H, T, D) with k, v of shape (B, 1, S, D) for multi-query attention).
        block_size: an int for square (block, block) tiles, a pair (block_q, block_k), or None for
            tiles of about :data:`mha_course.efficient.tiled.plan.TILE_SCORES` scores (see there). Any positive size works, 1
            included; T and S need not be multiples of it.
        causal: query i may attend key j only when j <= i (top-left aligned, like torch's
            ``is_causal=True`` and :func:`mha_course.causal_mask`), or j <= i + S - T (bottom-right,
            see ``causal_align``); tiles wholly in the future are skipped.
        scale: multiplies the scores; default 1/sqrt(D).
        return_lse: also return the log-sum-exp of each row's scores, lse_i = log sum_j exp(s_ij),
            (..., T) float32 (float64 for float64 inputs), -inf for a row with no visible key.
        causal_align: "top_left" (the default) or "bottom_right": FlashAttention's alignment when
            T != S, where the T queries are the last T of S positions (decoding with a KV cache) and
            the last query sees every key; ``causal_mask(T, S, diagonal=S - T)`` is its mask. With
            T > S the first T - S queries see no key and get zeros. The same option as
            :func:`mha_course.triton_attention`'s.

    Returns:
        out (..., T, Dv) in q's dtype (float16/bfloat16 accumulate in float32), or (out, lse).
        A row with no visible key (S = 0) is all zeros, as in the rest of the library.
        If an input requires grad, out is differentiable: the backward pass runs over the same
        tiles, rebuilding each tile of P from lse (O(T) extra memory too; see ``tiled_backward``).

    Raises:
        TypeError: inputs are not floating tensors of one dtype; block_size or scale of a wrong type.
        ValueError: mismatched D or S, rank < 2, unbroadcastable leading dims, block_size < 1,
            a scale that is NaN or infinite, a causal_align other than the two above.
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    diagonal = causal_diagonal(causal_align, T, S) if causal else 0  # query i sees key j iff j <= i + diagonal
    if diagonal < 0:  # bottom-right with T > S: the first T - S queries see no key; the rest are top-left
        hidden = T - S
        out, lse = tiled_attention(q[..., hidden:, :], k, v, block_size, True, scale, return_lse=True)
        lead = out.shape[:-2]
        out = torch.cat([out.new_zeros(*lead, hidden, out.shape[-1]), out], dim=-2)  # (..., T, Dv)
        lse = torch.cat([lse.new_full((*lead, hidden), -math.inf), lse], dim=-1)  # (..., T)
        return (out, lse) if return_lse else out
    blocks = None if block_size is None else blocks_from(block_size, q, k, v, bool(causal))  # validates it
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        out, lse = _TiledAttention.apply(q, k, v, blocks, bool(causal), scale, diagonal)
    else:
        out, lse = _tiled_forward(q, k, v, blocks, bool(causal), scale, diagonal)
    return (out, lse) if return_lse else out


def _tiled_forward(q, k, v, blocks, causal: bool, scale: float, diagonal: int = 0):
    """The loop itself; returns out (..., T, Dv) in q's dtype and lse (..., T) in the work dtype.

    ``blocks``: (block_q, block_k), or None for the defaults of :func:`mha_course.efficient.tiled.plan.plan`.
    ``diagonal`` (>= 0): in causal mode query i sees key j iff j <= i + diagonal.
    """
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    Dv = v.shape[-1]
    lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    N = math.prod(lead)
    work = torch.promote_types(q.dtype, torch.float32)  # float16/bfloat16 accumulate in float32
    dev = q.device
    with torch.no_grad():
        # Views, unless broadcasting (or, for k and v, upcasting to the work dtype) needs a copy.
        q3 = q.expand(*lead, T, D).reshape(N, T, D)  # (N, T, D)
        k3 = k.to(work).expand(*lead, S, D).reshape(N, S, D)  # (N, S, D)
        v3 = v.to(work).expand(*lead, S, Dv).reshape(N, S, Dv)  # (N, S, Dv)
        out = torch.empty(N, T, Dv, dtype=q.dtype, device=dev)  # (N, T, Dv)
        lse = torch.empty(N, T, dtype=work, device=dev)  # (N, T)
        if N * T * S == 0:  # nothing to attend: zeros, lse = -inf
            return out.zero_().reshape(*lead, T, Dv), lse.fill_(-math.inf).reshape(*lead, T)
    workers, group, bq, bk = plan(blocks, N, T, S, D, causal, dev)

    def worker(next_item, _index):
        """Work items (heads h0..h1-1, queries i0..i1-1) until none is left, in buffers of its own."""
        scratch = torch.empty(group * bq * bk, dtype=work, device=dev)  # every tile lives here: no allocation per tile
        q_buf = torch.empty(group * bq * D, dtype=work, device=dev)  # one block of q, scaled
        acc_buf = torch.empty(group * bq * Dv, dtype=work, device=dev)  # acc = sum_j 2^(s2_j - c) v_j
        l_buf = torch.empty(group * bq, dtype=work, device=dev)  # l = sum_j 2^(s2_j - c)
        for h0, h1, i0, i1 in iter(next_item, None):
            g, nq = h1 - h0, i1 - i0
            k_h, v_h = k3[h0:h1], v3[h0:h1]  # (g, S, D), (g, S, Dv)
            # Scores in base 2 (trick 1): s2 = (q * scale * log2 e) k^T. Scaling q costs g*nq*D products, not g*nq*S.
            q_blk = q_buf[: g * nq * D].view(g, nq, D).copy_(q3[h0:h1, i0:i1]).mul_(scale * LOG2E)  # (g, nq, D)
            a, l = acc_buf[: g * nq * Dv].view(g, nq, Dv), l_buf[: g * nq].view(g, nq)  # contiguous, for out=
            tiles = key_tiles(i0, i1, S, bk, causal, diagonal)
            p0 = i0 + diagonal  # the block's first query as a position among the keys
            _sweep(q_blk, k_h, v_h, tiles, p0, scratch, a, l, shift=None)  # c = 0 (trick 2)
            low, high = torch.aminmax(l)
            shift = None
            # l in range: no exponential overflowed; acc finite: no product with a huge value did (one sync).
            # acc is checked here rather than v once beforehand: the caller runs no parallel op of its own
            # before the workers start (see "Threads of its own" above). Its sum is inf or NaN if any term
            # is (a sum that overflows from finite terms only sends the block to the exact pass).
            exact = (low >= _LOW) & (high <= _HIGH) & torch.isfinite(a.sum())  # NaN fails too
            if not exact.item():
                shift = _row_max(q_blk, k_h, tiles, p0, scratch)  # (g, nq): redo with c = m
                _sweep(q_blk, k_h, v_h, tiles, p0, scratch, a, l, shift)
            torch.div(a, l.unsqueeze(-1), out=out[h0:h1, i0:i1])  # no temporary: written where it belongs
            log2_sum = torch.log2(l) if shift is None else torch.log2(l) + shift  # log2 sum_j 2^s2_j
            torch.mul(log2_sum, math.log(2.0), out=lse[h0:h1, i0:i1])

    run_items(worker, work_items(N, T, group, bq, causal, workers), workers)
    return out.reshape(*lead, T, Dv), lse.reshape(*lead, T)


def _sweep(q_blk, k3, v3, tiles, i0: int, scratch, acc, l, shift) -> None:
    """acc = sum_j 2^(s2_j - c) v_j and l = sum_j 2^(s2_j - c) over ``tiles``; c = 0 or ``shift``."""
    for n, tile in enumerate(tiles):
        r0, j0, j1, _ = tile
        s = tile_scores(q_blk, k3, tile, i0, scratch, mask=False)  # (N, nq - r0, nk)
        if shift is not None:
            s.sub_(shift[:, r0:].unsqueeze(-1))
        s.exp2_()  # in place: the tile is both summed and multiplied by v, never copied
        drop_future(s, tile, i0)
        if n == 0:  # the first tile (r0 = 0) initialises the sums: no zeroing pass, no read of acc
            torch.sum(s, dim=-1, out=l)
            torch.bmm(s, v3[:, j0:j1], out=acc)
        else:
            l[:, r0:].add_(s.sum(dim=-1))
            acc[:, r0:].baddbmm_(s, v3[:, j0:j1])  # acc += s @ v_blk, in place


def _row_max(q_blk, k3, tiles, i0: int, scratch) -> torch.Tensor:
    """(N, nq) maximum base-2 score of each query row over ``tiles``.

    Finite for finite inputs: every query sees at least key 0 (S >= 1), causal or not.
    """
    m = torch.full(q_blk.shape[:2], -math.inf, dtype=q_blk.dtype, device=q_blk.device)  # (N, nq)
    for tile in tiles:
        rows = m[:, tile[0] :]  # a view: written in place
        torch.maximum(rows, tile_scores(q_blk, k3, tile, i0, scratch).amax(dim=-1), out=rows)
    return m


class _TiledAttention(torch.autograd.Function):
    """Tiled forward, tiled backward: neither ever holds a (T, S) matrix."""

    @staticmethod
    def forward(ctx, q, k, v, blocks, causal, scale, diagonal):
        out, lse = _tiled_forward(q, k, v, blocks, causal, scale, diagonal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.blocks, ctx.diagonal = causal, scale, blocks, diagonal
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = tiled_backward(q, k, v, out, lse, grad_out, ctx.blocks, ctx.causal, ctx.scale, ctx.diagonal)
        return dq, dk, dv, None, None, None, None
