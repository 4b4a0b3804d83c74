"""Masks: causal (T != S, diagonal), padding (bounds), and the adapters to torch's True=blocked convention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.masks import (
    causal_mask,
    from_key_padding_mask,
    from_torch_attn_mask,
    invert_bool_mask,
    mask_to_bias,
    padding_mask,
    to_key_padding_mask,
    to_torch_attn_mask,
)
from mha_course.testing import assert_close

FAST = settings(max_examples=30, deadline=None, derandomize=True)


@FAST
@given(T=st.integers(0, 7), S=st.one_of(st.none(), st.integers(0, 7)), diagonal=st.integers(-8, 8))
def test_causal_mask_is_lower_triangle(T, S, diagonal):
    mask = causal_mask(T, S, diagonal=diagonal)
    S_ = T if S is None else S
    assert mask.dtype == torch.bool and mask.shape == (T, S_)
    for i in range(T):
        for j in range(S_):
            assert bool(mask[i, j]) == (j <= i + diagonal), (i, j)


def test_causal_mask_default_diagonal_examples():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # top-left aligned when T != S: query 0 sees key 0 only
    assert torch.equal(causal_mask(2, 4), torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(causal_mask(3, 2), torch.tensor([[1, 0], [1, 1], [1, 1]], dtype=torch.bool))


@pytest.mark.parametrize("T,S", [(2, 5), (5, 2), (4, 4), (1, 3)])
def test_causal_mask_matches_torch_is_causal(T, S):
    gen = torch.Generator().manual_seed(T * 10 + S)
    q, k, v = (
        torch.randn(2, T, 3, generator=gen),
        torch.randn(2, S, 3, generator=gen),
        torch.randn(2, S, 4, generator=gen),
    )
    out, _ = sdpa(q, k, v, mask=causal_mask(T, S))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_mask_for_decoding_with_a_cache():
    """The last T of S positions: diagonal = S - T lets the last query see every key."""
    mask = causal_mask(2, 5, diagonal=3)
    assert torch.equal(mask, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))
    assert torch.equal(causal_mask(5)[-2:], mask)


@pytest.mark.parametrize("bad", [2.0, "3", None, True])
def test_causal_mask_non_int_raises(bad):
    with pytest.raises(TypeError, match="int"):
        causal_mask(bad)
    with pytest.raises(TypeError, match="int"):
        causal_mask(3, bad if bad is not None else 2.5)


def test_causal_mask_negative_raises():
    with pytest.raises(ValueError, match="T=-1"):
        causal_mask(-1)
    with pytest.raises(ValueError, match="S=-2"):
        causal_mask(3, -2)


@FAST
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=4), extra=st.integers(0, 3))
def test_padding_mask_marks_real_tokens(lengths, extra):
    S = max(lengths) + extra
    mask = padding_mask(lengths, S)
    assert mask.dtype == torch.bool and mask.shape == (len(lengths), 1, 1, S)
    for b, n in enumerate(lengths):
        assert mask[b, 0, 0].tolist() == [True] * n + [False] * (S - n)
    assert torch.equal(padding_mask(torch.tensor(lengths), S), mask)


def test_padding_mask_ignores_padded_keys_in_attention():
    """Padding keys, whatever they hold, do not change the output of the real ones."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, generator=gen)
    k, v = torch.randn(2, 5, 4, generator=gen), torch.randn(2, 5, 2, generator=gen)
    mask = padding_mask([3, 5], 5)[:, 0]  # (B, 1, S)
    out, _ = sdpa(q, k, v, mask=mask)
    expected0, _ = sdpa(q[:1], k[:1, :3], v[:1, :3])
    assert_close(out[:1], expected0)
    k2, v2 = k.clone(), v.clone()
    k2[0, 3:] = 100.0
    v2[0, 3:] = -100.0
    assert_close(sdpa(q, k2, v2, mask=mask)[0], out)


def test_padding_mask_bounds_and_types():
    assert padding_mask([0, 4], 4)[0].sum() == 0  # empty and full sequences are fine
    assert padding_mask([], 3).shape == (0, 1, 1, 3)
    with pytest.raises(ValueError, match=r"\[0, S=4\].*\[2, 5\]"):
        padding_mask([2, 5], 4)
    with pytest.raises(ValueError, match=r"\[0, S=4\].*\[-1, 2\]"):
        padding_mask([-1, 2], 4)
    with pytest.raises(TypeError, match="float"):
        padding_mask([1.5, 2.0], 4)
    with pytest.raises(TypeError, match="bool"):
        padding_mask([True, False], 4)
    with pytest.raises(ValueError, match=r"\(B,\).*\(2, 2\)"):
        padding_mask([[1, 2], [3, 4]], 4)
    with pytest.raises(TypeError, match="S must be an int"):
        padding_mask([1, 2], 4.0)


def test_attn_mask_adapters_invert_bool_and_keep_float():
    mask = causal_mask(3, 4)
    theirs = to_torch_attn_mask(mask)
    assert torch.equal(theirs, ~mask)
    assert torch.equal(from_torch_attn_mask(theirs), mask)
    bias = torch.randn(3, 4)
    assert to_torch_attn_mask(bias) is bias or torch.equal(to_torch_attn_mask(bias), bias)
    assert torch.equal(from_torch_attn_mask(bias), bias)
    assert torch.equal(invert_bool_mask(mask), ~mask)
    with pytest.raises(TypeError, match="float32"):
        invert_bool_mask(bias)


def test_converted_attn_mask_means_the_same_to_torch_mha():
    """Our True=attend mask and torch's True=blocked attn_mask give the same attention."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)
    mask = causal_mask(4)
    _, w_theirs = mha(x, x, x, attn_mask=to_torch_attn_mask(mask), average_attn_weights=False)
    assert bool((w_theirs[..., ~mask] == 0).all())
    assert bool((w_theirs[..., mask] > 0).all())


def test_key_padding_adapters():
    mask = padding_mask([2, 4, 1], 4)  # (B, 1, 1, S)
    kpm = to_key_padding_mask(mask)
    assert kpm.shape == (3, 4) and kpm.dtype == torch.bool
    assert kpm.tolist() == [[False, False, True, True], [False] * 4, [False, True, True, True]]
    assert torch.equal(to_key_padding_mask(mask[:, 0, 0]), kpm)
    assert torch.equal(from_key_padding_mask(kpm), mask)
    with pytest.raises(ValueError, match=r"\(B, S\).*\(3, 1, 4\)"):
        to_key_padding_mask(mask[:, 0])
    with pytest.raises(TypeError, match="bool"):
        to_key_padding_mask(mask.float())
    with pytest.raises(ValueError, match=r"\(B, S\).*\(3, 1, 1, 4\)"):
        from_key_padding_mask(mask)
    with pytest.raises(TypeError, match="bool"):
        from_key_padding_mask(kpm.float())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_mask_to_bias(dtype):
    mask = causal_mask(3)
    bias = mask_to_bias(mask, dtype)
    assert bias.dtype == dtype
    assert bool((bias[mask] == 0).all()) and bool(torch.isneginf(bias[~mask]).all())
    floats = torch.randn(3, 3, dtype=torch.float64)
    assert torch.equal(mask_to_bias(floats, dtype), floats.to(dtype))
    assert mask_to_bias(None, dtype) is None
