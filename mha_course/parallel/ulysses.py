"""DeepSpeed-Ulysses (sequence parallelism by all-to-all): trade the sequence split for a head split.

Each of W ranks holds a contiguous block of T / W positions of q, k and v, for *all* heads (as in
ring attention, :func:`mha_course.parallel.shard_sequence` with the ``contiguous`` layout). Heads
are independent, so one **all-to-all** regroups the data: rank r sends to rank j the rows it holds
of head group j, and receives from every rank that rank's rows of head group r:

    (B, H, T/W, D) on every rank  --all-to-all-->  (B, H/W, T, D) on every rank
    attention of H/W heads over the whole sequence, on one rank, with no further communication
    (B, H/W, T, Dv)               --all-to-all-->  (B, H, T/W, Dv): the rows this rank started with

Bytes each rank sends (it keeps its own share, 1/W of each tensor; b bytes per number):

    (W - 1) / W * B * (T / W) * (H D + G D + G Dv + H Dv) * b      (G = H_kv key/value heads)

against the ring's (W - 1) * B * G * (S / W) * (D + Dv) * b: with G = H and D = Dv, W / 2 times less,
and constant when T / W is (the ring's grows with W). But W may not exceed the G key/value heads
(G % W == 0 here; implementations replicate K/V heads beyond), each all-to-all must finish before the
attention that needs it (no overlap inside the layer), and all-to-all wants every pair of ranks to have
a fast link (inside one NVLink node) where the ring needs only neighbours. Forward only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..core.attention import scaled_dot_product_attention
from ..core.masks import causal_mask
from ..validation import check_qkv, require_rank, require_tensor, resolve_scale
from .comm import bytes_written, gather_ints, group_rank_and_size


@dataclass
class UlyssesStats:
    """One rank's record of a :func:`ulysses_attention` call (seconds from ``time.perf_counter``)."""

    rank: int
    world_size: int
    bytes_sent: int = 0  # sizes of the tensors handed to the other ranks (its own share excluded)
    wire_bytes: int | None = None  # written to this process's sockets (gloo on Linux), else None
    comm_seconds: float = 0.0  # the two all-to-alls
    compute_seconds: float = 0.0  # the attention between them


def _all_to_all(chunks: list[torch.Tensor], shapes: list[tuple[int, ...]], group, stats: UlyssesStats):
    """Send chunks[j] to rank j; return what rank j sent to this one, of shape shapes[j], in rank order.

    Point-to-point sends and receives posted together (an "all-to-all-v"): gloo's own ``all_to_all``
    needs equal sizes, and a sequence of T positions need not split evenly over W ranks.
    """
    received = [chunks[0].new_empty(shape) for shape in shapes]
    received[stats.rank].copy_(chunks[stats.rank])  # this rank's own share never leaves it
    peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    ops = []
    for j in range(stats.world_size):
        if j != stats.rank:
            if chunks[j].numel():
                ops.append(dist.P2POp(dist.isend, chunks[j].contiguous(), peer(j), group))
                stats.bytes_sent += chunks[j].numel() * chunks[j].element_size()
            if received[j].numel():
                ops.append(dist.P2POp(dist.irecv, received[j], peer(j), group))
    start = time.perf_counter()
    for work in dist.batch_isend_irecv(ops) if ops else []:
        work.wait()
    stats.comm_seconds += time.perf_counter() - start
    return received


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    group=None,
    scale: float | None = None,
    return_stats: bool = False,
):
    """Attention over a sequence split across the ranks of ``group`` by two all-to-alls; call it on every rank.

    Args:
        q: (B, H, T_r, D) this rank's contiguous block of queries, all H heads; k: (B, G, S_r, D),
            v: (B, G, S_r, Dv) its block of keys and values, G key/value heads (G divides H: grouped-query
            attention, query head h reads key/value head h // (H / G)). Cut them from the full tensors
            with ``shard_sequence(x, W, rank, "contiguous")``; lengths may differ by rank.
        causal: query i sees key j only when j <= i (needs S == T).
        group: a torch.distributed process group (default: the world).
        scale: default 1/sqrt(D).
        return_stats: also return a :class:`UlyssesStats` (bytes and seconds).

    Returns:
        this rank's rows of softmax(q k^T * scale) v, (B, H, T_r, Dv) in q's dtype; or (out, stats).

    Raises:
        RuntimeError: torch.distributed is not initialised.
        TypeError / ValueError: bad q, k, v (as SDPA) or not 4-D; H or G not divisible by the world
            size (a rank needs whole heads), G not dividing H; causal with S != T; inputs that
            require grad (forward only).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(x, name)
        require_rank(x, 4, name, "(B, heads, length, dim)")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"k and v must have the same key/value heads G, got {tuple(k.shape)} and {tuple(v.shape)}")
    T_r, S_r, D = check_qkv(q[:, :1], k[:, :1], v[:, :1])  # dtypes, D, S, B (heads are checked below)
    scale = resolve_scale(scale, D)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise ValueError("ulysses_attention computes the forward pass only: call it under torch.no_grad()")
    rank, world_size = group_rank_and_size(group)
    B, H, G = q.shape[0], q.shape[1], k.shape[1]
    if H % G:
        raise ValueError(f"the {G} key/value heads must divide the {H} query heads")
    if H % world_size or G % world_size:
        raise ValueError(
            f"Ulysses gives each of the {world_size} ranks whole heads: H = {H} and G = {G} must be divisible "
            f"by {world_size} (replicate key/value heads, or use ring attention, beyond G ranks)"
        )
    lengths = gather_ints([T_r, S_r, B, H, G], group, q.device)
    Ts, Ss = [n[0] for n in lengths], [n[1] for n in lengths]
    if any(n[2:] != [B, H, G] for n in lengths):
        raise ValueError(f"every rank must pass the same B, H and G; got (B, H, G) per rank {[n[2:] for n in lengths]}")
    if causal and Ts != Ss:
        raise ValueError(f"causal Ulysses attention needs S == T on every rank, got T_r {Ts} and S_r {Ss}")
    stats = UlyssesStats(rank, world_size)
    wire_start = bytes_written() if dist.get_backend(group) == "gloo" else None
    h, g = H // world_size, G // world_size  # heads per rank after the first all-to-all
    # sequence-split -> head-split: send head group j of my rows to rank j, gather all rows of my heads
    q_all = torch.cat(_all_to_all(list(q.split(h, 1)), [(B, h, n, D) for n in Ts], group, stats), dim=2)
    k_all = torch.cat(_all_to_all(list(k.split(g, 1)), [(B, g, n, D) for n in Ss], group, stats), dim=2)
    v_all = torch.cat(
        _all_to_all(list(v.split(g, 1)), [(B, g, n, v.shape[-1]) for n in Ss], group, stats), dim=2
    )  # (B, g, S, Dv)
    start = time.perf_counter()
    repeat = h // g  # query heads per key/value head, the same within every group
    k_all, v_all = k_all.repeat_interleave(repeat, 1), v_all.repeat_interleave(repeat, 1)  # (B, h, S, .)
    mask = causal_mask(sum(Ts), device=q.device) if causal else None
    heads, _ = scaled_dot_product_attention(q_all, k_all, v_all, mask=mask, scale=scale)  # (B, h, T, Dv)
    stats.compute_seconds = time.perf_counter() - start
    # head-split -> sequence-split: rank j gets its rows of my heads back
    rows = _all_to_all(list(heads.split(Ts, 2)), [(B, h, T_r, v.shape[-1])] * world_size, group, stats)
    out = torch.cat(rows, dim=1).to(q.dtype)  # (B, H, T_r, Dv), heads in rank order = original order
    wire_end = bytes_written()
    stats.wire_bytes = None if wire_start is None or wire_end is None else wire_end - wire_start
    return (out, stats) if return_stats else out


__all__ = ["UlyssesStats", "ulysses_attention"]
