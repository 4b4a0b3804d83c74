"""What a GPU would run, found without a GPU: compile every shipped Triton kernel for real targets.

Triton's compiler needs no GPU: ``triton.compile(ASTSource(kernel, signature, constexprs),
target=GPUTarget("cuda", 90, 32))`` lowers a kernel to TTIR, TTGIR, LLVM IR, PTX and a cubin on
the CPU. ``ptxas -v`` (shipped inside the triton wheel) then reports what the hardware would
get: registers per thread, bytes spilled to local memory (stores + loads) and stack. Spills are
the number to watch: a spilled register lives in local memory, i.e. in DRAM behind the L1, and a
kernel that spills in its inner loop can run several times slower than one that does not.

For each kernel (forward, dK/dV, dQ), target, dtype, head dimension and autotune config this
module records::

    registers, spill bytes, stack, shared memory, the tensor-core instruction the PTX uses
    (wgmma on Hopper, mma.sync on Ampere, or none), and the theoretical occupancy:
    warps per SM = min(register limit, shared-memory limit, warp limit, block limit) * warps

Command line (one row per compiled kernel; exit 1 if any kernel fails to compile)::

    python -m mha_course.gpu_report [--arch sm_80 sm_90 sm_100] [--dtype float16 bfloat16]
                                    [--head-dim 64 128] [--kernel forward dkdv dq]
                                    [--configs all|first] [--causal] [--json PATH]

It must run with Triton's *compiler*, not its interpreter: when this process chose the
interpreter (no GPU), :func:`main` runs itself again with ``TRITON_INTERPRET=0``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .ptx_reading import (  # noqa: F401 (re-exported: gpu_report.TARGETS, .occupancy, ... as before)
    TARGETS,
    Target,
    occupancy,
    ptx_excerpt,
    ptxas_binary,
    ptxas_usage,
    tensor_core_instruction,
)

DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


@dataclass
class Record:
    """One compiled kernel: what ptxas and the PTX say about it."""

    kernel: str
    arch: str
    dtype: str
    head_dim: int
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    causal: bool
    ok: bool
    variant: str = ""  # other constexprs of the config, e.g. "TWO_PASS"
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared_bytes: int = 0
    tensor_cores: str = "none"
    warps_per_sm: int = 0
    occupancy: float = 0.0
    compile_s: float = 0.0
    error: str = ""
    triton_version: str = ""
    ptx: str = field(default="", repr=False)  # kept only when asked (compile_record(keep_ptx=True))

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def config(self) -> str:
        text = f"({self.block_m}, {self.block_n}, {self.num_warps}, {self.num_stages})"
        return f"{text} {self.variant}" if self.variant else text


# --- the kernels and how to describe their arguments ----------------------------------------------------


def kernels() -> dict[str, tuple[Any, Any]]:
    """name -> (the jitted kernel, the function listing its autotune configs)."""
    from .kernels import backward, forward

    return {
        "forward": (forward._jitted, forward._gpu_configs),
        "dkdv": (backward._dkdv_jitted, backward._dkdv_configs),
        "dq": (backward._dq_jitted, backward._dq_configs),
    }


_FP32_POINTERS = ("LSE", "DELTA")  # per-row statistics stay float32 whatever the inputs' dtype
_FLOAT_SCALARS = ("scale", "qk_scale_log2")


def signature(kernel: Any, dtype: str) -> dict[str, str]:
    """Triton's type string for every argument: pointers, int32 sizes and strides, float32 scalars, constexprs."""
    element = DTYPES[dtype]
    types = {}
    import inspect

    pointers = True  # the kernels take their tensors first, then strides, sizes, scalars, constexprs
    for name, param in inspect.signature(getattr(kernel, "fn", kernel)).parameters.items():
        pointers = pointers and not name.startswith("stride")
        if "constexpr" in str(param.annotation):  # tl.constexpr (a string under postponed annotations)
            types[name] = "constexpr"
        elif pointers:
            types[name] = "*fp32" if name in _FP32_POINTERS else f"*{element}"
        elif name in _FLOAT_SCALARS:
            types[name] = "fp32"
        else:
            types[name] = "i32"
    return types


def constants(head_dim: int, block_m: int, block_n: int, causal: bool, dtype: str) -> dict[str, Any]:
    """The constexpr arguments, as :func:`mha_course.kernels.triton_attention` passes them."""
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    return {
        "D": head_dim,
        "DV": head_dim,
        "BLOCK_D": block_d,
        "BLOCK_DV": block_d,
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "CAUSAL": causal,
        "PRECISION": "ieee" if dtype == "float32" else "tf32",
    }


def compile_record(
    name: str,
    kernel: Any,
    arch: str,
    dtype: str,
    head_dim: int,
    config: Any,
    causal: bool,
    ptxas: Path,
    keep_ptx: bool = False,
) -> Record:
    """Compile one kernel for one target and config; a failure is a record with ``ok=False``, never a raise."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    block_m, block_n = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    record = Record(
        name,
        arch,
        dtype,
        head_dim,
        block_m,
        block_n,
        config.num_warps,
        config.num_stages,
        causal,
        ok=False,
        triton_version=triton.__version__,
        variant=" ".join(k for k, v in config.kwargs.items() if k not in ("BLOCK_M", "BLOCK_N") and v),
    )
    target = TARGETS[arch]
    start = time.perf_counter()
    try:
        extra = {k: v for k, v in config.kwargs.items() if k not in ("BLOCK_M", "BLOCK_N")}  # e.g. TWO_PASS
        source = ASTSource(
            fn=kernel,
            signature=signature(kernel, dtype),
            constexprs={**constants(head_dim, block_m, block_n, causal, dtype), **extra},
        )
        compiled = triton.compile(
            source,
            target=GPUTarget("cuda", target.arch, 32),
            options={"num_warps": config.num_warps, "num_stages": config.num_stages},
        )
        ptx = compiled.asm["ptx"]
        usage = ptxas_usage(ptx, ptxas)
    except Exception as exc:  # reported, and the command exits 1
        record.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:300]
        record.compile_s = time.perf_counter() - start
        return record
    record.ok = True
    record.ptx = ptx if keep_ptx else ""
    record.registers, record.stack = usage["registers"], usage["stack"]
    record.spill_stores, record.spill_loads = usage["spill_stores"], usage["spill_loads"]
    record.shared_bytes = int(getattr(compiled.metadata, "shared", 0) or 0)
    record.tensor_cores = tensor_core_instruction(ptx)
    record.warps_per_sm, record.occupancy = occupancy(target, record.registers, record.shared_bytes, record.num_warps)
    record.compile_s = time.perf_counter() - start
    return record


def sweep(
    archs: list[str],
    dtypes: list[str],
    head_dims: list[int],
    names: list[str],
    first_only: bool = False,
    causal: bool = False,
    progress: bool = True,
) -> list[Record]:
    """Compile every (kernel, arch, dtype, head_dim, config) combination; see :func:`compile_record`."""
    from tqdm import tqdm

    ptxas = ptxas_binary()
    table = kernels()
    jobs = []
    for name in names:
        kernel, configs = table[name]
        chosen = configs()[:1] if first_only else configs()
        jobs += [
            (name, kernel, arch, dtype, d, c) for arch in archs for dtype in dtypes for d in head_dims for c in chosen
        ]
    return [
        compile_record(name, kernel, arch, dtype, d, c, causal, ptxas)
        for name, kernel, arch, dtype, d, c in tqdm(jobs, desc="compiling", unit="kernel", disable=not progress)
    ]


def compiled_view(
    kernel: str = "forward", arch: str = "sm_90", dtype: str = "float16", head_dim: int = 64, timeout: float = 300
) -> dict[str, Any]:
    """What ``kernel``'s first autotune config becomes on ``arch``, compiled in a fresh process (any machine).

    Returns the :class:`Record` fields plus ``ptx_lines`` (the PTX's line count) and ``excerpt``
    (:func:`ptx_excerpt`). Used by chapter 13, whose kernel runs in Triton's interpreter: the
    compiler needs a process that did not choose the interpreter.
    """
    code = (
        "import json\nfrom mha_course import gpu_report as g\n"
        f"print(json.dumps(g._compiled_view_here({kernel!r}, {arch!r}, {dtype!r}, {head_dim!r})))"
    )
    env = dict(os.environ, TRITON_INTERPRET="0")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {kernel} for {arch} failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compiled_view_here(kernel: str, arch: str, dtype: str, head_dim: int) -> dict[str, Any]:
    jitted, configs = kernels()[kernel]
    record = compile_record(kernel, jitted, arch, dtype, head_dim, configs()[0], False, ptxas_binary(), keep_ptx=True)
    if not record.ok:
        raise RuntimeError(record.error)
    return dict(_as_json(record), ptx_lines=len(record.ptx.splitlines()), excerpt=ptx_excerpt(record.ptx))


def _as_json(record: Record) -> dict[str, Any]:
    data = asdict(record)
    data.pop("ptx")
    return dict(data, spill_bytes=record.spill_bytes, config=record.config)


def format_table(records: list[Record]) -> str:
    """A fixed-width table, one row per record."""
    header = (
        f"{'kernel':8} {'arch':6} {'dtype':8} {'D':>4} {'config (M, N, warps, stages)':29} {'regs':>5} "
        f"{'spill B':>8} {'smem KiB':>9} {'tensor cores':12} {'warps/SM':>8} {'occ.':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        if not r.ok:
            lines.append(f"{r.kernel:8} {r.arch:6} {r.dtype:8} {r.head_dim:>4} {r.config:29} FAILED: {r.error}")
            continue
        lines.append(
            f"{r.kernel:8} {r.arch:6} {r.dtype:8} {r.head_dim:>4} {r.config:29} {r.registers:>5} "
            f"{r.spill_bytes:>8} {r.shared_bytes / 1024:>9.1f} {r.tensor_cores:12} {r.warps_per_sm:>8} "
            f"{r.occupancy:>5.0%}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (1 if a kernel failed to compile)."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.gpu_report",
        description=(
            "Compile the course's Triton kernels for real GPU targets on this machine (no GPU needed) and report "
            "registers, spills, shared memory, tensor-core instructions and occupancy."
        ),
    )
    parser.add_argument("--arch", nargs="+", default=["sm_80", "sm_90"], choices=sorted(TARGETS))
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--kernel", nargs="+", default=["forward", "dkdv", "dq"], choices=["forward", "dkdv", "dq"])
    parser.add_argument(
        "--configs",
        choices=["all", "first"],
        default="all",
        help="every config of each kernel's autotune list (default), or only the first",
    )
    parser.add_argument("--causal", action="store_true", help="compile the causal variant")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    from .kernels import runtime

    if runtime.triton is None:
        print("error: Triton is not installed (its wheels exist for Linux only)", file=sys.stderr)
        return 2
    if runtime.INTERPRETED or runtime.IMPORTED_TOO_EARLY:
        # the kernels were decorated for the interpreter: compile in a fresh process that uses the compiler
        env = dict(os.environ, TRITON_INTERPRET="0")
        return subprocess.run(
            [sys.executable, "-m", "mha_course.gpu_report", *(argv if argv is not None else sys.argv[1:])], env=env
        ).returncode
    records = sweep(
        args.arch,
        args.dtype,
        args.head_dim,
        args.kernel,
        first_only=args.configs == "first",
        causal=args.causal,
        progress=not args.quiet,
    )
    print(format_table(records))
    spilling = [r for r in records if r.ok and r.spill_bytes]
    print(
        f"{len(records)} kernels compiled for {', '.join(args.arch)}; {len(spilling)} spill; "
        f"{sum(not r.ok for r in records)} failed"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([_as_json(r) for r in records], indent=1) + "\n")
        print(f"records: {args.json}")
    return 1 if any(not r.ok for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
