"""Chapter 10's cost model with communication: bytes per scheme, time per byte, and when it hides.

Bytes are exact and the same on any interconnect (b = bytes per number, W = world size):

    ring all-reduce of n numbers     each rank sends 2 (W - 1) / W * n * b      (reduce-scatter, then all-gather)
    tensor-parallel attention        one all-reduce of the (B, T, E) output per forward
    ring attention, one step         each rank sends one K/V block: B * H * (S / W) * (D + Dv) * b
    ring attention, whole            W - 1 steps: (W - 1) / W * B * H * S * (D + Dv) * b per rank
    Ulysses (two all-to-alls)        (W - 1) / W * B * (T / W) * (H D + G D + G Dv + H Dv) * b per rank

With grouped-query attention the ring passes K/V blocks of only G = H_kv heads (H in the lines
above means the heads whose K/V travel): G / H of the traffic, while the compute stays that of H heads.
Time is a model, the alpha-beta model of a link with latency alpha and bandwidth beta (bytes/s):

    t_transfer = alpha + bytes / beta

A ring step hides its transfer when computing on a block takes longer than sending one. With
F FLOP/s, one step computes 2 * B * H * (T/W) * (S/W) * (D + Dv) FLOPs for the H query heads and
sends B * G * (S/W) * (D + Dv) * b bytes for the G key/value heads, so

    hidden when  T / W  >=  F * b * G / (2 * beta * H)     (independent of B, D and S)

which is F b / (2 beta) for multi-head attention (G = H) and 8 times less for a model of 64 query and
8 key/value heads. A causal ring balanced by the zigzag layout does about half the work per step, so it
needs twice that. A tensor-parallel all-reduce cannot overlap the computation that produces its input,
and its compute per byte sent shrinks as W grows (:func:`tp_compute_over_comm`): it stays inside one
NVLink domain, hidden in part by chunked GEMMs ("async tensor parallelism") or Megatron's sequence
parallelism (a reduce-scatter and an all-gather, the same bytes, with the norms between on T / W positions).
The link figures in :data:`LINKS` are datasheet peaks per direction; NCCL reaches a fraction of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validation import require_int, require_non_negative_int, require_positive_int
from .layout import rank_chunks


@dataclass(frozen=True)
class Link:
    """A datasheet link: peak bandwidth per direction, in bytes per second."""

    name: str
    bandwidth: float
    source: str


# Each interconnect the chapters compare: its bandwidth per direction, with the datasheet it comes from.
LINKS = {
    "NVLink 4 (H100 SXM)": Link(
        "NVLink 4 (H100 SXM)", 450e9, "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU, both directions together"
    ),
    "PCIe 5.0 x16": Link("PCIe 5.0 x16", 64e9, "PCI-SIG: 32 GT/s per lane, 16 lanes, about 64 GB/s per direction"),
    "InfiniBand NDR (400 Gb/s)": Link(
        "InfiniBand NDR (400 Gb/s)", 50e9, "NVIDIA ConnectX-7 NDR: 400 Gb/s per port, one port per GPU"
    ),
}


def allreduce_bytes(numel: int, world_size: int, itemsize: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``numel`` numbers: 2 (W - 1) / W * numel * itemsize.

    Raises:
        TypeError / ValueError: an argument that is not a non-negative int (world_size, itemsize >= 1).
    """
    numel = require_non_negative_int(numel, "numel")
    world_size, itemsize = require_positive_int(world_size, "world_size"), require_positive_int(itemsize, "itemsize")
    return 2 * (world_size - 1) / world_size * numel * itemsize


def tp_bytes(B: int, T: int, E: int, world_size: int, itemsize: int) -> float:
    """Bytes one rank sends in one forward of tensor-parallel attention: the all-reduce of (B, T, E)."""
    for name, n in (("B", B), ("T", T), ("E", E)):
        require_non_negative_int(n, name)
    return allreduce_bytes(B * T * E, world_size, itemsize)


def ring_step_bytes(B: int, H: int, S_block: int, D: int, Dv: int, itemsize: int) -> int:
    """Bytes of one K/V block sent in one ring step: B * H * S_block * (D + Dv) * itemsize."""
    for name, n in (("B", B), ("H", H), ("S_block", S_block), ("D", D), ("Dv", Dv), ("itemsize", itemsize)):
        require_non_negative_int(n, name)
    return B * H * S_block * (D + Dv) * itemsize


def ring_bytes(
    B: int, H: int, S: int, D: int, Dv: int, world_size: int, rank: int, itemsize: int, layout: str = "contiguous"
) -> int:
    """Bytes rank ``rank`` sends in a whole ring pass: the blocks it passes on in steps 0 .. W - 2.

    At step s it sends the block of rank (rank - s) mod W, whose length the layout gives; with S a
    multiple of W that is (W - 1) * ring_step_bytes(B, H, S / W, D, Dv, itemsize).
    """
    world_size = require_positive_int(world_size, "world_size")
    total = 0
    for step in range(world_size - 1):
        origin = (rank - step) % world_size
        length = sum(b - a for a, b in rank_chunks(S, world_size, origin, layout))
        total += ring_step_bytes(B, H, length, D, Dv, itemsize)
    return total


def ulysses_bytes(
    B: int, H: int, G: int, T: int, S: int, D: int, Dv: int, world_size: int, rank: int, itemsize: int
) -> int:
    """Bytes rank ``rank`` sends in :func:`mha_course.parallel.ulysses.ulysses_attention` (contiguous blocks).

    First all-to-all: to each other rank, its head group of this rank's rows of q, k and v,
    B (H/W) T_r D + B (G/W) S_r (D + Dv); second: to each other rank j, rank j's rows of this rank's
    H / W output heads, B (H/W) T_j Dv. With T, S multiples of W that is

        (W - 1) / W * B * (T / W) * (H D + G D + G Dv + H Dv) * itemsize      (S = T)

    Raises:
        TypeError / ValueError: a size that is not a positive int, or H, G not divisible by W.
    """
    for name, n in (("B", B), ("H", H), ("G", G), ("T", T), ("S", S), ("D", D), ("Dv", Dv), ("itemsize", itemsize)):
        require_positive_int(n, name)
    world_size = require_positive_int(world_size, "world_size")
    rank = require_non_negative_int(rank, "rank")
    if rank >= world_size or H % world_size or G % world_size:
        raise ValueError(f"need rank < W and H, G divisible by W; got rank={rank}, W={world_size}, H={H}, G={G}")
    Ts = [sum(b - a for a, b in rank_chunks(T, world_size, r, "contiguous")) for r in range(world_size)]
    Ss = [sum(b - a for a, b in rank_chunks(S, world_size, r, "contiguous")) for r in range(world_size)]
    h, g, others = H // world_size, G // world_size, world_size - 1
    inputs = others * B * (h * Ts[rank] * D + g * Ss[rank] * (D + Dv))
    outputs = B * h * Dv * (T - Ts[rank])
    return (inputs + outputs) * itemsize


def transfer_time(nbytes: float, bandwidth: float, latency: float = 0.0) -> float:
    """The alpha-beta model: seconds to move ``nbytes`` over a link, latency + nbytes / bandwidth.

    Raises:
        ValueError: a negative size or latency, or a bandwidth that is not positive.
    """
    if nbytes < 0 or latency < 0 or bandwidth <= 0:
        raise ValueError(f"need nbytes >= 0, latency >= 0, bandwidth > 0; got {nbytes}, {latency}, {bandwidth}")
    return latency + nbytes / bandwidth


def ring_hiding_block(
    flops_per_s: float,
    bandwidth: float,
    itemsize: int,
    balanced_causal: bool = False,
    num_heads: int = 1,
    num_kv_heads: int | None = None,
) -> float:
    """The smallest block T / W (queries per rank) for which a ring step's compute hides its transfer.

        T / W >= F * b * G / (2 * beta * H)   (twice that for a causal ring, which computes half a block per step)

    with H = ``num_heads`` query heads computed and G = ``num_kv_heads`` key/value heads sent (default
    G = H: multi-head attention, F b / (2 beta)).

    Raises:
        ValueError: flops_per_s or bandwidth not positive, itemsize < 1, or G not dividing H.
        TypeError: a head count that is not an int.
    """
    itemsize = require_positive_int(itemsize, "itemsize")
    num_heads = require_positive_int(num_heads, "num_heads")
    num_kv_heads = num_heads if num_kv_heads is None else require_positive_int(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads must divide num_heads, got {num_kv_heads} and {num_heads}")
    if flops_per_s <= 0 or bandwidth <= 0:
        raise ValueError(f"flops_per_s and bandwidth must be positive, got {flops_per_s} and {bandwidth}")
    block = flops_per_s * itemsize * num_kv_heads / (2 * bandwidth * num_heads)
    return 2 * block if balanced_causal else block


def tp_compute_over_comm(E: int, S: int, world_size: int, flops_per_s: float, bandwidth: float, itemsize: int) -> float:
    """Compute time over all-reduce time for one tensor-parallel attention layer, per rank (> 1: compute dominates).

    Per token, a rank computes the four projections, 8 E^2 / W FLOPs, and attention over S keys,
    4 S E / W FLOPs; it sends 2 (W - 1) / W * E * b bytes. The ratio is

        (8 E + 4 S) * E / W / F   over   2 (W - 1) / W * E * b / beta   =   (4 E + 2 S) * beta / ((W - 1) * b * F)

    Raises:
        ValueError: world_size < 2 (nothing is sent), or a non-positive rate.
    """
    E, S, world_size = (
        require_positive_int(E, "E"),
        require_non_negative_int(S, "S"),
        require_int(world_size, "world_size", 2),
    )
    if flops_per_s <= 0 or bandwidth <= 0:
        raise ValueError(f"flops_per_s and bandwidth must be positive, got {flops_per_s} and {bandwidth}")
    return (4 * E + 2 * S) * bandwidth / ((world_size - 1) * itemsize * flops_per_s)
