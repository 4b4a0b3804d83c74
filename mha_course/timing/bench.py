"""Side-by-side attention benchmark: ``python -m mha_course.bench --help``.

Every implementation runs on the same q, k, v (B, H, T, D) in one process, one after another, so
ratios between them are fair even on a noisy machine. Implementations:

    naive              softmax(q k^T * scale [+ causal bias]) v in three torch lines: the (T, S) matrix
    mha_course.sdpa    mha_course.scaled_dot_product_attention (the course's checked version)
    tiled              mha_course.tiled_attention (online softmax, O(T) extra memory), if present
    torch.sdpa[X]      torch.nn.functional.scaled_dot_product_attention with backend X forced by
                       torch.nn.attention.sdpa_kernel (CPU: FLASH_ATTENTION, MATH;
                       CUDA: FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION, MATH)
    triton             mha_course.triton_attention (CUDA only)

For each it reports the median time of ``--repeats`` calls after a warm-up, the throughput in
TFLOP/s (4*B*H*T*S*D forward FLOPs, halved when causal; see mha_course.efficient.cost), the peak memory the
call adds (mha_course.efficient.cost.peak_memory_mib), the largest absolute difference from torch's SDPA run
on float32 copies of the inputs, and speed ratios against torch's SDPA backends (baseline_ms / ms: above 1 is faster).
A backend that refuses a configuration is skipped and named. ``--json`` writes a list of records
(impl, backend, device, dtype, B, H, T, D, causal, pass, ms, tflops, peak_mib, ...); ``--plot`` a figure.

More in ``docs/design/benchmark.md`` (mha_course.timing.bench).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..efficient.cost import attention_flops, attention_memory_bytes, peak_memory_mib
from .bench_impls import MATERIALIZING, TORCH_BACKENDS, available_impls, with_backward
from .bench_report import add_ratios, dtype_name, environment, format_load_summary, format_table, plot_records
from .machine_load import background_load, check_load, cpu_seconds, load_average, other_load

BACKWARD_FLOP_FACTOR = 3.0  # forward + backward FLOPs / forward FLOPs (see the module docstring)
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
# defaults per device: (dtype, B, H, D, sequence lengths)
DEFAULTS = {
    "cpu": ("float32", 1, 8, 64, [1024, 2048, 4096]),
    "cuda": ("bfloat16", 4, 16, 128, [1024, 2048, 4096, 8192, 16384]),
}
QUICK_T = [128, 256]


def _interleaved_ms(calls: dict[str, Callable[[], object]], repeats: int, device: str) -> dict[str, float]:
    """Median ms of each call, timed in turns: round r times every call once, starting with call r mod n.

    The rotation lets each call follow each other about equally often: after a parallel torch op the CPU's
    idle intra-op threads spin for several ms, and in a fixed order one implementation would always
    pay for the one before it.
    """
    cuda = torch.device(device).type == "cuda"
    times = {name: [] for name in calls}
    names = list(calls)
    for r in range(repeats if names else 0):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call = calls[name]
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            call()
            if cuda:
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def run_benchmark(
    device: str = "cpu",
    dtype: str | None = None,
    B: int | None = None,
    H: int | None = None,
    D: int | None = None,
    Ts: list[int] | None = None,
    causal_modes: tuple[bool, ...] = (False, True),
    repeats: int = 3,
    warmup: int = 1,
    block_size: int | None = None,
    only: list[str] | None = None,
    max_materialized_gib: float = 4.0,
    measure_memory: bool = True,
    backward: bool = False,
    background_loads: tuple[int, ...] = (0,),
    log: Callable[[str], None] = print,
) -> tuple[list[dict], list[str]]:
    """Time every implementation at every (T, causal); return (records, notes about skipped runs).

    Args:
        device: "cpu" or "cuda". dtype, B, H, D, Ts: default per device (see DEFAULTS).
        causal_modes: which of non-causal / causal to run.
        repeats, warmup: timed and untimed calls per measurement (the median is reported).
        block_size: tiled attention's block (None: its default).
        only: names (or prefixes) of implementations to keep, e.g. ["tiled", "torch.sdpa"].
        max_materialized_gib: skip the implementations that hold (B, H, T, S) float32 matrices when
            one such matrix would exceed this size (they hold several).
        measure_memory: one extra call per measurement to record peak_mib.
        backward: time forward + the gradients of q, k, v instead of the forward alone.
        background_loads: numbers of busy processes (see :func:`background_load`); every (T, causal)
            is measured at each, in this order, before the next (T, causal).

    Raises:
        ValueError: unknown device or dtype, CUDA asked for but not available, a negative load.
        TypeError: a load that is not an int.
    """
    if device not in TORCH_BACKENDS:
        raise ValueError(f"device must be one of {sorted(TORCH_BACKENDS)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch.cuda.is_available() is False")
    d_dtype, d_B, d_H, d_D, d_Ts = DEFAULTS[device]
    dtype = dtype or d_dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES[dtype]
    for n in background_loads:
        check_load(n)
    B, H, D, Ts = B or d_B, H or d_H, D or d_D, Ts or d_Ts
    impls, notes = available_impls(device, block_size)
    if only:
        impls = [i for i in impls if any(i.name == o or i.name.startswith(o) for o in only)]
    records = []
    gen = torch.Generator(device=device).manual_seed(0)
    for T in Ts:
        for causal in causal_modes:
            q, k, v = (torch.randn(B, H, T, D, generator=gen, device=device, dtype=torch_dtype) for _ in range(3))
            matrix_gib = attention_memory_bytes(B, H, T, D, dtype=torch.float32)["weights"] / 2**30
            flops = attention_flops(B, H, T, D, causal=causal) * (BACKWARD_FLOP_FACTOR if backward else 1.0)
            grad_out = torch.randn(B, H, T, D, generator=gen, device=device, dtype=torch_dtype) if backward else None
            # accuracy reference: torch's SDPA on float32 copies, default backend
            sdpa = lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            reference = (with_backward(sdpa, grad_out.float()) if backward else sdpa)(
                q.float(), k.float(), v.float(), causal
            )
            for load in background_loads:
                with background_load(load) as helpers:
                    calls, found = {}, {}
                    for impl in impls:
                        label = f"{impl.name} T={T} causal={causal}" + (f" background_load={load}" if load else "")
                        if impl.name in MATERIALIZING and matrix_gib > max_materialized_gib:
                            notes.append(
                                f"{label}: skipped, one (B, H, T, S) matrix is {matrix_gib:.1f} GiB "
                                f"> --max-materialized-gib {max_materialized_gib}"
                            )
                            continue
                        fn = with_backward(impl.fn, grad_out) if backward else impl.fn
                        call = lambda fn=fn, q=q, k=k, v=v, causal=causal: fn(q, k, v, causal)
                        try:
                            out = call()  # warm-up and output for the accuracy column
                        except (RuntimeError, ValueError, TypeError) as err:  # a backend refusing this config
                            notes.append(f"{label}: skipped, {type(err).__name__}: {str(err).splitlines()[0][:160]}")
                            continue
                        max_err = (
                            float((out.float() - reference).abs().max())
                            if out.shape == reference.shape
                            else float("nan")
                        )
                        del out
                        for _ in range(max(0, warmup - 1)):
                            call()
                        peak = peak_memory_mib(call, device) if measure_memory else None
                        calls[impl.name], found[impl.name] = call, (impl, label, max_err, peak)
                    before = cpu_seconds(helpers)
                    ms_by_impl = _interleaved_ms(calls, repeats, device)
                    other = other_load(before, cpu_seconds(helpers))
                for name, ms in ms_by_impl.items():
                    impl, label, max_err, peak = found[name]
                    record = {
                        "impl": impl.name,
                        "backend": impl.backend,
                        "device": device,
                        "dtype": dtype_name(torch_dtype),
                        "B": B,
                        "H": H,
                        "T": T,
                        "D": D,
                        "causal": causal,
                        "pass": "forward+backward" if backward else "forward",
                        "ms": round(ms, 4),
                        "tflops": round(flops / (ms * 1e-3) / 1e12, 6),
                        "peak_mib": None if peak is None else round(peak, 2),
                        "max_abs_err": max_err,
                        "repeats": repeats,
                        "background_load": load,
                        "other_load": None if other is None else round(other, 2),
                    }
                    records.append(record)
                    log(f"  {label}: {ms:.2f} ms, peak {record['peak_mib']} MiB")
    add_ratios(records, device)
    return records, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--device", choices=sorted(TORCH_BACKENDS), default=None, help="cpu or cuda (default: cuda when available)"
    )
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default=None, help="default: float32 on CPU, bfloat16 on CUDA"
    )
    parser.add_argument(
        "--T", type=int, nargs="+", default=None, help="sequence lengths (S = T); default CPU 1024 2048 4096"
    )
    parser.add_argument("--B", type=int, default=None, help="batch (default: CPU 1, CUDA 4)")
    parser.add_argument("--H", type=int, default=None, help="heads (default: CPU 8, CUDA 16)")
    parser.add_argument("--D", type=int, default=None, help="head dim (default: CPU 64, CUDA 128)")
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both", help="which masks to run")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed calls per measurement (median; default 5, quick 2)"
    )
    parser.add_argument(
        "--block-size", type=int, default=None, help="block of tiled attention (default: tiled_attention's own choice)"
    )
    parser.add_argument(
        "--impl",
        nargs="+",
        default=None,
        help="keep only these implementations (names or prefixes: naive, tiled, torch.sdpa, triton, ...)",
    )
    parser.add_argument(
        "--max-materialized-gib",
        type=float,
        default=4.0,
        help="skip (B, H, T, S)-matrix implementations beyond this matrix size (default 4)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's choice, usually one per core)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory call")
    parser.add_argument(
        "--backward", action="store_true", help="time forward + gradients of q, k, v (a training step's attention)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the records as a JSON list")
    parser.add_argument("--plot", metavar="PATH", help="save time and memory against T (PNG, PDF, SVG)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: T = {QUICK_T}, 2 repeats")
    parser.add_argument(
        "--background-load",
        type=int,
        nargs="+",
        default=[0],
        metavar="N",
        help="busy processes beside the benchmark, one run per value for every configuration; "
        "e.g. 0 1: quiet, then beside one busy process (default 0)",
    )
    args = parser.parse_args(argv)
    if min(args.background_load) < 0:
        parser.error(f"--background-load: numbers of busy processes must be >= 0, got {args.background_load}")

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    Ts = args.T or (QUICK_T if args.quick else None)
    repeats = args.repeats or (2 if args.quick else 5)
    causal_modes = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    env = environment(device)
    print("mha_course.timing.bench  " + "  ".join(f"{k}={v}" for k, v in env.items()))
    print("command: python -m mha_course.bench " + " ".join(sys.argv[1:] if argv is None else argv))
    print("load average (1, 5, 15 min) before: " + load_average())
    try:
        records, notes = run_benchmark(
            device,
            args.dtype,
            args.B,
            args.H,
            args.D,
            Ts,
            causal_modes,
            repeats=repeats,
            block_size=args.block_size,
            only=args.impl,
            max_materialized_gib=args.max_materialized_gib,
            measure_memory=not args.no_memory,
            backward=args.backward,
            background_loads=tuple(args.background_load),
        )
    except ValueError as err:
        parser.error(str(err))
    if records:
        r0 = records[0]
        print(
            f"\nshapes: q, k, v (B={r0['B']}, H={r0['H']}, T, D={r0['D']}), dtype {r0['dtype']}, device {device}, "
            f"median of {repeats}; {r0['pass']}; FLOPs = 4*B*H*T^2*D (halved when causal)"
            + (f", x{BACKWARD_FLOP_FACTOR:g} for forward+backward" if args.backward else "")
        )
        print(format_table(records, device))
        summary = format_load_summary(records, device)
        if summary:
            print("\n" + summary)
    print("load average (1, 5, 15 min) after: " + load_average())
    for note in notes:
        print("note: " + note)
    if args.json:
        with open(args.json, "w") as f:
            # Each record names the machine it was timed on: ratios differ between CPUs.
            json.dump([{**record, "environment": env} for record in records], f, indent=1)
        print(f"wrote {len(records)} records to {args.json}")
    if args.plot and records:
        r0 = records[0]
        plot_records(
            records,
            args.plot,
            title=f"{r0['pass']}, {device} {r0['dtype']} B={r0['B']} H={r0['H']} D={r0['D']}, "
            f"torch {env['torch']}, {env.get('gpu', env.get('cpu', ''))}",
        )
        print(f"wrote plot to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
