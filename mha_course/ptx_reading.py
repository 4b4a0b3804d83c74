"""Reading compiled GPU code without a GPU: the targets' per-SM limits, what ``ptxas -v`` says about a
kernel's PTX (registers, spills, stack), which tensor-core instruction its matmuls became, and the
occupancy those figures allow.

:mod:`.gpu_report` compiles the kernels and tabulates these facts; apart from finding ptxas in the
triton wheel, each is a small function on plain text and numbers.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """The per-SM limits that bound occupancy (NVIDIA CUDA C Programming Guide, compute capabilities)."""

    arch: int  # 80, 90, 100
    name: str  # the GPU it stands for
    registers_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    shared_per_sm: int = 228 * 1024
    shared_reserved_per_block: int = 1024  # the driver keeps 1 KiB of shared memory per block (sm_80+)
    register_granule: int = 256  # registers are allocated per warp in units of 256


TARGETS = {
    "sm_80": Target(80, "A100", shared_per_sm=164 * 1024),
    "sm_90": Target(90, "H100"),
    "sm_100": Target(100, "B200"),
}


def ptxas_binary() -> Path:
    """The newest ptxas shipped in the triton wheel (the older one rejects the PTX version Triton 3.9 emits)."""
    import triton

    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    found = []
    for path in folder.glob("ptxas*"):
        try:
            out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        version = re.search(r"release (\d+)\.(\d+)", out)
        if version:
            found.append(((int(version[1]), int(version[2])), path))
    if not found:
        raise FileNotFoundError(f"no ptxas in {folder}: is this triton wheel built for NVIDIA?")
    return max(found)[1]


def ptxas_usage(ptx: str, ptxas: Path) -> dict[str, int]:
    """registers, spill_stores, spill_loads, stack of the PTX's kernel, from ``ptxas -v``."""
    target = re.search(r"\.target\s+(sm_\w+)", ptx)
    if target is None:
        raise ValueError("the PTX names no .target")
    with tempfile.TemporaryDirectory(prefix="mha-ptx-") as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        proc = subprocess.run(
            [str(ptxas), "-v", "--gpu-name", target[1], str(source), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed: {text.strip()[-500:]}")
    registers = re.search(r"Used (\d+) registers", text)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if registers is None or frame is None:
        raise RuntimeError(f"could not read ptxas -v: {text.strip()[-500:]}")
    return {
        "registers": int(registers[1]),
        "stack": int(frame[1]),
        "spill_stores": int(frame[2]),
        "spill_loads": int(frame[3]),
    }


def tensor_core_instruction(ptx: str) -> str:
    """ "wgmma" (Hopper's warpgroup MMA), "mma.sync" (Ampere-style), or "none": what the matmuls became."""
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    if re.search(r"\bmma\.sync\b", ptx):
        return "mma.sync"
    return "none"


def occupancy(target: Target, registers: int, shared_bytes: int, num_warps: int) -> tuple[int, float]:
    """(warps per SM, fraction of the SM's warp slots) for one block of ``num_warps`` warps."""
    per_warp = math.ceil(max(registers, 1) * 32 / target.register_granule) * target.register_granule
    by_registers = target.registers_per_sm // (per_warp * num_warps)
    by_shared = target.shared_per_sm // (shared_bytes + target.shared_reserved_per_block)
    by_warps = target.max_warps_per_sm // num_warps
    blocks = min(by_registers, by_shared, by_warps, target.max_blocks_per_sm)
    warps = blocks * num_warps
    return warps, warps / target.max_warps_per_sm


def ptx_excerpt(
    ptx: str, patterns: tuple[str, ...] = ("wgmma.mma_async", "mma.sync", "ex2.approx"), per_pattern: int = 2
) -> list[str]:
    """A few PTX lines that show what the matmuls and exponentials became (first lines of each kind)."""
    lines = [line.strip() for line in ptx.splitlines()]
    shown = []
    for pattern in patterns:
        shown += [line for line in lines if line.startswith(pattern) or f" {pattern}" in line][:per_pattern]
    return shown
