"""Reading compiled GPU code without a GPU: the targets' per-SM limits and peak rates, which tensor-core
instruction a kernel's PTX uses, what its cubin holds (registers and local memory, read by the wheel's
``cuobjdump``; the SASS, by its ``nvdisasm``), the SASS's loops, and a static throughput bound per
loop: the clocks the tensor cores, the instruction issue, the special-function units (``ex2``) and
shared memory need, at their peak rates, for a 128 x 128 block of scores.

:mod:`.gpu_report` compiles the kernels and tabulates these facts; apart from running the two CUDA
tools in the triton wheel, each is a small function on plain text and numbers.
"""

from __future__ import annotations

import hashlib
import math
import os
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
    # Peak rates per SM and clock, for the static throughput bound (:func:`throughput_bound`):
    tensor_fmas_per_clock: int = 1024  # dense fp16/bf16 multiply-adds (tf32: half)
    issue_per_clock: int = 4  # one warp instruction per scheduler, four schedulers
    mufu_per_clock: int = 16  # special-function results (ex2, rcp, lg2): 4 per scheduler
    shared_bytes_per_clock: int = 128  # shared-memory bandwidth
    # Tensor memory (sm_100's tcgen05 accumulators): 128 lanes x 512 columns of 32-bit cells per SM, 256 KiB
    # (NVIDIA PTX ISA, "Tensor Memory"); 0 where the GPU has none. A block takes whole columns
    # (tcgen05.alloc: a power of two >= 32), and an alloc that does not fit waits until columns are freed.
    tensor_memory_columns: int = 0


TARGETS = {
    "sm_80": Target(80, "A100", shared_per_sm=164 * 1024),
    "sm_90": Target(90, "H100", tensor_fmas_per_clock=2048),
    "sm_100": Target(100, "B200", tensor_fmas_per_clock=4096, tensor_memory_columns=512),
}


def tensor_core_instruction(ptx: str) -> str:
    """ "tcgen05" (Blackwell's), "wgmma" (Hopper's warpgroup MMA), "mma.sync" (Ampere-style), or "none"."""
    if "tcgen05.mma" in ptx:
        return "tcgen05"
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    if re.search(r"\bmma\.sync\b", ptx):
        return "mma.sync"
    return "none"


def occupancy(
    target: Target, registers: int, shared_bytes: int, num_warps: int, tensor_memory_columns: int = 0
) -> tuple[int, float]:
    """(warps per SM, fraction of the SM's warp slots) for one block of ``num_warps`` warps.

    ``tensor_memory_columns``: the columns of tensor memory one block allocates (Triton's ``tmem_size``; 0 for
    none). Only blocks whose allocations fit in the SM's columns at once are counted: a further block may
    be resident, but its ``tcgen05.alloc`` waits until another block frees its columns, so it hides no latency.
    """
    if tensor_memory_columns < 0 or (tensor_memory_columns and not target.tensor_memory_columns):
        raise ValueError(
            f"tensor_memory_columns must be 0 on {target.name} (no tensor memory) and >= 0, got {tensor_memory_columns}"
        )
    per_warp = math.ceil(max(registers, 1) * 32 / target.register_granule) * target.register_granule
    by_registers = target.registers_per_sm // (per_warp * num_warps)
    by_shared = target.shared_per_sm // (shared_bytes + target.shared_reserved_per_block)
    by_warps = target.max_warps_per_sm // num_warps
    by_tensor_memory = target.max_blocks_per_sm
    if tensor_memory_columns:
        allocated = max(32, 1 << (tensor_memory_columns - 1).bit_length())  # a power of two >= 32 columns
        by_tensor_memory = target.tensor_memory_columns // allocated
    blocks = min(by_registers, by_shared, by_warps, by_tensor_memory, target.max_blocks_per_sm)
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


# --- the cubin: resources and SASS --------------------------------------------------------------------------


def triton_tool(name: str) -> Path:
    """A CUDA binary shipped in the triton wheel (``cuobjdump``, ``nvdisasm``)."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: is this triton wheel built for NVIDIA?")
    return path


def _run_on_cubin(tool: str, flags: list[str], cubin: bytes) -> str:
    """``tool``'s output for the cubin, kept on disk by the hash of (tool, flags, triton's version, the cubin):
    the same bytes always read the same, and a warm run skips the tool (about 0.5 s of CPU a call)."""
    import triton

    key = hashlib.sha256(repr((tool, flags, triton.__version__)).encode() + cubin).hexdigest()
    kept = _tool_cache() / f"{key}.txt"
    if kept.is_file():
        return kept.read_text()
    with tempfile.TemporaryDirectory(prefix="mha-cubin-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(triton_tool(tool)), *flags, str(path)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} failed: {(proc.stdout + proc.stderr).strip()[-500:]}")
    try:  # a read-only home only loses the cache
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(proc.stdout)
        partial.replace(kept)  # atomic: a concurrent reader sees all of it or nothing
    except OSError:
        pass
    return proc.stdout


def _tool_cache() -> Path:
    """Where :func:`_run_on_cubin` keeps outputs: beside Triton's own cache (TRITON_CACHE_DIR, ~/.triton/cache)."""
    triton_cache = os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache"
    return Path(triton_cache).parent / "mha_course_cuda_tools"


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """registers, stack and local bytes per thread, as ``cuobjdump -res-usage`` reads them from the cubin."""
    text = _run_on_cubin("cuobjdump", ["-res-usage"], cubin)
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    if found is None:
        raise RuntimeError(f"could not read cuobjdump -res-usage: {text.strip()[-500:]}")
    return {"registers": int(found[1]), "stack": int(found[2]), "local": int(found[4])}


def disassemble(cubin: bytes) -> str:
    """The cubin's SASS, as ``nvdisasm -c`` prints it (one instruction per line, labels ``.L_x_N:``)."""
    return _run_on_cubin("nvdisasm", ["-c"], cubin)


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: its opcode with modifiers (``HGMMA.64x64x16.F32``) and operands."""

    opcode: str
    operands: str
    never: bool = False  # predicated on !PT: issued, never executed (padding the scheduler inserts)

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


_SASS_LINE = re.compile(r"/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);")
# The target label of a branch, whatever comes before it: `BRA `(.L_x_1)`, `BRA.U !UP1, `(.L_x_17)`.
_BRANCH_TARGET = re.compile(r"`?\(?(\.L_x_\d+)\)?\s*$")
# Instructions after which control does not fall through when they execute unconditionally.
_STOPS = ("EXIT", "RET", "BPT", "BRA")


@dataclass(frozen=True)
class _Flow:
    """Where one instruction can send control: its branch target's index (None if none) and whether it may
    also fall through to the next instruction."""

    target: int | None
    falls_through: bool


def _parse_sass(sass: str) -> tuple[list[Instruction], dict[int, str], list[str]]:
    """(instructions in program order, index -> the label in front of it, each instruction's predicate text)."""
    instructions: list[Instruction] = []
    labels: dict[int, str] = {}
    predicates: list[str] = []
    for line in sass.splitlines():
        stripped = line.strip()
        if re.fullmatch(r"\.L_x_\d+:", stripped):
            labels[len(instructions)] = stripped[:-1]
            continue
        found = _SASS_LINE.search(line)
        if found:
            predicate = (found[1] or "").strip()
            predicates.append(predicate)
            instructions.append(Instruction(found[2], found[3].strip(), never=predicate == "@!PT"))
    return instructions, labels, predicates


def _flows(instructions: list[Instruction], labels: dict[int, str], predicates: list[str]) -> list[_Flow]:
    """Each instruction's successors. A branch is conditional when predicated (``@P0 BRA``) or when it names a
    predicate before its target (``BRA.U !UP1, `(.L_x_17)``, Blackwell's uniform branches)."""
    index = {label: i for i, label in labels.items()}
    flows = []
    for ins, predicate in zip(instructions, predicates, strict=True):
        if ins.never or ins.base not in _STOPS:
            flows.append(_Flow(None, True))
            continue
        parts = [p.strip() for p in ins.operands.split(",")]
        conditional = predicate not in ("", "@PT") or (ins.base == "BRA" and len(parts) > 1 and parts[0] != "UPT")
        target = None
        if ins.base == "BRA":
            found = _BRANCH_TARGET.search(ins.operands)
            target = index.get(found[1]) if found else None
        flows.append(_Flow(target, conditional))
    return flows


def _block_of(leaders: list[int], count: int) -> dict[int, int]:
    """Instruction index -> the index of its basic block's first instruction."""
    block_of = {}
    for number, start in enumerate(leaders):
        end = leaders[number + 1] if number + 1 < len(leaders) else count
        block_of.update({i: start for i in range(start, end)})
    return block_of


def _dominators(flows: list[_Flow], leaders: list[int]) -> dict[int, set[int]]:
    """Block leader -> the leaders of the blocks that dominate it (every path from the entry passes through
    them). A block the entry does not reach dominates only itself."""
    block_of = _block_of(leaders, len(flows))
    successors: dict[int, set[int]] = {}
    for number, start in enumerate(leaders):
        last = (leaders[number + 1] if number + 1 < len(leaders) else len(flows)) - 1
        flow, nexts = flows[last], set()
        if flow.target is not None:
            nexts.add(block_of[flow.target])
        if flow.falls_through and last + 1 < len(flows):
            nexts.add(block_of[last + 1])
        successors[start] = nexts
    reached, todo = {leaders[0]}, [leaders[0]]
    while todo:
        for nxt in successors[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    predecessors: dict[int, set[int]] = {b: set() for b in leaders}
    for b, nexts in successors.items():
        for nxt in nexts:
            predecessors[nxt].add(b)
    dom = {b: (set(reached) if b in reached else {b}) for b in leaders}
    dom[leaders[0]] = {leaders[0]}
    changed = True
    while changed:
        changed = False
        for b in leaders[1:]:
            if b not in reached:
                continue
            incoming = [dom[p] for p in predecessors[b] if p in reached]
            new = set.intersection(*incoming) | {b} if incoming else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def sass_loops(sass: str) -> list[list[Instruction]]:
    """The bodies of the SASS's loops, in program order: the instructions from a label to a branch back to it,
    for every branch whose target dominates it (every path to the branch passes through the label).

    The dominance test keeps out the jumps back from code placed out of line: on sm_100 a wait that
    must retry (a barrier's phase not yet flipped) branches to a spin loop after the kernel's EXIT,
    which then branches back into the kernel. That backward branch closes no loop, and a range from its
    target to it would hold most of the kernel. The out-of-line retry paths of a real loop are not part
    of its body here: the body is the loop's straight-line code, what a steady iteration runs.
    """
    instructions, labels, predicates = _parse_sass(sass)
    if not instructions:
        return []
    flows = _flows(instructions, labels, predicates)
    leaders = sorted({0, *labels, *(i + 1 for i, f in enumerate(flows) if f.target is not None or not f.falls_through)})
    leaders = [i for i in leaders if i < len(instructions)]
    dom, block_of = _dominators(flows, leaders), _block_of(leaders, len(instructions))
    return [
        instructions[flow.target : end + 1]
        for end, flow in enumerate(flows)
        if flow.target is not None and flow.target <= end and block_of[flow.target] in dom[block_of[end]]
    ]


# Tensor-core instructions and their (m, n, k) when the SASS names it. HGMMA is one per warpgroup (4 warps);
# HMMA (mma.sync) is one per warp. tcgen05's UTC*MMA take their shape from a descriptor, not the opcode.
_HGMMA = re.compile(r"HGMMA\.(\d+)x(\d+)x(\d+)")
_HMMA = re.compile(r"HMMA\.(16)(8)(16|8)\b")
TENSOR_OPCODES = ("HGMMA", "HMMA", "UTCHMMA", "UTCQMMA", "UTCOMMA", "UTCMMA")


def _shape(pattern: re.Pattern[str], opcode: str) -> tuple[int, int, int]:
    """(m, n, k) of a tensor-core opcode that its family's pattern matched (the caller checked ``ins.base``)."""
    found = pattern.match(opcode)
    if found is None:
        raise ValueError(f"expected a {pattern.pattern!r} opcode; got {opcode!r}")
    m, n, k = map(int, found.groups())
    return m, n, k


def tensor_fmas(ins: Instruction) -> tuple[int, int]:
    """(multiply-adds, warps that issue it together) of one tensor-core instruction; (0, 1) for any other."""
    if ins.base == "HGMMA":
        m, n, k = _shape(_HGMMA, ins.opcode)
        return m * n * k, 4
    if ins.base == "HMMA":
        m, n, k = _shape(_HMMA, ins.opcode)  # HMMA.16816 = m16 n8 k16, HMMA.1688 = m16 n8 k8
        return m * n * k, 1
    return 0, 1


def shared_bytes(ins: Instruction, element_bytes: int) -> float:
    """Bytes one warp's instruction moves through shared memory (a warpgroup's wgmma counted a quarter per warp)."""
    if ins.never:
        return 0.0
    if ins.base in ("LDS", "STS", "LDGSTS", "ATOMS"):
        width = re.search(r"\.(128|64|U16|S16|U8|S8)\b", ins.opcode)
        size = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}[width[1]] if width else 4
        return 32.0 * size
    if ins.base in ("LDSM", "STSM"):
        count = re.search(r"\.(\d)$", ins.opcode)
        return 128.0 * (int(count[1]) if count else 1)  # 8x8 matrices of 16-bit values
    if ins.base == "HGMMA":
        m, n, k = _shape(_HGMMA, ins.opcode)
        operands = [x.strip() for x in ins.operands.split(",")]
        a_from_shared = len(operands) > 1 and operands[1].startswith("gdesc")
        return (n * k + (m * k if a_from_shared else 0)) * element_bytes / 4
    return 0.0


#: The scores one bound is counted for: a 128 x 128 block, whatever the kernel's tiles.
BOUND_SCORES = 128 * 128


@dataclass(frozen=True)
class Bound:
    """SM clocks per 128 x 128 block of scores that each unit needs at its peak rate, from one loop's SASS.

    An optimistic bound for comparing kernels, not a prediction of TFLOP/s: it assumes every unit
    runs at its peak rate in parallel with the others, no latency, no stall, no memory traffic
    beyond shared memory, and the loop's steady state (no prologue, epilogue or masked blocks).
    """

    tensor: float  # tensor-core clocks; nan where the SASS does not name the shape (tcgen05)
    issue: float  # instruction-issue clocks (all instructions, 4 warp instructions per clock)
    mufu: float  # special-function clocks (EX2 and friends, 16 lanes per clock)
    shared: float  # shared-memory clocks (LDS/STS/ldmatrix/cp.async and wgmma operands, 128 B per clock)
    instructions_per_score: float  # thread instructions per score
    mma_redundancy: float  # tensor work issued / the tile's matmuls: 2.0 when two warpgroups repeat one product

    @property
    def limit(self) -> str:
        """The unit with the most clocks: what bounds the loop."""
        units = {"tensor": self.tensor, "issue": self.issue, "mufu": self.mufu, "shared": self.shared}
        return max(units, key=lambda u: -1.0 if math.isnan(units[u]) else units[u])

    @property
    def clocks(self) -> float:
        return max(x for x in (self.tensor, self.issue, self.mufu, self.shared) if not math.isnan(x))


def throughput_bound(
    loop: list[Instruction],
    num_warps: int,
    tile_scores: int,
    tile_fmas: int,
    target: Target,
    element_bytes: int = 2,
) -> Bound:
    """The static bound of one loop iteration that handles ``tile_scores`` scores with ``tile_fmas`` matmul FMAs.

    Every warp of the block runs the loop body once per iteration; a 128 x 128 block of scores takes
    ``BOUND_SCORES / tile_scores`` iterations. ``element_bytes``: 2 for fp16/bf16 operands (4 for tf32,
    which also halves the tensor rate).
    """
    if not loop or num_warps < 1 or tile_scores < 1:
        raise ValueError(
            f"need a loop, warps >= 1 and scores >= 1, got {len(loop)} instructions, {num_warps}, {tile_scores}"
        )
    iterations = BOUND_SCORES / tile_scores
    issued = sum(1 for ins in loop if ins.base != "NOP")
    mufu = sum(1 for ins in loop if ins.base == "MUFU" and not ins.never)
    fmas = 0.0
    named = True
    for ins in loop:
        per, warps = tensor_fmas(ins)
        fmas += per * num_warps / warps
        named = named and not (ins.base in TENSOR_OPCODES and per == 0)
    rate = target.tensor_fmas_per_clock * (2 / element_bytes)
    shared = sum(shared_bytes(ins, element_bytes) for ins in loop) * num_warps
    return Bound(
        tensor=fmas * iterations / rate if named else math.nan,
        issue=issued * num_warps * iterations / target.issue_per_clock,
        mufu=mufu * num_warps * 32 * iterations / target.mufu_per_clock,
        shared=shared * iterations / target.shared_bytes_per_clock,
        instructions_per_score=issued * num_warps * 32 / tile_scores,
        mma_redundancy=fmas / tile_fmas if named and tile_fmas else math.nan,
    )


def steady_loop(loops: list[list[Instruction]]) -> list[Instruction]:
    """The loop that runs the full, unmasked tiles: of the loops doing the most tensor-core work per iteration,
    the one with the fewest instructions (masked or tail variants of the same loop carry extra ones)."""
    with_mma = [loop for loop in loops if any(ins.base in TENSOR_OPCODES for ins in loop)]
    if not with_mma:
        raise ValueError("no loop of the SASS issues a tensor-core instruction")

    def work(loop):
        return sum(tensor_fmas(ins)[0] / tensor_fmas(ins)[1] for ins in loop) or sum(
            ins.base in TENSOR_OPCODES for ins in loop
        )

    most = max(work(loop) for loop in with_mma)
    return min((loop for loop in with_mma if work(loop) == most), key=len)


def parameter_multiplies(ptx: str, index: int) -> list[str]:
    """The PTX multiplies that read kernel parameter ``index`` (counted among the non-constexpr parameters),
    directly or after a widening ``cvt`` to 64 bits.

    ``mul.wide.s32`` / ``.s64`` forms a 64-bit product; ``mul.lo.s32`` wraps at 2**31 before any widening.
    """
    loaded = re.search(rf"ld\.param\.\w+\s+(%\w+),\s*\[\w+_param_{index}\];", ptx)
    if loaded is None:
        return []
    registers = {loaded[1]}
    for widened in re.finditer(r"cvt\.[su]64\.[su]32\s+(%\w+),\s*(%\w+);", ptx):
        if widened[2] in registers:
            registers.add(widened[1])
    uses = re.compile("|".join(rf"{re.escape(r)}\b" for r in registers))
    return [
        line.strip()
        for line in ptx.splitlines()
        if re.match(r"\s*(mul|mad)\.", line) and uses.search(line.split(",", 1)[-1])
    ]
