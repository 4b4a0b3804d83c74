"""The roofline model: ridge points, which phase is bound by what, and what fewer K/V heads buy."""

from __future__ import annotations

import pytest

from mha_course.efficient import roofline

# The vendors' datasheets, written here from the documents (dense bf16 tensor-core TFLOP/s, memory TB/s),
# not read from the module: a typo in roofline.GPUS must disagree with them.
DATASHEETS = {"H100 SXM": (989.4, 3.35), "A100 SXM 80GB": (312.0, 2.039), "L4": (121.0, 0.300)}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_ridge_points_follow_the_datasheets(name):
    tflops, tbytes = DATASHEETS[name]
    gpu = roofline.GPUS[name]
    assert gpu.ridge == pytest.approx(tflops / tbytes, rel=1e-3), f"{name}: ridge {gpu.ridge:.1f} FLOPs/byte"
    # a phase's ridge is its GPU's
    assert roofline.decode_step(name, B=1, H=1, S=64, D=16).ridge == pytest.approx(tflops / tbytes, rel=1e-3)


def test_every_gpu_of_the_model_has_its_datasheet_here():
    assert sorted(roofline.GPUS) == sorted(DATASHEETS)


def test_long_prefill_is_compute_bound_and_its_time_is_flops_over_peak():
    p = roofline.prefill("H100 SXM", B=1, H=32, T=8192, D=128)
    assert p.bound == "compute" and p.intensity > p.ridge
    assert p.time_ms == pytest.approx(4 * 32 * 8192 * 8192 * 128 / 989.4e12 * 1e3)
    assert roofline.prefill("H100 SXM", B=1, H=32, T=8192, D=128, causal=True).time_ms == pytest.approx(p.time_ms / 2)


def test_a_decoding_step_is_memory_bound_at_about_one_flop_per_byte():
    d = roofline.decode_step("H100 SXM", B=8, H=32, S=4096, D=128)
    assert d.bound == "memory" and 0.9 < d.intensity < 1.01
    assert d.time_ms == pytest.approx(d.memory_ms) and d.memory_ms > 100 * d.compute_ms


def test_grouped_and_multi_query_attention_cut_decoding_time_by_the_kv_head_ratio():
    mha = roofline.decode_step("A100 SXM 80GB", B=8, H=32, S=8192, D=128)
    gqa = roofline.decode_step("A100 SXM 80GB", B=8, H=32, S=8192, D=128, num_kv_heads=8)
    mqa = roofline.decode_step("A100 SXM 80GB", B=8, H=32, S=8192, D=128, num_kv_heads=1)
    assert mha.time_ms / gqa.time_ms == pytest.approx(4, rel=0.01)
    assert mha.time_ms / mqa.time_ms == pytest.approx(32, rel=0.05)


@pytest.mark.parametrize(
    "bad,error", [(dict(T=0), ValueError), (dict(T=2.0), TypeError), (dict(gpu="TPU"), ValueError)]
)
def test_bad_input_is_refused(bad, error):
    args = dict(gpu="L4", B=1, H=2, T=16, D=8) | bad
    with pytest.raises(error):
        roofline.prefill(**args)


def test_materialised_prefill_stays_memory_bound_at_about_d_over_2_flops_per_byte():
    for T in (1024, 16384):
        naive = roofline.prefill("H100 SXM", B=1, H=32, T=T, D=128, fused=False)
        fused = roofline.prefill("H100 SXM", B=1, H=32, T=T, D=128)
        assert naive.bound == "memory" and naive.phase == "prefill, materialised"
        assert 50 < naive.intensity < 64 and naive.flops == fused.flops and naive.bytes > fused.bytes
    assert fused.bound == "compute" and fused.time_ms < naive.time_ms
    # causal halves a fused kernel's FLOPs (it skips the future's blocks), not a materialised one's
    assert roofline.prefill("L4", B=1, H=1, T=64, D=16, causal=True, fused=False).flops == 4 * 64 * 64 * 16


def test_grouped_query_decoding_intensity_is_the_query_heads_per_kv_head():
    for num_kv_heads in (32, 8, 1):
        d = roofline.decode_step("H100 SXM", B=4, H=32, S=8192, D=128, num_kv_heads=num_kv_heads)
        assert d.intensity == pytest.approx(32 / num_kv_heads, rel=0.01) and d.bound == "memory"


def test_k_and_v_reloaded_per_query_block_cap_the_intensity_near_block_m():
    ideal = roofline.prefill("H100 SXM", B=1, H=32, T=16384, D=128)
    reloads = roofline.prefill("H100 SXM", B=1, H=32, T=16384, D=128, block_m=128)
    # bytes: Q, O once; K, V 128 times (T / block_m passes): 2 * 2 * H * T * D * (1 + 128) elements
    assert reloads.bytes == 2 * 2 * 32 * 16384 * 128 * (1 + 128)
    assert reloads.flops == ideal.flops and ideal.intensity == pytest.approx(16384 / 2)
    assert 120 < reloads.intensity < 128 < reloads.ridge and reloads.bound == "memory"
    # the traffic grows as T^2 (Theta(N^2 d^2 / M)): doubling T quadruples the K/V reloads' bytes
    longer = roofline.prefill("H100 SXM", B=1, H=32, T=32768, D=128, block_m=128)
    assert longer.bytes / reloads.bytes == pytest.approx(4, rel=0.02)
    with pytest.raises(ValueError, match="fused"):
        roofline.prefill("L4", B=1, H=1, T=64, D=16, fused=False, block_m=16)
