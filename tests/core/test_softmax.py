"""softmax: agrees with torch, rows sum to 1, shift invariant, stable for huge logits and half precision."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.softmax import softmax
from mha_course.testing import assert_close

FAST = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def tensor_and_dim(draw, max_rank=4):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=max_rank)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    spread = draw(st.sampled_from([0.1, 1.0, 10.0, 100.0]))
    return spread * torch.randn(shape, generator=gen, dtype=torch.float64), dim


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@FAST
@given(case=tensor_and_dim())
def test_matches_torch_softmax(case, dtype):
    x, dim = case
    x = x.to(dtype)
    result = softmax(x, dim=dim)
    assert result.dtype == dtype and result.shape == x.shape
    assert_close(result, torch.softmax(x, dim=dim))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@FAST
@given(case=tensor_and_dim())
def test_half_precision_within_dtype_tolerance(case, dtype):
    x, dim = case
    x = x.to(dtype)
    result = softmax(x, dim=dim)
    assert result.dtype == dtype and result.shape == x.shape
    assert_close(result, torch.softmax(x.double(), dim=dim), dtype=dtype)


@FAST
@given(case=tensor_and_dim())
def test_rows_sum_to_one_and_are_non_negative(case):
    x, dim = case
    result = softmax(x, dim=dim)
    assert bool((result >= 0).all())
    sums = result.sum(dim=dim)
    assert_close(sums, torch.ones_like(sums))


@FAST
@given(case=tensor_and_dim(), shift=st.floats(-1e4, 1e4))
def test_shift_invariance(case, shift):
    """softmax(x + c) == softmax(x): also a per-row shift."""
    x, dim = case
    per_row = shift * torch.rand_like(x.sum(dim=dim, keepdim=True))
    assert_close(softmax(x + shift, dim=dim), softmax(x, dim=dim), dtype=torch.float32)
    assert_close(softmax(x + per_row, dim=dim), softmax(x, dim=dim), dtype=torch.float32)


@pytest.mark.parametrize(
    "dtype,magnitude",
    [
        (torch.float32, 1e4),
        (torch.float32, 1e30),
        (torch.float32, 3e38),
        (torch.float64, 1e300),
        (torch.float16, 6e4),
        (torch.bfloat16, 1e30),
    ],
)
def test_huge_logits_stay_finite(dtype, magnitude):
    x = torch.tensor(
        [[magnitude, magnitude / 2, -magnitude], [-magnitude, -magnitude, -magnitude], [0.0, magnitude, 1.0]],
        dtype=dtype,
    )
    result = softmax(x)
    assert torch.isfinite(result).all(), result
    expected = torch.tensor([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]], dtype=dtype)
    assert_close(result, expected)


def test_float16_logits_that_overflow_exp():
    """exp(12) > 65504: a naive float16 softmax gives inf / inf = NaN; the stable one does not."""
    x = torch.tensor([12.0, 11.0, 10.0], dtype=torch.float16)
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isnan(naive).any() or torch.isinf(torch.exp(x)).any()  # the hazard is real
    assert_close(softmax(x), torch.softmax(x.double(), dim=0), dtype=torch.float16)


def test_fully_masked_row_gives_zeros_partially_masked_row_ignores_masked():
    ninf = float("-inf")
    x = torch.tensor([[ninf, ninf, ninf], [0.5, ninf, 1.5], [1.0, 2.0, 3.0]])
    result = softmax(x)
    assert not torch.isnan(result).any()
    assert bool((result[0] == 0).all())
    assert result[1, 1] == 0
    assert_close(result[1, [0, 2]], torch.softmax(x[1, [0, 2]], dim=0))
    assert_close(result[2], torch.softmax(x[2], dim=0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fully_masked_row_half(dtype):
    x = torch.full((2, 4), float("-inf"), dtype=dtype)
    x[1, 2] = 3.0
    result = softmax(x)
    assert torch.equal(result, torch.tensor([[0.0, 0, 0, 0], [0, 0, 1, 0]], dtype=dtype))


def test_nan_propagates():
    x = torch.tensor([[1.0, float("nan")], [1.0, 2.0]])
    result = softmax(x)
    assert torch.isnan(result[0]).all() and not torch.isnan(result[1]).any()


def test_empty_axis_and_scalar():
    assert softmax(torch.zeros(3, 0)).shape == (3, 0)
    assert softmax(torch.zeros(0, 3)).shape == (0, 3)
    assert_close(softmax(torch.tensor(5.0), dim=0), torch.tensor(1.0))


def test_input_not_modified():
    x = torch.randn(4, 5)
    before = x.clone()
    softmax(x)
    assert torch.equal(x, before)


def test_gradcheck():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax(t, dim=-1), (x,))
    assert torch.autograd.gradcheck(lambda t: softmax(t, dim=0), (x,))


def test_gradient_matches_torch_and_is_finite_on_masked_rows():
    x = torch.randn(3, 4, dtype=torch.float64)
    x[1] = float("-inf")
    x[2, 0] = float("-inf")
    grad_out = torch.randn(3, 4, dtype=torch.float64)
    ours = x.clone().requires_grad_()
    (softmax(ours) * grad_out).sum().backward()
    assert torch.isfinite(ours.grad).all()
    assert bool((ours.grad[1] == 0).all())
    theirs = x.clone().requires_grad_()
    (torch.softmax(theirs, dim=-1)[[0, 2]] * grad_out[[0, 2]]).sum().backward()
    assert_close(ours.grad[[0, 2]], theirs.grad[[0, 2]])


@pytest.mark.parametrize("bad", [[1.0, 2.0], 3.0, None])
def test_non_tensor_raises_type_error(bad):
    with pytest.raises(TypeError, match="torch.Tensor"):
        softmax(bad)


def test_integer_tensor_raises_type_error():
    with pytest.raises(TypeError, match="int64"):
        softmax(torch.arange(4))


@pytest.mark.parametrize("dim", [2, -3, 5])
def test_dim_out_of_range_names_shape(dim):
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        softmax(torch.zeros(3, 4), dim=dim)
