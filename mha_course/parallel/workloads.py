"""What each rank runs in the demo and the chapter: seeded problems, and rank functions for ``run_ranks``.

Every rank builds the *same* full problem from the same seed (the inputs, the whole attention
module), keeps its own part of it, runs the distributed computation and returns its part of the
answer with what it measured. The launching process builds the same problem once more and checks
the assembled answer against the single-process library (:mod:`mha_course.parallel.demo`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..core.attention import scaled_dot_product_attention
from ..core.masks import causal_mask
from ..core.mha import MultiHeadAttention
from ..validation import require_positive_int
from .comm import bytes_written
from .launch import rank_device
from .layout import shard_sequence
from .ring import ring_attention
from .tensor_parallel import TensorParallelMultiHeadAttention
from .ulysses import ulysses_attention


@dataclass(frozen=True)
class Problem:
    """One seeded attention problem: q (B, H, T, D), k (B, G, T, D), v (B, G, T, Dv); E = H * D.

    G = ``kv_heads`` key/value heads (default H); with G < H, query head h reads key/value head
    h // (H / G) (grouped-query attention). The tensor-parallel module ignores G.
    """

    B: int = 1
    H: int = 4
    T: int = 256
    D: int = 32
    Dv: int | None = None  # None: Dv = D
    seed: int = 0
    kv_heads: int | None = None  # None: G = H

    def __post_init__(self):
        for name in ("B", "H", "T", "D"):
            require_positive_int(getattr(self, name), name)
        if self.Dv is not None:
            require_positive_int(self.Dv, "Dv")
        if self.kv_heads is not None:
            require_positive_int(self.kv_heads, "kv_heads")
        if self.H % self.G:
            raise ValueError(f"kv_heads must divide H, got kv_heads={self.kv_heads}, H={self.H}")

    @property
    def G(self) -> int:
        return self.H if self.kv_heads is None else self.kv_heads

    @property
    def E(self) -> int:
        return self.H * self.D

    def qkv(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q, k, v) drawn from the seed: (B, H, T, D), (B, G, T, D), (B, G, T, Dv)."""
        g = torch.Generator().manual_seed(self.seed)
        Dv = self.D if self.Dv is None else self.Dv
        return (
            torch.randn(self.B, self.H, self.T, self.D, generator=g),
            torch.randn(self.B, self.G, self.T, self.D, generator=g),
            torch.randn(self.B, self.G, self.T, Dv, generator=g),
        )

    def expected(self, causal: bool = False) -> torch.Tensor:
        """The single-process answer (B, H, T, Dv): key/value heads repeated for grouped-query attention."""
        q, k, v = self.qkv()
        k, v = (x.repeat_interleave(self.H // self.G, 1) for x in (k, v))  # (B, H, T, .)
        return scaled_dot_product_attention(q, k, v, mask=causal_mask(self.T) if causal else None)[0]

    def module_and_input(self) -> tuple[MultiHeadAttention, torch.Tensor]:
        """A whole MultiHeadAttention(E, H) and an input x (B, T, E), both from the seed."""
        torch.manual_seed(self.seed)
        module = MultiHeadAttention(self.E, self.H)
        x = torch.randn(self.B, self.T, self.E, generator=torch.Generator().manual_seed(self.seed + 1))
        return module, x


def tensor_parallel_rank(rank: int, world_size: int, problem: Problem, backend: str = "gloo", repeats: int = 3) -> dict:
    """Rank ``rank``'s shard of the problem's module: its output (B, T, E), seconds and bytes per forward."""
    device = rank_device(backend, rank)
    module, x = problem.module_and_input()
    shard = TensorParallelMultiHeadAttention.from_module(module, rank, world_size).to(device)
    x = x.to(device)
    with torch.no_grad():
        shard(x)  # warm-up
        times, wire = [], []
        for _ in range(repeats):
            torch.distributed.barrier()
            before, start = bytes_written(), time.perf_counter()
            out, _ = shard(x)
            times.append(time.perf_counter() - start)
            after = bytes_written()
            measurable = backend == "gloo" and before is not None and after is not None  # NCCL: not through sockets
            wire.append(after - before if measurable else None)
    return {
        "out": out.cpu(),
        "seconds": statistics.median(times),
        "wire_bytes": wire[-1],
        "heads": list(shard.head_range),
        "itemsize": x.element_size(),
    }


def ring_rank(
    rank: int,
    world_size: int,
    problem: Problem,
    causal: bool = False,
    layout: str = "contiguous",
    backend: str = "gloo",
    repeats: int = 3,
) -> dict:
    """Rank ``rank``'s rows of ring attention: its output, median seconds per call, and the RingStats of one
    repeat, the *same* repeat on every rank: the one whose slowest rank spent the least CPU time computing
    (the repeat least disturbed by other programs). Each rank keeping its own best repeat would put
    timelines from different calls side by side."""
    device = rank_device(backend, rank)
    q, k, v = (shard_sequence(x, world_size, rank, layout).to(device) for x in problem.qkv())
    with torch.no_grad():
        ring_attention(q, k, v, causal=causal, layout=layout)  # warm-up
        runs = []
        for _ in range(repeats):
            torch.distributed.barrier()  # start together, so the timelines line up
            start = time.perf_counter()
            out, stats = ring_attention(q, k, v, causal=causal, layout=layout, return_stats=True)
            runs.append((time.perf_counter() - start, stats))
    mine = torch.tensor([sum(s.compute_cpu for s in stats.steps) for _, stats in runs], dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    torch.distributed.all_gather(everyone, mine.to(device))  # every rank's CPU seconds per repeat
    chosen = int(torch.stack([t.cpu() for t in everyone]).amax(0).argmin())  # least disturbed slowest rank
    return {
        "out": out.cpu(),
        "seconds": statistics.median(t for t, _ in runs),
        "stats": runs[chosen][1],
        "repeat": chosen,
    }


def ulysses_rank(
    rank: int, world_size: int, problem: Problem, causal: bool = False, backend: str = "gloo", repeats: int = 3
) -> dict:
    """Rank ``rank``'s rows of DeepSpeed-Ulysses attention: its output, median seconds, and the UlyssesStats
    of the call with the least communication time."""
    device = rank_device(backend, rank)
    q, k, v = (shard_sequence(x, world_size, rank, "contiguous").to(device) for x in problem.qkv())
    with torch.no_grad():
        ulysses_attention(q, k, v, causal=causal)  # warm-up
        runs = []
        for _ in range(repeats):
            torch.distributed.barrier()
            start = time.perf_counter()
            out, stats = ulysses_attention(q, k, v, causal=causal, return_stats=True)
            runs.append((time.perf_counter() - start, stats))
    least = min(runs, key=lambda run: run[1].comm_seconds)
    return {"out": out.cpu(), "seconds": statistics.median(t for t, _ in runs), "stats": least[1]}


def ring_sweep_rank(
    rank: int,
    world_size: int,
    problems: list[Problem],
    causal: bool = False,
    layout: str = "contiguous",
    backend: str = "gloo",
    repeats: int = 1,
) -> list[dict]:
    """:func:`ring_rank` for several problems in one launch (e.g. growing T, to see compute outgrow transfer)."""
    return [ring_rank(rank, world_size, p, causal, layout, backend, repeats) for p in problems]


def link_rank(rank: int, world_size: int, sizes: list[int], repeats: int = 5) -> dict[int, float]:
    """The link alone: ping-pong between ranks 0 and 1, median one-way seconds per message size in bytes.

    One-way time = half a round trip (send, then receive the same message back), nothing else
    running: the alpha + n / beta of the link, to fit alpha and beta. Other ranks only wait.
    """
    times = {}
    for n in sizes:
        message = torch.zeros(max(1, n // 4))  # float32
        samples = []
        for _ in range(repeats + 1):  # the first round trip warms the connection up and is dropped
            torch.distributed.barrier()
            start = time.perf_counter()
            if rank == 0:
                torch.distributed.send(message, 1)
                torch.distributed.recv(message, 1)
            elif rank == 1:
                torch.distributed.recv(message, 0)
                torch.distributed.send(message, 0)
            samples.append((time.perf_counter() - start) / 2)
        times[message.numel() * 4] = statistics.median(samples[1:])
    return times


def demo_rank(rank: int, world_size: int, problem: Problem, backend: str = "gloo", repeats: int = 3) -> dict:
    """Everything the demo runs, in one launch: tensor parallelism, three ring variants, then Ulysses."""
    results = {"tensor_parallel": tensor_parallel_rank(rank, world_size, problem, backend, repeats)}
    for name, causal, layout in RING_VARIANTS:
        results[name] = ring_rank(rank, world_size, problem, causal, layout, backend, repeats)
    if problem.H % world_size == 0 and problem.G % world_size == 0:  # Ulysses needs whole heads per rank
        results["ulysses"] = ulysses_rank(rank, world_size, problem, False, backend, repeats)
    return results


#: (name, causal, layout) of the ring runs the demo makes
RING_VARIANTS = (
    ("ring", False, "contiguous"),
    ("ring causal contiguous", True, "contiguous"),
    ("ring causal zigzag", True, "zigzag"),
)
