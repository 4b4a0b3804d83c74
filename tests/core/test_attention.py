"""scaled_dot_product_attention against torch's SDPA, the float64 loop reference, and by its properties."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.masks import causal_mask, padding_mask
from mha_course.core.reference import attention_loop_reference
from mha_course.testing import assert_close

FAST = settings(max_examples=40, deadline=None, derandomize=True)
SLOW = settings(max_examples=15, deadline=None, derandomize=True)


@st.composite
def attention_case(draw, max_len=6, max_dim=8, full_rows=True):
    """A random configuration: leading dims of rank 0-2 (broadcast per tensor), T != S, D != Dv,
    a mask of kind none/bool/float in one of many broadcastable shapes, and an optional scale.

    With ``full_rows`` every query keeps at least one key (torch's SDPA gives NaN on older versions
    for fully masked rows); without it a row may be fully masked.
    """
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))

    def broadcast_of(shape):  # each dim kept or replaced by 1, so the result broadcasts to ``shape``
        return tuple(d if draw(st.booleans()) else 1 for d in shape)

    T, S = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    D, Dv = draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    q_lead = lead if draw(st.booleans()) else broadcast_of(lead)
    q = torch.randn(*q_lead, T, D, generator=gen, dtype=torch.float64)
    k = torch.randn(*broadcast_of(lead), S, D, generator=gen, dtype=torch.float64)
    v = torch.randn(*broadcast_of(lead), S, Dv, generator=gen, dtype=torch.float64)
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    mask = None
    if kind != "none":
        layout = draw(st.sampled_from(["TS", "S", "1S", "lead1S", "lead1TS", "leadTS"]))
        shape = {
            "TS": (T, S),
            "S": (S,),
            "1S": (1, S),
            "lead1S": (*broadcast_of(lead), 1, S),
            "lead1TS": (*broadcast_of(lead), T, S),
            "leadTS": (*lead, T, S),
        }[layout]
        allowed = torch.rand(shape, generator=gen) < 0.6
        if full_rows:  # one random key per row stays visible
            keep = torch.randint(0, S, (*shape[:-1], 1), generator=gen)
            allowed = allowed | (torch.arange(S) == keep)
        if kind == "bool":
            mask = allowed
        else:
            bias = 2 * torch.randn(shape, generator=gen, dtype=torch.float64)
            mask = torch.where(allowed, bias, torch.full_like(bias, float("-inf")))
    scale = draw(st.one_of(st.none(), st.floats(0.05, 3.0)))
    return q, k, v, mask, scale


def torch_sdpa(q, k, v, mask, scale):
    """torch's SDPA output and weights, with every leading dim expanded first (torch does not let
    the mask widen the batch); the weights come from SDPA with v = identity, i.e. weights @ I."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2])
    T, (S, D), Dv = q.shape[-2], k.shape[-2:], v.shape[-1]
    q, k, v = q.expand(*lead, T, D), k.expand(*lead, S, D), v.expand(*lead, S, Dv)
    eye = torch.eye(S, dtype=q.dtype).expand(*lead, S, S)
    if mask is not None and mask.dim() == 1:
        mask = mask[None, :]  # (1, S): torch's SDPA rejects a 1-D mask for 4-D inputs
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    return out, weights


def cast(case, dtype):
    q, k, v, mask, scale = case
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    return q.to(dtype), k.to(dtype), v.to(dtype), mask, scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@FAST
@given(case=attention_case())
def test_matches_torch_sdpa(case, dtype):
    q, k, v, mask, scale = cast(case, dtype)
    out, weights = sdpa(q, k, v, mask=mask, scale=scale)
    expected_out, expected_weights = torch_sdpa(q, k, v, mask, scale)
    assert out.dtype == weights.dtype == dtype
    assert_close(out, expected_out, what="output")
    assert_close(weights, expected_weights, what="weights")


@SLOW
@given(case=attention_case(max_len=4, max_dim=4, full_rows=False))
def test_matches_float64_loop_reference(case):
    q, k, v, mask, scale = case
    out, weights = sdpa(q, k, v, mask=mask, scale=scale)
    ref_out, ref_weights = attention_loop_reference(q, k, v, mask=mask, scale=scale)
    assert_close(out, ref_out, what="output")
    assert_close(weights, ref_weights, what="weights")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@SLOW
@given(case=attention_case(max_len=4, max_dim=4))
def test_low_precision_within_dtype_tolerance(case, dtype):
    """Half-precision results agree with float64 math on the same (rounded) inputs, per the table."""
    q, k, v, mask, scale = cast(case, dtype)
    out, weights = sdpa(q, k, v, mask=mask, scale=scale)
    assert out.dtype == weights.dtype == dtype
    ref_out, ref_weights = attention_loop_reference(q, k, v, mask=mask, scale=scale)
    assert_close(out, ref_out, dtype=dtype, what="output")
    assert_close(weights, ref_weights, dtype=dtype, what="weights")


@FAST
@given(case=attention_case())
def test_output_shape_broadcasts_leading_dims(case):
    q, k, v, mask, scale = case
    out, weights = sdpa(q, k, v, mask=mask, scale=scale)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2])
    T, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    assert out.shape == (*lead, T, Dv)
    assert weights.shape == (*lead, T, S)


@FAST
@given(case=attention_case())
def test_rows_sum_to_one(case):
    q, k, v, mask, scale = case
    _, weights = sdpa(q, k, v, mask=mask, scale=scale)
    assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=weights.dtype), what="row sums")
    assert bool((weights >= 0).all())


@FAST
@given(case=attention_case())
def test_masked_keys_get_exactly_zero_weight(case):
    q, k, v, mask, scale = case
    if mask is None:
        mask = torch.ones(k.shape[-2], dtype=torch.bool)
    _, weights = sdpa(q, k, v, mask=mask, scale=scale)
    blocked = ~mask if mask.dtype == torch.bool else torch.isneginf(mask)
    blocked = blocked.expand_as(weights)
    assert bool((weights[blocked] == 0).all())


def test_default_scale_is_inverse_sqrt_d():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 7, generator=gen, dtype=torch.float64) for _ in range(3))
    default = sdpa(q, k, v)
    explicit = sdpa(q, k, v, scale=1 / math.sqrt(7))
    other = sdpa(q, k, v, scale=1.0)
    assert_close(default[0], explicit[0])
    with pytest.raises(AssertionError):
        assert_close(default[0], other[0])


def test_scale_multiplies_scores():
    """scale=c on q equals scale=1 on c*q."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(4, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    assert_close(sdpa(q, k, v, scale=0.37)[1], sdpa(0.37 * q, k, v, scale=1.0)[1])


def test_fully_masked_rows_are_zero_and_other_rows_untouched():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 5, 6, generator=gen) < 0.5
    mask[..., 0] = True
    mask[0, 1] = False  # query 1 of batch 0 may attend to nothing
    mask[1, 3] = False
    for m in (mask, torch.where(mask, 0.0, float("-inf")).double()):
        out, weights = sdpa(q, k, v, mask=m)
        assert not torch.isnan(out).any() and not torch.isnan(weights).any()
        assert bool((weights[0, 1] == 0).all()) and bool((out[0, 1] == 0).all())
        assert bool((weights[1, 3] == 0).all()) and bool((out[1, 3] == 0).all())
        live = torch.ones(2, 5, dtype=torch.bool)
        live[0, 1] = live[1, 3] = False
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~live[..., None])
        assert_close(out[live], expected[live], what="rows with a visible key")


def test_fully_masked_rows_have_finite_gradients():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 sees nothing
    out, _ = sdpa(q, k, v, mask=mask)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert bool((q.grad[1] == 0).all())


@SLOW
@given(case=attention_case(max_len=4, max_dim=4))
def test_causal_mask_matches_torch_is_causal(case):
    q, k, v, _, scale = case
    T, S = q.shape[-2], k.shape[-2]
    out, _ = sdpa(q, k, v, mask=causal_mask(T, S), scale=scale)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    # top-left alignment: with T > S the last T - S rows still see every key; rows are never empty
    assert_close(out, expected)


@SLOW
@given(case=attention_case(max_len=6, max_dim=4), t=st.integers(0, 5))
def test_causal_outputs_ignore_the_future(case, t):
    q, k, v, _, scale = case
    T, S = q.shape[-2], k.shape[-2]
    t = min(t, T - 1)
    mask = causal_mask(T, S)
    out, _ = sdpa(q, k, v, mask=mask, scale=scale)
    if t + 1 >= min(T, S):
        return  # no future key to perturb, or no later query to see it
    k2, v2 = k.clone(), v.clone()
    k2[..., t + 1 :, :] += 10.0  # every key query t must not see
    v2[..., t + 1 :, :] -= 5.0
    out2, _ = sdpa(q, k2, v2, mask=mask, scale=scale)
    assert_close(out2[..., : t + 1, :], out[..., : t + 1, :], what="outputs up to t")
    assert not torch.allclose(out2[..., t + 1 :, :], out[..., t + 1 :, :]), "perturbation must matter later"


@SLOW
@given(case=attention_case(max_len=6), seed=st.integers(0, 1000))
def test_permutation_equivariance(case, seed):
    """Without positions, permuting queries permutes the outputs; permuting keys with values changes nothing."""
    q, k, v, _, scale = case
    T, S = q.shape[-2], k.shape[-2]
    gen = torch.Generator().manual_seed(seed)
    pq, pk = torch.randperm(T, generator=gen), torch.randperm(S, generator=gen)
    out, weights = sdpa(q, k, v, scale=scale)
    out_p, weights_p = sdpa(q[..., pq, :], k[..., pk, :], v[..., pk, :], scale=scale)
    assert_close(out_p, out[..., pq, :], what="permuted outputs")
    assert_close(weights_p, weights[..., pq, :][..., pk], what="permuted weights")


@FAST
@given(case=attention_case(), shift=st.floats(-1e3, 1e3))
def test_adding_a_constant_to_all_scores_changes_nothing(case, shift):
    q, k, v, mask, scale = case
    base = torch.zeros(()) if mask is None else mask
    if base.dtype == torch.bool:
        base = torch.where(base, 0.0, float("-inf")).double()
    out, weights = sdpa(q, k, v, mask=base, scale=scale)
    out_s, weights_s = sdpa(q, k, v, mask=base + shift, scale=scale)
    # |shift| up to 1e3 costs float64 digits in the scores: compare at float32 tolerance
    assert_close(out_s, out, dtype=torch.float32, what="shifted output")
    assert_close(weights_s, weights, dtype=torch.float32, what="shifted weights")


@pytest.mark.parametrize(
    "dtype,magnitude",
    [(torch.float32, 1e4), (torch.float32, 1e30), (torch.float16, 6e4), (torch.bfloat16, 1e30), (torch.float64, 1e300)],
)
def test_huge_scores_stay_finite(dtype, magnitude):
    """Scores far beyond exp's range: the max subtraction keeps the result finite and exact."""
    q = torch.tensor([[1.0], [-1.0]], dtype=dtype)  # (T=2, D=1)
    k = torch.tensor([[magnitude], [magnitude / 2], [-magnitude]], dtype=dtype)  # (S=3, D=1)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=dtype)
    out, weights = sdpa(q, k, v, scale=1.0)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    # query 0 picks key 0 (largest score), query 1 picks key 2
    assert_close(weights, torch.tensor([[1.0, 0, 0], [0, 0, 1.0]], dtype=dtype))
    assert_close(out, torch.tensor([[1.0, 2.0], [5.0, 6.0]], dtype=dtype))


def test_float16_scores_beyond_float16_range():
    """q.k = 250 * 250 * 4 = 250000 > 65504: the scores overflow float16, the attention must not."""
    q = torch.full((3, 4), 250.0, dtype=torch.float16)
    k = torch.full((5, 4), 250.0, dtype=torch.float16)
    k[1] = -250.0
    v = torch.randn(5, 2).half()
    out, weights = sdpa(q, k, v)
    ref_out, ref_weights = attention_loop_reference(q, k, v)
    assert torch.isfinite(out).all()
    assert_close(out, ref_out, dtype=torch.float16)
    assert_close(weights, ref_weights, dtype=torch.float16)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_gradcheck(mask_kind):
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = {
        "none": None,
        "bool": padding_mask([3, 5], 5)[:, 0],
        "float": torch.randn(3, 5, generator=gen, dtype=torch.float64),
    }[mask_kind]
    assert torch.autograd.gradcheck(lambda q, k, v: sdpa(q, k, v, mask=mask, scale=0.7), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: sdpa(q, k, v, mask=mask)[1], (q, k, v))


def test_gradients_match_torch():
    gen = torch.Generator().manual_seed(5)
    leaves = [torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    mask = causal_mask(4)
    grad_out = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(sdpa(*leaves, mask=mask)[0], leaves, grad_out)
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, attn_mask=mask), leaves, grad_out)
    for a, b, name in zip(ours, theirs, "qkv", strict=True):
        assert_close(a, b, what=f"d{name}")


def test_empty_key_set_gives_zeros():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 5)
    out, weights = sdpa(q, k, v)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 0)
    assert bool((out == 0).all())


def test_inputs_are_not_modified():
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(3, 4, generator=gen) for _ in range(3))
    mask = causal_mask(3)
    copies = [t.clone() for t in (q, k, v, mask)]
    sdpa(q, k, v, mask=mask)
    for before, after in zip(copies, (q, k, v, mask), strict=True):
        assert torch.equal(before, after)
