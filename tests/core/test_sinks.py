"""Attention sinks: the streaming mask against a loop, and a streaming cache that decodes exactly
like attention with that mask while holding at most sinks + window entries."""

import pytest
import torch

from mha_course import attention_loop_reference, scaled_dot_product_attention
from mha_course.sinks import StreamingKVCache, sink_mass, streaming_mask
from mha_course.testing import assert_close


@pytest.mark.parametrize("T, S, window, sinks", [(6, 6, 2, 1), (7, 7, 3, 0), (3, 9, 4, 2), (5, 5, 10, 4)])
def test_streaming_mask_against_a_loop(T, S, window, sinks):
    mask = streaming_mask(T, window, sinks, S)
    for i in range(T):
        p = i + S - T
        for j in range(S):
            assert bool(mask[i, j]) == (j <= p and (p - j < window or j < sinks)), (i, j)


def test_streaming_cache_decodes_like_the_masked_attention():
    torch.manual_seed(0)
    B, H, G, N, D, window, sinks = 2, 4, 2, 13, 8, 4, 2
    q = torch.randn(B, H, N, D, dtype=torch.float64)
    k, v = torch.randn(B, G, N, D, dtype=torch.float64), torch.randn(B, G, N, D, dtype=torch.float64)
    expected, _ = attention_loop_reference(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask=streaming_mask(N, window, sinks)
    )
    cache = StreamingKVCache(window, sinks)
    outs = []
    for t in range(N):
        keys, values = cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert len(cache) <= sinks + window
        assert cache.positions.tolist() == sorted(
            set(range(min(sinks, t + 1))) | set(range(max(0, t - window + 1), t + 1))
        )
        outs.append(
            scaled_dot_product_attention(
                q[:, :, t : t + 1], keys.repeat_interleave(2, 1), values.repeat_interleave(2, 1)
            )[0]
        )
    assert_close(torch.cat(outs, dim=2), expected)
    assert "kept=6" in repr(cache) and cache.seen == N


def test_sink_mass_reads_the_first_keys():
    w = torch.zeros(2, 3, 4, 5, 5)  # (L, B, H, T, S)
    w[..., 0] = 0.25
    w[..., 1] = 0.75
    assert_close(sink_mass(w), torch.full((2, 3, 4), 0.25))
    assert_close(sink_mass(w, sinks=2, skip=1), torch.ones(2, 3, 4))


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="positive"):
        streaming_mask(4, 0)
    with pytest.raises(ValueError, match="S must be >= T"):
        streaming_mask(5, 2, 1, S=3)
    with pytest.raises(ValueError, match=r"\(..., H, T, S\)"):
        sink_mass(torch.ones(4, 4))
    with pytest.raises(ValueError, match="leaves no query"):
        sink_mass(torch.ones(2, 3, 3), skip=3)
    cache = StreamingKVCache(3, 1)
    with pytest.raises(ValueError, match="empty"):
        _ = cache.keys
    with pytest.raises(ValueError, match=r"\(B, G, T, D\)"):
        cache.append(torch.ones(2, 3, 4), torch.ones(2, 3, 4))
    cache.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    with pytest.raises(ValueError, match="match the cache"):
        cache.append(torch.ones(1, 3, 1, 4), torch.ones(1, 3, 1, 4))
    with pytest.raises(TypeError, match="int"):
        StreamingKVCache(2.5)


def test_a_model_runs_under_a_streaming_mask_and_a_full_window_changes_nothing():
    from mha_course.model import TinyTransformer

    torch.manual_seed(3)
    model = TinyTransformer(12, 10, embed_dim=16, num_heads=2, num_layers=2, positions="rotary", causal=True).eval()
    tokens = torch.randint(12, (2, 10))
    with torch.no_grad():
        logits, _ = model(tokens)
        assert_close(model(tokens, mask=streaming_mask(10, 10))[0], logits)
        windowed, weights = model(tokens, mask=streaming_mask(10, 3, sinks=1))
    assert not torch.allclose(windowed, logits)
    assert float(weights[..., 9, 1:7].abs().max()) == 0.0  # query 9 sees <s> and keys 7..9 only
