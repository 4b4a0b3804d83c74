"""What a GPU would run, found without a GPU: compile every shipped Triton kernel as a launch would.

Triton's compiler needs no GPU. A launch specialises the kernel to its arguments (unit strides become
constants, sizes divisible by 16 and aligned pointers are marked); this module takes the launcher's own
arguments (:mod:`mha_course.kernels.registry`) for contiguous CPU tensors, specialises them as a launch does
(:func:`~mha_course.kernels.registry.launch_signature`) and compiles with ``triton.compile`` for a real target: the cubin a contiguous launch on that GPU builds.
``cuobjdump -res-usage`` reads its registers, local memory and stack, ``nvdisasm`` its SASS (spills as
STL/LDL: the bytes stored and loaded, the figures ``ptxas -v`` prints; the bytes spilled are the stores),
Triton's metadata the shared memory and (sm_100) the tensor memory a block allocates, both counted in the
occupancy. The SASS also gives the inner loop (a branch back to a label that dominates it), and
:func:`mha_course.kernels.ptx.throughput_bound` turns the steady-state loop into SM clocks per 128 x 128 block of scores for the tensor cores, instruction issue, the
special-function unit (EX2) and shared memory; the largest is the limit. The bound is optimistic, for
comparing kernels and configs (every unit at its peak in parallel, no stall, no global-memory traffic,
only full tiles); the backward's is the dK/dV loop's plus the dQ loop's.

Command line (one row per compiled kernel; exit 1 if any kernel fails to compile)::

    python -m mha_course.gpu_report [--arch sm_80 sm_90 sm_100] [--dtype float16 bfloat16]
                                    [--head-dim 64 128] [--kernel forward dkdv dq]
                                    [--configs all|first] [--causal | --non-causal] [--json PATH]

It must run with Triton's *compiler*, not its interpreter: when this process chose the
interpreter (no GPU), :func:`main` runs itself again with ``TRITON_INTERPRET=0``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .ptx import (
    TARGETS,
    cubin_resources,
    disassemble,
    occupancy,
    ptx_excerpt,
    sass_loops,
    steady_loop,
    tensor_core_instruction,
    throughput_bound,
)

DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


@dataclass
class Record:
    """One compiled kernel: what its cubin and SASS say about it."""

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
    variant: str = ""  # other constexprs of the config
    registers: int = 0
    spill_stores: int = 0  # bytes per thread the SASS stores to local memory (STL), counted statically: ptxas -v's
    # "bytes spill stores" (the same figure for the same cubin)
    spill_loads: int = 0  # bytes per thread it loads back (LDL): ptxas -v's "bytes spill loads"
    local_bytes: int = 0  # local memory per thread (cuobjdump LOCAL): 0 when nothing spills
    stack: int = 0
    shared_bytes: int = 0
    tensor_memory_columns: int = 0  # sm_100: columns of the SM's 512 of tensor memory one block allocates
    tensor_cores: str = "none"
    warps_per_sm: int = 0
    occupancy: float = 0.0
    # the static bound, SM clocks per 128 x 128 block of scores (see the module docstring)
    tensor_clocks: float = math.nan
    issue_clocks: float = math.nan
    mufu_clocks: float = math.nan
    shared_clocks: float = math.nan
    bound_clocks: float = math.nan
    limit: str = ""
    instructions_per_score: float = math.nan
    mma_redundancy: float = math.nan
    loop_instructions: int = 0
    compile_s: float = 0.0
    error: str = ""
    triton_version: str = ""
    ptx: str = field(default="", repr=False)  # kept only when asked (compile_record(keep_ptx=True))
    sass: str = field(default="", repr=False)

    @property
    def spill_bytes(self) -> int:
        """Bytes spilled per thread: the stores, ptxas's "bytes spill stores" (a spilled value is stored, then
        loaded back once or more, so stores + loads would count it twice or more)."""
        return self.spill_stores

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads or self.local_bytes)

    @property
    def config(self) -> str:
        text = f"({self.block_m}, {self.block_n}, {self.num_warps}, {self.num_stages})"
        return f"{text} {self.variant}" if self.variant else text


_COMPILED: dict[tuple, tuple] = {}  # one compile per distinct specialisation, for the life of the process


def compile_launch(entry: Any, arch: str | int, dtype: str, head_dim: int, config: Any, causal: bool):
    """:func:`mha_course.kernels.registry.compile_as_launched` for ``arch`` ("sm_90" or 90), compiled once per
    (kernel, arch, dtype, head dim, config, mask) in this process and then reused."""
    from .registry import compile_as_launched, describe

    number = TARGETS[arch].arch if isinstance(arch, str) else arch
    key = (entry.name, number, dtype, head_dim, describe(config), causal)
    if key not in _COMPILED:
        _COMPILED[key] = compile_as_launched(entry, number, dtype, head_dim, config, causal)
    return _COMPILED[key]


def registry() -> dict[str, Any]:
    """name -> :class:`mha_course.kernels.registry.KernelEntry`, every kernel the course ships."""
    from . import registry as kernel_registry

    return dict(kernel_registry.REGISTRY)


def _local_bytes(sass: str, opcode: str) -> int:
    """Bytes per thread the SASS moves to or from local memory with ``opcode`` (STL or LDL), counted statically."""
    total = 0
    for width in re.findall(rf"\b{opcode}(\.\w+)*", sass):
        total += {".128": 16, ".64": 8, ".U16": 2, ".S16": 2, ".U8": 1, ".S8": 1}.get(width, 4)
    return total


def compile_record(
    name: str, entry: Any, arch: str, dtype: str, head_dim: int, config: Any, causal: bool, keep_ptx: bool = False
) -> Record:
    """Compile one kernel for one target and config; a failure is a record with ``ok=False``, never a raise."""
    record, compiled, start = _compile(name, entry, arch, dtype, head_dim, config, causal)
    return _read(record, compiled, entry, config, start, keep_ptx)


def _compile(name: str, entry: Any, arch: str, dtype: str, head_dim: int, config: Any, causal: bool):
    """(the record so far, the CompiledKernel or None if compiling failed, the start time)."""
    import triton

    variant = " ".join(f"{k}={v}" for k, v in config.kwargs.items() if k not in ("BLOCK_M", "BLOCK_N"))
    launch = dict(num_warps=config.num_warps, num_stages=config.num_stages, causal=causal, variant=variant)
    block_m, block_n = entry.tile(config)
    record = Record(
        name, arch, dtype, head_dim, block_m, block_n, **launch, ok=False, triton_version=triton.__version__
    )
    start = time.perf_counter()
    try:
        compiled, _ = compile_launch(entry, TARGETS[arch].arch, dtype, head_dim, config, causal)
    except Exception as exc:  # reported, and the command exits 1
        return _failed(record, exc, start), None, start
    return record, compiled, start


def _failed(record: Record, exc: Exception, start: float) -> Record:
    record.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:300]
    record.compile_s = time.perf_counter() - start
    return record


def _read(record: Record, compiled: Any, entry: Any, config: Any, start: float, keep_ptx: bool = False) -> Record:
    """Fill ``record`` from the compiled kernel: the cubin's resources, its SASS (CUDA's tools) and the bound."""
    import torch

    from .registry import constexprs

    if compiled is None:
        return record
    target = TARGETS[record.arch]
    try:
        ptx, cubin = compiled.asm["ptx"], compiled.asm["cubin"]
        resources = cubin_resources(cubin)
        sass = disassemble(cubin)
    except Exception as exc:  # reported, and the command exits 1
        return _failed(record, exc, start)
    record.ok = True
    record.ptx = ptx if keep_ptx else ""
    record.sass = sass if keep_ptx else ""
    record.registers, record.stack, record.local_bytes = resources["registers"], resources["stack"], resources["local"]
    record.spill_stores, record.spill_loads = _local_bytes(sass, "STL"), _local_bytes(sass, "LDL")
    record.shared_bytes = int(getattr(compiled.metadata, "shared", 0) or 0)
    record.tensor_memory_columns = int(getattr(compiled.metadata, "tmem_size", 0) or 0)
    record.tensor_cores = tensor_core_instruction(ptx)
    record.warps_per_sm, record.occupancy = occupancy(
        target, record.registers, record.shared_bytes, record.num_warps, record.tensor_memory_columns
    )
    padded = constexprs(record.head_dim, record.head_dim, record.causal, getattr(torch, record.dtype))["BLOCK_D"]
    try:
        loop = steady_loop(sass_loops(sass))
    except ValueError as exc:
        record.error = f"no bound: {exc}"
    else:
        scores = record.block_m * record.block_n
        element_bytes = 4 if record.dtype == "float32" else 2
        bound = throughput_bound(
            loop, config.num_warps, scores, entry.products * scores * padded, target, element_bytes
        )
        record.tensor_clocks, record.issue_clocks = bound.tensor, bound.issue
        record.mufu_clocks, record.shared_clocks = bound.mufu, bound.shared
        record.bound_clocks, record.limit = bound.clocks, bound.limit
        record.instructions_per_score, record.mma_redundancy = bound.instructions_per_score, bound.mma_redundancy
        record.loop_instructions = len(loop)
    record.compile_s = time.perf_counter() - start
    return record


def sweep(
    archs: list[str],
    dtypes: list[str],
    head_dims: list[int],
    names: list[str],
    first_only: bool = False,
    causal: tuple[bool, ...] = (False, True),
    progress: bool = True,
) -> list[Record]:
    """Compile every (kernel, arch, dtype, head_dim, causal, config) combination; see :func:`compile_record`.

    Triton compiles one kernel at a time in this thread; CUDA's tools read each cubin in a pool of threads
    meanwhile (they are processes of their own, and take most of the time).
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    table = registry()
    jobs = []
    for name in names:
        entry = table[name]
        for arch in archs:
            for d in head_dims:
                for m in causal:
                    chosen = entry.configs(TARGETS[arch].arch, d, m)
                    chosen = chosen[:1] if first_only else chosen
                    jobs += [(name, entry, arch, dtype, d, c, m) for dtype in dtypes for c in chosen]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        read = []
        for name, entry, arch, dtype, d, c, m in tqdm(jobs, desc="compiling", unit="kernel", disable=not progress):
            record, compiled, start = _compile(name, entry, arch, dtype, d, c, m)
            read.append(pool.submit(_read, record, compiled, entry, c, start))
        return [future.result() for future in read]


def best_bounds(records: list[Record]) -> list[dict[str, Any]]:
    """Per (arch, dtype, D, causal): the forward's best config's bound and the backward's (best dK/dV + best dQ)."""
    groups: dict[tuple, dict[str, Record]] = {}
    for r in records:
        if not (r.ok and math.isfinite(r.bound_clocks)) or r.spills:
            continue  # a config that spills is not shipped
        key = (r.arch, r.dtype, r.head_dim, r.causal)
        best = groups.setdefault(key, {})
        if r.kernel not in best or r.bound_clocks < best[r.kernel].bound_clocks:
            best[r.kernel] = r
    rows = []
    for (arch, dtype, d, causal), best in sorted(groups.items()):
        row = dict(arch=arch, dtype=dtype, head_dim=d, causal=causal)
        if "forward" in best:
            row.update(forward=best["forward"].bound_clocks, forward_config=best["forward"].config)
        if "dkdv" in best and "dq" in best:
            dkdv, dq = best["dkdv"], best["dq"]
            row.update(backward=dkdv.bound_clocks + dq.bound_clocks, dkdv_config=dkdv.config, dq_config=dq.config)
        rows.append(row)
    return rows


def compiled_view(
    kernel: str = "forward",
    arch: str = "sm_90",
    dtype: str = "float16",
    head_dim: int = 64,
    config: tuple[int, int, int, int] | None = None,
    timeout: float = 300,
) -> dict[str, Any]:
    """What ``kernel`` becomes on ``arch``, non-causal, compiled in a fresh process (any machine).

    ``config``: (BLOCK_M, BLOCK_N, warps, stages), or None for the first config shipped for ``arch``.
    Returns the :class:`Record` fields plus ``ptx_lines`` (the PTX's line count), ``excerpt``
    (:func:`ptx_excerpt`) and ``loop_sass`` (the steady-state loop, one SASS instruction a line). Used
    by chapter 13, whose kernel runs in Triton's interpreter: the compiler needs a process that did
    not choose the interpreter.
    """
    code = (
        "import json\nfrom mha_course.kernels import gpu_report as g\n"
        f"print(json.dumps(g._compiled_view_here({kernel!r}, {arch!r}, {dtype!r}, {head_dim!r}, {config!r})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=_compiler_env()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {kernel} for {arch} failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compiled_view_here(kernel: str, arch: str, dtype: str, head_dim: int, shape=None) -> dict[str, Any]:
    import triton

    entry = registry()[kernel]
    config = entry.configs(TARGETS[arch].arch, head_dim, False)[0]
    if shape is not None:
        block_m, block_n, warps, stages = shape
        config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
    record = compile_record(kernel, entry, arch, dtype, head_dim, config, False, keep_ptx=True)
    if not record.ok:
        raise RuntimeError(record.error)
    loop = steady_loop(sass_loops(record.sass))
    return dict(
        _as_json(record),
        ptx_lines=len(record.ptx.splitlines()),
        excerpt=ptx_excerpt(record.ptx),
        loop_sass=[f"{ins.opcode} {ins.operands}".strip() for ins in loop],
    )


def _compiler_env() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="0")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated: silences its warning
    return env


def _as_json(record: Record) -> dict[str, Any]:
    data = asdict(record)
    data.pop("ptx")
    data.pop("sass")
    return dict(data, spill_bytes=record.spill_bytes, config=record.config)


def format_table(records: list[Record]) -> str:
    """A fixed-width table, one row per record; the bound's columns are SM clocks per 128 x 128 scores."""
    header = (
        f"{'kernel':7} {'arch':6} {'dtype':8} {'D':>4} {'causal':6} {'config (M, N, warps, stages)':28} "
        f"{'regs':>4} {'spill st/ld B':>13} {'smem KiB':>8} {'TMEM col':>8} {'tensor':8} {'occ.':>4} | {'tensor':>6} {'issue':>6} "
        f"{'mufu':>6} {'smem':>6} {'limit':6} {'instr/score':>11} {'mma x':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        head = f"{r.kernel:7} {r.arch:6} {r.dtype:8} {r.head_dim:>4} {('yes' if r.causal else 'no'):6} {r.config:28}"
        if not r.ok:
            lines.append(f"{head} FAILED: {r.error}")
            continue
        lines.append(
            f"{head} {r.registers:>4} {f'{r.spill_stores}/{r.spill_loads}':>13} {r.shared_bytes / 1024:>8.1f} "
            f"{r.tensor_memory_columns:>8} {r.tensor_cores:8} "
            f"{r.occupancy:>4.0%} | {r.tensor_clocks:>6.0f} {r.issue_clocks:>6.0f} {r.mufu_clocks:>6.0f} "
            f"{r.shared_clocks:>6.0f} {r.limit:6} {r.instructions_per_score:>11.2f} {r.mma_redundancy:>5.2f}"
        )
    return "\n".join(lines)


def format_bounds(rows: list[dict[str, Any]]) -> str:
    """The best config's bound per problem: forward, and backward = dK/dV + dQ."""
    lines = ["bound, SM clocks per 128 x 128 block of scores (best config; optimistic, for comparing kernels):"]
    for row in rows:
        text = f"  {row['arch']:6} {row['dtype']:8} D={row['head_dim']:<4} causal={'yes' if row['causal'] else 'no ':3}"
        if "forward" in row:
            text += f"  forward {row['forward']:6.0f} {row['forward_config']:18}"
        if "backward" in row:
            text += f"  backward {row['backward']:6.0f} (dK/dV {row['dkdv_config']}, dQ {row['dq_config']})"
        lines.append(text)
    return "\n".join(lines)


def notes(archs: list[str]) -> str:
    """What the table's columns count, and what they leave out, for these targets."""
    lines = [
        "spill st/ld B: bytes per thread stored to and loaded from local memory (ptxas -v's spill stores and loads); "
        "the bytes spilled are the stores (a spilled value is stored, then loaded back once or more: adding the two "
        "would count it twice or more)"
    ]
    if any(TARGETS[a].tensor_memory_columns for a in archs):
        lines.append(
            "sm_100: occupancy counts tensor memory (128 lanes x 512 columns of 32 bits per SM, 256 KiB): only the "
            "blocks whose allocations (TMEM col) fit at once, as well as registers, shared memory and warps; the "
            "tensor column of the bound is nan and the smem column leaves out the operands tcgen05 reads from shared "
            "memory (UTCHMMA takes its shapes from descriptors the SASS does not show), so sm_100's limit is read "
            "from issue, mufu and a lower bound of smem"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (1 if a kernel failed to compile)."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.gpu_report",
        description=(
            "Compile the course's Triton kernels for real GPU targets on this machine (no GPU needed), specialised "
            "as a contiguous launch is, and report registers, spills, shared memory, tensor-core instructions, "
            "occupancy and a static throughput bound of the inner loop."
        ),
    )
    parser.add_argument("--arch", nargs="+", default=["sm_80", "sm_90"], choices=sorted(TARGETS))
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    names = list(registry())  # every registered kernel: forward, dkdv, dq
    parser.add_argument("--kernel", nargs="+", default=names, choices=names)
    configs_help = "every shipped config of each kernel (default), or only the first"
    parser.add_argument("--configs", choices=["all", "first"], default="all", help=configs_help)
    masks = parser.add_mutually_exclusive_group()
    masks.add_argument("--causal", action="store_true", help="only the causal variant (default: both)")
    masks.add_argument("--non-causal", action="store_true", help="only the non-causal variant (default: both)")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    from . import runtime

    outside = [d for d in args.head_dim if not runtime.MIN_HEAD_DIM <= d <= runtime.MAX_HEAD_DIM]
    if outside:
        parser.error(f"--head-dim: the kernels take [{runtime.MIN_HEAD_DIM}, {runtime.MAX_HEAD_DIM}], got {outside}")
    if runtime.triton is None:
        print("error: Triton is not installed (its wheels exist for Linux only)", file=sys.stderr)
        return 2
    if runtime.INTERPRETED or runtime.IMPORTED_TOO_EARLY:
        # the kernels were decorated for the interpreter: compile in a fresh process that uses the compiler
        return subprocess.run(
            [sys.executable, "-m", "mha_course.kernels.gpu_report", *(argv if argv is not None else sys.argv[1:])],
            env=_compiler_env(),
        ).returncode
    causal = (True,) if args.causal else (False,) if args.non_causal else (False, True)
    first_only, progress = args.configs == "first", not args.quiet
    records = sweep(args.arch, args.dtype, args.head_dim, args.kernel, first_only, causal, progress)
    print(format_table(records))
    bounds = best_bounds(records)
    print(format_bounds(bounds))
    spilling = [r for r in records if r.ok and r.spills]
    print(
        f"{len(records)} kernels compiled for {', '.join(args.arch)}; {len(spilling)} spill; "
        f"{sum(not r.ok for r in records)} failed"
    )
    for r in spilling:
        print(
            f"  spills: {r.kernel} {r.arch} {r.dtype} D={r.head_dim} causal={'yes' if r.causal else 'no'} {r.config}: "
            f"{r.spill_stores} B spill stores, {r.spill_loads} B spill loads per thread (stack {r.stack} B)"
        )
    print(notes(args.arch))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"records": [_as_json(r) for r in records], "bounds": bounds}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"records: {args.json}")
    return 1 if any(not r.ok for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
