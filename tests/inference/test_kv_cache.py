"""KV cache: cached decoding equals full causal recomputation (mha_course.inference.kv_cache)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import MultiHeadAttention, assert_close, attention_loop_reference, causal_mask
from mha_course import scaled_dot_product_attention as sdpa
from mha_course.inference.kv_cache import KVCache, decode_self_attention, decode_step
from mha_course.inference.variants import GroupedQueryAttention, repeat_kv


def decode_all(q, k, v, cache, chunks):
    """Feed positions to decode_step in chunks of the given sizes; return all outputs (B, H, N, D)."""
    outs, start = [], 0
    for size in chunks:
        sl = slice(start, start + size)
        outs.append(decode_step(q[:, :, sl], k[:, :, sl], v[:, :, sl], cache))
        start += size
    return torch.cat(outs, dim=2)


@pytest.mark.parametrize("max_len", [None, 12])
def test_token_by_token_equals_full_causal_attention(max_len):
    torch.manual_seed(0)
    B, H, N, D = 2, 3, 12, 8
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.float64) for _ in range(3))
    cache = KVCache(B, H, D, max_len=max_len, dtype=torch.float64)
    got = decode_all(q, k, v, cache, [1] * N)
    expected, _ = attention_loop_reference(q, k, v, mask=causal_mask(N))
    assert_close(got, expected, what="cached decoding vs float64 causal loops")
    assert len(cache) == N
    assert_close(cache.keys, k, what="cache keys")
    assert_close(cache.values, v, what="cache values")


def test_prompt_chunk_then_steps_uses_end_aligned_mask():
    torch.manual_seed(1)
    B, H, N, D = 1, 2, 10, 4
    q, k, v = (torch.randn(B, H, N, D) for _ in range(3))
    got = decode_all(q, k, v, KVCache(B, H, D), [4, 1, 3, 1, 1])  # a prompt of 4, then mixed chunks
    expected, _ = sdpa(q, k, v, mask=causal_mask(N))
    assert_close(got, expected, what="chunked decoding")


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3),
    G=st.integers(1, 3),
    R=st.integers(1, 3),
    N=st.integers(1, 9),
    D=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_grouped_query_cache_matches_repeated_heads(B, G, R, N, D, seed):
    gen = torch.Generator().manual_seed(seed)
    H = G * R
    q = torch.randn(B, H, N, D, generator=gen)
    k, v = torch.randn(B, G, N, D, generator=gen), torch.randn(B, G, N, D, generator=gen)
    cache = KVCache(B, G, D, max_len=N)
    got = decode_all(q, k, v, cache, [1] * N)
    expected, _ = sdpa(q, repeat_kv(k, H), repeat_kv(v, H), mask=causal_mask(N))
    assert_close(got, expected, what="GQA cached decoding")
    assert cache.nbytes() == 2 * B * G * N * D * 4


def test_cache_rejects_bad_input_and_overflow():
    cache = KVCache(2, 4, 8, max_len=2)
    with pytest.raises(ValueError, match=r"\(B=2, G=4, T, 8\)"):
        cache.append(torch.zeros(2, 4, 1, 7), torch.zeros(2, 4, 1, 8))
    with pytest.raises(ValueError, match="same number of positions"):
        cache.append(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 2, 8))
    cache.append(torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 2, 8))
    with pytest.raises(ValueError, match="full"):
        cache.append(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8))
    cache.reset()
    assert len(cache) == 0 and cache.keys.shape == (2, 4, 0, 8)
    with pytest.raises(ValueError, match="batch"):
        KVCache(0, 1, 1)
    with pytest.raises(ValueError, match="same new positions"):
        decode_step(torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8), cache)


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_decoding_a_module_equals_its_causal_forward(num_kv_heads):
    torch.manual_seed(2)
    E, H, N = 16, 4, 9
    module = MultiHeadAttention(E, H) if num_kv_heads is None else GroupedQueryAttention(E, H, num_kv_heads)
    module.eval()
    x = torch.randn(2, N, E)
    with torch.no_grad():
        full = module(x, mask=causal_mask(N))[0]
        cached = decode_self_attention(module, x, use_cache=True)
        preallocated = decode_self_attention(module, x, use_cache=True, max_len=N)
        recomputed = decode_self_attention(module, x, use_cache=False)
    for name, got in (("cached", cached), ("preallocated", preallocated), ("recomputed", recomputed)):
        assert_close(got, full, what=name)


def test_decoding_respects_head_gate():
    torch.manual_seed(3)
    mha = MultiHeadAttention(8, 2).eval()
    mha.head_gate[1] = 0.0
    x = torch.randn(1, 5, 8)
    with torch.no_grad():
        assert_close(decode_self_attention(mha, x), mha(x, mask=causal_mask(5))[0], what="gated heads")
