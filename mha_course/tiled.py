"""Tiled (FlashAttention-style) attention: online softmax over blocks, O(T) extra memory.

Naive attention materialises the (T, S) score matrix. Here queries are processed in blocks of
``block_q`` rows and, for each, keys and values stream past in blocks of ``block_k``, every tile
batched over all B*H heads. Per query row two running sums are kept, l = sum_j exp(s_j - c) and
acc = sum_j exp(s_j - c) v_j, and out = acc / l at the end: one (block_q, block_k) tile of scores
exists at a time, never anything of size T*S. The mathematics is that of
:func:`mha_course.online_softmax_attention`; four engineering choices make this Python loop about
as fast as torch's fused CPU kernel, whose time is mostly its two matrix products per tile, as ours,
on a quiet machine and on a shared one:

1. **Base-2 exponentials.** exp(x) = 2^(x log2 e), so q is multiplied once by scale * log2(e) and
   each tile takes ``exp2_``: torch's CPU exp2 measured about 4x faster than its exp (FlashAttention
   does the same on GPUs). l then sums powers of 2; lse = ln 2 * (c + log2 l).
2. **A fixed shift, checked once per query block.** Softmax does not care which shift c is
   subtracted; the running maximum of the textbook online softmax exists only so that exp never
   overflows. The first attempt uses c = 0: no subtraction and no rescaling of acc, so a tile costs
   one matmul, ``exp2_`` in place, a row sum and a second matmul accumulating into acc in place.
   l only grows, so if it ends inside [2^-60, 2^60] no exponential overflowed, and terms that
   underflowed (below 2^-126) are below 2^-66 of l, far under float32's precision; floating point
   keeps the same *relative* precision at any magnitude, so the sums are as accurate as with the
   maximum as shift. That alone does not cover acc: with scores of 40 (terms of e^40, about 2^58)
   and values of 1e22, acc overflows float32 (1e22 * e^40 > 3.4e38) although l is fine, so acc must
   also be finite. Otherwise (scores beyond about +-40, a huge value, or NaN) the block is redone in
   two passes, first its exact row maxima m, then the same loop with c = m, where every row's largest
   term is 1 and l lies in [1, S]. Typical inputs never need it, and the check costs one sync per
   query block, not per tile. This fixed shift is an engineering shortcut on top of the online
   softmax, not a different method: both compute exactly softmax(s) v.
3. **Causal tiles in three kinds.** Keys before the block's first query i0 are in every query's past
   (no mask); keys from its end i1 on are in every query's future (skipped); the diagonal band
   [i0, i1) is masked. The band is cut into :data:`DIAGONAL_SPLIT` narrower tiles, each computed
   only for the queries at or below its first key: the scores computed only to be masked shrink
   from half of the band's (i1 - i0)^2 square to 1/(2 * DIAGONAL_SPLIT) of it. The mask is applied
   after the exponentials, zeroing the future with ``tril_`` (a quarter of the time that
   ``masked_fill_`` with -inf took on the scores before them, measured on (512, 128) tiles).
4. **Threads of its own.** Each torch call in a loop over all heads is a parallel region: the
   intra-op threads split it and wait for one another at its end. On a core shared with another
   process a thread is off the CPU for milliseconds at a time, and every region (hundreds per call)
   waits for it. So with two or more intra-op threads the work is cut into items (a few heads, one
   query block) that a pool of worker threads, one per intra-op thread, takes one at a time. Each
   worker runs its torch calls on itself alone (``torch.set_num_threads(1)`` inside that thread,
   which leaves the caller's count alone); torch releases the GIL inside its kernels, so the
   workers compute in parallel. A worker that shares its core simply takes fewer items, and nobody
   waits for it but at the very end. The backward shares out the same items; dK and dV, sums over
   all query blocks, get a copy per extra worker, added up at the end. Small problems (see
   :data:`PARALLEL_MIN_WORK`), one intra-op thread and other devices run one loop over all heads in
   the calling thread, as before.

Measured and rejected (2-core AVX-512 CPU, fp32, B*H = 8, D = 64): a column of ones appended to v
so that l comes out of the acc matmul (a Dv+1 = 65 wide matmul was slower than the separate sum);
the shift as an extra column of q and k (K = 65 slowed that matmul by about 10%). The Python loop
itself costs about 12 us per tile, under 1% at the default tiles.

Memory beyond the output: copies of k and v only to upcast or broadcast them (O(S D)), per worker
one tile buffer (heads * block_q * block_k scores) and O(heads * block_q * (D + Dv)) for a scaled
block of q and the sums; the backward adds a dK and dV (O(S D)) per extra worker.
"""

from __future__ import annotations

import math
import os
import queue
import threading

import torch

from .attention import check_qkv, resolve_scale
from .softmax import LOG2E

#: With block_size=None, a tile holds about this many scores across all B*H heads (4 MiB in float32):
#: block_k = 256 keys and block_q = TILE_SCORES / (B*H*256) queries, halved when causal, clamped to
#: [64, 1024]. Measured on 2 cores, fp32, B*H = 8, D = 64, T = 1024..4096 against shapes from
#: (128, 256) to (512, 512): (512, 256) was the fastest non-causal tile (taller tiles make the
#: second matmul, (block_q, block_k) @ (block_k, Dv), more efficient), while causal attention
#: preferred (256, 256): the diagonal band, partly computed only to be masked, grows with block_q.
TILE_SCORES = 2**20
#: Causal attention cuts each block's diagonal band into this many narrower tiles (see trick 3).
DIAGONAL_SPLIT = 4
_LOW, _HIGH = 2.0**-60, 2.0**60  # where l must end for the unshifted pass to be exact
#: Below this many multiply-adds in q k^T (N*T*S*D) the calling thread works alone: handing work to
#: the pool would cost more than it saves.
PARALLEL_MIN_WORK = 2**24
#: With several workers and block_size=None: (2048, 256) tiles of up to 4 heads, 2^20 scores (4 MiB
#: in float32) per worker, causal or not. Measured on 2 cores, fp32, T = 4096, B*H = 8, D = 64 against
#: (1024, 256) x 1 or 2 heads, (512, 512), (1024, 512), (2048, 512), (2048, 1024) and (4096, 256) x 1:
#: tiles beyond a core's L2 cache (1 MiB there) still won, since fewer, larger torch calls cost less
#: Python (see "Measured and rejected" above).
WORKER_TILE_SCORES = 2**20
WORKER_BLOCKS = (2048, 256)
#: Work items per worker at least, where the sizes allow: a worker slowed by another process leaves
#: part of its share to the others only if there are items left to take.
ITEMS_PER_WORKER = 4


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
        If an input requires grad, out is differentiable: the backward pass runs over the same
        tiles, rebuilding each tile of P from lse (O(T) extra memory too; see ``_tiled_backward``).

    Raises:
        TypeError: inputs are not floating tensors of one dtype; block_size or scale of a wrong type.
        ValueError: mismatched D or S, rank < 2, unbroadcastable leading dims, block_size < 1,
            a scale that is NaN or infinite.
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    blocks = None if block_size is None else _blocks(block_size, q, k, v, bool(causal))  # validates it
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        out, lse = _TiledAttention.apply(q, k, v, blocks, bool(causal), scale)
    else:
        out, lse = _tiled_forward(q, k, v, blocks, bool(causal), scale)
    return (out, lse) if return_lse else out


def _tiled_forward(q, k, v, blocks, causal: bool, scale: float):
    """The loop itself; returns out (..., T, Dv) in q's dtype and lse (..., T) in the work dtype.

    ``blocks``: (block_q, block_k), or None for the defaults of :func:`_plan`.
    """
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    Dv = v.shape[-1]
    lead = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
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
    workers, group, bq, bk = _plan(blocks, N, T, S, D, causal, dev)

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
            tiles = _key_tiles(i0, i1, S, bk, causal)
            _sweep(q_blk, k_h, v_h, tiles, i0, scratch, a, l, shift=None)  # c = 0 (trick 2)
            low, high = torch.aminmax(l)
            shift = None
            # l in range: no exponential overflowed; acc finite: no product with a huge value did (one sync)
            exact = (low >= _LOW) & (high <= _HIGH) & torch.isfinite(a).all()  # NaN fails too
            if not exact.item():
                shift = _row_max(q_blk, k_h, tiles, i0, scratch)  # (g, nq): redo with c = m
                _sweep(q_blk, k_h, v_h, tiles, i0, scratch, a, l, shift)
            out[h0:h1, i0:i1] = a / l.unsqueeze(-1)
            log2_sum = torch.log2(l) if shift is None else torch.log2(l) + shift  # log2 sum_j 2^s2_j
            torch.mul(log2_sum, math.log(2.0), out=lse[h0:h1, i0:i1])

    _run(worker, _work_items(N, T, group, bq, causal), workers)
    return out.reshape(*lead, T, Dv), lse.reshape(*lead, T)


def _key_tiles(i0: int, i1: int, S: int, bk: int, causal: bool) -> list[tuple[int, int, int, bool]]:
    """(r0, j0, j1, needs_mask) for each tile of the query block i0..i1-1 (trick 3).

    The tile covers keys j0..j1-1 and the block's rows r0.. (queries i0 + r0 ..); r0 > 0 only on the
    causal diagonal, where queries before key j0 see none of the tile's keys.
    """
    if not causal:
        return [(0, j0, min(S, j0 + bk), False) for j0 in range(0, S, bk)]
    past, end = min(i0, S), min(i1, S)  # keys < i0: seen by all; keys >= i1: seen by none
    width = min(bk, -(-(i1 - i0) // DIAGONAL_SPLIT))  # ceil(nq / DIAGONAL_SPLIT)
    return ([(0, j0, min(past, j0 + bk), False) for j0 in range(0, past, bk)]
            + [(j0 - i0, j0, min(end, j0 + width), True) for j0 in range(past, end, width)])


def _tile_scores(q_blk, k3, tile, i0: int, scratch, mask: bool = True) -> torch.Tensor:
    """(N, nq - r0, nk) base-2 scores of one tile, written into ``scratch``; the causal future is -inf.

    mask=False leaves the future's scores in place, for a caller that zeroes their exponentials
    with :func:`_drop_future` instead (a quarter of the cost of masking the scores).
    """
    r0, j0, j1, needs_mask = tile
    q_rows = q_blk[:, r0:]  # (N, nq - r0, D)
    N, rows, nk = q_rows.shape[0], q_rows.shape[1], j1 - j0
    s = torch.bmm(q_rows, k3[:, j0:j1].transpose(1, 2), out=scratch[: N * rows * nk].view(N, rows, nk))
    if needs_mask and mask:
        s.masked_fill_(_future(i0 + r0, j0, rows, nk, s.device), -math.inf)
    return s


def _drop_future(p: torch.Tensor, tile, i0: int) -> None:
    """Zero, in place, the entries of a tile of exponentials (N, rows, nk) that lie in the causal future.

    Key j0 + c is in the future of query i0 + r0 + r when c - r > i0 + r0 - j0: everything above that
    diagonal. An exponential there may have overflowed to inf; it is overwritten, never used.
    """
    r0, j0, _, needs_mask = tile
    if needs_mask:
        p.tril_(i0 + r0 - j0)


def _sweep(q_blk, k3, v3, tiles, i0: int, scratch, acc, l, shift) -> None:
    """acc = sum_j 2^(s2_j - c) v_j and l = sum_j 2^(s2_j - c) over ``tiles``; c = 0 or ``shift``."""
    for n, tile in enumerate(tiles):
        r0, j0, j1, _ = tile
        s = _tile_scores(q_blk, k3, tile, i0, scratch, mask=False)  # (N, nq - r0, nk)
        if shift is not None:
            s.sub_(shift[:, r0:].unsqueeze(-1))
        s.exp2_()  # in place: the tile is both summed and multiplied by v, never copied
        _drop_future(s, tile, i0)
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
        rows = m[:, tile[0]:]  # a view: written in place
        torch.maximum(rows, _tile_scores(q_blk, k3, tile, i0, scratch).amax(dim=-1), out=rows)
    return m


def _future(i0: int, j0: int, nq: int, nk: int, device) -> torch.Tensor:
    """(nq, nk) bool, True where key j0 + c lies in the future of query i0 + r (j > i)."""
    rows = torch.arange(i0, i0 + nq, device=device).unsqueeze(1)  # (nq, 1)
    cols = torch.arange(j0, j0 + nk, device=device).unsqueeze(0)  # (1, nk)
    return cols > rows


def _blocks(block_size, q, k, v, causal: bool) -> tuple[int, int]:
    """(block_q, block_k) from ``block_size``, or for None the one-thread default (see TILE_SCORES)."""
    if block_size is None:
        return _default_blocks(math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])), causal)
    pair = (block_size, block_size) if isinstance(block_size, int) and not isinstance(block_size, bool) \
        else block_size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or \
            any(isinstance(b, bool) or not isinstance(b, int) for b in pair):
        raise TypeError(f"block_size must be an int, a pair of ints (block_q, block_k) or None, got {block_size!r}")
    if min(pair) < 1:
        raise ValueError(f"block sizes must be >= 1, got {block_size!r}")
    return int(pair[0]), int(pair[1])


def _default_blocks(heads: int, causal: bool, scores: int = TILE_SCORES) -> tuple[int, int]:
    """block_k = 256 and block_q such that a tile of ``heads`` heads holds about ``scores`` scores (half when causal)."""
    block_q = scores // (max(heads, 1) * 256) // (2 if causal else 1)
    return min(1024, max(64, block_q)), 256


def _plan(blocks, N: int, T: int, S: int, D: int, causal: bool, device) -> tuple[int, int, int, int]:
    """(workers, heads per work item, block_q, block_k) for N heads of (T, S) attention.

    One worker, the calling thread with all its intra-op threads, for small problems, with one
    intra-op thread, and off the CPU: a work item is then a query block of all N heads. Otherwise
    one single-threaded worker per intra-op thread (see "Threads" in the module docstring).
    ``blocks``: the caller's (block_q, block_k), or None for the defaults.
    """
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads < 2 or N * T * S * D < PARALLEL_MIN_WORK:
        bq, bk = blocks or _default_blocks(N, causal)
        return 1, N, min(bq, T), min(bk, S)
    bq, bk = blocks or WORKER_BLOCKS
    bq, bk = min(bq, T), min(bk, S)
    group = max(1, min(N, WORKER_TILE_SCORES // (bq * bk)))  # heads per item: fewer, larger torch calls

    def items():
        return -(-N // group) * -(-T // bq)

    # Until each worker has several items: fewer heads per item, then (default blocks only) shorter query blocks.
    while items() < ITEMS_PER_WORKER * threads and (group > 1 or (blocks is None and bq > 256)):
        if group > 1:
            group //= 2
        else:
            bq //= 2
    return min(threads, items()), group, bq, bk


def _work_items(N: int, T: int, group: int, bq: int, causal: bool) -> list[tuple[int, int, int, int]]:
    """(h0, h1, i0, i1): heads h0..h1-1 and queries i0..i1-1. Causal: the last, costliest query blocks first."""
    starts = range(0, T, bq)
    return [(h0, min(N, h0 + group), i0, min(T, i0 + bq))
            for i0 in (reversed(starts) if causal else starts) for h0 in range(0, N, group)]


def _run(worker, items: list, workers: int) -> None:
    """worker(next_item, index) in ``workers`` threads of the pool, or in the calling thread when 1.

    next_item() hands out ``items`` one at a time (None when none is left), so a worker that runs
    slower, sharing its core with another process, simply takes fewer. The first error of any
    worker is raised here; after an error or an interrupt no worker takes a new item.
    """
    lock, pending, stopped = threading.Lock(), iter(items), []
    inference = torch.is_inference_mode_enabled()  # grad and inference modes are per thread: pass them on

    def next_item():
        with lock:
            return None if stopped else next(pending, None)

    def task(index):
        try:
            with torch.inference_mode() if inference else torch.no_grad():
                worker(next_item, index)
        except BaseException:
            stopped.append(True)
            raise

    if workers < 2 or _POOL.grow(workers) < 2:
        task(0)
        return
    try:
        _POOL.run(task, min(workers, _POOL.size))
    finally:
        stopped.append(True)  # an interrupt (Ctrl-C) while waiting: the workers take no further item


class _Pool:
    """Long-lived worker threads with one intra-op thread each, started on first use and shared by all calls.

    ``torch.set_num_threads(1)`` in a worker limits that thread only (OpenMP's and MKL's thread counts
    are per thread) but also the count that threads started later begin with, which :meth:`grow`
    restores. A forked child starts a pool of its own: threads do not survive a fork.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._reset()

    def _reset(self):
        self._tasks, self.size, self._pid = queue.SimpleQueue(), 0, os.getpid()

    def grow(self, n: int) -> int:
        """Start workers until there are ``n``; returns how many there are (fewer where the OS refuses threads)."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            if self.size < n:
                default = torch.get_num_threads()
                try:
                    while self.size < n:
                        ready = threading.Event()
                        threading.Thread(target=self._serve, args=(self._tasks, ready), daemon=True,
                                         name=f"mha_course.tiled-{self.size}").start()
                        ready.wait()
                        self.size += 1
                except RuntimeError:  # "can't start new thread" (a process limit): work with those there are
                    pass
                finally:
                    torch.set_num_threads(default)  # what threads started from now on begin with
            return self.size

    def run(self, task, n: int) -> None:
        """task(i) for i in range(n), each in a worker; waits for all of them, then raises the first error."""
        done = queue.SimpleQueue()
        for i in range(n):
            self._tasks.put((task, i, done))
        errors = [done.get() for _ in range(n)]
        first = next((err for err in errors if err is not None), None)
        if first is not None:
            raise first

    @staticmethod
    def _serve(tasks, ready) -> None:
        torch.set_num_threads(1)  # this thread's own ops run on this thread alone
        ready.set()
        while True:
            task, i, done = tasks.get()
            try:
                task(i)
            except BaseException as err:  # handed to the caller, which raises it
                done.put(err)
            else:
                done.put(None)


_POOL = _Pool()


def _tiled_backward(q, k, v, out, lse, grad_out, blocks, causal: bool, scale: float):
    """Gradients of tiled attention, tile by tile, with P rebuilt from the saved log-sum-exp.

    The formulas are :mod:`mha_course.backward`'s; only the order of work changes. For each query
    block, delta = rowsum(dO * O), and for each of its key tiles (the forward's tiles, causal
    skipping included):

        P  = 2^(s2 - lse * log2 e)      exact softmax weights of the tile, no running statistics
        dV += P^T dO,   dS = P * (dO V^T - delta),   dQ += dS K * scale,   dK += dS^T Q * scale

    The work items are the forward's (heads, query block) pairs. dQ of a query block comes from one
    item; dK and dV sum over all query blocks, so every worker but the first accumulates them in a
    copy of its own, added up at the end. Extra memory: two (heads, block_q, block_k) tiles per
    worker, float32 copies of the gradients and a dK, dV per extra worker: O(T), never (T, S).
    Gradients of broadcast inputs (k, v shared by heads) are summed back to their shapes.
    """
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    Dv = v.shape[-1]
    lead = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    N = math.prod(lead)
    work = torch.promote_types(q.dtype, torch.float32)
    dev = q.device
    with torch.no_grad():
        q3 = q.to(work).expand(*lead, T, D).reshape(N, T, D)  # (N, T, D)
        k3 = k.to(work).expand(*lead, S, D).reshape(N, S, D)  # (N, S, D)
        v3 = v.to(work).expand(*lead, S, Dv).reshape(N, S, Dv)  # (N, S, Dv)
        g3 = grad_out.to(work).expand(*lead, T, Dv).reshape(N, T, Dv)  # (N, T, Dv)
        o3 = out.to(work).expand(*lead, T, Dv).reshape(N, T, Dv)  # (N, T, Dv)
        lse2 = lse.to(work).expand(*lead, T).reshape(N, T) * LOG2E  # (N, T), base 2 like the scores
        dq3 = torch.zeros(N, T, D, dtype=work, device=dev)
        dk3 = torch.zeros(N, S, D, dtype=work, device=dev)
        dv3 = torch.zeros(N, S, Dv, dtype=work, device=dev)
    if N * T * S > 0:  # S = 0: no weights at all, every gradient is 0
        workers, group, bq, bk = _plan(blocks, N, T, S, D, causal, dev)
        copies = []  # (dK, dV) of the workers after the first

        def worker(next_item, index):
            dk_w = dv_w = None
            scratch = torch.empty(group * bq * bk, dtype=work, device=dev)  # the tile of P
            dp_buf = torch.empty(group * bq * bk, dtype=work, device=dev)  # the tile of dP, then dS
            for h0, h1, i0, i1 in iter(next_item, None):
                if dk_w is None:  # only a worker that gets an item needs its copy
                    dk_w, dv_w = (dk3, dv3) if index == 0 else (torch.zeros_like(dk3), torch.zeros_like(dv3))
                    if index:
                        copies.append((dk_w, dv_w))
                g = h1 - h0
                q_blk = q3[h0:h1, i0:i1] * (scale * LOG2E)  # (g, nq, D), as the forward scaled it
                g_blk, q_raw = g3[h0:h1, i0:i1], q3[h0:h1, i0:i1]  # (g, nq, Dv), (g, nq, D)
                delta = (g_blk * o3[h0:h1, i0:i1]).sum(-1)  # (g, nq) = rowsum(dO * O)
                k_h, v_h, dq_h, dk_h, dv_h = k3[h0:h1], v3[h0:h1], dq3[h0:h1], dk_w[h0:h1], dv_w[h0:h1]
                for tile in _key_tiles(i0, i1, S, bk, causal):
                    r0, j0, j1, _ = tile
                    p = _tile_scores(q_blk, k_h, tile, i0, scratch, mask=False)  # (g, rows, nk)
                    p.sub_(lse2[h0:h1, i0 + r0:i1].unsqueeze(-1)).exp2_()  # P tile
                    _drop_future(p, tile, i0)  # P = 0 in the causal future
                    rows, nk = p.shape[1], j1 - j0
                    dv_h[:, j0:j1].baddbmm_(p.transpose(1, 2), g_blk[:, r0:])  # += P^T dO
                    ds = torch.bmm(g_blk[:, r0:], v_h[:, j0:j1].transpose(1, 2),
                                   out=dp_buf[: g * rows * nk].view(g, rows, nk))  # dP = dO V^T
                    ds.sub_(delta[:, r0:].unsqueeze(-1)).mul_(p)  # dS = P * (dP - delta)
                    dq_h[:, i0 + r0:i1].baddbmm_(ds, k_h[:, j0:j1])  # += dS K
                    dk_h[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_raw[:, r0:])  # += dS^T Q

        _run(worker, _work_items(N, T, group, bq, causal), workers)
        with torch.no_grad():
            for dk_w, dv_w in copies:
                dk3.add_(dk_w)
                dv3.add_(dv_w)
            dq3.mul_(scale)
            dk3.mul_(scale)
    dq = dq3.reshape(*lead, T, D).sum_to_size(q.shape).to(q.dtype)  # back to q's own (broadcast) shape
    dk = dk3.reshape(*lead, S, D).sum_to_size(k.shape).to(k.dtype)
    dv = dv3.reshape(*lead, S, Dv).sum_to_size(v.shape).to(v.dtype)
    return dq, dk, dv


class _TiledAttention(torch.autograd.Function):
    """Tiled forward, tiled backward: neither ever holds a (T, S) matrix."""

    @staticmethod
    def forward(ctx, q, k, v, blocks, causal, scale):
        out, lse = _tiled_forward(q, k, v, blocks, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.blocks = causal, scale, blocks
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _tiled_backward(q, k, v, out, lse, grad_out, ctx.blocks, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None
