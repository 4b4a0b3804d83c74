"""causal_align="bottom_right" (FlashAttention's convention when T != S) in tiled_attention and triton_attention.

Query i may attend key j iff j <= i + S - T: the T queries are the last T of S positions. The
float64 yardstick is the library's attention with ``causal_mask(T, S, diagonal=S - T)`` and its
hand-derived backward with the same mask; rows that see no key (T > S) are zeros there too.
"""

import pytest
import torch

import mha_course
from mha_course.testing import assert_close

# T < S (decoding a chunk against a longer cache), T > S (queries with no key), T == S; blocks that cut rows.
CASES = [(5, 37), (19, 70), (40, 23), (33, 33), (1, 9)]


def _inputs(T, S, D=16, Dv=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, n, d, generator=gen) for n, d in ((T, D), (S, D), (S, Dv))] + [
        torch.randn(2, 2, T, Dv, generator=gen)
    ]


def _expected(q, k, v, grad_out, diagonal):
    mask = mha_course.causal_mask(q.shape[-2], k.shape[-2], diagonal=diagonal)
    q, k, v, grad_out = (x.double() for x in (q, k, v, grad_out))
    out, _ = mha_course.scaled_dot_product_attention(q, k, v, mask=mask)
    return out, mha_course.attention_backward(q, k, v, grad_out, mask=mask)


def _run(fn, q, k, v, grad_out):
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad_out)
    return out.detach(), [x.grad for x in leaves]


def _attention(name):
    if name == "triton":
        pytest.importorskip("triton")
        return lambda q, k, v, **kw: mha_course.triton_attention(q, k, v, block_m=16, block_n=16, **kw)
    return lambda q, k, v, **kw: mha_course.tiled_attention(q, k, v, block_size=(8, 16), **kw)


@pytest.mark.parametrize("name", ["tiled", "triton"])
@pytest.mark.parametrize("T,S", CASES)
def test_bottom_right_matches_the_mask_with_diagonal_S_minus_T(name, T, S):
    q, k, v, grad_out = _inputs(T, S, seed=T * S)
    fn = _attention(name)
    out, grads = _run(lambda q, k, v: fn(q, k, v, causal=True, causal_align="bottom_right"), q, k, v, grad_out)
    expected, expected_grads = _expected(q, k, v, grad_out, diagonal=S - T)
    assert_close(out, expected.float(), what=f"{name} out T={T} S={S}")
    for x, g, e in zip("qkv", grads, expected_grads, strict=True):
        assert_close(g, e.float(), what=f"{name} d{x} T={T} S={S}")


@pytest.mark.parametrize("name", ["tiled", "triton"])
def test_top_left_is_the_default_and_rows_without_keys_have_lse_minus_inf(name):
    q, k, v, grad_out = _inputs(40, 23, seed=1)
    fn = _attention(name)
    top_left, _ = _expected(q, k, v, grad_out, diagonal=0)
    assert_close(fn(q, k, v, causal=True), top_left.float())
    assert_close(fn(q, k, v, causal=True, causal_align="top_left"), top_left.float())
    out, lse = fn(q, k, v, causal=True, causal_align="bottom_right", return_lse=True)
    assert torch.all(lse[..., :17] == -torch.inf) and torch.all(out[..., :17, :] == 0)
    assert torch.isfinite(lse[..., 17:]).all()


@pytest.mark.parametrize("name", ["tiled", "triton"])
def test_alignment_does_not_matter_without_causal_and_a_bad_name_is_rejected(name):
    q, k, v, grad_out = _inputs(5, 37, seed=2)
    fn = _attention(name)
    assert_close(fn(q, k, v, causal_align="bottom_right"), fn(q, k, v))
    with pytest.raises(ValueError, match="causal_align must be one of"):
        fn(q, k, v, causal=True, causal_align="bottom-right")
