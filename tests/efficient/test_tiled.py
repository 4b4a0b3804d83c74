"""tiled_attention and the online softmax: against torch's SDPA, the float64 loop reference, by
properties, on awkward shapes, and for memory."""

import math
import os
import threading

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.masks import causal_mask
from mha_course.core.reference import attention_loop_reference
from mha_course.core.softmax import softmax
from mha_course.efficient import cost
from mha_course.efficient.online_softmax import online_softmax, online_softmax_attention, online_softmax_update
from mha_course.efficient.tiled import forward as tiled_module
from mha_course.efficient.tiled import plan as tiling
from mha_course.efficient.tiled import workers as worker_pool
from mha_course.efficient.tiled.forward import tiled_attention
from mha_course.testing import assert_close

FAST = settings(max_examples=40, deadline=None, derandomize=True)


def make_qkv(lead, T, S, D, Dv, dtype=torch.float64, seed=0, q_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, T, D, generator=gen, dtype=torch.float64) * q_scale
    k = torch.randn(*lead, S, D, generator=gen, dtype=torch.float64)
    v = torch.randn(*lead, S, Dv, generator=gen, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def torch_reference(q, k, v, causal, scale=None):
    """torch's SDPA in float64 (is_causal is top-left aligned, like the course's causal_mask)."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)


# The held-back awkward shapes: T not a multiple of the block, T != S both ways, block 1, oblong
# blocks, blocks larger than T, causal.
AWKWARD = [
    # (T, S, D, Dv, block_size, causal)
    (37, 37, 8, 8, 16, False),
    (37, 37, 8, 8, 16, True),
    (17, 45, 4, 6, 8, True),
    (45, 17, 4, 6, 8, True),
    (13, 29, 5, 3, 1, False),
    (13, 29, 5, 3, 1, True),
    (29, 13, 5, 3, (3, 7), True),
    (20, 31, 8, 8, (64, 5), False),
    (1, 9, 8, 8, 4, True),
    (9, 1, 8, 8, 4, True),
    (64, 64, 16, 16, None, True),
]


@pytest.mark.parametrize("T,S,D,Dv,block_size,causal", AWKWARD)
def test_awkward_shapes_match_torch_in_float64(T, S, D, Dv, block_size, causal):
    q, k, v = make_qkv((2, 3), T, S, D, Dv, seed=T * 100 + S)
    out = tiled_attention(q, k, v, block_size, causal=causal)
    assert out.dtype == torch.float64 and out.shape == (2, 3, T, Dv)
    assert_close(out, torch_reference(q, k, v, causal), what=f"tiled T={T} S={S} block={block_size}")


@pytest.mark.parametrize("T,S,block_size,causal", [(7, 11, 3, True), (11, 7, 1, False), (6, 6, (4, 5), True)])
def test_matches_the_float64_loop_reference(T, S, block_size, causal):
    q, k, v = make_qkv((2,), T, S, 4, 3, dtype=torch.float32, seed=7)
    mask = causal_mask(T, S) if causal else None
    expected, _ = attention_loop_reference(q, k, v, mask)
    assert_close(tiled_attention(q, k, v, block_size, causal=causal), expected, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_accumulates_in_float32(dtype, causal):
    q, k, v = make_qkv((2, 2), 50, 70, 16, 16, dtype=dtype, seed=3)
    out, lse = tiled_attention(q, k, v, (16, 24), causal=causal, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    # Same rounded inputs, exact arithmetic: only the output's final rounding should differ.
    assert_close(out, torch_reference(q, k, v, causal), dtype=dtype, what=f"{dtype} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_lse_is_the_log_sum_exp_of_the_scores(causal):
    q, k, v = make_qkv((2,), 19, 23, 8, 8, seed=5)
    _, lse = tiled_attention(q, k, v, 6, causal=causal, return_lse=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    if causal:
        scores = scores.masked_fill(~causal_mask(19, 23), -math.inf)
    assert_close(lse, torch.logsumexp(scores, dim=-1), what="lse")


@pytest.mark.parametrize("q_scale", [60.0, 1e-3])
def test_extreme_scores_take_the_rescaling_path_and_stay_exact(q_scale):
    # Scores of several hundred overflow exp() unless the shift is raised to the maximum.
    q, k, v = make_qkv((1, 2), 33, 70, 8, 8, seed=11, q_scale=q_scale)
    for causal in (False, True):
        assert_close(
            tiled_attention(q, k, v, (8, 16), causal=causal),
            torch_reference(q, k, v, causal),
            what=f"q_scale={q_scale} causal={causal}",
        )


def test_scores_far_below_zero_do_not_underflow():
    # Every score is about -400: exp(s - 0) underflows to 0, so the shift must move down.
    q, k, v = make_qkv((1,), 12, 30, 4, 4, dtype=torch.float32, seed=2)
    q = q.abs() + 10.0
    k = -(k.abs() + 10.0)
    out = tiled_attention(q, k, v, (5, 7), scale=1.0)
    assert torch.isfinite(out).all()
    assert_close(out, torch_reference(q, k, v, False, scale=1.0).float(), what="all-negative scores")


@pytest.mark.parametrize("scale", [-0.7, 0.0, 3.0])
def test_any_finite_scale_matches_torch(scale):
    # Negative scales and zero are well defined (zero: uniform weights), as in torch's SDPA.
    q, k, v = make_qkv((2,), 11, 14, 4, 3, seed=8)
    for causal in (False, True):
        assert_close(
            tiled_attention(q, k, v, (4, 5), causal=causal, scale=scale),
            torch_reference(q, k, v, causal, scale=scale),
            what=f"scale={scale} causal={causal}",
        )


def _count_fallbacks(monkeypatch) -> list:
    """Record every query block that takes the two-pass path (exact row maxima, then shifted)."""
    calls = []
    row_max = tiled_module._row_max

    def spy(*args, **kwargs):
        calls.append(1)
        return row_max(*args, **kwargs)

    monkeypatch.setattr(tiled_module, "_row_max", spy)
    return calls


def test_typical_inputs_take_the_one_pass_path(monkeypatch):
    calls = _count_fallbacks(monkeypatch)
    q, k, v = make_qkv((2, 4), 300, 300, 16, 16, dtype=torch.float32, seed=1)
    for causal in (False, True):
        tiled_attention(q, k, v, 64, causal=causal)
    assert calls == [], "unit-variance inputs should never need the shifted second pass"


@pytest.mark.parametrize("causal", [False, True])
def test_only_the_overflowing_query_block_is_redone_and_stays_exact(monkeypatch, causal):
    # One query row (in the second of three blocks) has scores of several hundred: 2^s overflows
    # unless shifted. Its block alone takes the two-pass path; every output and lse stays exact.
    calls = _count_fallbacks(monkeypatch)
    q, k, v = make_qkv((2,), 24, 30, 8, 8, seed=12)
    q[1, 13] *= 200.0
    out, lse = tiled_attention(q, k, v, (8, 7), causal=causal, return_lse=True)
    assert len(calls) == 1
    assert_close(out, torch_reference(q, k, v, causal), what="out")
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    if causal:
        scores = scores.masked_fill(~causal_mask(24, 30), -math.inf)
    assert_close(lse, torch.logsumexp(scores, dim=-1), what="lse after the shifted pass")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_with_huge_scores_is_still_exact(dtype):
    # float16/bfloat16 scores of ~1000 fit in float32 but 2^s does not: the shifted pass runs in float32.
    q, k, v = make_qkv((1, 2), 20, 33, 8, 8, dtype=dtype, seed=13, q_scale=60.0)
    for causal in (False, True):
        assert_close(
            tiled_attention(q, k, v, (6, 8), causal=causal),
            torch_reference(q, k, v, causal),
            dtype=dtype,
            what=f"{dtype} causal={causal}",
        )


def test_huge_values_with_moderate_scores_take_the_exact_pass():
    # Scores of 40 keep l = sum 2^(s log2 e) within range, but e^40 * 1e22 overflows float32's acc:
    # the unshifted pass must not be trusted then (it used to return inf where SDPA gives 1e22).
    q = torch.full((1, 1, 4, 1), 40.0)
    k = torch.zeros(1, 1, 6, 1)
    k[..., 0, 0] = 1.0  # one key scores 40, the others 0: l ~ e^40 ~ 2^58, inside the trusted range
    v = torch.full((1, 1, 6, 2), 1e22)
    out = tiled_attention(q, k, v, (2, 3), scale=1.0)
    assert torch.isfinite(out).all()
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=1.0), what="out with |v| = 1e22")


@pytest.mark.parametrize("value", [2.0**61, math.inf, math.nan], ids=["2^61", "inf", "nan"])
def test_huge_infinite_or_nan_values_agree_with_sdpa(value):
    # Each block's check looks at acc itself: one value of 2^61, inf or NaN must give what SDPA gives.
    # (Causal only for the finite value: 0 * inf from a masked weight is NaN in SDPA, while tiled skips the future.)
    q, k, v = make_qkv((1, 2), 9, 11, 4, 3, dtype=torch.float32, seed=5)
    v[0, 1, 4, 2] = value
    for causal in (False, True) if math.isfinite(value) else (False,):
        out = tiled_attention(q, k, v, (4, 5), causal=causal)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert torch.equal(torch.isnan(out), torch.isnan(ref)), f"NaN pattern differs, v = {value}, causal={causal}"
        finite = torch.isfinite(ref)
        assert_close(out[finite], ref[finite], what=f"out with one value {value}, causal={causal}")


@given(
    T=st.integers(1, 30),
    S=st.integers(1, 30),
    bq=st.integers(1, 12),
    bk=st.integers(1, 12),
    causal=st.booleans(),
    log_q_scale=st.floats(-3.0, 2.5),
    seed=st.integers(0, 10**6),
)
@FAST
def test_any_score_magnitude_gives_exact_out_and_lse(T, S, bq, bk, causal, log_q_scale, seed):
    # From nearly uniform weights (q ~ 1e-3) to one-hot ones with scores in the hundreds (q ~ 300):
    # both the unshifted pass and the two-pass fallback must be exact, in out and in lse.
    q, k, v = make_qkv((2,), T, S, 6, 3, seed=seed, q_scale=10.0**log_q_scale)
    out, lse = tiled_attention(q, k, v, (bq, bk), causal=causal, return_lse=True)
    assert_close(out, torch_reference(q, k, v, causal), what="out")
    scores = q @ k.transpose(-2, -1) / math.sqrt(6)
    if causal:
        scores = scores.masked_fill(~causal_mask(T, S), -math.inf)
    assert_close(lse, torch.logsumexp(scores, dim=-1), what="lse")


@pytest.mark.parametrize("split", [1, 3, 5, 64])
def test_any_diagonal_split_is_exact(monkeypatch, split):
    # The causal band of each query block is cut into `split` tiles that skip the rows above their
    # first key; blocks of 7 rows leave uneven pieces, T != S both ways, the fallback path included.
    monkeypatch.setattr(tiling, "DIAGONAL_SPLIT", split)
    for T, S, q_scale in [(23, 23, 1.0), (23, 15, 1.0), (15, 29, 1.0), (23, 23, 300.0)]:
        q, k, v = make_qkv((2,), T, S, 4, 3, seed=T + S, q_scale=q_scale)
        out, lse = tiled_attention(q, k, v, (7, 9), causal=True, return_lse=True)
        assert_close(out, torch_reference(q, k, v, True), what=f"split={split} T={T} S={S}")
        scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~causal_mask(T, S), -math.inf)
        assert_close(lse, torch.logsumexp(scores, dim=-1), what=f"lse split={split} T={T} S={S}")


def test_non_contiguous_inputs():
    # q, k, v as views of a (B, T, H, D) layout, the way a projection produces them, and a strided v.
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 19, 3, 8, generator=gen, dtype=torch.float64).transpose(1, 2)  # (B, H, T, D)
    k = torch.randn(2, 23, 3, 8, generator=gen, dtype=torch.float64).transpose(1, 2)
    v = torch.randn(2, 3, 23, 10, generator=gen, dtype=torch.float64)[..., ::2]  # (B, H, S, 5)
    for causal in (False, True):
        assert_close(
            tiled_attention(q, k, v, (5, 6), causal=causal),
            torch_reference(q, k, v, causal),
            what=f"non-contiguous causal={causal}",
        )


def test_later_keys_with_larger_scores_rescale_earlier_blocks():
    # Keys grow along the sequence so every new key block raises the running maximum.
    q, k, v = make_qkv((2,), 16, 64, 4, 4, seed=4)
    k = k * torch.linspace(0.1, 30.0, 64, dtype=torch.float64).unsqueeze(-1)
    assert_close(tiled_attention(q, k, v, 8), torch_reference(q, k, v, False), what="growing keys")


def test_broadcast_leading_dims_like_multi_query_attention():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 10, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 1, 12, 8, generator=gen, dtype=torch.float64)  # one shared key/value head
    v = torch.randn(1, 1, 12, 5, generator=gen, dtype=torch.float64)
    expected, _ = sdpa(q, k, v, causal_mask(10, 12))
    assert_close(tiled_attention(q, k, v, 3, causal=True), expected, what="broadcast k, v")


def test_zero_keys_give_zero_output_and_minus_inf_lse():
    q, k, v = make_qkv((2,), 5, 0, 4, 3)
    out, lse = tiled_attention(q, k, v, 2, return_lse=True)
    assert out.shape == (2, 5, 3) and torch.equal(out, torch.zeros_like(out))
    assert torch.isneginf(lse).all()


def test_causal_output_ignores_the_future():
    q, k, v = make_qkv((1, 2), 24, 24, 8, 8, seed=9)
    out = tiled_attention(q, k, v, 5, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 15:, :] += 3.0
    v2[..., 15:, :] -= 7.0
    out2 = tiled_attention(q, k2, v2, 5, causal=True)
    assert_close(out2[..., :15, :], out[..., :15, :], what="queries before the change")
    assert (out2[..., 15:, :] - out[..., 15:, :]).abs().max() > 1e-3


@given(
    T=st.integers(1, 40),
    S=st.integers(1, 40),
    D=st.integers(1, 9),
    bq=st.integers(1, 48),
    bk=st.integers(1, 48),
    causal=st.booleans(),
    seed=st.integers(0, 10**6),
)
@FAST
def test_any_blocks_any_shapes_agree_with_torch(T, S, D, bq, bk, causal, seed):
    q, k, v = make_qkv((2,), T, S, D, D + 1, seed=seed)
    assert_close(
        tiled_attention(q, k, v, (bq, bk), causal=causal),
        torch_reference(q, k, v, causal),
        what=f"T={T} S={S} blocks=({bq},{bk}) causal={causal}",
    )


def test_textbook_loop_agrees_with_the_fast_one():
    q, k, v = make_qkv((2, 2), 21, 34, 8, 8, seed=1)
    for block, causal in [(1, True), (5, False), (8, True), (64, False)]:
        assert_close(
            online_softmax_attention(q, k, v, block, causal=causal),
            tiled_attention(q, k, v, block, causal=causal),
            what=f"block={block}",
        )


def gradients(fn, q, k, v, grad_out):
    """(dq, dk, dv) of sum(fn(q, k, v) * grad_out), on fresh leaves."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    fn(*leaves).backward(grad_out)
    return [x.grad for x in leaves]


@pytest.mark.parametrize(
    "lead,T,S,D,Dv,block_size,causal",
    [
        ((2,), 9, 11, 4, 3, 4, True),  # T, S not multiples of the block
        ((1, 2), 37, 37, 8, 8, (8, 16), True),  # causal diagonal cut into narrower tiles
        ((1, 2), 37, 37, 8, 8, (16, 8), False),
        ((3,), 1, 20, 5, 7, 1, False),  # block size 1, a single query, Dv != D
        ((2,), 25, 9, 6, 6, 4, True),  # T > S causal: late queries see every key
        ((2,), 9, 25, 6, 6, None, True),  # T < S causal, default tiles
        ((), 30, 30, 16, 16, 7, False),  # no leading dims
    ],
)
def test_tiled_backward_matches_float64_autograd(lead, T, S, D, Dv, block_size, causal):
    q, k, v = make_qkv(lead, T, S, D, Dv, seed=6)
    grad_out = torch.randn(*lead, T, Dv, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    got = gradients(lambda q, k, v: tiled_attention(q, k, v, block_size, causal=causal), q, k, v, grad_out)
    expected = gradients(lambda q, k, v: torch_reference(q, k, v, causal), q, k, v, grad_out)
    for name, a, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert_close(a, e, what=f"{name} {lead} T={T} S={S} blocks={block_size} causal={causal}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_backward_in_each_dtype(dtype, causal):
    q, k, v = make_qkv((1, 2), 40, 33, 16, 16, dtype=dtype, seed=8)
    grad_out = torch.randn(1, 2, 40, 16, generator=torch.Generator().manual_seed(9)).to(dtype)
    got = gradients(lambda q, k, v: tiled_attention(q, k, v, 16, causal=causal), q, k, v, grad_out)
    expected = gradients(lambda q, k, v: torch_reference(q, k, v, causal), q, k, v, grad_out.double())
    for name, a, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert a.dtype == dtype
        assert_close(a, e.to(dtype), dtype=dtype, what=f"{name} {dtype} causal={causal}")


@pytest.mark.parametrize("q_scale", [30.0, 300.0])
def test_tiled_backward_with_huge_scores(q_scale):
    # Scores of hundreds: P is rebuilt from an lse found on the forward's rescaling path.
    q, k, v = make_qkv((1, 2), 20, 20, 8, 8, seed=10, q_scale=q_scale)
    grad_out = torch.randn(1, 2, 20, 8, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    got = gradients(lambda q, k, v: tiled_attention(q, k, v, 8, causal=True), q, k, v, grad_out)
    expected = gradients(lambda q, k, v: torch_reference(q, k, v, True), q, k, v, grad_out)
    for name, a, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert torch.isfinite(a).all(), name
        assert_close(a, e, what=f"{name} q_scale={q_scale}")


def test_tiled_backward_sums_the_gradients_of_shared_keys_and_values():
    # Multi-query attention: one k, v for 4 heads; their gradients add up over the heads.
    q, _, _ = make_qkv((2, 4), 12, 12, 8, 8, seed=12)
    _, k, v = make_qkv((2, 1), 12, 12, 8, 8, seed=13)
    grad_out = torch.randn(2, 4, 12, 8, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    got = gradients(lambda q, k, v: tiled_attention(q, k, v, 5, causal=True), q, k, v, grad_out)
    expected = gradients(
        lambda q, k, v: torch_reference(q, k.expand(2, 4, 12, 8), v.expand(2, 4, 12, 8), True), q, k, v, grad_out
    )
    assert got[1].shape == k.shape and got[2].shape == v.shape
    for name, a, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert_close(a, e, what=name)


def test_tiled_backward_with_no_keys_is_zero():
    q, k, v = (x.requires_grad_() for x in make_qkv((2,), 5, 0, 4, 3))
    tiled_attention(q, k, v).sum().backward()
    assert q.grad.abs().sum() == 0 and k.grad.shape == (2, 0, 4) and v.grad.shape == (2, 0, 3)


def test_gradcheck_through_the_tiled_backward():
    q, k, v = (x.requires_grad_() for x in make_qkv((1,), 6, 7, 3, 2, seed=15))
    assert torch.autograd.gradcheck(lambda q, k, v: tiled_attention(q, k, v, (4, 3), causal=True), (q, k, v))


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"block_size": 0}, ValueError),
        ({"block_size": (4, 0)}, ValueError),
        ({"block_size": 2.5}, TypeError),
        ({"block_size": True}, TypeError),
        ({"block_size": (1, 2, 3)}, TypeError),
        ({"scale": math.nan}, ValueError),
        ({"scale": math.inf}, ValueError),
        ({"scale": "0.5"}, TypeError),
    ],
)
def test_bad_arguments_raise(kwargs, error):
    q, k, v = make_qkv((1,), 4, 4, 2, 2)
    with pytest.raises(error):
        tiled_attention(q, k, v, **kwargs)


def test_bad_shapes_and_dtypes_raise_naming_the_shapes():
    q, k, v = make_qkv((1,), 4, 6, 8, 8)
    with pytest.raises(ValueError, match="last dim D"):
        tiled_attention(q, k[..., :7], v, 2)
    with pytest.raises(ValueError, match="same length S"):
        tiled_attention(q, k, v[..., :5, :], 2)
    with pytest.raises(TypeError):
        tiled_attention(q.long(), k, v, 2)
    with pytest.raises(TypeError):
        tiled_attention(q.float(), k, v, 2)
    with pytest.raises(ValueError):
        tiled_attention(q[0, 0], k, v, 2)


# ---- online softmax ------------------------------------------------------------------------------


@given(S=st.integers(1, 50), block=st.integers(1, 60), seed=st.integers(0, 10**6))
@FAST
def test_online_softmax_equals_softmax(S, block, seed):
    x = torch.randn(3, S, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 20
    x[0, : S // 2] = -math.inf  # a partly masked row
    assert_close(online_softmax(x, block), softmax(x), what=f"S={S} block={block}")


def test_online_softmax_of_a_fully_masked_row_is_zero():
    x = torch.full((2, 7), -math.inf)
    assert torch.equal(online_softmax(x, 3), torch.zeros(2, 7))


def test_online_update_gives_the_whole_row_statistics():
    x = torch.randn(4, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 5
    m, l = torch.full((4,), -math.inf, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    for j0 in range(0, 20, 6):
        m_old = m
        m, l, correction = online_softmax_update(m, l, x[:, j0 : j0 + 6])
        expected_corr = torch.where(torch.isneginf(m_old), torch.zeros_like(m), torch.exp(m_old - m))
        assert_close(correction, expected_corr, what="correction")
    assert_close(m, x.amax(dim=-1), what="running max")
    assert_close(l, torch.exp(x - x.amax(dim=-1, keepdim=True)).sum(-1), what="running sum")


def test_online_update_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        online_softmax_update(torch.zeros(3), torch.zeros(3), torch.zeros(4, 5))
    with pytest.raises(ValueError):
        online_softmax(torch.zeros(3), 0)


# ---- memory --------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_backward", [False, True], ids=["forward", "forward+backward"])
def test_tiled_memory_stays_far_below_the_score_matrix(with_backward):
    if not cost.cpu_peak_memory_supported():
        pytest.skip("peak memory is measured through /proc on Linux only")
    H, T, D = 2, 2048, 32
    q, k, v = make_qkv((1, H), T, T, D, D, dtype=torch.float32)
    grad_out = torch.randn(1, H, T, D)
    score_mib = H * T * T * 4 / 2**20  # one (B, H, T, S) float32 matrix: 32 MiB

    def call(fn):
        if not with_backward:
            return lambda: fn(q, k, v)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        return lambda: torch.autograd.grad(fn(*leaves), leaves, grad_out)  # a training step

    naive, tiled = call(lambda q, k, v: sdpa(q, k, v)[0]), call(lambda q, k, v: tiled_attention(q, k, v))
    naive(), tiled()  # warm-up: one-time allocations are not the point
    naive_mib = cost.peak_memory_mib(naive)
    tiled_mib = cost.peak_memory_mib(tiled, repeats=3)  # the smallest: another thread's pages only add
    # the backward of the naive version holds P, dP and dS at once
    assert naive_mib >= (2 if with_backward else 1) * score_mib, (
        f"measurement sees the naive (T, S) matrices: {naive_mib:.1f} MiB"
    )
    assert tiled_mib < score_mib / 4, f"tiled used {tiled_mib:.1f} MiB vs {score_mib:.0f} MiB for one (T, S)"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead", [(), (1, 1), (4, 8), (16, 16)])
def test_default_tiles_work_for_any_number_of_heads(lead, causal):
    q, k, v = make_qkv(lead, 70, 1100, 4, 4, dtype=torch.float32, seed=len(lead))
    assert_close(
        tiled_attention(q, k, v, causal=causal),
        torch_reference(q, k, v, causal).float(),
        what=f"lead={lead} causal={causal}",
    )


@pytest.mark.parametrize("causal", [False, True])
def test_default_tiles_with_ragged_edges(causal):
    # With 8 heads the default tiles are (512 or 256, 256): T and S below leave partial tiles on
    # both axes, and T > S leaves queries whose whole key range is in the past.
    q, k, v = make_qkv((1, 8), 600, 459, 16, 16, dtype=torch.float32, seed=21)
    block_q, block_k = tiling.blocks_from(None, q, k, v, causal)
    assert 600 % block_q and 459 % block_k
    assert_close(
        tiled_attention(q, k, v, causal=causal),
        torch_reference(q, k, v, causal).float(),
        what=f"default tiles causal={causal}",
    )


# ---- the worker pool: one intra-op thread per worker, work items shared out ------------------------


@FAST
@given(
    N=st.integers(1, 9),
    T=st.integers(1, 70),
    group=st.integers(1, 4),
    bq=st.integers(1, 40),
    causal=st.booleans(),
    workers=st.integers(1, 4),
)
def test_work_items_cover_every_head_and_query_once(N, T, group, bq, causal, workers):
    items = tiling.work_items(N, T, group, bq, causal, workers)
    covered = torch.zeros(N, T, dtype=torch.int64)
    for h0, h1, i0, i1 in items:
        assert 0 <= h0 < h1 <= N and 0 <= i0 < i1 <= T and h1 - h0 <= group and i1 - i0 <= bq, (h0, h1, i0, i1)
        covered[h0:h1, i0:i1] += 1
    assert bool((covered == 1).all()), f"heads x queries not covered exactly once by {items}"
    if causal:  # costliest first: a later query block sees more keys (the tail pieces are sorted too)
        ends = [i1 for *_, i1 in items]
        assert ends == sorted(ends, reverse=True), f"causal items not costliest first: {items}"


def test_the_last_work_items_are_cut_smaller_so_the_workers_finish_together():
    whole = tiling.work_items(8, 4096, 1, 2048, False)
    cut = tiling.work_items(8, 4096, 1, 2048, False, workers=2)
    assert cut[:-8] == whole[:-2], "only the last item per worker is cut"
    assert cut[-8:] == [(h, h + 1, i, i + 512) for h in (6, 7) for i in (2048, 2560, 3072, 3584)]
    causal = tiling.work_items(8, 4096, 1, 2048, True, workers=2)
    assert [i1 for *_, i1 in causal[-8:]] == [2048, 2048, 1536, 1536, 1024, 1024, 512, 512], "costliest first"


@pytest.fixture
def pool(monkeypatch):
    """Every call goes through a fresh worker pool of 2, however small the problem."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))  # one intra-op thread never uses the pool
    monkeypatch.setattr(tiling, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(worker_pool, "POOL", worker_pool.WorkerPool())
    yield worker_pool.POOL
    torch.set_num_threads(threads)


POOL_CASES = [
    # (lead of q, lead of k and v, T, S, D, Dv, block_size, causal)
    ((2, 3), (2, 3), 70, 70, 8, 8, None, False),
    ((2, 3), (2, 3), 70, 70, 8, 8, None, True),
    ((1, 4), (1, 1), 45, 61, 8, 5, (16, 8), True),  # keys and values shared by the heads
    ((3,), (3,), 61, 45, 4, 4, 7, True),
    ((1,), (1,), 200, 150, 8, 8, (32, 64), False),  # one head: the query blocks are the items
]


@pytest.mark.parametrize("lead_q,lead_kv,T,S,D,Dv,block_size,causal", POOL_CASES)
def test_pool_forward_and_backward_match_float64_autograd(pool, lead_q, lead_kv, T, S, D, Dv, block_size, causal):
    gen = torch.Generator().manual_seed(T + S)
    q = torch.randn(*lead_q, T, D, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*lead_kv, S, D, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*lead_kv, S, Dv, generator=gen, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(*lead_q, T, Dv, generator=gen, dtype=torch.float64)
    out, lse = tiled_attention(q, k, v, block_size, causal=causal, return_lse=True)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(~causal_mask(T, S), -math.inf)
    expected = torch.softmax(scores, dim=-1) @ v
    assert_close(out, expected, what="out")
    assert_close(lse, torch.logsumexp(scores, dim=-1), what="lse")
    for name, got, want in zip("qkv", grads, torch.autograd.grad(expected, (q, k, v), grad_out), strict=True):
        assert_close(got, want, what=f"d{name}")
    assert pool.size == 2, "the pool did the work"


def test_pool_caller_only_allocates_and_reshapes(pool):
    # After a parallel op of its own the caller's idle intra-op threads spin on a core for ms, and a
    # worker waits for that core: a check of v there once delayed the second worker by 4 ms a call.
    # (The profiler records the calling thread's ops, not the workers'.)
    q, k, v = make_qkv((1, 2), 64, 64, 8, 8, dtype=torch.float32)
    tiled_attention(q, k, v)  # starts the workers
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        tiled_attention(q, k, v)
    caller_ops = {event.name for event in prof.events()}
    allowed = {"aten::empty", "aten::expand", "aten::reshape", "aten::_reshape_alias", "aten::view"}
    allowed |= {"aten::as_strided", "aten::to", "aten::promote_types"}
    assert pool.size == 2
    assert caller_ops <= allowed, f"the calling thread computed: {sorted(caller_ops - allowed)}"


def test_pool_redoes_only_the_overflowing_item_exactly(pool, monkeypatch):
    calls = _count_fallbacks(monkeypatch)
    q, k, v = make_qkv((2,), 24, 30, 8, 8, seed=12)
    q[1, 13] *= 200.0  # one query row whose scores overflow 2^s unless shifted
    for causal in (False, True):
        calls.clear()
        out = tiled_attention(q, k, v, (8, 7), causal=causal)
        assert len(calls) == 1
        assert_close(out, torch_reference(q, k, v, causal), what=f"causal={causal}")


def test_pool_leaves_the_thread_settings_alone(pool):
    def fresh_thread_count():
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        return seen[0]

    before, before_fresh = torch.get_num_threads(), fresh_thread_count()
    q, k, v = make_qkv((1, 2), 64, 64, 8, 8, dtype=torch.float32)
    tiled_attention(q, k, v)  # starts the workers, each with torch.set_num_threads(1)
    assert pool.size == 2
    assert torch.get_num_threads() == before, "the caller's intra-op threads changed"
    assert fresh_thread_count() == before_fresh, "threads started later begin with another count"


def test_pool_workers_stay_single_threaded_whatever_the_caller_sets(pool):
    # torch reads its shared thread count once per thread: a worker that read it after the pool restored
    # the caller's count ran on every core, and two such workers oversubscribed the CPU.
    def worker_counts():
        seen = []
        pool.run(lambda i: seen.append(torch.get_num_threads()), pool.size)
        return seen

    q, k, v = make_qkv((1, 2), 64, 64, 8, 8, dtype=torch.float32)
    tiled_attention(q, k, v)  # starts the workers
    threads = torch.get_num_threads()
    assert worker_counts() == [1] * pool.size
    torch.set_num_threads(1)  # what chapter 12 does, then restores
    torch.set_num_threads(threads)
    tiled_attention(q, k, v)
    assert worker_counts() == [1] * pool.size


def test_pool_takes_calls_from_several_threads_at_once(pool):
    inputs = [make_qkv((2, 2), 50 + i, 40 + i, 8, 8, dtype=torch.float64, seed=i) for i in range(4)]
    results = [None] * len(inputs)

    def call(i):
        results[i] = tiled_attention(*inputs[i], 16, causal=bool(i % 2))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, (q, k, v) in enumerate(inputs):
        assert_close(results[i], torch_reference(q, k, v, bool(i % 2)), what=f"call {i}")


def test_pool_hands_a_workers_error_to_the_caller_and_recovers(pool, monkeypatch):
    sweep = tiled_module._sweep

    def failing(*args, **kwargs):
        raise RuntimeError("worker failed")

    monkeypatch.setattr(tiled_module, "_sweep", failing)
    q, k, v = make_qkv((2, 2), 40, 40, 8, 8)
    with pytest.raises(RuntimeError, match="worker failed"):
        tiled_attention(q, k, v, 8)
    monkeypatch.setattr(tiled_module, "_sweep", sweep)
    assert_close(tiled_attention(q, k, v, 8), torch_reference(q, k, v, False), what="after an error")


def test_pool_under_inference_mode(pool):
    q, k, v = make_qkv((2, 2), 40, 40, 8, 8)
    with torch.inference_mode():
        out = tiled_attention(q, k, v, 8)
    assert out.is_inference()
    assert_close(out, torch_reference(q, k, v, False), what="inference mode")


def test_one_intra_op_thread_never_uses_the_pool(monkeypatch):
    def refuse(*args):
        raise AssertionError("the pool was used")

    monkeypatch.setattr(tiling, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(worker_pool.POOL, "run", refuse)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        q, k, v = make_qkv((2, 2), 40, 40, 8, 8)
        assert_close(tiled_attention(q, k, v, 8), torch_reference(q, k, v, False), what="one thread")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_pool_works_in_a_forked_child(pool):
    import time

    q, k, v = make_qkv((2, 2), 40, 40, 8, 8)
    expected = tiled_attention(q, k, v, 8)  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # the child: its pool must start afresh, not wait for threads that stayed behind
        ok = False
        try:
            ok = torch.allclose(tiled_attention(q, k, v, 8), expected)
        finally:
            os._exit(0 if ok else 1)  # never return into pytest from the child
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("tiled_attention hung in a forked child")
