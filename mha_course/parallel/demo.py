"""``python -m mha_course.parallel.demo --world-size 4 [--backend gloo|nccl]``: attention across processes.

Starts W processes (:func:`mha_course.parallel.launch.run_ranks`), runs in them

* tensor-parallel multi-head attention (each rank H / W heads, one all-reduce), and
* ring attention, non-causal, causal with the contiguous layout, and causal with the zigzag layout,
* DeepSpeed-Ulysses attention (two all-to-alls: sequence split -> head split -> back), non-causal,

checks every result against the single-process library, and prints per rank the time, the bytes
sent (measured on the sockets under gloo on Linux, and counted from the tensors handed to send)
next to the cost model's formula, and the ring's per-step timeline: compute, transfer, and the part
of the transfer that ran on after the compute (not hidden behind it). That part is read from the two
end times; the time the rank waited (``waited_ms`` in the JSON report) also counts any wait for a
CPU core, which is most of it when the ranks outnumber the cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

from ..testing import assert_close
from ..validation import require_positive_int
from .comm_cost import ring_bytes, tp_bytes, ulysses_bytes
from .launch import BACKENDS, default_backend, run_ranks
from .layout import unshard_sequence
from .workloads import RING_VARIANTS, Problem, demo_rank


def run_demo(world_size: int = 4, problem: Problem | None = None, backend: str | None = None, repeats: int = 3) -> dict:
    """Run every scheme on ``world_size`` processes and check it; returns the report as plain data.

    The report holds ``world_size``, ``backend``, ``cpu_cores`` (of this machine), ``problem``, and
    ``schemes``; per scheme: ``equal`` (True when the assembled output matches one process
    to float32 tolerance), ``max_abs_diff``, and ``ranks``: per rank ``seconds``, ``wire_bytes``
    (None where not measurable), ``model_bytes`` and, for the ring, ``bytes_sent`` and ``steps``
    (dicts of :class:`mha_course.parallel.ring.RingStep`, times in ms from the earliest step start).
    """
    problem = Problem(H=heads_for(world_size)) if problem is None else problem
    backend = default_backend(world_size) if backend is None else backend
    results = run_ranks(demo_rank, world_size, problem, backend, repeats, backend=backend)
    module, x = problem.module_and_input()
    q, k, v = problem.qkv()
    with torch.no_grad():
        expected = {"tensor_parallel": module(x)[0], "ring": problem.expected()}
        expected["causal"] = problem.expected(causal=True)
    itemsize = q.element_size()
    report = {
        "world_size": world_size,
        "backend": backend,
        "cpu_cores": os.cpu_count(),
        "problem": dataclasses.asdict(problem),
        "schemes": {},
    }
    tp = [r["tensor_parallel"] for r in results]
    report["schemes"]["tensor_parallel"] = _compare(tp[0]["out"], expected["tensor_parallel"]) | {
        "ranks": [
            {
                "rank": i,
                "heads": r["heads"],
                "seconds": r["seconds"],
                "wire_bytes": r["wire_bytes"],
                "model_bytes": tp_bytes(problem.B, problem.T, problem.E, world_size, itemsize),
            }
            for i, r in enumerate(tp)
        ]
    }
    Dv = problem.D if problem.Dv is None else problem.Dv
    for name, causal, layout in RING_VARIANTS:
        runs = [r[name] for r in results]
        out = unshard_sequence([r["out"] for r in runs], layout)
        t0 = min(s.compute_start for r in runs for s in r["stats"].steps)
        report["schemes"][name] = _compare(out, expected["causal" if causal else "ring"]) | {
            "causal": causal,
            "layout": layout,
            "ranks": [
                {
                    "rank": i,
                    "seconds": r["seconds"],
                    "bytes_sent": r["stats"].bytes_sent,
                    "wire_bytes": r["stats"].wire_bytes,
                    "model_bytes": ring_bytes(
                        problem.B, problem.H, problem.T, problem.D, Dv, world_size, i, itemsize, layout
                    ),
                    "steps": [_ms_since(dataclasses.asdict(s), t0) for s in r["stats"].steps],
                }
                for i, r in enumerate(runs)
            ],
        }
    if "ulysses" in results[0]:
        runs = [r["ulysses"] for r in results]
        out = unshard_sequence([r["out"] for r in runs], "contiguous")
        report["schemes"]["ulysses"] = _compare(out, expected["ring"]) | {
            "causal": False,
            "ranks": [
                {
                    "rank": i,
                    "seconds": r["seconds"],
                    "bytes_sent": r["stats"].bytes_sent,
                    "wire_bytes": r["stats"].wire_bytes,
                    "comm_seconds": r["stats"].comm_seconds,
                    "compute_seconds": r["stats"].compute_seconds,
                    "model_bytes": ulysses_bytes(
                        problem.B, problem.H, problem.G, problem.T, problem.T, problem.D, Dv, world_size, i, itemsize
                    ),
                }
                for i, r in enumerate(runs)
            ],
        }
    return report


def heads_for(world_size: int) -> int:
    """A head count that tensor parallelism can split over ``world_size`` ranks: the first multiple >= 8."""
    return world_size * -(-8 // world_size)


def format_report(report: dict) -> str:
    """The report as the text the command line prints."""
    p, W = report["problem"], report["world_size"]
    lines = [
        f"attention across {W} processes, backend {report['backend']}: B={p['B']} H={p['H']} T={p['T']} "
        f"D={p['D']} Dv={p['Dv'] or p['D']}, float32 (torch {torch.__version__})"
    ]
    cores = report.get("cpu_cores")
    if report["backend"] == "gloo" and cores and W > cores:
        lines.append(
            f"note: {W} ranks share {cores} CPU cores, so a rank may wait for a core: its times include those "
            "waits, and a wait after compute is not all transfer"
        )
    for name, scheme in report["schemes"].items():
        lines += [
            "",
            _title(name, scheme, p, W),
            f"  equal to one process: {'yes' if scheme['equal'] else 'NO'} "
            f"(max |difference| {scheme['max_abs_diff']:.1e})",
        ]
        ring = "steps" in scheme["ranks"][0]
        counts = "bytes_sent" in scheme["ranks"][0]
        lines.append(
            "  rank      ms  bytes on the wire  " + ("bytes counted  " if counts else "") + "  model bytes  wire/model"
        )
        for r in scheme["ranks"]:
            wire = "n/a" if r["wire_bytes"] is None else f"{r['wire_bytes']:,}"
            ratio = (
                "" if r["wire_bytes"] is None or not r["model_bytes"] else f"{r['wire_bytes'] / r['model_bytes']:.4f}"
            )
            counted = f"{r['bytes_sent']:>13,}  " if counts else ""
            lines.append(
                f"  {r['rank']:>4} {1e3 * r['seconds']:>7.1f}  {wire:>17}  {counted}{r['model_bytes']:>13,.0f}  {ratio:>10}"
            )
        if ring:
            lines.append("  per step, ms: compute | transfer (the part of it not hidden behind compute)")
            for r in scheme["ranks"]:
                cells = [
                    f"{s['compute_ms']:5.1f} | "
                    + ("  -  " if s["transfer_ms"] is None else f"{s['transfer_ms']:4.1f}")
                    + ("" if s["not_hidden_ms"] is None else f" ({s['not_hidden_ms']:3.1f})")
                    for s in r["steps"]
                ]
                lines.append(f"  rank {r['rank']}: " + "   ".join(cells))
    return "\n".join(lines)


def _title(name: str, scheme: dict, p: dict, W: int) -> str:
    if name == "tensor_parallel":
        return (
            f"tensor parallelism: {p['H'] // W} of {p['H']} heads per rank, one all-reduce of (B, T, E) per "
            f"forward; model bytes per rank 2(W-1)/W * B*T*E * 4"
        )
    if name == "ulysses":
        return (
            f"DeepSpeed-Ulysses (not causal): all-to-all to {p['H'] // W} of {p['H']} heads over the whole sequence "
            "and back; model bytes per rank (W-1)/W * B*(T/W)*(H D + G D + G Dv + H Dv) * 4"
        )
    mode = "causal, " + scheme["layout"] + " layout" if scheme["causal"] else "not causal"
    return (
        f"ring attention ({mode}): {W} steps, {W - 1} K/V blocks sent per rank; model bytes per rank "
        f"(W-1) * B*H*(T/W)*(D+Dv) * 4"
    )


def _compare(got: torch.Tensor, expected: torch.Tensor) -> dict:
    try:
        assert_close(got, expected)
        equal = True
    except AssertionError:
        equal = False
    return {"equal": equal, "max_abs_diff": float((got - expected).abs().max())}


def _ms_since(step: dict, t0: float) -> dict:
    """A RingStep's times as ms from t0, and its durations."""
    ms = {
        key: None if step[key] is None else 1e3 * (step[key] - t0)
        for key in ("compute_start", "compute_end", "transfer_start", "transfer_end", "wait_end")
    }
    return {
        "step": step["step"],
        "origin": step["origin"],
        "scores": step["scores"],
        "bytes_sent": step["bytes_sent"],
        **ms,
        "compute_ms": ms["compute_end"] - ms["compute_start"],
        "compute_cpu_ms": 1e3 * step["compute_cpu"],
        "transfer_ms": None if ms["transfer_end"] is None else ms["transfer_end"] - ms["transfer_start"],
        "waited_ms": ms["wait_end"] - ms["compute_end"],
        # the transfer's end after the compute's: the communication not overlapped
        "not_hidden_ms": None if ms["transfer_end"] is None else max(0.0, ms["transfer_end"] - ms["compute_end"]),
    }


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 0 when every scheme matched one process, 1 otherwise, 2 for bad arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.parallel.demo",
        description="Attention across W processes with torch.distributed: tensor-parallel heads, ring "
        "attention and DeepSpeed-Ulysses, checked against one process, with bytes sent per rank and the ring's per-step timeline.",
    )
    parser.add_argument("--world-size", type=int, default=4, help="number of processes W (default 4)")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="gloo (CPU) or nccl (one GPU per rank); default nccl with W GPUs, else gloo",
    )
    parser.add_argument("--seq-len", type=int, default=2048, help="sequence length T (default 2048)")
    parser.add_argument(
        "--heads", type=int, default=None, help="heads H, divisible by W (default: first multiple of W >= 8)"
    )
    parser.add_argument("--head-dim", type=int, default=32, help="per-head dimension D (default 32)")
    parser.add_argument("--batch", type=int, default=1, help="batch size B (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per scheme; the median is shown")
    parser.add_argument("--json", help="also write the report to this file")
    args = parser.parse_args(argv)
    try:
        for flag in ("world_size", "seq_len", "head_dim", "batch", "repeats"):
            require_positive_int(getattr(args, flag), "--" + flag.replace("_", "-"))
        if args.heads is not None:
            require_positive_int(args.heads, "--heads")
        problem = Problem(B=args.batch, H=args.heads or heads_for(args.world_size), T=args.seq_len, D=args.head_dim)
        if problem.H % args.world_size:
            raise ValueError(f"--heads {problem.H} is not divisible by --world-size {args.world_size}")
        report = run_demo(args.world_size, problem, args.backend, args.repeats)
    except (TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if all(s["equal"] for s in report["schemes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
