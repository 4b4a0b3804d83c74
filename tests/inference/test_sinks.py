"""Attention sinks: the streaming mask against a loop, and a streaming cache that decodes exactly
like attention with that mask while holding at most sinks + window entries."""

import pytest
import torch

from mha_course import attention_loop_reference, scaled_dot_product_attention
from mha_course.inference.sinks import (
    StreamingKVCache,
    attention_with_sink_logits,
    sink_mass,
    streaming_decode,
    streaming_mask,
)
from mha_course.testing import assert_close


@pytest.mark.parametrize("T, S, window, sinks", [(6, 6, 2, 1), (7, 7, 3, 0), (3, 9, 4, 2), (5, 5, 10, 4), (4, 4, 0, 1)])
def test_streaming_mask_against_a_loop(T, S, window, sinks):
    mask = streaming_mask(T, window, sinks, S)
    for i in range(T):
        p = i + S - T
        for j in range(S):
            assert bool(mask[i, j]) == (j <= p and (p - j <= window or j < sinks)), (i, j)


def test_a_window_means_what_it_means_in_sliding_window_mask_and_flex():
    from mha_course.inference.flex import mask_from_mod, sliding_window_mod
    from mha_course.inference.variants import sliding_window_mask

    for window in (0, 3, 8):
        mask = streaming_mask(20, window)
        assert torch.equal(mask, sliding_window_mask(20, window, causal=True))
        assert torch.equal(mask, mask_from_mod(sliding_window_mod(window), 1, 1, 20, 20)[0, 0])
        assert int(mask[-1].sum()) == window + 1  # the query's own key and `window` before it


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
        assert len(cache) <= sinks + window + 1
        assert cache.positions.tolist() == sorted(set(range(min(sinks, t + 1))) | set(range(max(0, t - window), t + 1)))
        assert cache.slots.tolist() == list(range(len(cache)))
        outs.append(
            scaled_dot_product_attention(
                q[:, :, t : t + 1], keys.repeat_interleave(2, 1), values.repeat_interleave(2, 1)
            )[0]
        )
    assert_close(torch.cat(outs, dim=2), expected)
    assert "kept=7" in repr(cache) and cache.seen == N


def test_sink_mass_reads_the_first_keys():
    w = torch.zeros(2, 3, 4, 5, 5)  # (L, B, H, T, S)
    w[..., 0] = 0.25
    w[..., 1] = 0.75
    assert_close(sink_mass(w), torch.full((2, 3, 4), 0.25))
    assert_close(sink_mass(w, sinks=2, skip=1), torch.ones(2, 3, 4))


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="window"):
        streaming_mask(4, -1)
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
    from mha_course.models.model import TinyTransformer

    torch.manual_seed(3)
    model = TinyTransformer(12, 10, embed_dim=16, num_heads=2, num_layers=2, positions="rotary", causal=True).eval()
    tokens = torch.randint(12, (2, 10))
    with torch.no_grad():
        logits, _ = model(tokens)
        assert_close(model(tokens, mask=streaming_mask(10, 10))[0], logits)
        windowed, weights = model(tokens, mask=streaming_mask(10, 3, sinks=1))
    assert not torch.allclose(windowed, logits)
    assert float(weights[..., 9, 1:6].abs().max()) == 0.0  # query 9 sees <s> and keys 6..9 only (window 3)


def _rotary_model():
    from mha_course.models.model import TinyTransformer

    torch.manual_seed(4)
    return TinyTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=2, positions="rotary", causal=True).eval()


def test_streaming_decode_with_text_positions_equals_the_model_under_the_streaming_mask():
    model, tokens = _rotary_model(), torch.randint(12, (3, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model(tokens, mask=streaming_mask(16, 4, sinks=2))[0]
        full = model(tokens)[0]
    assert_close(streaming_decode(model, tokens, 4, 2, reindex=False), expected)
    # a window that holds everything is ordinary causal decoding, whatever the numbering
    assert_close(streaming_decode(model, tokens, 15, 0, reindex=True), full)
    assert_close(streaming_decode(model, tokens, 15, 1, reindex=False), full)


def test_reindexing_changes_only_the_offsets_to_the_sinks():
    model = _rotary_model()
    tokens = torch.randint(12, (2, 40), generator=torch.Generator().manual_seed(6))  # longer than max_len 16
    text, slots = (streaming_decode(model, tokens, 5, 1, reindex=r) for r in (False, True))
    # until the first eviction (t <= sinks + window) text positions and slots coincide
    assert_close(text[:, :7], slots[:, :7])
    assert float((text[:, 7:] - slots[:, 7:]).abs().max()) > 1e-4
    # without sinks the window is contiguous: offsets agree, so the two numberings give the same logits
    assert_close(*(streaming_decode(model, tokens, 5, 0, reindex=r) for r in (False, True)))


def test_streaming_decode_refuses_models_without_rotary_attention():
    from mha_course.models.model import TinyTransformer

    learned = TinyTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=1, positions="learned", causal=True)
    with pytest.raises(TypeError, match="rotary"):
        streaming_decode(learned, torch.zeros(1, 4, dtype=torch.long), 2, 1, reindex=True)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        streaming_decode(_rotary_model(), torch.zeros(4, dtype=torch.long), 2, 1, reindex=True)


def test_learned_sink_logits_equal_an_extra_key_with_a_zero_value():
    torch.manual_seed(7)
    B, H, T, D = 2, 3, 5, 4
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(3))
    sink = torch.tensor([-1.0, 0.5, 3.0], dtype=torch.float64)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    out, weights = attention_with_sink_logits(q, k, v, sink, mask=mask)
    # the reference: one more key whose score is the sink logit (a key equal to q * b / |q|^2 * sqrt(D)) and value 0
    extra_k = (
        q * (sink[None, :, None] * D**0.5 / (q * q).sum(-1))[..., None]
    )  # (B, H, T, D): score b_h with its own query
    scores = torch.cat([(q * extra_k).sum(-1, keepdim=True), q @ k.transpose(-2, -1)], dim=-1) / D**0.5
    scores[..., 1:] = scores[..., 1:].masked_fill(~mask, float("-inf"))
    ref_weights = torch.softmax(scores, dim=-1)[..., 1:]
    assert_close(weights, ref_weights)
    assert_close(out, ref_weights @ v)
    assert (weights.sum(-1) < 1).all() and float(weights[:, 2].sum(-1).max()) < 0.5  # a large logit takes most
    plain, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    out_far, _ = attention_with_sink_logits(q, k, v, torch.full((H,), -1e4, dtype=torch.float64), mask=mask)
    assert_close(out_far, plain)  # a sink logit of -inf is ordinary attention
    with pytest.raises(ValueError, match=r"\(H,\)"):
        attention_with_sink_logits(q, k, v, torch.zeros(2, dtype=torch.float64))
