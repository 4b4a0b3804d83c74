"""Grouped-query, sliding-window and low-rank attention (mha_course.inference.variants)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import MultiHeadAttention, assert_close, attention_loop_reference, causal_mask
from mha_course import scaled_dot_product_attention as sdpa
from mha_course.inference.variants import (
    GroupedQueryAttention,
    grouped_query_attention,
    kv_cache_bytes,
    linformer_attention,
    linformer_projections,
    repeat_kv,
    sliding_window_attention,
    sliding_window_mask,
)


def test_repeat_kv_pairs_query_head_h_with_kv_head_h_over_r():
    kv = torch.arange(3.0).reshape(1, 3, 1, 1).expand(1, 3, 2, 1)  # head g holds the value g
    rep = repeat_kv(kv, 6)
    assert rep.shape == (1, 6, 2, 1)
    assert rep[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="multiple"):
        repeat_kv(kv, 4)


@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "full"])
@pytest.mark.parametrize("G", [1, 2, 4])
def test_gqa_equals_attention_on_repeated_heads(G, mask_kind):
    torch.manual_seed(0)
    B, H, T, S, D = 2, 4, 5, 7, 3
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(B, G, S, D), torch.randn(B, G, S, D + 1)
    mask = {
        None: None,
        "causal": causal_mask(T, S),
        "padding": torch.tensor([S, 3])[:, None, None, None] > torch.arange(S),
        "full": torch.rand(B, H, T, S) > 0.4,
    }[mask_kind]
    out, weights = grouped_query_attention(q, k, v, mask=mask)
    exp_out, exp_w = attention_loop_reference(q, repeat_kv(k, H), repeat_kv(v, H), mask=mask)
    assert_close(out, exp_out.float(), what="GQA output")
    assert_close(weights, exp_w.float(), what="GQA weights")


def test_gqa_rejects_bad_groups():
    with pytest.raises(ValueError, match="dividing H"):
        grouped_query_attention(torch.randn(1, 4, 2, 3), torch.randn(1, 3, 2, 3), torch.randn(1, 3, 2, 3))
    with pytest.raises(ValueError, match=r"\(B, G, S, D\)"):
        grouped_query_attention(torch.randn(1, 4, 2, 3), torch.randn(3, 2, 3), torch.randn(1, 3, 2, 3))


def test_kv_cache_bytes_and_mha_conversion():
    assert kv_cache_bytes(1, 8, 4096, 128, torch.float16, num_layers=32) == 2 * 32 * 8 * 4096 * 128 * 2
    assert kv_cache_bytes(1, 32, 10, 4, torch.float32) == 32 * kv_cache_bytes(1, 1, 10, 4, torch.float32)
    torch.manual_seed(1)
    mha = MultiHeadAttention(12, 4).eval()
    x = torch.randn(2, 6, 12)
    with torch.no_grad():
        same = GroupedQueryAttention.from_mha(mha, 4)(x, mask=causal_mask(6))[0]
        assert_close(same, mha(x, mask=causal_mask(6))[0], what="G = H conversion")
        pooled = GroupedQueryAttention.from_mha(mha, 2)
        assert pooled.k_proj.weight.shape == (6, 12)
        assert_close(
            pooled.k_proj.weight[:3],
            (mha.k_proj.weight[:3] + mha.k_proj.weight[3:6]) / 2,
            what="mean-pooled first key head",
        )


def test_sliding_window_mask_is_a_band():
    m = sliding_window_mask(6, 1)
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    assert torch.equal(m, (i - j).abs() <= 1)
    assert torch.equal(sliding_window_mask(6, 2, causal=True), ((i - j) >= 0) & ((i - j) <= 2))
    assert torch.equal(sliding_window_mask(5, 10, causal=True), causal_mask(5))


@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 70), window=st.integers(0, 40), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_banded_equals_masked_reference(T, window, causal, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, T, 4, generator=gen) for _ in range(3))
    got = sliding_window_attention(q, k, v, window, causal=causal)
    expected = sliding_window_attention(q, k, v, window, causal=causal, method="mask")
    assert_close(got, expected, what=f"banded T={T} w={window} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_banded_equals_float64_loops(causal):
    torch.manual_seed(5)
    q, k, v = (torch.randn(1, 1, 19, 3, dtype=torch.float64) for _ in range(3))
    got = sliding_window_attention(q, k, v, 3, causal=causal)
    expected, _ = attention_loop_reference(q, k, v, mask=sliding_window_mask(19, 3, causal=causal))
    assert_close(got, expected, what="banded vs float64 loops")


def test_sliding_window_limits():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 33, 8) for _ in range(3))
    assert_close(sliding_window_attention(q, k, v, 0), v, what="window 0 sees only itself")
    assert_close(sliding_window_attention(q, k, v, 40), sdpa(q, k, v)[0], what="window >= T is full attention")
    assert_close(
        sliding_window_attention(q, k, v, 40, causal=True),
        sdpa(q, k, v, mask=causal_mask(33))[0],
        what="causal window >= T is causal attention",
    )
    with pytest.raises(ValueError, match="S == T"):
        sliding_window_attention(q, k[:, :, :5], v[:, :, :5], 3)
    with pytest.raises(ValueError, match="method"):
        sliding_window_attention(q, k, v, 3, method="fast")


def test_linformer_is_attention_over_projected_keys():
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 3, 10, 4), torch.randn(2, 3, 16, 4), torch.randn(2, 3, 16, 5)
    E, F = linformer_projections(16, 4, generator=torch.Generator().manual_seed(0))
    assert E.shape == F.shape == (4, 16) and not torch.equal(E, F)
    out, weights = linformer_attention(q, k, v, E, F)
    assert out.shape == (2, 3, 10, 5) and weights.shape == (2, 3, 10, 4)
    exp_out, exp_w = attention_loop_reference(q, E @ k, F @ v)
    assert_close(out, exp_out.float(), what="Linformer output")
    # pooling with r = S is the identity: exact full attention
    P, _ = linformer_projections(16, 16, kind="pool")
    assert torch.equal(P, torch.eye(16))
    assert_close(linformer_attention(q, k, v, P, P)[0], sdpa(q, k, v)[0], what="rank S pooling")
    with pytest.raises(ValueError, match=r"\(r, S=16\)"):
        linformer_attention(q, k, v, E[:, :8], F)
    with pytest.raises(ValueError, match="rank"):
        linformer_projections(16, 0)


def test_pooled_linformer_error_falls_with_rank_on_smooth_keys():
    torch.manual_seed(4)
    S, D = 256, 16
    pos = torch.linspace(0, 1, S)[:, None]
    freqs = torch.arange(1, D + 1)[None, :] * 0.5
    k = torch.sin(2 * torch.pi * pos * freqs)[None, None]  # (1, 1, S, D), varies slowly along S
    v = torch.cos(2 * torch.pi * pos * freqs)[None, None]
    q = torch.randn(1, 1, 32, D)
    full = sdpa(q, k, v)[0]
    errors = []
    for r in (4, 16, 64):
        E, F = linformer_projections(S, r, kind="pool")
        errors.append(float((linformer_attention(q, k, v, E, F)[0] - full).abs().mean()))
    assert errors[0] > errors[1] > errors[2], errors


def test_interleaved_local_and_global_layers_cache_the_window_in_local_layers():
    from mha_course.inference.variants import interleaved_kv_cache_numbers

    per_position = 2 * 8 * 128
    assert interleaved_kv_cache_numbers(10_000, 6, 0, 1023, 8, 128) == 6 * 10_000 * per_position  # all global
    assert interleaved_kv_cache_numbers(10_000, 6, None, 1023, 8, 128) == 6 * 1024 * per_position  # all local
    assert interleaved_kv_cache_numbers(10_000, 6, 5, 1023, 8, 128) == (5 * 1024 + 10_000) * per_position
    assert interleaved_kv_cache_numbers(100, 6, 5, 1023, 8, 128) == 6 * 100 * per_position  # short: all keep T
    assert interleaved_kv_cache_numbers(64, 4, 1, 7, 1, 1) == 2 * (2 * 8 + 2 * 64)  # Gemma 2's 1 : 1
    with pytest.raises(ValueError, match="window"):
        interleaved_kv_cache_numbers(64, 4, 1, -1, 1, 1)
