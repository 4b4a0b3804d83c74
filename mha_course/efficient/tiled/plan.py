"""Where tiled attention cuts its work: tile sizes, the causal tile kinds, and work items for threads.

Shared by :mod:`mha_course.efficient.tiled.forward` (the forward pass, whose docstring explains the choices) and
:mod:`mha_course.efficient.tiled.backward`. A tile covers query rows i0..i1-1 and keys j0..j1-1 of a group of
heads; a work item is (heads h0..h1-1, queries i0..i1-1), handed to one worker thread of
:mod:`mha_course.efficient.tiled.workers`.
"""

from __future__ import annotations

import math

import torch

from ...validation import broadcast_shapes

# Each constant's measurements and the alternatives tried: docs/design/tiled_cpu.md.

#: Scores per one-thread tile, across all B*H heads (4 MiB in float32): tall tiles make the second matmul efficient.
TILE_SCORES = 2**20

#: Causal diagonal bands are cut into this many narrower tiles, so fewer scores are computed only to be masked.
#: Causal attention cuts each block's diagonal band into this many narrower tiles (trick 3 of :mod:`mha_course.efficient.tiled.forward`).
DIAGONAL_SPLIT = 4

#: Below this many multiply-adds in q k^T (N*T*S*D) handing out work to the pool costs more than it saves.
PARALLEL_MIN_WORK = 2**24

#: Scores per worker tile (2 MiB in float32): fewer, larger torch calls cost less Python than L2 misses cost.
#: With several workers and block_size=None: (2048, 256) tiles of up to 4 heads, 2^19 scores (2 MiB
#: in float32) per worker, causal or not: at T = 4096 one head per item. Measured on 2 cores, fp32,
#: T = 4096, B*H = 8, D = 64 on an AVX-512 host against (1024, 256) x 1 or 2 heads, (512, 512),
#: (1024, 512), (2048, 512), (2048, 1024) and (4096, 256) x 1: tiles beyond a core's L2 cache (1 MiB
#: there) still won, since fewer, larger torch calls cost less Python (see "Measured and rejected" in
#: :mod:`mha_course.efficient.tiled.forward`). On an AVX2 host one head per item (2^19) beat two (2^20), the kept value
#: before: quiet, as a fraction of torch's kernel in three runs of both in turns (median of 11 each),
#: non-causal 0.86 / 0.92 / 0.98 against 0.79 / 0.86 / 0.85, causal 0.88 / 0.96 / 0.92 against
#: 0.84 / 0.97 / 0.90; in the benchmark's three runs 0.87-0.99 against 0.75-0.81 non-causal and
#: 0.84-0.87 against 0.82-0.93 causal (benchmarks/RESULTS.md).
WORKER_TILE_SCORES = 2**19

#: (block_q, block_k) of the workers' tiles with block_size=None: tall tiles, one head per item at T = 4096.
WORKER_BLOCKS = (2048, 256)

#: Work items per worker at least: a worker slowed by another process leaves items for the others to take.
ITEMS_PER_WORKER = 4


def blocks_from(block_size, q, k, v, causal: bool) -> tuple[int, int]:
    """(block_q, block_k) from ``block_size``, or for None the one-thread default (see TILE_SCORES)."""
    if block_size is None:
        return default_blocks(math.prod(broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])), causal)
    pair = (block_size, block_size) if isinstance(block_size, int) and not isinstance(block_size, bool) else block_size
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or any(isinstance(b, bool) or not isinstance(b, int) for b in pair)
    ):
        raise TypeError(f"block_size must be an int, a pair of ints (block_q, block_k) or None, got {block_size!r}")
    if min(pair) < 1:
        raise ValueError(f"block sizes must be >= 1, got {block_size!r}")
    return int(pair[0]), int(pair[1])


def default_blocks(heads: int, causal: bool, scores: int = TILE_SCORES) -> tuple[int, int]:
    """block_k = 256 and block_q such that a tile of ``heads`` heads holds about ``scores`` scores (half when causal)."""
    block_q = scores // (max(heads, 1) * 256) // (2 if causal else 1)
    return min(1024, max(64, block_q)), 256


CAUSAL_ALIGNS = ("top_left", "bottom_right")


def causal_diagonal(causal_align: str, T: int, S: int) -> int:
    """The causal diagonal d for T queries and S keys: query i may attend key j iff j <= i + d.

    "top_left" (d = 0, torch's ``is_causal``): query 0 sees key 0. "bottom_right" (d = S - T,
    FlashAttention's convention): the queries are the last T of S positions, so the last query sees
    every key; with T > S the first T - S queries see none. ``causal_mask(T, S, diagonal=d)`` is the mask.

    Raises:
        ValueError: causal_align is not one of :data:`CAUSAL_ALIGNS`.
    """
    if causal_align not in CAUSAL_ALIGNS:
        raise ValueError(f"causal_align must be one of {CAUSAL_ALIGNS}, got {causal_align!r}")
    return 0 if causal_align == "top_left" else S - T


def plan(blocks, N: int, T: int, S: int, D: int, causal: bool, device) -> tuple[int, int, int, int]:
    """(workers, heads per work item, block_q, block_k) for N heads of (T, S) attention.

    One worker, the calling thread with all its intra-op threads, for small problems, with one
    intra-op thread, and off the CPU: a work item is then a query block of all N heads. Otherwise
    one single-threaded worker per intra-op thread (trick 4 of :mod:`mha_course.efficient.tiled.forward`).
    ``blocks``: the caller's (block_q, block_k), or None for the defaults.
    """
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads < 2 or N * T * S * D < PARALLEL_MIN_WORK:
        bq, bk = blocks or default_blocks(N, causal)
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


#: The last ``workers`` work items are cut into this many query blocks each, so the workers finish together.
TAIL_SPLIT = 4


def work_items(N: int, T: int, group: int, bq: int, causal: bool, workers: int = 1) -> list[tuple[int, int, int, int]]:
    """(h0, h1, i0, i1): heads h0..h1-1 and queries i0..i1-1. Causal: the last, costliest query blocks first.

    With several ``workers``, the last ``workers`` items are cut into :data:`TAIL_SPLIT` shorter query
    blocks each: a worker that finds no item left waits for the others, at most about one item's time,
    and small last items shorten that wait (measured in docs/design/tiled_cpu.md).
    """
    starts = range(0, T, bq)
    items = [
        (h0, min(N, h0 + group), i0, min(T, i0 + bq))
        for i0 in (reversed(starts) if causal else starts)
        for h0 in range(0, N, group)
    ]
    if workers < 2 or len(items) <= workers:
        return items
    pieces = []
    for h0, h1, i0, i1 in items[-workers:]:
        step = -(-(i1 - i0) // TAIL_SPLIT)
        pieces += [(h0, h1, j, min(i1, j + step)) for j in range(i0, i1, step)]
    if causal:  # a later query block sees more keys: costliest first, as above
        pieces.sort(key=lambda item: -item[3])
    return items[:-workers] + pieces


def key_tiles(i0: int, i1: int, S: int, bk: int, causal: bool, diagonal: int = 0) -> list[tuple[int, int, int, bool]]:
    """(r0, j0, j1, needs_mask) for each tile of the query block i0..i1-1 (trick 3 of :mod:`mha_course.efficient.tiled.forward`).

    The tile covers keys j0..j1-1 and the block's rows r0.. (queries i0 + r0 ..); r0 > 0 only on the
    causal diagonal, where queries before key j0 - ``diagonal`` see none of the tile's keys (query i
    sees key j iff j <= i + diagonal; ``diagonal`` >= 0, see :func:`causal_diagonal`).
    """
    if not causal:
        return [(0, j0, min(S, j0 + bk), False) for j0 in range(0, S, bk)]
    if diagonal < 0:
        raise ValueError(f"key_tiles needs diagonal >= 0 (every query sees a key), got {diagonal}")
    p0, p1 = i0 + diagonal, i1 + diagonal  # the block's first and last query, as positions among the keys
    past, end = min(p0, S), min(p1, S)  # keys < p0: seen by all; keys >= p1: seen by none
    width = min(bk, -(-(i1 - i0) // DIAGONAL_SPLIT))  # ceil(nq / DIAGONAL_SPLIT)
    return [(0, j0, min(past, j0 + bk), False) for j0 in range(0, past, bk)] + [
        (j0 - p0, j0, min(end, j0 + width), True) for j0 in range(past, end, width)
    ]


def tile_scores(q_blk, k3, tile, i0: int, scratch, mask: bool = True) -> torch.Tensor:
    """(N, nq - r0, nk) base-2 scores of one tile, written into ``scratch``; the causal future is -inf.

    mask=False leaves the future's scores in place, for a caller that zeroes their exponentials
    with :func:`drop_future` instead (a quarter of the cost of masking the scores).
    """
    r0, j0, j1, needs_mask = tile
    q_rows = q_blk[:, r0:]  # (N, nq - r0, D)
    N, rows, nk = q_rows.shape[0], q_rows.shape[1], j1 - j0
    s = torch.bmm(q_rows, k3[:, j0:j1].transpose(1, 2), out=scratch[: N * rows * nk].view(N, rows, nk))
    if needs_mask and mask:
        s.masked_fill_(future_mask(i0 + r0, j0, rows, nk, s.device), -math.inf)
    return s


def drop_future(p: torch.Tensor, tile, i0: int) -> None:
    """Zero, in place, the entries of a tile of exponentials (N, rows, nk) that lie in the causal future.

    Key j0 + c is in the future of query i0 + r0 + r when c - r > i0 + r0 - j0: everything above that
    diagonal. An exponential there may have overflowed to inf; it is overwritten, never used.
    ``i0`` is the block's first query as a position among the keys (its index + the causal diagonal).
    """
    r0, j0, _, needs_mask = tile
    if needs_mask:
        p.tril_(i0 + r0 - j0)


def future_mask(i0: int, j0: int, nq: int, nk: int, device) -> torch.Tensor:
    """(nq, nk) bool, True where key j0 + c lies in the future of query i0 + r (j > i)."""
    rows = torch.arange(i0, i0 + nq, device=device).unsqueeze(1)  # (nq, 1)
    cols = torch.arange(j0, j0 + nk, device=device).unsqueeze(0)  # (1, nk)
    return cols > rows
