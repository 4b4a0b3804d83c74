"""attention_backward: the hand-derived gradients against autograd, torch's SDPA and gradcheck."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.masks import causal_mask
from mha_course.core.softmax import softmax
from mha_course.efficient.gradients import attention_backward, manual_attention, softmax_jacobian
from mha_course.testing import assert_close

FAST = settings(max_examples=25, deadline=None, derandomize=True)


def make(lead, T, S, D, Dv, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tensors = [
        torch.randn(*lead, n, d, generator=gen, dtype=torch.float64) for n, d in ((T, D), (S, D), (S, Dv), (T, Dv))
    ]
    return [t.to(dtype) for t in tensors]


def autograd_grads(fn, q, k, v, grad_out):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    return torch.autograd.grad(out, (q, k, v), grad_out)


@pytest.mark.parametrize(
    "T,S,D,Dv,causal",
    [
        (5, 5, 4, 4, False),
        (5, 5, 4, 4, True),
        (3, 8, 2, 5, True),
        (8, 3, 6, 1, True),
        (1, 1, 1, 1, False),
    ],
)
def test_matches_autograd_through_torch_sdpa(T, S, D, Dv, causal):
    q, k, v, do = make((2, 3), T, S, D, Dv, seed=T * 10 + S)
    expected = autograd_grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal), q, k, v, do)
    got = attention_backward(q, k, v, do, causal=causal)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert_close(g, e, what=name)


@st.composite
def masked_case(draw):
    T, S = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    D, Dv = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 10**6))
    q, k, v, do = make((2,), T, S, D, Dv, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    mask = None
    if kind == "bool":
        mask = torch.rand(2, T, S, generator=gen) < 0.6  # rows may be fully masked
    elif kind == "float":
        mask = torch.randn(1, T, S, generator=gen, dtype=torch.float64)
    scale = draw(st.one_of(st.none(), st.floats(0.1, 2.0)))
    return q, k, v, do, mask, scale, draw(st.booleans())


@given(masked_case())
@FAST
def test_matches_autograd_through_the_course_attention(case):
    q, k, v, do, mask, scale, causal = case
    T, S = q.shape[-2], k.shape[-2]
    full = mask
    if causal:
        cm = causal_mask(T, S)
        full = cm if mask is None else (mask & cm if mask.dtype == torch.bool else mask.masked_fill(~cm, float("-inf")))
    expected = autograd_grads(lambda a, b, c: sdpa(a, b, c, full, scale)[0], q, k, v, do)
    got = attention_backward(q, k, v, do, mask=mask, scale=scale, causal=causal)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert_close(g, e, what=name)


def test_fully_masked_rows_get_zero_gradients():
    q, k, v, do = make((1,), 4, 5, 3, 3, seed=2)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False
    dq, dk, dv = attention_backward(q, k, v, do, mask=mask)
    assert torch.equal(dq[:, 2], torch.zeros_like(dq[:, 2]))
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()
    # Removing the fully masked query changes neither dk nor dv: it contributed nothing.
    keep = [0, 1, 3]
    _, dk2, dv2 = attention_backward(q[:, keep], k, v, do[:, keep], mask=mask[keep])
    assert_close(dk, dk2, what="dk")
    assert_close(dv, dv2, what="dv")


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_through_the_manual_function(causal):
    q, k, v, _ = make((2,), 4, 6, 3, 2, seed=4)
    inputs = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: manual_attention(a, b, c, causal=causal), inputs)


def test_gradcheck_with_a_float_mask_and_broadcast_keys():
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(2, 3, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b, c: manual_attention(a, b, c, mask, 0.7), (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_low_precision_matches_float64_gradients(dtype):
    q, k, v, do = make((2,), 7, 9, 8, 8, seed=5)
    expected = attention_backward(q, k, v, do)
    got = attention_backward(*(x.to(dtype) for x in (q, k, v, do)))
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        assert g.dtype == dtype
        # Inputs rounded to dtype: compare against the float64 gradients of the rounded inputs.
        e = attention_backward(*(x.to(dtype).double() for x in (q, k, v, do)))[("dq", "dk", "dv").index(name)]
        assert_close(g, e, dtype=dtype, what=name)


def test_softmax_jacobian_matches_autograd():
    x = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    J = softmax_jacobian(softmax(x))
    assert_close(J, torch.autograd.functional.jacobian(lambda t: softmax(t), x), what="Jacobian")
    assert_close(J.sum(dim=0), torch.zeros(6, dtype=torch.float64), what="column sums")
    assert_close(J, J.T, what="symmetry")


@pytest.mark.parametrize(
    "bad,error",
    [
        ("grad_shape", ValueError),
        ("grad_dtype", TypeError),
        ("scale", ValueError),
        ("mask", ValueError),
    ],
)
def test_bad_input_raises(bad, error):
    q, k, v, do = make((2,), 3, 4, 2, 2)
    kwargs = {}
    if bad == "grad_shape":
        do = do[..., :1]
    elif bad == "grad_dtype":
        do = do.long()
    elif bad == "scale":
        kwargs["scale"] = float("inf")
    else:
        kwargs["mask"] = torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(error):
        attention_backward(q, k, v, do, **kwargs)
