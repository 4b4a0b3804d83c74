"""Multi-head latent attention: the naive form against a per-head loop, the absorbed form and the
latent-cache decoder against the naive form, and the cache sizes."""

import math

import pytest
import torch

from mha_course import attention_loop_reference, causal_mask
from mha_course.core.positions import apply_rotary
from mha_course.inference.mla import (
    LatentCache,
    MultiHeadLatentAttention,
    cache_numbers_per_token,
    decode_cost_per_token,
)
from mha_course.testing import assert_close


def make(seed=0, **sizes):
    torch.manual_seed(seed)
    options = dict(embed_dim=24, num_heads=3, latent_dim=10, head_dim=6, rope_dim=4, value_dim=5) | sizes
    return MultiHeadLatentAttention(**options).double().eval()


def test_naive_form_against_per_head_attention_with_the_decoupled_rotary_part():
    mla = make()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    out, weights = mla(x, mask=causal_mask(7))
    latent = x @ mla.kv_down.weight.T  # (B, T, r)
    k_rope = apply_rotary(x @ mla.k_rope_proj.weight.T)  # (B, T, Dr), one for all heads
    heads = []
    for h in range(3):
        q = x @ mla.q_proj.weight[h * 6 : (h + 1) * 6].T
        q_rope = apply_rotary(x @ mla.q_rope_proj.weight[h * 4 : (h + 1) * 4].T)
        k = latent @ mla.k_up.weight[h * 6 : (h + 1) * 6].T
        v = latent @ mla.v_up.weight[h * 5 : (h + 1) * 5].T
        head, w = attention_loop_reference(
            torch.cat([q, q_rope], -1), torch.cat([k, k_rope], -1), v, mask=causal_mask(7), scale=1 / math.sqrt(6 + 4)
        )
        assert_close(weights[:, h], w)
        heads.append(head)
    assert_close(out, torch.cat(heads, -1) @ mla.out_proj.weight.T)


def test_absorbed_form_equals_the_naive_form():
    mla = make(1)
    x = torch.randn(3, 9, 24, dtype=torch.float64)
    for mask in (None, causal_mask(9)):
        out, weights = mla(x, mask=mask)
        out_a, weights_a = mla.forward_absorbed(x, mask=mask)
        assert_close(out_a, out)
        assert_close(weights_a, weights)


def test_decoding_from_the_latent_cache_equals_causal_attention():
    mla = make(2)
    x = torch.randn(2, 8, 24, dtype=torch.float64)
    full, _ = mla(x, mask=causal_mask(8))
    cache = LatentCache()
    steps = [mla.decode(x[:, t : t + 1], cache) for t in range(8)]
    assert_close(torch.cat(steps, 1), full)
    assert cache.nbytes() == 2 * 8 * (10 + 4) * 8  # B * S * (r + Dr) float64 numbers
    chunked = LatentCache()
    assert_close(torch.cat([mla.decode(x[:, :5], chunked), mla.decode(x[:, 5:], chunked)], 1), full)


def test_cache_numbers_per_token():
    H, D = 128, 128
    assert cache_numbers_per_token("mha", H, D) == 2 * 128 * 128
    assert cache_numbers_per_token("gqa", H, D, num_kv_heads=8) == 2 * 8 * 128
    assert cache_numbers_per_token("mqa", H, D) == 256
    assert cache_numbers_per_token("mla", H, D, latent_dim=512, rope_dim=64) == 576  # DeepSeek-V2


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="even"):
        MultiHeadLatentAttention(16, 2, 8, rope_dim=3)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadLatentAttention(10, 4, 8)
    with pytest.raises(TypeError, match="int"):
        MultiHeadLatentAttention(16, 2, 8.0)
    with pytest.raises(ValueError, match=r"\(B, T, E=24\)"):
        make()(torch.randn(1, 3, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="needs num_kv_heads"):
        cache_numbers_per_token("gqa", 4, 8)
    with pytest.raises(ValueError, match="kind must be"):
        cache_numbers_per_token("mlp", 4, 8)


def test_absorbed_mla_trades_bandwidth_for_flops_at_decode():
    mha = decode_cost_per_token("mha", 128, 128)
    mla = decode_cost_per_token("mla", 128, 128, latent_dim=512, rope_dim=64)
    assert mha["macs"] == 128 * 256 and mla["macs"] == 128 * 1088  # 2D against 2r + Dr per head
    assert mha["bytes"] == 2 * 128 * 128 * 2 and mla["bytes"] == (512 + 64) * 2
    assert mha["intensity"] == pytest.approx(1.0) and 200 < mla["intensity"] < 300  # H100's ridge is ~295
    gqa = decode_cost_per_token("gqa", 128, 128, num_kv_heads=8)
    assert gqa["intensity"] == pytest.approx(16.0)  # H / G
    # the count is the absorbed decoder's own work: 2r + Dr multiply-adds per head and cached latent
    m = make()
    assert decode_cost_per_token("mla", 3, 6, latent_dim=10, rope_dim=4)["macs"] == 3 * (2 * m.latent_dim + m.rope_dim)
    with pytest.raises(ValueError, match="latent_dim"):
        decode_cost_per_token("mla", 8, 16)
