"""The graded API against PyTorch over seeded tables of configurations (one test per configuration).

Covers softmax (any dim, huge logits, -inf entries, all -inf rows, four dtypes),
scaled_dot_product_attention (bool/float masks in every broadcast layout, custom scale, 0-3 leading
dims, T != S, Dv != D, T or S = 1, low precision), causal_mask (vs ``is_causal`` and ``tril``),
padding_mask, the nn.MultiheadAttention mask adapters and split_heads/merge_heads.
The references are torch's own functions run in float64 on the same (already rounded) inputs, so
every dtype is held to its row of ``TOLERANCES``.
"""

import math
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import causal_mask, merge_heads, padding_mask, scaled_dot_product_attention, softmax, split_heads
from mha_course.core.masks import (
    from_key_padding_mask,
    from_torch_attn_mask,
    invert_bool_mask,
    to_key_padding_mask,
    to_torch_attn_mask,
)
from mha_course.testing import assert_close

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _ids(configs):
    return [",".join(f"{k}={v}" for k, v in c.items() if k != "seed") for c in configs]


# ----------------------------------------------------------------------------- softmax


def _softmax_configs(n=48):
    rng = random.Random(1001)
    configs = []
    for i in range(n):
        rank = rng.randint(1, 4)
        shape = tuple(rng.randint(1, 5) for _ in range(rank))
        configs.append(
            dict(
                shape=shape,
                dim=rng.randint(-rank, rank - 1),
                dtype=DTYPES[i % 4],
                magnitude=rng.choice([1.0, 30.0]),
                neg_inf=rng.random() < 0.4,
                seed=i,
            )
        )
    return configs


SOFTMAX_CONFIGS = _softmax_configs()


@pytest.mark.parametrize("c", SOFTMAX_CONFIGS, ids=_ids(SOFTMAX_CONFIGS))
def test_softmax_matches_torch_any_dim(c):
    gen = torch.Generator().manual_seed(c["seed"])
    x = (torch.randn(c["shape"], generator=gen, dtype=torch.float64) * c["magnitude"]).to(c["dtype"])
    if c["neg_inf"]:
        x = x.masked_fill(torch.rand(c["shape"], generator=gen) < 0.3, float("-inf"))
    x64 = x.double()
    expected = torch.softmax(x64, c["dim"])
    expected = torch.nan_to_num(expected, nan=0.0)  # all -inf rows: NaN in torch, zeros here
    got = softmax(x, c["dim"])
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, expected.to(c["dtype"]), dtype=c["dtype"], what="softmax")


@pytest.mark.parametrize(
    "dtype,big",
    [
        (torch.float32, 1e4),
        (torch.float32, 3e38),
        (torch.float64, 1e300),
        (torch.float16, 6e4),
        (torch.bfloat16, 3e38),
        (torch.float16, 1e4),
    ],
)
def test_softmax_huge_logits_of_both_signs(dtype, big):
    x = torch.tensor(
        [[0.0, big, -big, 1.0], [-big, -big, 0.0, 0.0], [big, big, -big, 0.0], [-big, -big, -big, -big]], dtype=dtype
    )
    got = softmax(x)
    assert torch.isfinite(got).all()
    assert_close(got, torch.softmax(x.double(), -1).to(dtype), dtype=dtype, what="softmax")
    assert_close(got.double().sum(-1), torch.ones(4, dtype=torch.float64), dtype=dtype, what="row sums")


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_neg_inf_entries_and_fully_masked_rows(dtype):
    inf = float("inf")
    x = torch.tensor([[-inf, 0.0, 1.0], [-inf, -inf, -inf], [2.0, -inf, -inf]], dtype=dtype)
    e = math.e
    expected = torch.tensor([[0.0, 1 / (1 + e), e / (1 + e)], [0, 0, 0], [1, 0, 0]], dtype=torch.float64)
    assert_close(softmax(x, -1), expected.to(dtype), dtype=dtype, what="dim=-1")
    assert_close(softmax(x.T, 0), expected.T.to(dtype), dtype=dtype, what="dim=0")
    assert_close(softmax(x[None].expand(2, 3, 3), 2), expected.expand(2, 3, 3).to(dtype), dtype=dtype, what="dim=2")


def test_softmax_scalar_accepts_dim_0_and_minus_1_like_torch():
    x = torch.tensor(3.0)
    for dim in (0, -1):
        assert_close(softmax(x, dim), torch.softmax(x, dim))
    with pytest.raises(ValueError, match=r"\[-1, 0\].*shape \(\).*got 1"):
        softmax(x, 1)


# ----------------------------------------------------------------------------- attention

MASK_LAYOUTS = ["none", "TS", "S", "B11S", "B1TS", "1HTS", "leadTS", "float_TS", "float_lead1S", "causal"]


def _sdpa_configs(n=60):
    rng = random.Random(2002)
    configs = []
    for i in range(n):
        rank = i % 4  # leading dims 0..3
        configs.append(
            dict(
                lead=tuple(rng.randint(1, 3) for _ in range(rank)),
                T=rng.choice([1, 2, 5, 7]),
                S=rng.choice([1, 3, 6]),
                D=rng.choice([1, 4, 16]),
                Dv=rng.choice([1, 3, 8]),
                dtype=DTYPES[(i // 4) % 4],
                mask=MASK_LAYOUTS[i % len(MASK_LAYOUTS)],
                scale=rng.choice([None, 0.25, 1.5]),
                seed=i,
            )
        )
    return configs


SDPA_CONFIGS = _sdpa_configs()


def _make_mask(layout, lead, T, S, gen, dtype):
    """A mask in the given layout that keeps key 0 visible to every query (no fully masked row)."""
    if layout == "none":
        return None
    if layout == "causal":
        return causal_mask(T, S)
    ones = (1,) * len(lead)
    first_only = (lead[0], *ones[1:]) if lead else ()  # (B, 1, ..., 1)
    last_only = (*ones[:-1], lead[-1]) if lead else ()  # (1, ..., 1, H)
    shape = {
        "TS": (T, S),
        "S": (S,),
        "B11S": (*first_only, 1, S),
        "B1TS": (*first_only, T, S),
        "1HTS": (*last_only, T, S),
        "leadTS": (*lead, T, S),
        "float_TS": (T, S),
        "float_lead1S": (*lead, 1, S),
    }[layout]
    allowed = torch.rand(shape, generator=gen) < 0.6
    allowed[..., 0] = True
    if layout.startswith("float"):
        bias = torch.randn(shape, generator=gen, dtype=torch.float64)
        return torch.where(allowed, bias, torch.full_like(bias, float("-inf"))).to(dtype)
    return allowed


def _torch_reference(q, k, v, mask, scale):
    """float64 torch SDPA output and weights (weights = SDPA with v = identity)."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2])
    T, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q, k, v = (x.double() for x in (q, k, v))
    q, k, v = q.expand(*lead, T, D), k.expand(*lead, S, D), v.expand(*lead, S, Dv)
    if mask is not None:
        mask = mask if mask.dtype == torch.bool else mask.double()
        mask = mask.expand(*lead, T, S)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    eye = torch.eye(S, dtype=torch.float64).expand(*lead, S, S)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    return out, weights


@pytest.mark.parametrize("c", SDPA_CONFIGS, ids=_ids(SDPA_CONFIGS))
def test_sdpa_matches_torch(c):
    gen = torch.Generator().manual_seed(c["seed"])
    dtype, lead, T, S = c["dtype"], c["lead"], c["T"], c["S"]
    q = torch.randn(*lead, T, c["D"], generator=gen).to(dtype)
    k = torch.randn(*lead, S, c["D"], generator=gen).to(dtype)
    v = torch.randn(*lead, S, c["Dv"], generator=gen).to(dtype)
    mask = _make_mask(c["mask"], lead, T, S, gen, dtype)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=c["scale"])
    ref_out, ref_weights = _torch_reference(q, k, v, mask, c["scale"])
    assert out.dtype == weights.dtype == dtype
    assert_close(out, ref_out.to(dtype), dtype=dtype, what="out")
    assert_close(weights, ref_weights.to(dtype), dtype=dtype, what="weights")
    # the returned weights are the softmax of the (masked, scaled) scores
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["D"])
    scores = q.double() @ k.double().transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    assert_close(weights, torch.softmax(scores, -1).expand_as(weights).to(dtype), dtype=dtype, what="softmax(scores)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_are_zeros_where_torch_may_give_nan(dtype, kind):
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen).to(dtype) for n in (4, 5, 5))
    allowed = torch.rand(2, 1, 4, 5, generator=gen) < 0.7
    allowed[..., 0] = True
    allowed[0, :, 2] = False  # query 2 of batch 0 sees nothing
    allowed[1, :, :, :] = False  # batch 1 sees nothing at all
    mask = allowed if kind == "bool" else torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.equal(out[0, :, 2], torch.zeros_like(out[0, :, 2])) and not out[1].any() and not weights[1].any()
    assert not weights[0, :, 2].any()
    q_rest = q[0:1, :, [0, 1, 3]]
    ref_out, _ = _torch_reference(q_rest, k[0:1], v[0:1], allowed[0:1, :, [0, 1, 3]], None)
    assert_close(out[0:1, :, [0, 1, 3]], ref_out.to(dtype), dtype=dtype, what="rows that see something")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_scores_beyond_the_dtype_range_stay_finite(dtype):
    gen = torch.Generator().manual_seed(3)
    q = (torch.randn(2, 6, 64, generator=gen) * 60).to(dtype)  # q.k reaches ~1e5 > float16's 65504
    k = (torch.randn(2, 7, 64, generator=gen) * 60).to(dtype)
    v = torch.randn(2, 7, 16, generator=gen).to(dtype)
    assert (q.double() @ k.double().mT).abs().max() > 65504
    out, weights = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    ref_out, ref_weights = _torch_reference(q, k, v, None, None)
    assert_close(out, ref_out.to(dtype), dtype=dtype, what="out")
    assert_close(weights, ref_weights.to(dtype), dtype=dtype, what="weights")


def test_mask_leading_dims_widen_the_output_like_broadcasting():
    gen = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(4, 8, generator=gen), torch.randn(5, 8, generator=gen), torch.randn(5, 3, generator=gen)
    mask = torch.rand(2, 3, 4, 5, generator=gen) < 0.7
    mask[..., 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert out.shape == (2, 3, 4, 3) and weights.shape == (2, 3, 4, 5)
    ref_out, ref_weights = _torch_reference(q, k, v, mask, None)
    assert_close(out, ref_out.float())
    assert_close(weights, ref_weights.float())


# ----------------------------------------------------------------------------- masks


@pytest.mark.parametrize("T,S", [(1, 1), (3, 3), (2, 6), (6, 2), (5, 4), (1, 7), (7, 1)])
def test_causal_mask_is_top_left_like_is_causal(T, S):
    assert torch.equal(causal_mask(T, S), torch.ones(T, S, dtype=torch.bool).tril())
    gen = torch.Generator().manual_seed(T * 10 + S)
    q, k, v = (
        torch.randn(2, T, 4, generator=gen),
        torch.randn(2, S, 4, generator=gen),
        torch.randn(2, S, 3, generator=gen),
    )
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(T, S))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    for diagonal in range(-T, S + 1):
        assert torch.equal(causal_mask(T, S, diagonal=diagonal), torch.ones(T, S, dtype=torch.bool).tril(diagonal))
    # decoding alignment: the last query sees every key
    assert causal_mask(T, S, diagonal=S - T)[-1].all()


def test_padding_mask_from_list_tensor_zero_lengths_and_bounds():
    expected = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    for lengths in ([2, 0, 4], torch.tensor([2, 0, 4]), torch.tensor([2, 0, 4], dtype=torch.int32), (2, 0, 4)):
        got = padding_mask(lengths, 4)
        assert got.dtype == torch.bool and torch.equal(got, expected)
    assert padding_mask([], 3).shape == (0, 1, 1, 3)
    with pytest.raises(ValueError, match=r"\[0, S=4\].*\[2, 5\]"):
        padding_mask([2, 5], 4)
    with pytest.raises(ValueError, match=r"\[0, S=4\].*-1"):
        padding_mask([-1], 4)


def test_adapters_agree_with_nn_multiheadattention():
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    B, T, S, E, H = 2, 4, 5, 8, 2
    module = nn.MultiheadAttention(E, H, batch_first=True).eval()
    x, kv = torch.randn(B, T, E, generator=gen), torch.randn(B, S, E, generator=gen)
    allowed = torch.rand(T, S, generator=gen) < 0.6
    allowed[:, 0] = True
    real = padding_mask([5, 3], S)
    with torch.no_grad():
        by_hand = module(x, kv, kv, attn_mask=~allowed, key_padding_mask=~real[:, 0, 0])[1]
        adapted = module(x, kv, kv, attn_mask=to_torch_attn_mask(allowed), key_padding_mask=to_key_padding_mask(real))[
            1
        ]
    assert torch.equal(by_hand, adapted)
    assert torch.equal(from_torch_attn_mask(to_torch_attn_mask(allowed)), allowed)
    assert torch.equal(from_key_padding_mask(to_key_padding_mask(real)), real)
    assert torch.equal(to_key_padding_mask(real[:, 0, 0]), ~real[:, 0, 0])
    assert torch.equal(invert_bool_mask(allowed), ~allowed)
    bias = torch.randn(T, S, generator=gen)
    assert to_torch_attn_mask(bias) is bias and from_torch_attn_mask(bias) is bias


# ----------------------------------------------------------------------------- heads


@pytest.mark.parametrize(
    "B,T,H,D,contiguous",
    [(1, 1, 1, 1, True), (2, 5, 3, 4, True), (3, 2, 4, 1, False), (2, 0, 2, 3, True), (1, 7, 1, 6, False)],
)
def test_split_merge_round_trip_and_manual_reshape(B, T, H, D, contiguous):
    gen = torch.Generator().manual_seed(B * 100 + T)
    x = (
        torch.randn(B, T, H * D, generator=gen)
        if contiguous
        else torch.randn(T, B, H * D, generator=gen).transpose(0, 1)
    )
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, D)
    for h in range(H):
        assert torch.equal(heads[:, h], x[..., h * D : (h + 1) * D])
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(split_heads(merge_heads(heads), H), heads)
