"""Which rank holds which part of a sequence, and how much causal work each rank does per ring step.

A sequence of T positions is cut into contiguous *chunks* with the sizes of ``torch.tensor_split``
(the first T % n chunks are one longer). Two layouts give each of the W ranks its chunks:

    contiguous   W chunks; rank r holds chunk r                 rank 0: [0, T/W), rank 1: [T/W, 2T/W), ...
    zigzag       2W chunks; rank r holds chunks r and 2W-1-r    rank 0: first and last, rank W-1: the middle two

With a causal mask, query i sees key j only when j <= i, so the pair (queries of chunk a, keys of
chunk b) is one of three kinds (:func:`block_relation`): **past** (every key before every query: no
mask), **diagonal** (they overlap: masked), **future** (every key after every query: skipped).
In the contiguous layout, rank r sees r past blocks and one diagonal block in its W ring steps, so
rank 0 idles while rank W-1 works every step: the ring runs at the pace of its busiest rank. The
zigzag layout pairs an early chunk with a late one, so every rank does the same work at every step
(:func:`causal_work` counts it: the query-key pairs with j <= i, what a kernel that skips the
future attends).
"""

from __future__ import annotations

import torch

from ..validation import require_int, require_non_negative_int, require_positive_int, require_tensor

LAYOUTS = ("contiguous", "zigzag")


def chunk_bounds(T: int, n: int) -> list[tuple[int, int]]:
    """(start, stop) of n contiguous chunks of range(T), sized like ``torch.tensor_split`` (some may be empty).

    Raises:
        TypeError: T or n is not an int.
        ValueError: T < 0 or n < 1.
    """
    T, n = require_non_negative_int(T, "T"), require_positive_int(n, "n")
    small, extra = divmod(T, n)
    bounds, start = [], 0
    for i in range(n):
        stop = start + small + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def rank_chunks(T: int, world_size: int, rank: int, layout: str = "contiguous") -> list[tuple[int, int]]:
    """The (start, stop) position ranges rank ``rank`` holds, in the order its rows are stored.

    Raises:
        TypeError: a size is not an int.
        ValueError: world_size < 1, rank outside [0, world_size), or an unknown layout.
    """
    world_size = require_positive_int(world_size, "world_size")
    rank = check_rank(rank, world_size)
    check_layout(layout)
    if layout == "contiguous":
        return [chunk_bounds(T, world_size)[rank]]
    chunks = chunk_bounds(T, 2 * world_size)
    return [chunks[rank], chunks[2 * world_size - 1 - rank]]


def shard_sequence(x: torch.Tensor, world_size: int, rank: int, layout: str = "contiguous") -> torch.Tensor:
    """The rows of ``x`` (..., T, F) that rank ``rank`` holds: (..., T_r, F), chunks in :func:`rank_chunks` order.

    Raises:
        TypeError: x is not a tensor, or a size is not an int.
        ValueError: x has fewer than 2 dims, a bad world_size / rank, or an unknown layout.
    """
    require_tensor(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, F) (at least 2 dims), got {tuple(x.shape)}")
    parts = [x[..., a:b, :] for a, b in rank_chunks(x.shape[-2], world_size, rank, layout)]
    return torch.cat(parts, dim=-2)  # (..., T_r, F)


def unshard_sequence(shards, layout: str = "contiguous") -> torch.Tensor:
    """Put the ranks' shards (..., T_r, F), given in rank order, back into one (..., T, F) sequence.

    Raises:
        TypeError: shards is not a non-empty list or tuple of tensors.
        ValueError: the shards' lengths are not those of ``layout`` for their total T.
    """
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError(f"shards must be a non-empty list of tensors (one per rank), got {type(shards).__name__}")
    for i, s in enumerate(shards):
        require_tensor(s, f"shards[{i}]")
    world_size, T = len(shards), sum(s.shape[-2] for s in shards)
    check_lengths([s.shape[-2] for s in shards], T, layout)
    pieces = []
    for rank, shard in enumerate(shards):
        start = 0
        for a, b in rank_chunks(T, world_size, rank, layout):
            pieces.append((a, shard[..., start : start + b - a, :]))
            start += b - a
    return torch.cat([p for _, p in sorted(pieces, key=lambda item: item[0])], dim=-2)  # (..., T, F)


def block_relation(q_start: int, q_len: int, k_start: int, k_len: int) -> str:
    """Causal relation of the queries [q_start, q_start + q_len) to the keys [k_start, k_start + k_len).

    Returns "past" (every key at or before every query: no mask needed), "future" (every key after
    every query, or an empty block: nothing to compute) or "diagonal" (they overlap: mask j <= i).
    """
    if q_len == 0 or k_len == 0 or k_start > q_start + q_len - 1:
        return "future"
    if k_start + k_len - 1 <= q_start:
        return "past"
    return "diagonal"


def visible_pairs(q_start: int, q_len: int, k_start: int, k_len: int, causal: bool = True) -> int:
    """How many (query, key) pairs of the two position ranges attend: all of them, or those with j <= i when causal.

    The work an attention kernel that skips the causal future must do for this pair of blocks; a
    diagonal block of n positions has n (n + 1) / 2.
    """
    if not causal:
        return q_len * k_len
    # query at position p sees the keys k_start .. min(p, k_start + k_len - 1)
    return sum(min(max(p - k_start + 1, 0), k_len) for p in range(q_start, q_start + q_len))


def causal_work(T: int, world_size: int, layout: str = "contiguous") -> list[list[int]]:
    """Query-key pairs each rank attends at each ring step of causal ring attention: ``work[rank][step]``.

    At step s, rank r holds the keys of rank (r - s) mod W, and attends, for each of its query chunks
    and each of those key chunks, the pairs with j <= i (:func:`visible_pairs`). A ring step lasts as
    long as its busiest rank, so the ring's time is about ``sum over steps of max over ranks``.
    """
    world_size = require_positive_int(world_size, "world_size")
    chunks = [rank_chunks(T, world_size, r, layout) for r in range(world_size)]
    return [
        [
            sum(
                visible_pairs(qa, qb - qa, ka, kb - ka)
                for qa, qb in chunks[rank]
                for ka, kb in chunks[(rank - step) % world_size]
            )
            for step in range(world_size)
        ]
        for rank in range(world_size)
    ]


def check_layout(layout) -> str:
    """Raise ValueError unless ``layout`` is one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def check_rank(rank, world_size: int) -> int:
    """``rank`` as an int in [0, world_size); TypeError / ValueError naming both otherwise."""
    rank = require_int(rank, "rank")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got rank={rank}")
    return rank


def check_lengths(lengths: list[int], T: int, layout: str) -> None:
    """Raise ValueError unless rank r holds ``lengths[r]`` rows, as ``layout`` cuts T over len(lengths) ranks."""
    expected = [sum(b - a for a, b in rank_chunks(T, len(lengths), r, layout)) for r in range(len(lengths))]
    if list(lengths) != expected:
        raise ValueError(
            f"the ranks hold {list(lengths)} rows; layout {layout!r} of T={T} over {len(lengths)} ranks "
            f"gives {expected} (cut the sequence with mha_course.parallel.shard_sequence)"
        )
