"""Ring attention (context parallelism): the sequence split over W ranks, keys and values passed round a ring.

Each rank holds a block of the queries and the matching block of keys and values (see
:mod:`mha_course.parallel.layout`). In W steps every key/value block visits every rank:

    step s, rank r: holds the K/V block of rank (r - s) mod W
        post  send(K/V block -> rank r+1), recv(next K/V block <- rank r-1)    (asynchronous)
        compute  (out_b, lse_b) = attention of its queries over the block it holds
        merge    (out, lse) = merge_partial_attention([out, out_b], [lse, lse_b])
        wait     for the transfer, which ran while it computed

The transfer of step s+1's block overlaps step s's compute, so the communication is hidden when a
block takes longer to attend to than to send (:mod:`mha_course.parallel.comm_cost` has the
condition). Each rank keeps only its own running (out, lse), O(T / W) memory, and sends
(W - 1) blocks of B * H * (S / W) * (D + Dv) numbers: nothing of size T * S ever exists.

Causal attention skips a (query chunk, key chunk) pair that lies wholly in the future; with the
``contiguous`` layout that leaves rank 0 idle for W - 1 steps while rank W - 1 works in all of
them, and the ``zigzag`` layout balances it (:func:`mha_course.parallel.layout.causal_work`).
Forward only: training would also send dK and dV round the ring in the backward pass.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..validation import broadcast_shapes, check_qkv, require_non_negative_int, require_tensor, resolve_scale
from .comm import bytes_written, gather_ints, group_rank_and_size
from .layout import block_relation, check_layout, check_lengths, rank_chunks, visible_pairs
from .merge import attention_with_lse, merge_partial_attention


@dataclass
class RingStep:
    """What one rank did in one ring step (times are ``time.perf_counter()`` seconds, one clock per machine)."""

    step: int
    origin: int  # the rank whose keys and values this step attended to
    scores: int  # query-key pairs attended (j <= i when causal; 0 when the whole block was in the future)
    compute_start: float
    compute_end: float
    compute_cpu: float  # CPU seconds of that compute: time spent waiting for a core is not counted
    transfer_start: float | None  # None at the last step: nothing left to pass on
    transfer_end: float | None  # when the send and the receive had both completed
    wait_end: float  # when this rank could go on: after its compute and its transfer
    bytes_sent: int  # sizes of the K/V tensors handed to send


@dataclass
class RingStats:
    """One rank's record of a :func:`ring_attention` call."""

    rank: int
    world_size: int
    layout: str
    causal: bool
    steps: list[RingStep] = field(default_factory=list)
    wire_bytes: int | None = None  # bytes written to sockets in the ring (gloo on Linux; else None)

    @property
    def bytes_sent(self) -> int:
        return sum(s.bytes_sent for s in self.steps)


def ring_step(q, k, v, out, lse, q_offset: int, k_offset: int, causal: bool = False, scale: float | None = None):
    """One step of ring attention: fold one block of keys and values into the running (out, lse).

        causal: key k_offset + j is visible to query q_offset + i when k_offset + j <= q_offset + i
        (out_b, lse_b) = attention_with_lse(q, k, v, mask)      (a block wholly in the future: skipped)
        return merge_partial_attention([out, out_b], [lse, lse_b])

    Args:
        q: (..., T, D) queries at global positions q_offset .. q_offset + T - 1.
        k: (..., S, D), v: (..., S, Dv): the block at global positions k_offset .. k_offset + S - 1.
        out: (..., T, Dv), lse: (..., T): the running result (start from zeros and -inf).
        q_offset, k_offset: non-negative ints (used only when causal).
        causal: hide keys after the query.
        scale: default 1/sqrt(D).

    Returns:
        (out, lse) updated, in the dtypes of ``out`` and ``lse``.

    Raises:
        TypeError / ValueError: bad q, k, v (as SDPA), offsets, or out / lse of the wrong shape.
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    q_offset, k_offset = require_non_negative_int(q_offset, "q_offset"), require_non_negative_int(k_offset, "k_offset")
    _check_running(out, lse, q, v)
    relation = block_relation(q_offset, T, k_offset, S) if causal else "all"
    if relation == "future":
        return out, lse
    mask = None
    if relation == "diagonal" and q_offset != k_offset:  # a partial overlap: mask by global position
        mask = torch.arange(k_offset, k_offset + S, device=q.device) <= torch.arange(
            q_offset, q_offset + T, device=q.device
        ).unsqueeze(-1)  # (T, S)
    aligned = relation == "diagonal" and q_offset == k_offset  # the usual top-left causal mask
    out_b, lse_b = attention_with_lse(q, k, v, mask, scale, causal=aligned)
    return merge_partial_attention([out, out_b.to(out.dtype)], [lse, lse_b.to(lse.dtype)])


def ring_attention(
    q,
    k,
    v,
    causal: bool = False,
    group=None,
    layout: str = "contiguous",
    scale: float | None = None,
    return_stats: bool = False,
):
    """Attention over a sequence split across the ranks of ``group``; call it on every rank at once.

    Args:
        q: (..., T_r, D) this rank's queries; k: (..., S_r, D), v: (..., S_r, Dv) its keys and values,
            cut from the full (..., T, D), (..., S, D), (..., S, Dv) by
            :func:`mha_course.parallel.shard_sequence` with the same ``layout`` (T, S need not be
            multiples of the world size). Every rank passes the same leading dims and dtype.
        causal: query i sees key j only when j <= i (needs S == T).
        group: a torch.distributed process group (default: the world).
        layout: "contiguous" or "zigzag" (see :mod:`mha_course.parallel.layout`).
        scale: default 1/sqrt(D).
        return_stats: also return a :class:`RingStats` (per-step times, scores, bytes).

    Returns:
        this rank's rows of softmax(q k^T * scale) v, (..., T_r, Dv) in q's dtype; or (out, stats).

    Raises:
        RuntimeError: torch.distributed is not initialised.
        TypeError / ValueError: bad q, k, v (as SDPA); an unknown layout; shards whose lengths are
            not that layout's; causal with S != T; inputs that require grad (forward only).
    """
    T_r, S_r, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    check_layout(layout)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise ValueError("ring_attention computes the forward pass only: call it under torch.no_grad()")
    rank, world_size = group_rank_and_size(group)
    lengths = gather_ints([T_r, S_r], group, q.device)  # one small all_gather: who holds how many rows
    Ts, Ss = [n for n, _ in lengths], [n for _, n in lengths]
    check_lengths(Ts, sum(Ts), layout)
    check_lengths(Ss, sum(Ss), layout)
    if causal and Ts != Ss:
        raise ValueError(f"causal ring attention needs S == T on every rank, got T_r {Ts} and S_r {Ss}")
    stats = RingStats(rank, world_size, layout, causal)
    # NCCL's bytes never go through a socket write of this process: only gloo's can be counted
    wire_start = bytes_written() if dist.get_backend(group) == "gloo" else None
    work = torch.promote_types(q.dtype, torch.float32)
    lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = torch.zeros(*lead, T_r, v.shape[-1], dtype=work, device=q.device)  # (..., T_r, Dv)
    lse = torch.full((*lead, T_r), -math.inf, dtype=work, device=q.device)  # (..., T_r)
    q_chunks = _local_chunks(sum(Ts), world_size, rank, layout)
    kv = (k.contiguous(), v.contiguous())
    for step in range(world_size):
        origin = (rank - step) % world_size
        transfer = None
        if step < world_size - 1:  # post the next block's transfer before computing on this one
            source = (origin - 1) % world_size  # the block that arrives from rank - 1
            incoming = tuple(x.new_empty(*x.shape[:-2], Ss[source], x.shape[-1]) for x in kv)
            transfer = _Transfer(kv, incoming, rank, world_size, step, group)
        start, cpu_start = time.perf_counter(), time.process_time()
        k_chunks = _local_chunks(sum(Ss), world_size, origin, layout)
        scores = sum(
            visible_pairs(qs, qr.stop - qr.start, ks, kr.stop - kr.start, causal)
            for (qr, qs), (kr, ks) in itertools.product(q_chunks, k_chunks)
        )
        for rows, cols, q_start, k_start, masked in _calls(q_chunks, k_chunks, causal):
            out[..., rows, :], lse[..., rows] = ring_step(
                q[..., rows, :],
                kv[0][..., cols, :],
                kv[1][..., cols, :],
                out[..., rows, :],
                lse[..., rows],
                q_start,
                k_start,
                masked,
                scale,
            )
        end = time.perf_counter()
        record = RingStep(step, origin, scores, start, end, time.process_time() - cpu_start, None, None, end, 0)
        if transfer is not None:
            transfer.wait()
            kv = incoming
            record.transfer_start, record.transfer_end = transfer.start, transfer.end
            record.wait_end, record.bytes_sent = time.perf_counter(), transfer.bytes_sent
        stats.steps.append(record)
    wire_end = bytes_written()
    stats.wire_bytes = None if wire_start is None or wire_end is None else wire_end - wire_start
    out = out.to(q.dtype)
    return (out, stats) if return_stats else out


def _local_chunks(T: int, world_size: int, rank: int, layout: str) -> list[tuple[slice, int]]:
    """[(slice of the rank's local rows, global position of the first)] for each chunk it holds."""
    chunks, local = [], 0
    for a, b in rank_chunks(T, world_size, rank, layout):
        chunks.append((slice(local, local + b - a), a))
        local += b - a
    return chunks


def _calls(q_chunks, k_chunks, causal: bool) -> list[tuple[slice, slice, int, int, bool]]:
    """The ring_step calls of one step: (local rows, local columns, q_offset, k_offset, causal mask needed).

    A (query chunk, key chunk) pair in the causal future is skipped, a diagonal pair is its own masked
    call, and the pairs that need no mask are merged where their rows or columns sit side by side
    (zigzag: both query chunks against an early key chunk, or a late query chunk against both key
    chunks, in one call): fewer, larger products run faster, and without a mask positions do not matter.
    """
    calls, unmasked = [], {}
    for (rows, q_start), (cols, k_start) in itertools.product(q_chunks, k_chunks):
        relation = block_relation(q_start, rows.stop - rows.start, k_start, cols.stop - cols.start) if causal else "all"
        if relation == "diagonal":
            calls.append((rows, cols, q_start, k_start, True))
        elif relation != "future" and cols.stop > cols.start:
            unmasked.setdefault((rows.start, rows.stop), []).append((cols.start, cols.stop))
    groups: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []
    for rows, cols in sorted(unmasked.items()):
        cols = _join(sorted(cols))
        if groups and groups[-1][1] == cols and groups[-1][0][1] == rows[0]:
            groups[-1] = ((groups[-1][0][0], rows[1]), cols)  # the next rows, against the same columns
        else:
            groups.append((rows, cols))
    calls += [(slice(*rows), slice(*c), 0, 0, False) for rows, cols in groups for c in cols]
    return calls


def _join(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted (start, stop) ranges with the touching ones joined."""
    joined = [ranges[0]]
    for a, b in ranges[1:]:
        if a == joined[-1][1]:
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return joined


class _Transfer:
    """Send this rank's K/V block to rank + 1 and receive the next from rank - 1, asynchronously.

    ``batch_isend_irecv`` posts all four operations at once (NCCL needs them grouped, or a ring of
    blocking sends deadlocks); a watcher thread notes when they have all completed, which is how the
    timeline knows the transfer's true end even while this thread computes.
    """

    def __init__(self, outgoing, incoming, rank, world_size, step, group):
        peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
        nxt, prev = peer((rank + 1) % world_size), peer((rank - 1) % world_size)
        ops = [dist.P2POp(dist.isend, x, nxt, group, tag=2 * step + i) for i, x in enumerate(outgoing) if x.numel()]
        ops += [dist.P2POp(dist.irecv, x, prev, group, tag=2 * step + i) for i, x in enumerate(incoming) if x.numel()]
        self.bytes_sent = sum(x.numel() * x.element_size() for x in outgoing)
        self.start = time.perf_counter()
        self.end: float | None = None
        works = dist.batch_isend_irecv(ops) if ops else []
        self._watcher = threading.Thread(target=self._watch, args=(works,), daemon=True)
        self._watcher.start()

    def _watch(self, works) -> None:
        for work in works:
            work.wait()  # releases the GIL: the computing thread runs on
        self.end = time.perf_counter()

    def wait(self) -> None:
        self._watcher.join()
        if self.end is None:
            raise RuntimeError("a ring transfer failed (see the other ranks' errors)")


def _check_running(out, lse, q, v) -> None:
    require_tensor(out, "out")
    require_tensor(lse, "lse")
    T, Dv = q.shape[-2], v.shape[-1]
    if out.dim() < 2 or out.shape[-2:] != (T, Dv) or tuple(lse.shape) != tuple(out.shape[:-1]):
        raise ValueError(
            f"out must have shape (..., T={T}, Dv={Dv}) and lse (..., T) = out.shape[:-1]; "
            f"got out {tuple(out.shape)} and lse {tuple(lse.shape)}"
        )
