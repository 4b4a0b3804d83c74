"""The GPU path, proven without a GPU: the shipped kernels compile for real targets, do not spill, use tensor cores.

The compile test runs ``python -m mha_course.gpu_report`` in a subprocess (this process decorated
the kernels for Triton's interpreter; the report runs Triton's compiler) for the first config of
each kernel's autotune list, fp16, D = 64 and 128, on sm_80 (A100) and sm_90 (H100).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mha_course import gpu_report

triton = pytest.importorskip("triton")


def test_occupancy_follows_the_register_shared_memory_and_warp_limits():
    h100 = gpu_report.TARGETS["sm_90"]
    # 255 registers -> 8192 per warp: one 8-warp block fills the 64 K register file
    assert gpu_report.occupancy(h100, 255, 48 * 1024, 8) == (8, 8 / 64)
    # 128 registers, 4 warps: 4 blocks by registers, 6 by shared memory (33 KiB each), 16 by warps
    assert gpu_report.occupancy(h100, 128, 32 * 1024, 4) == (16, 16 / 64)
    # shared memory binds: 100 KiB blocks, two fit in 228 KiB
    assert gpu_report.occupancy(h100, 32, 100 * 1024, 4) == (8, 8 / 64)
    a100 = gpu_report.TARGETS["sm_80"]
    assert gpu_report.occupancy(a100, 32, 100 * 1024, 4) == (4, 4 / 64)  # 164 KiB: one block


def test_tensor_core_instruction_is_read_from_the_ptx():
    assert gpu_report.tensor_core_instruction("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == "wgmma"
    assert gpu_report.tensor_core_instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == "mma.sync"
    assert gpu_report.tensor_core_instruction("fma.rn.f32 %f1, %f2, %f3, %f4;") == "none"


def test_signature_types_pointers_sizes_scalars_and_constexprs():
    from mha_course.kernels import forward

    types = gpu_report.signature(forward._flash_forward_kernel, "bfloat16")  # the plain function: any import state
    assert types["Q"] == types["O"] == "*bf16" and types["LSE"] == "*fp32"
    assert types["stride_qb"] == types["T"] == types["S"] == types["num_heads"] == "i32"
    assert types["qk_scale_log2"] == "fp32" and types["BLOCK_M"] == types["CAUSAL"] == "constexpr"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.gpu_report",
            "--arch",
            "sm_80",
            "sm_90",
            "--dtype",
            "float16",
            "--head-dim",
            "64",
            "128",
            "--configs",
            "first",
            "--json",
            str(path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(path.read_text()), proc.stdout


@pytest.mark.slow
def test_every_kernel_compiles_for_ampere_and_hopper(compiled):
    records, _ = compiled
    assert {(r["kernel"], r["arch"], r["head_dim"]) for r in records} == {
        (k, a, d) for k in ("forward", "dkdv", "dq") for a in ("sm_80", "sm_90") for d in (64, 128)
    }
    assert all(r["ok"] and r["registers"] > 0 and r["triton_version"] == triton.__version__ for r in records)


@pytest.mark.slow
def test_no_kernel_spills(compiled):
    records, table = compiled
    spilling = [(r["kernel"], r["arch"], r["head_dim"], r["spill_bytes"]) for r in records if r["spill_bytes"]]
    assert spilling == [], table


@pytest.mark.slow
def test_hopper_matmuls_use_wgmma_and_ampere_mma_sync(compiled):
    records, table = compiled
    assert {r["tensor_cores"] for r in records if r["arch"] == "sm_90"} == {"wgmma"}, table
    assert {r["tensor_cores"] for r in records if r["arch"] == "sm_80"} == {"mma.sync"}, table
