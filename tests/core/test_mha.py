"""MultiHeadAttention against torch.nn.MultiheadAttention (weights converted both ways), a per-head loop,
and by its properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.masks import causal_mask, padding_mask, to_key_padding_mask, to_torch_attn_mask
from mha_course.core.mha import MultiHeadAttention
from mha_course.testing import assert_close

FAST = settings(max_examples=25, deadline=None, derandomize=True)


@st.composite
def mha_case(draw):
    """A configuration: sizes with T != S allowed, bias or not, self or cross attention, and masks
    (causal, padding, float, per-batch 3-D) that never block a whole row (torch gives NaN there)."""
    B, T, S = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    H, D = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    cross = draw(st.booleans())
    if not cross:
        S = T
    bias = draw(st.booleans())
    masks = draw(st.sets(st.sampled_from(["causal", "padding", "float", "per_batch"])))
    seed = draw(st.integers(0, 2**31 - 1))
    return dict(B=B, T=T, S=S, H=H, D=D, cross=cross, bias=bias, masks=masks, seed=seed)


def build_inputs(c, dtype=torch.float32):
    """Inputs, our mask (True/float = attend convention) and torch's attn_mask / key_padding_mask."""
    gen = torch.Generator().manual_seed(c["seed"])
    B, T, S, H, E = c["B"], c["T"], c["S"], c["H"], c["H"] * c["D"]
    query = torch.randn(B, T, E, generator=gen, dtype=dtype)
    key = torch.randn(B, S, E, generator=gen, dtype=dtype) if c["cross"] else query
    value = torch.randn(B, S, E, generator=gen, dtype=dtype) if c["cross"] else query
    ours, attn_mask, kpm = None, None, None
    if "causal" in c["masks"]:  # row i sees key 0 at least
        ours, attn_mask = causal_mask(T, S), to_torch_attn_mask(causal_mask(T, S))
    if "float" in c["masks"]:
        bias = torch.randn(T, S, generator=gen, dtype=dtype)
        if attn_mask is not None:
            bias = bias.masked_fill(attn_mask, float("-inf"))
        ours, attn_mask = bias, bias
    if "per_batch" in c["masks"]:  # (B, T, S) for us, (B*H, T, S) for torch
        allowed = torch.rand(B, T, S, generator=gen) < 0.7
        allowed[..., 0] = True
        if ours is not None:
            allowed = allowed & (ours if ours.dtype == torch.bool else ~torch.isneginf(ours))
        ours = allowed if ours is None or ours.dtype == torch.bool else ours.masked_fill(~allowed, float("-inf"))
        attn_mask = to_torch_attn_mask(ours).repeat_interleave(H, dim=0)  # (B*H, T, S)
    if "padding" in c["masks"]:
        lengths = torch.randint(1, S + 1, (B,), generator=gen)  # key 0 is always real
        pad = padding_mask(lengths, S)  # (B, 1, 1, S)
        kpm = to_key_padding_mask(pad)
        if ours is None:
            ours = pad
        elif ours.dtype == torch.bool:
            ours = (ours if ours.dim() == 2 else ours[:, None]) & pad
        else:
            ours = (ours if ours.dim() == 2 else ours[:, None]).masked_fill(~pad, float("-inf"))
            # torch wants key_padding_mask of the same kind as a float attn_mask
            kpm = torch.zeros(B, S, dtype=dtype).masked_fill(kpm, float("-inf"))
    return query, key, value, ours, attn_mask, kpm


def randomise(module, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():  # torch initialises in_proj_bias to zero: make biases count
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return module


def run_torch(theirs, query, key, value, attn_mask, kpm):
    return theirs(
        query, key, value, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=True, average_attn_weights=False
    )


@FAST
@given(c=mha_case())
def test_to_torch_matches(c):
    E = c["H"] * c["D"]
    ours = randomise(MultiHeadAttention(E, c["H"], bias=c["bias"]), c["seed"]).eval()
    theirs = ours.to_torch().eval()
    assert theirs.batch_first and (theirs.in_proj_bias is not None) == c["bias"]
    query, key, value, mask, attn_mask, kpm = build_inputs(c)
    out, weights = ours(query, key, value, mask=mask)
    expected_out, expected_weights = run_torch(theirs, query, key, value, attn_mask, kpm)
    assert weights.shape == (c["B"], c["H"], c["T"], c["S"])
    assert_close(weights, expected_weights, what="weights")
    assert_close(out, expected_out, what="output")


@FAST
@given(c=mha_case())
def test_from_torch_matches(c):
    E = c["H"] * c["D"]
    theirs = randomise(nn.MultiheadAttention(E, c["H"], bias=c["bias"], batch_first=True), c["seed"]).eval()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    assert ours.num_heads == c["H"] and ours.head_dim == c["D"] and (ours.q_proj.bias is not None) == c["bias"]
    query, key, value, mask, attn_mask, kpm = build_inputs(c)
    out, weights = ours(query, key, value, mask=mask)
    expected_out, expected_weights = run_torch(theirs, query, key, value, attn_mask, kpm)
    assert_close(weights, expected_weights, what="weights")
    assert_close(out, expected_out, what="output")


def test_round_trip_keeps_every_weight():
    ours = randomise(MultiHeadAttention(12, 3), 0)
    back = MultiHeadAttention.from_torch(ours.to_torch())
    for (name, p), (name2, p2) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert name == name2 and torch.equal(p, p2), name


def test_from_torch_float64_and_default_self_attention():
    theirs = randomise(nn.MultiheadAttention(8, 2, batch_first=True).double(), 1)
    ours = MultiHeadAttention.from_torch(theirs)
    assert ours.q_proj.weight.dtype == torch.float64
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out, weights = ours(x)  # key and value default to query
    expected_out, expected_weights = theirs(x, x, x, average_attn_weights=False)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_matches_per_head_loop():
    """Head h uses rows h*D .. (h+1)*D of each projection; out_proj mixes the concatenated heads."""
    torch.manual_seed(2)
    E, H, D = 12, 3, 4
    m = randomise(MultiHeadAttention(E, H), 2).double()
    xq, xkv = torch.randn(2, 4, E, dtype=torch.float64), torch.randn(2, 6, E, dtype=torch.float64)
    out, weights = m(xq, xkv, xkv)
    heads = []
    for h in range(H):
        rows = slice(h * D, (h + 1) * D)
        q = xq @ m.q_proj.weight[rows].T + m.q_proj.bias[rows]
        k = xkv @ m.k_proj.weight[rows].T + m.k_proj.bias[rows]
        v = xkv @ m.v_proj.weight[rows].T + m.v_proj.bias[rows]
        head, w = sdpa(q, k, v)
        assert_close(weights[:, h], w, what=f"weights of head {h}")
        heads.append(head)
    assert_close(out, m.out_proj(torch.cat(heads, dim=-1)), what="output")


def test_parameters_and_names():
    m = MultiHeadAttention(16, 4)
    assert {n for n, _ in m.named_children()} >= {"q_proj", "k_proj", "v_proj", "out_proj"}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        layer = getattr(m, name)
        assert isinstance(layer, nn.Linear) and layer.weight.shape == (16, 16)
    assert sum(p.numel() for p in m.parameters()) == 4 * 16 * 16 + 4 * 16
    assert sum(p.numel() for p in MultiHeadAttention(16, 4, bias=False).parameters()) == 4 * 16 * 16
    assert sum(p.numel() for p in MultiHeadAttention(16, 1).parameters()) == 4 * 16 * 16 + 4 * 16
    assert "head_gate" not in m.state_dict()
    assert m.num_heads == 4 and m.head_dim == 4 and m.embed_dim == 16


def test_head_gate_zeroes_one_head():
    m = randomise(MultiHeadAttention(8, 2), 3).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    m.head_gate[1] = 0.0
    gated, _ = m(x)
    with torch.no_grad():
        m.head_gate[1] = 1.0
        m.out_proj.weight[:, 4:] = 0.0  # head 1's columns of W_O
    assert_close(gated, m(x)[0])


def test_self_attention_permutation_equivariance():
    m = randomise(MultiHeadAttention(8, 2), 4).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    out, weights = m(x)
    out_p, weights_p = m(x[:, perm])
    assert_close(out_p, out[:, perm])
    assert_close(weights_p, weights[:, :, perm][..., perm])


def test_causal_self_attention_ignores_the_future():
    m = randomise(MultiHeadAttention(8, 2), 5).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    mask = causal_mask(6)
    out, _ = m(x, mask=mask)
    x2 = x.clone()
    x2[:, 3:] += 3.0
    out2, _ = m(x2, mask=mask)
    assert_close(out2[:, :3], out[:, :3])
    assert not torch.allclose(out2[:, 3:], out[:, 3:])


def test_gradcheck():
    m = randomise(MultiHeadAttention(4, 2), 6).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    mask = padding_mask([1, 2], 2)
    assert torch.autograd.gradcheck(lambda a, b: m(a, b, b, mask=mask)[0], (q, kv))


def test_parameter_gradients_match_torch():
    ours = randomise(MultiHeadAttention(8, 2), 7).double()
    theirs = ours.to_torch()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    ours(x, mask=causal_mask(4))[0].square().sum().backward()
    theirs(x, x, x, attn_mask=to_torch_attn_mask(causal_mask(4)))[0].square().sum().backward()
    d_in = torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad, ours.v_proj.weight.grad])
    assert_close(d_in, theirs.in_proj_weight.grad)
    assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_dropout_only_in_training():
    m = randomise(MultiHeadAttention(8, 2, dropout=0.5), 8)
    x = torch.randn(2, 6, 8)
    m.eval()
    a, b = m(x)[0], m(x)[0]
    assert torch.equal(a, b)
    m.train()
    torch.manual_seed(0)
    assert not torch.allclose(m(x)[0], a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_module(dtype):
    m = randomise(MultiHeadAttention(8, 2), 9)
    x = torch.randn(2, 4, 8)
    ref_out, ref_weights = m.double()(x.double(), mask=causal_mask(4))
    m = m.to(dtype)
    out, weights = m(x.to(dtype), mask=causal_mask(4))
    assert out.dtype == weights.dtype == dtype
    assert torch.isfinite(out).all()
    # the projections themselves run in half precision: allow a few ulps more than one attention call
    atol = {torch.float16: 2e-2, torch.bfloat16: 1.5e-1}[dtype]
    assert (out.double() - ref_out).abs().max() < atol
    assert (weights.double() - ref_weights).abs().max() < atol
