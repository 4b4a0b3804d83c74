"""Which way of running tiled_attention's loop keeps its speed when the CPU is shared?

    python benchmarks/tiled_designs.py [--T 4096] [--repeats 5] [--loads 0 1] [--causal no|yes|both]

Times, side by side in one process (in turns, median of --repeats), the designs that
``mha_course/efficient/tiled/forward.py`` weighed, quiet and beside N busy processes (``mha_course.timing.machine_load``),
as a fraction of torch's fused CPU flash kernel (above 1: faster), float32, B = 1, H = 8, D = 64:

- ``one loop, all threads``: one Python loop over all heads, every torch call split over all
  intra-op threads (the design before worker threads);
- ``one loop, 4x tiles``: the same with tiles four times larger (fewer, longer parallel regions);
- ``one loop, 1 thread``: the same on one intra-op thread, what a design that drops to one thread
  when ``os.getloadavg()`` is high would run under load;
- ``worker threads``: the design kept, one single-threaded worker per intra-op thread taking
  (heads, query block) items one at a time (``mha_course.efficient.tiled.workers``);
- ``worker threads, 4x items``: the same with four times as many, smaller items per worker
  (``tiling.ITEMS_PER_WORKER``), so a worker slowed by another process leaves more to the others.

The figures depend on the machine and on what else runs on it: report them with the core count and
the "other" column, the cores that other work kept busy while they were timed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mha_course.efficient.tiled import plan as tiling
from mha_course.efficient.tiled.forward import tiled_attention
from mha_course.timing.machine_load import background_load, cpu_seconds, other_load


@contextlib.contextmanager
def _one_loop(threads: int | None = None):
    """Run tiled_attention without worker threads, on ``threads`` intra-op threads (default: as set)."""
    saved_work, saved_threads = tiling.PARALLEL_MIN_WORK, torch.get_num_threads()
    tiling.PARALLEL_MIN_WORK = 2**62  # every call is "small": the calling thread works alone
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        tiling.PARALLEL_MIN_WORK = saved_work
        torch.set_num_threads(saved_threads)


def designs(q, k, v, causal: bool) -> dict:
    """name -> a call computing attention of q, k, v (B, H, T, D) that way."""
    heads = q.shape[0] * q.shape[1]
    bq, bk = tiling.default_blocks(heads, causal)

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def one_loop():
        with _one_loop():
            return tiled_attention(q, k, v, causal=causal)

    def one_loop_big():
        with _one_loop():
            return tiled_attention(q, k, v, (2 * bq, 2 * bk), causal=causal)  # 4x the scores per tile

    def one_thread():
        with _one_loop(threads=1):
            return tiled_attention(q, k, v, causal=causal)

    def workers():
        return tiled_attention(q, k, v, causal=causal)

    def workers_more_items():
        saved = tiling.ITEMS_PER_WORKER
        tiling.ITEMS_PER_WORKER = 4 * saved  # smaller items: a slowed worker leaves more to the others
        try:
            return tiled_attention(q, k, v, causal=causal)
        finally:
            tiling.ITEMS_PER_WORKER = saved

    return {
        "torch flash": flash,
        "one loop, all threads": one_loop,
        "one loop, 4x tiles": one_loop_big,
        "one loop, 1 thread": one_thread,
        "worker threads": workers,
        "worker threads, 4x items": workers_more_items,
    }


def measure(T: int, causal: bool, loads: list[int], repeats: int) -> dict:
    """{load: ({design: median ms}, other cores busy)} for one (T, causal)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, T, 64) for _ in range(3))  # (B, H, T, D)
    calls = designs(q, k, v, causal)
    results = {}
    with torch.no_grad():
        for load in loads:
            with background_load(load) as helpers:
                for call in calls.values():
                    call()  # warm-up
                times = {name: [] for name in calls}
                before = cpu_seconds(helpers)
                for _ in range(repeats):
                    for name, call in calls.items():
                        start = time.perf_counter()
                        call()
                        times[name].append((time.perf_counter() - start) * 1e3)
                other = other_load(before, cpu_seconds(helpers))
            results[load] = ({name: statistics.median(t) for name, t in times.items()}, other)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 1], help="busy processes, one run each")
    parser.add_argument("--causal", choices=["no", "yes", "both"], default="both")
    args = parser.parse_args(argv)
    print(
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
        f"T = {args.T}, B = 1, H = 8, D = 64, float32, median of {args.repeats}"
    )
    for causal in {"no": [False], "yes": [True], "both": [False, True]}[args.causal]:
        results = measure(args.T, causal, args.loads, args.repeats)
        names = list(next(iter(results.values()))[0])
        head = ["causal" if causal else "non-causal"] + [("quiet" if n == 0 else f"load {n}") for n in args.loads]
        rows = [head]
        for name in names[1:]:
            rows.append(
                [name]
                + [f"{times['torch flash'] / times[name]:.2f}x ({times[name]:.0f} ms)" for times, _ in results.values()]
            )
        rows.append(["torch flash"] + [f"1.00x ({times['torch flash']:.0f} ms)" for times, _ in results.values()])
        rows.append(
            ["other cores busy"] + ["n/a" if other is None else f"{other:.2f}" for _, other in results.values()]
        )
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        print()


if __name__ == "__main__":
    main()
