"""How fast is FlexAttention on this machine, compiled and eager, against the course and torch's SDPA?

    python benchmarks/flex_attention_cpu.py [--lengths 256 1024] [--threads 2] [--repeats 5] [--warm-cache]

For a causal mask and a document mask (4 packed documents), at each length T (B=1, H=4, D=64,
float32), prints the median time of: the course's ``scaled_dot_product_attention`` with the
materialised mask, torch's ``F.scaled_dot_product_attention`` with the same mask, FlexAttention in
eager mode, and ``torch.compile(flex_attention)``, plus how long the first compiled call took
(compilation, from an empty TorchInductor cache unless --warm-cache: compiled kernels are cached on
disk, so a second run of the same shapes starts much faster). Where compiling is impossible (no C++
compiler on a CPU) it says so and times the rest. Figures depend on the machine and what else runs on it: report them with the core count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from mha_course import scaled_dot_product_attention
from mha_course.inference.flex import compile_support, document_mod, flex_attention, make_block_mask, mask_from_mod


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def measure(q, k, v, mask, block_mask, can_compile: bool, repeats: int) -> tuple[float, ...]:
    """Median ms of the course, torch's SDPA, eager and compiled FlexAttention; seconds of the first compiled call."""
    course = median_ms(lambda: scaled_dot_product_attention(q, k, v, mask=mask), repeats)
    sdpa = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), repeats)
    eager = median_ms(lambda: flex_attention(q, k, v, block_mask=block_mask), repeats)
    compiled, first = float("nan"), float("nan")
    if can_compile:
        start = time.perf_counter()
        out = flex_attention(q, k, v, block_mask=block_mask, compiled=True)
        first = time.perf_counter() - start
        gap = float((out - scaled_dot_product_attention(q, k, v, mask=mask)[0]).abs().max())
        assert gap < 1e-4, f"compiled FlexAttention differs from the course by {gap}"
        compiled = median_ms(lambda: flex_attention(q, k, v, block_mask=block_mask, compiled=True), repeats)
    return course, sdpa, eager, compiled, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="keep TorchInductor's on-disk cache (default: compile from an empty one)",
    )
    args = parser.parse_args()
    fresh_cache = None
    if not args.warm_cache:  # read by TorchInductor when it compiles, so setting it here is early enough
        fresh_cache = tempfile.mkdtemp(prefix="flex_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = fresh_cache
    try:
        run(args)
    finally:
        if fresh_cache:
            shutil.rmtree(fresh_cache, ignore_errors=True)


def run(args) -> None:
    torch.set_num_threads(args.threads)
    can_compile, why = compile_support()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
        f"compiling: {'yes' if can_compile else 'no'} ({why}); "
        f"{'warm' if args.warm_cache else 'empty'} compile cache"
    )
    print(
        f"{'mask':10s} {'T':>5s} {'course':>9s} {'torch SDPA':>11s} {'flex eager':>11s} {'flex compiled':>14s} "
        f"{'first compiled call':>20s} {'tiles skipped':>14s}"
    )
    torch.manual_seed(0)
    for T in args.lengths:
        q, k, v = (torch.randn(1, 4, T, 64) for _ in range(3))
        sizes = torch.tensor([T // 4 + T // 8, T // 4, T // 4 - T // 8, T // 4])  # 4 packed documents
        mods = {
            "causal": lambda b, h, i, j: j <= i,
            "documents": document_mod(torch.repeat_interleave(torch.arange(4), sizes)),
        }
        for name, mod in mods.items():
            mask = mask_from_mod(mod, 1, 1, T, T)  # (1, 1, T, T)
            block_mask = make_block_mask(mod, 1, 1, T, T, block_size=128)
            course, sdpa, eager, compiled, first = measure(q, k, v, mask, block_mask, can_compile, args.repeats)
            print(
                f"{name:10s} {T:5d} {course:8.2f}ms {sdpa:10.2f}ms {eager:10.2f}ms {compiled:13.2f}ms "
                f"{first:19.1f}s {block_mask.sparsity():13.1f}%"
            )


if __name__ == "__main__":
    main()
