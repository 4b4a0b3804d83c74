"""FLOP and memory accounting, the timing helper and the peak-memory measurement (mha_course.efficient.cost)."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mha_course import causal_mask, scaled_dot_product_attention
from mha_course.efficient import cost
from mha_course.efficient.cost import (
    attention_flops,
    attention_memory_bytes,
    cpu_peak_memory_supported,
    loglog_slope,
    peak_memory_mib,
    time_ms,
)


@pytest.mark.parametrize("B,H,T,S,D", [(1, 1, 8, 8, 4), (2, 3, 16, 24, 8), (1, 8, 64, 32, 16)])
def test_flops_match_torch_flop_counter(B, H, T, S, D):
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    with FlopCounterMode(display=False) as counter:
        scaled_dot_product_attention(q, k, v)  # two matmuls; softmax is not counted by either side
    assert counter.get_total_flops() == attention_flops(B, H, T, D, S=S)
    assert attention_flops(B, H, T, D) == 4 * B * H * T * T * D


def test_causal_flops_are_half_and_bad_sizes_raise():
    assert attention_flops(2, 4, 128, 64, causal=True) == attention_flops(2, 4, 128, 64) / 2
    with pytest.raises(ValueError, match="T"):
        attention_flops(1, 1, -3, 8)
    with pytest.raises(TypeError, match="D must be an int, got float 2.5"):
        attention_flops(1, 1, 3, 2.5)


def test_memory_bytes_match_real_tensors():
    B, H, T, S, D = 2, 3, 10, 7, 4
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    out, weights = scaled_dot_product_attention(q, k, v)
    mem = attention_memory_bytes(B, H, T, D, S=S, dtype=torch.float32)
    assert mem["weights"] == weights.numel() * weights.element_size()
    assert mem["output"] == out.numel() * out.element_size()
    assert mem["inputs"] == sum(x.numel() * x.element_size() for x in (q, k, v))
    half = attention_memory_bytes(B, H, T, D, S=S, dtype=torch.float16)
    assert half["weights"] * 2 == mem["weights"]
    # the original notes' "attention is expensive": one fp32 (T, T) matrix at T = 16k is 1 GiB per head
    assert attention_memory_bytes(1, 1, 16384, 64)["weights"] == 2**30


def test_time_ms_returns_the_median_after_warmup(monkeypatch):
    # A clock that each call moves on by its own duration: the figures are exact on any machine, however busy
    # (real sleeps of 1 and 2 ms overshoot by tens of ms on a loaded one).
    now = [0.0]
    monkeypatch.setattr(cost, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    durations = iter([0.2, 0.001, 0.3, 0.002])  # seconds; the first call is the warm-up
    calls = []

    def fn():
        calls.append(1)
        now[0] += next(durations)

    ms = time_ms(fn, repeats=3, warmup=1)
    assert len(calls) == 4
    assert ms == pytest.approx(2.0)  # median of 1, 300, 2 ms (the mean would be 101); the warm-up's 200 is ignored
    with pytest.raises(ValueError, match="repeats"):
        time_ms(fn, repeats=0)


def test_loglog_slope_recovers_exponents():
    xs = [128, 256, 512, 1024]
    assert loglog_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert loglog_slope(xs, [0.5 * x**1.5 for x in xs]) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        loglog_slope([1], [1])
    with pytest.raises(ValueError):
        loglog_slope([1, 2], [0, 1])


needs_rss = pytest.mark.skipif(not cpu_peak_memory_supported(), reason="needs Linux /proc/self/clear_refs")


@needs_rss
def test_peak_memory_sees_a_freed_temporary():
    def fn():
        x = torch.ones(16 * 2**20)  # 64 MiB, touched, then freed
        return float(x[-1])

    fn()
    big = torch.ones(48 * 2**20)  # 192 MiB, touched and freed: raises the process's all-time peak
    del big
    peak = peak_memory_mib(fn, repeats=3)  # so this is right only if the peak is reset before each call
    assert 60 < peak < 80, peak  # the smallest of 3: another thread's pages only add to a reading
    assert peak_memory_mib(lambda: None, repeats=3) < 2


@needs_rss
def test_peak_memory_repeats_returns_the_smallest_reading():
    sizes = iter([8, 2, 4])  # MiB a call allocates, touches and frees: the second reading is the smallest

    def fn():
        x = torch.ones(next(sizes) * 2**18)
        return float(x[-1])

    peak = peak_memory_mib(fn, repeats=3)
    assert 1.5 < peak < 3.5, peak
    with pytest.raises(ValueError, match="repeats >= 1, got repeats=0"):
        peak_memory_mib(fn, repeats=0)
    with pytest.raises(TypeError, match="repeats must be an int, got float 2.0"):
        peak_memory_mib(fn, repeats=2.0)


@needs_rss
def test_naive_attention_memory_grows_quadratically():
    peaks = []
    for T in (512, 1024):
        q = torch.randn(1, 4, T, 32)
        fn = lambda q=q, T=T: scaled_dot_product_attention(q, q, q, mask=causal_mask(T))
        fn()
        peaks.append(peak_memory_mib(fn, repeats=3))  # one reading can hold another thread's pages
    weights_mib = attention_memory_bytes(1, 4, 1024, 32)["weights"] / 2**20
    assert peaks[1] >= weights_mib  # at least the (B, H, T, S) weights it returns
    assert 3.0 < peaks[1] / peaks[0] < 5.0, peaks
    assert math.isfinite(loglog_slope([512, 1024], peaks))
