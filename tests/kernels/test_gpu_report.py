"""The GPU path, proven without a GPU: the shipped kernels compile for real targets as a launch specialises them,
do not spill, use tensor cores, form 64-bit batch/head offsets, and meet their static throughput bounds.

Compiling runs in one subprocess (this process decorated the kernels for Triton's interpreter; the
report runs Triton's compiler), once per distinct specialisation.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from mha_course.kernels import gpu_report
from mha_course.kernels import ptx as pr

triton = pytest.importorskip("triton")


def test_occupancy_follows_the_register_shared_memory_and_warp_limits():
    h100 = pr.TARGETS["sm_90"]
    # 255 registers -> 8192 per warp: one 8-warp block fills the 64 K register file
    assert pr.occupancy(h100, 255, 48 * 1024, 8) == (8, 8 / 64)
    # 128 registers, 4 warps: 4 blocks by registers, 6 by shared memory (33 KiB each), 16 by warps
    assert pr.occupancy(h100, 128, 32 * 1024, 4) == (16, 16 / 64)
    # shared memory binds: 100 KiB blocks, two fit in 228 KiB
    assert pr.occupancy(h100, 32, 100 * 1024, 4) == (8, 8 / 64)
    a100 = pr.TARGETS["sm_80"]
    assert pr.occupancy(a100, 32, 100 * 1024, 4) == (4, 4 / 64)  # 164 KiB: one block


def test_tensor_core_instruction_is_read_from_the_ptx():
    assert pr.tensor_core_instruction("tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd2, %rd3, %r4;") == "tcgen05"
    assert pr.tensor_core_instruction("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == "wgmma"
    assert pr.tensor_core_instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == "mma.sync"
    assert pr.tensor_core_instruction("fma.rn.f32 %f1, %f2, %f3, %f4;") == "none"


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   HGMMA.64x128x16.F32 R24, gdesc[UR12], RZ, !UPT ;
        /*0020*/                   FFMA R2, R3, R4, -R5 ;
        /*0030*/                   MUFU.EX2 R2, R2 ;
        /*0040*/                   LDS.64 R6, [R7] ;
        /*0050*/              @!PT LDS RZ, [RZ] ;
        /*0060*/                   HGMMA.64x64x16.F32 R24, R76, gdesc[UR8].tnspB, R24 ;
        /*0070*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0080*/                   BRA `(.L_x_2);
"""


def test_the_bound_is_counted_from_the_loop_by_hand():
    loops = pr.sass_loops(SASS)
    assert [len(loop) for loop in loops] == [7, 1]  # the body, and the trap loop Triton ends kernels with
    loop = pr.steady_loop(loops)
    assert loop is loops[0]
    # 4 warps, a 64 x 128 tile: a 128 x 128 block is 2 iterations.
    fmas = 64 * 128 * 16 + 64 * 64 * 16  # one warpgroup's two wgmmas
    bound = pr.throughput_bound(loop, 4, 64 * 128, fmas, pr.TARGETS["sm_90"])
    assert bound.tensor == fmas * 2 / 2048
    assert bound.issue == 7 * 4 * 2 / 4
    assert bound.mufu == 1 * 4 * 32 * 2 / 16
    # per warp: wgmma 1 reads A and B (128x16 + 64x16 halves), wgmma 2 only B (64x16), a quarter each; LDS.64 256 B
    per_warp = (128 * 16 + 64 * 16) * 2 / 4 + 64 * 16 * 2 / 4 + 256
    assert bound.shared == per_warp * 4 * 2 / 128
    assert bound.instructions_per_score == 7 * 4 * 32 / (64 * 128)
    assert bound.mma_redundancy == 1.0 and bound.limit == "tensor" and bound.clocks == bound.tensor
    assert pr.throughput_bound(loop, 4, 64 * 128, fmas // 2, pr.TARGETS["sm_90"]).mma_redundancy == 2.0


def test_mma_sync_shapes_and_shared_memory_widths():
    hmma = pr.Instruction("HMMA.16816.F32", "R4, R8, R12, R4")
    assert pr.tensor_fmas(hmma) == (16 * 8 * 16, 1)
    assert pr.tensor_fmas(pr.Instruction("HMMA.1688.F32.TF32", "R4, R8, R12, R4")) == (16 * 8 * 8, 1)
    assert pr.shared_bytes(pr.Instruction("LDSM.16.M88.4", "R4, [R2]"), 2) == 512
    assert pr.shared_bytes(pr.Instruction("LDGSTS.E.BYPASS.128", "[R1], desc[UR4][R2.64]"), 2) == 512
    assert pr.shared_bytes(pr.Instruction("LDS", "R4, [R2]", never=True), 2) == 0
    with pytest.raises(ValueError, match="tensor-core"):
        pr.steady_loop([[pr.Instruction("FADD", "R1, R2, R3")]])


def test_parameter_multiplies_tell_32_from_64_bit_products():
    ptx = """
	ld.param.b32 	%r62, [k_param_5];
	ld.param.b32 	%r64, [k_param_6];
	mul.wide.s32 	%rd19, %r69, %r62;
	mul.lo.s32 	%r70, %r73, %r64;
"""
    assert pr.parameter_multiplies(ptx, 5) == ["mul.wide.s32 \t%rd19, %r69, %r62;"]
    assert pr.parameter_multiplies(ptx, 6) == ["mul.lo.s32 \t%r70, %r73, %r64;"]


# One process compiles each distinct specialisation once (gpu_report caches them): every config shipped for the
# H100 in float16, causal and not, D = 64 and 128 (what the bound and the Hopper checks need), and the A100's first
# config per kernel in bfloat16, causal, D = 64, both through the command line; the launch checks then reuse
# those compiles. The full sweep (both dtypes, every A100 config) is `python -m mha_course.kernels.gpu_report`, whose
# figures are in benchmarks/RESULTS.md.
_REPORT_SCRIPT = """
import json, sys
from mha_course.kernels import gpu_report as g
from mha_course.kernels.ptx import cubin_resources, parameter_multiplies
from mha_course.kernels.registry import example_inputs, launch_signature
hopper, ampere = sys.argv[1], sys.argv[2]


def binder_signature(entry, config):
    # Triton's own launch binder (internal to Triton, read here only to check launch_signature against it)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = entry.kernel
    args, constants = entry.example_launch(*example_inputs("float16", 64), False)
    binder = create_function_from_signature(kernel.signature, kernel.params, make_backend(GPUTarget("cuda", 90, 32)))
    _, specialization, _ = binder(*args, **constants, **config.kwargs)
    ours, values, attrs = launch_signature(kernel, args, dict(constants, **config.kwargs))
    theirs = {name: kind for name, (kind, _) in zip(kernel.arg_names, specialization)}
    hinted = [name for i, (name, (_, key)) in enumerate(zip(kernel.arg_names, specialization)) if key == "D"]
    ours_hinted = [kernel.arg_names[i] for (i,), hint in attrs.items() if hint]
    return dict(same_types=list(ours.items()) == list(theirs.items()), same_hints=hinted == ours_hinted)

codes = [
    g.main(["--arch", "sm_90", "--dtype", "float16", "--json", hopper, "--quiet"]),
    g.main(["--arch", "sm_80", "--dtype", "bfloat16", "--head-dim", "64", "--causal", "--configs", "first",
            "--json", ampere, "--quiet"]),
]
compiled_in_sweeps = len(g._COMPILED)
launches = {}
for name, entry in g.registry().items():
    config = entry.configs(90, 64, False)[0]
    compiled, signature = g.compile_launch(entry, "sm_90", "float16", 64, config, False)
    ptx = compiled.asm["ptx"]
    params = [n for n, t in signature.items() if t != "constexpr"]
    batch_head = [n for n in params if n.startswith("stride_") and n[-1] in "bh"]
    launches[name] = dict(
        signature=signature,
        multiplies={n: parameter_multiplies(ptx, params.index(n)) for n in batch_head},
        resources=cubin_resources(compiled.asm["cubin"]),
        reused=compiled is g.compile_launch(entry, 90, "float16", 64, config, False)[0],
        binder=binder_signature(entry, config),
    )
print(json.dumps(dict(codes=codes, compiled_in_sweeps=compiled_in_sweeps, compiled=len(g._COMPILED), launches=launches)))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu")
    hopper, ampere = folder / "sm_90.json", folder / "sm_80.json"
    command = [sys.executable, "-c", _REPORT_SCRIPT, str(hopper), str(ampere)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, env=gpu_report._compiler_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    hopper_report, ampere_report = json.loads(hopper.read_text()), json.loads(ampere.read_text())
    records = hopper_report["records"] + ampere_report["records"]
    return dict(out, records=records, bounds=hopper_report["bounds"], table=proc.stdout[-6000:])


@pytest.mark.slow
def test_a_launch_specialises_unit_strides_and_divisible_sizes(report):
    signature = report["launches"]["forward"]["signature"]
    assert signature["stride_qd"] == signature["stride_od"] == "constexpr"  # stride 1: a constant, as at launch
    assert signature["stride_qb"] == signature["T"] == "i32" and signature["Q"] == "*fp16"


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["forward", "dkdv", "dq"])
def test_the_report_specialises_a_launch_as_tritons_binder_does(report, kernel):
    assert report["launches"][kernel]["binder"] == dict(same_types=True, same_hints=True)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["forward", "dkdv", "dq"])
def test_batch_and_head_offsets_are_64_bit_products(report, kernel):
    multiplies = report["launches"][kernel]["multiplies"]
    assert multiplies and all(multiplies.values()), multiplies  # every batch/head stride is multiplied
    for name, lines in multiplies.items():
        for line in lines:
            assert line.startswith("mul.wide.") or ".s64" in line or ".u64" in line, (name, line)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["forward", "dkdv", "dq"])
def test_registers_are_the_cubins_and_the_bound_is_finite(report, kernel):
    launch = report["launches"][kernel]
    record = _first_record(report, kernel)
    assert record["ok"] and record["registers"] == launch["resources"]["registers"] > 0
    assert record["spill_bytes"] == 0 and record["tensor_cores"] == "wgmma"
    assert record["mma_redundancy"] == 1.0  # no warpgroup repeats another's product
    assert math.isfinite(record["bound_clocks"]) and record["limit"] in ("tensor", "issue", "mufu", "shared")


def _first_record(report, kernel):
    """The sweep's record of the launch the checks above compiled: sm_90, float16, D = 64, non-causal, first config."""
    return next(
        r
        for r in report["records"]
        if (r["kernel"], r["arch"], r["dtype"], r["head_dim"], r["causal"]) == (kernel, "sm_90", "float16", 64, False)
    )


@pytest.mark.slow
def test_each_specialisation_compiles_once(report):
    assert report["codes"] == [0, 0], report["table"]
    assert report["compiled_in_sweeps"] == len(report["records"])  # no record compiled twice
    assert report["compiled"] == report["compiled_in_sweeps"]  # the launch checks found theirs in the cache
    assert all(launch["reused"] for launch in report["launches"].values())


@pytest.mark.slow
def test_the_shipped_configs_compile_without_spilling_and_use_tensor_cores(report):
    records, table = report["records"], report["table"]
    from mha_course.kernels import registry

    shipped = {
        (name, d, c, registry.describe(config))
        for name, entry in registry.REGISTRY.items()
        for d in (64, 128)
        for c in (False, True)
        for config in entry.configs(90, d, c)
    }
    hopper = [r for r in records if r["arch"] == "sm_90"]
    assert len(hopper) == len(shipped) and {r["dtype"] for r in hopper} == {"float16"}  # every H100 config
    assert {
        (r["kernel"], r["arch"], r["dtype"], r["head_dim"], r["causal"]) for r in records if r["arch"] == "sm_80"
    } == {(k, "sm_80", "bfloat16", 64, True) for k in ("forward", "dkdv", "dq")}
    assert all(r["ok"] and r["triton_version"] == triton.__version__ for r in records), table
    assert [r["config"] for r in records if r["spill_bytes"] or r["local_bytes"]] == [], table
    assert {r["tensor_cores"] for r in records if r["arch"] == "sm_90"} == {"wgmma"}, table
    assert {r["tensor_cores"] for r in records if r["arch"] == "sm_80"} == {"mma.sync"}, table
    # Hopper: no warpgroup repeats another's product (8 warps never share a 64-row accumulator)
    assert all(r["mma_redundancy"] == 1.0 for r in hopper), table


@pytest.mark.slow
def test_hopper_bounds_meet_the_tutorial_kernels(report):
    """SM clocks per 128 x 128 scores, float16, causal and not: Triton's tutorial 06 compiled the same way
    gives 1088 / 2048 (forward, D = 64 / 128); the targets for the backward (dK/dV + dQ) are 3840 / 7680."""
    targets = {64: (1088, 3840), 128: (2048, 7680)}
    assert {(row["head_dim"], row["causal"]) for row in report["bounds"]} == {
        (64, False),
        (64, True),
        (128, False),
        (128, True),
    }
    for row in report["bounds"]:
        forward, backward = targets[row["head_dim"]]
        assert row["forward"] <= forward and row["backward"] <= backward, (row, report["table"])


@pytest.mark.parametrize("name", ["forward", "dkdv", "dq"])
@pytest.mark.parametrize("gpu", [80, 90])
def test_the_autotuner_tries_only_the_configs_shipped_for_the_launch(name, gpu):
    from mha_course.kernels import registry

    entry = registry.REGISTRY[name]
    every = registry.shipped(entry, gpu)
    for head_dim in (16, 40, 64, 65, 96, 128):
        for causal in (False, True):
            launch = dict(D=head_dim, DV=16, CAUSAL=causal)
            kept = registry.prune_to_launch(entry, gpu, every, launch)
            expected = entry.configs(gpu, head_dim, causal)
            assert sorted(map(registry.describe, kept)) == sorted(map(registry.describe, expected))


def test_parameter_multiplies_follow_a_widening_conversion():
    ptx = """
	ld.param.b32 	%r7, [k_param_2];
	cvt.s64.s32 	%rd3, %r7;
	mul.lo.s64 	%rd4, %rd9, %rd3;
"""
    assert pr.parameter_multiplies(ptx, 2) == ["mul.lo.s64 \t%rd4, %rd9, %rd3;"]


@pytest.mark.slow
def test_the_cuda_tools_run_once_per_cubin(tmp_path, monkeypatch):
    calls, tool = tmp_path / "calls", tmp_path / "fake_tool"
    tool.write_text(f'#!/bin/sh\necho run >> {calls}\nwc -c < "$2"\n')  # $1 is the flag, $2 the cubin
    tool.chmod(0o755)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton" / "cache"))
    monkeypatch.setattr(pr, "triton_tool", lambda name: tool)
    first = pr._run_on_cubin("fake_tool", ["-x"], b"12345")
    assert first.strip() == "5" and pr._run_on_cubin("fake_tool", ["-x"], b"12345") == first
    assert pr._run_on_cubin("fake_tool", ["-x"], b"123456").strip() == "6"  # other bytes: the tool runs again
    assert calls.read_text().split() == ["run", "run"]
    assert len(list((tmp_path / "triton" / "mha_course_cuda_tools").glob("*.txt"))) == 2


# --- the loop on sm_100, tensor memory, spills ---------------------------------------------------------------

# The shape of sm_100's SASS: a loop closed by a uniform branch (BRA.U !UP1), a barrier wait inside it whose retry
# path sits after EXIT and branches back into the loop, and a wait before the loop whose retry path branches back
# to just after it: neither backward branch closes a loop.
SASS_SM100 = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!P4 BRA `(.L_x_7) ;
.L_x_6:
        /*0020*/                   FFMA R2, R3, R4, -R5 ;
.L_x_17:
        /*0030*/                   UTCHMMA gdesc[UR4], gdesc[UR12], tmem[UR9], tmem[UR20], idesc[UR21], !UPT ;
        /*0040*/              @!P2 BRA `(.L_x_13) ;
.L_x_38:
        /*0050*/                   MUFU.EX2 R2, R2 ;
        /*0060*/                   FSEL R3, R3, -INF , P1 ;
        /*0070*/                   BRA.U !UP1, `(.L_x_17) ;
        /*0080*/                   EXIT ;
.L_x_7:
        /*0090*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P4, [UR4], R0 ;
        /*00a0*/              @!P4 BRA `(.L_x_7) ;
        /*00b0*/                   BRA `(.L_x_6) ;
.L_x_13:
        /*00c0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR4], R0 ;
        /*00d0*/              @!P2 BRA `(.L_x_13) ;
        /*00e0*/                   BRA `(.L_x_38) ;
.L_x_99:
        /*00f0*/                   BRA `(.L_x_99);
"""


def test_only_branches_back_to_a_dominating_label_close_loops():
    loops = pr.sass_loops(SASS_SM100)
    bodies = [[ins.base for ins in loop] for loop in loops]
    # the loop (closed by a uniform branch), the two spin waits, the trap loop; not the jumps back from out of line
    assert bodies == [
        ["UTCHMMA", "BRA", "MUFU", "FSEL", "BRA"],
        ["SYNCS", "BRA"],
        ["SYNCS", "BRA"],
        ["BRA"],
    ], bodies
    assert pr.steady_loop(loops) is loops[0]


def test_tensor_memory_bounds_occupancy_on_sm_100_only():
    b200, h100 = pr.TARGETS["sm_100"], pr.TARGETS["sm_90"]
    assert b200.tensor_memory_columns == 512 and h100.tensor_memory_columns == 0
    # 64 registers, 4 warps, 16 KiB: 8 blocks by registers, 13 by shared memory, 16 by warps ...
    assert pr.occupancy(b200, 64, 16 * 1024, 4) == (32, 32 / 64)
    # ... but 256 columns each: two blocks hold their tensor memory at once; 512: one; 96 rounds up to 128: four
    assert pr.occupancy(b200, 64, 16 * 1024, 4, tensor_memory_columns=256) == (8, 8 / 64)
    assert pr.occupancy(b200, 64, 16 * 1024, 4, tensor_memory_columns=512) == (4, 4 / 64)
    assert pr.occupancy(b200, 64, 16 * 1024, 4, tensor_memory_columns=96) == (16, 16 / 64)
    with pytest.raises(ValueError, match="no tensor memory"):
        pr.occupancy(h100, 64, 16 * 1024, 4, tensor_memory_columns=256)


def test_spill_bytes_are_the_stores_not_stores_plus_loads():
    record = gpu_report.Record("forward", "sm_100", "float16", 64, 128, 128, 8, 2, True, True)
    assert not record.spills and record.spill_bytes == 0
    record.spill_stores, record.spill_loads = 116, 136
    assert record.spills and record.spill_bytes == 116
    assert "116/136" in gpu_report.format_table([record])


# Compiles the forward (float16, D = 64, first config) for sm_100 and sm_90, non-causal, and the causal one for
# sm_100, and runs the wheel's ptxas on the causal PTX with Triton's flags to read its own spill figures.
_SM100_SCRIPT = """
import json, re, subprocess, tempfile
from pathlib import Path
from triton.backends.nvidia.compiler import get_ptxas
from mha_course.kernels import gpu_report as g
from mha_course.kernels.ptx import sass_loops, steady_loop
entry = g.registry()["forward"]
out = {}
for arch, causal in (("sm_100", False), ("sm_90", False), ("sm_100", True)):
    config = entry.configs(g.TARGETS[arch].arch, 64, causal)[0]
    r = g.compile_record("forward", entry, arch, "float16", 64, config, causal, keep_ptx=True)
    loops = sass_loops(r.sass)
    loop = steady_loop(loops)
    alloc = re.findall(r"tcgen05\\.alloc\\S*\\s+\\[%r\\d+\\],\\s*(\\d+);", r.ptx)
    row = dict(ok=r.ok, loop=len(loop), mufu=sum(i.base == "MUFU" for i in loop),
               fsel=sum(i.base == "FSEL" for i in loop), longest=max(map(len, loops)),
               spill_stores=r.spill_stores, spill_loads=r.spill_loads, spill_bytes=r.spill_bytes,
               tmem=r.tensor_memory_columns, alloc=[int(a) for a in alloc], warps=r.warps_per_sm,
               bound=r.bound_clocks, limit=r.limit)
    if causal:
        with tempfile.TemporaryDirectory() as tmp:
            ptx = Path(tmp) / "k.ptx"
            ptx.write_text(r.ptx)
            cmd = [get_ptxas(100).path, "-lineinfo", "-v", "--regAllocOptLevel=2", "--gpu-name=sm_100a", str(ptx),
                   "-o", str(Path(tmp) / "k.o")]
            log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        found = re.search(r"(\\d+) bytes spill stores, (\\d+) bytes spill loads", log)
        row["ptxas"] = [int(found[1]), int(found[2])]
    out[f"{arch} {'causal' if causal else 'full'}"] = row
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def sm100():
    proc = subprocess.run(
        [sys.executable, "-c", _SM100_SCRIPT],
        capture_output=True,
        text=True,
        timeout=900,
        env=gpu_report._compiler_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sm_100s_bound_reads_the_inner_loop_as_sm_90s_does(sm100):
    """sm_100's steady loop is the inner loop: about as long as sm_90's, one EX2 per score per thread as there
    (128 x 128 scores over 256 threads: 64, plus the rescale), no masking select; not the kernel-long stretch
    (thousands of instructions, every exponential and select of both loops) that out-of-line waits made look
    like a loop."""
    blackwell, hopper = sm100["sm_100 full"], sm100["sm_90 full"]
    assert blackwell["ok"] and hopper["ok"]
    assert hopper["fsel"] == blackwell["fsel"] == 0
    assert abs(blackwell["mufu"] - hopper["mufu"]) <= 2 and 64 <= blackwell["mufu"] <= 68, (blackwell, hopper)
    assert blackwell["loop"] < 1.25 * hopper["loop"], (blackwell, hopper)
    assert blackwell["longest"] < 2 * hopper["longest"], "a loop spans more than the kernel's two loops"
    assert math.isfinite(blackwell["bound"]) and blackwell["limit"] in ("issue", "mufu", "shared")


@pytest.mark.slow
def test_sm_100s_tensor_memory_and_spills_are_read_as_ptxas_reports_them(sm100):
    blackwell, causal = sm100["sm_100 full"], sm100["sm_100 causal"]
    assert blackwell["tmem"] > 0 and blackwell["alloc"] == [blackwell["tmem"]]  # Triton's tmem_size is the PTX's
    assert sm100["sm_90 full"]["tmem"] == 0
    # the spill figures read from the SASS are ptxas's own, and the bytes spilled are the stores
    assert [causal["spill_stores"], causal["spill_loads"]] == causal["ptxas"]
    assert causal["spill_bytes"] == causal["spill_stores"]


def test_a_head_dim_no_kernel_takes_is_refused_before_compiling(capsys):
    with pytest.raises(SystemExit) as exited:
        gpu_report.main(["--head-dim", "64", "256", "--quiet"])
    assert exited.value.code == 2 and "the kernels take [16, 128], got [256]" in capsys.readouterr().err
