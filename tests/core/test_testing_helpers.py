"""assert_close must be able to fail: shapes, NaN placement, values off tolerance; equal infs pass."""

import numpy as np
import pytest
import torch

from mha_course.testing import TOLERANCES, assert_close, tolerance


def test_equal_values_pass_and_nothing_is_returned():
    x = torch.randn(3, 4)
    assert assert_close(x, x.clone()) is None


def test_shape_mismatch_raises():
    with pytest.raises(AssertionError, match=r"shape \(3, 4\) != expected \(4, 3\)"):
        assert_close(torch.zeros(3, 4), torch.zeros(4, 3))
    with pytest.raises(AssertionError, match="shape"):
        assert_close(torch.zeros(1, 3), torch.zeros(3))  # broadcastable is not enough


def test_nan_placement():
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert_close(a, a.clone())  # NaN in the same place passes
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(a, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(torch.tensor([1.0, 2.0, 3.0]), a)
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(a, torch.tensor([float("nan"), 2.0, 3.0]))


def test_infinities():
    inf = float("inf")
    assert_close(torch.tensor([inf, -inf, 1.0]), torch.tensor([inf, -inf, 1.0]))
    for actual, expected in (([inf], [-inf]), ([inf], [1e30]), ([1e30], [inf]), ([-inf], [0.0])):
        with pytest.raises(AssertionError, match="mismatch"):
            assert_close(torch.tensor(actual), torch.tensor(expected))


@pytest.mark.parametrize("dtype", list(TOLERANCES))
def test_tolerance_edges(dtype):
    atol, rtol = tolerance(dtype)
    expected = torch.tensor([0.0, 1.0, -100.0], dtype=torch.float64)
    inside = expected + 0.5 * (atol + rtol * expected.abs())
    outside = expected.clone()
    outside[1] += 2 * (atol + rtol)
    assert_close(inside, expected, dtype=dtype)
    with pytest.raises(AssertionError, match=r"mismatch at \(1,\)"):
        assert_close(outside, expected, dtype=dtype)


def test_default_tolerance_comes_from_actual_dtype():
    expected = torch.ones(3, dtype=torch.float64)
    assert_close(expected.half() + 1e-3, expected)  # float16 tolerance
    with pytest.raises(AssertionError):
        assert_close(expected + 1e-3, expected)  # float64 tolerance


def test_table_is_ordered_by_precision():
    order = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
    atols = [TOLERANCES[d][0] for d in order]
    assert atols == sorted(atols)
    for d in order:  # each tolerance is above the dtype's own rounding
        assert TOLERANCES[d][1] >= torch.finfo(d).eps / 2


def test_numpy_and_exact_dtypes():
    assert tolerance(np.float32) == TOLERANCES[torch.float32]
    assert tolerance(np.dtype("float16")) == TOLERANCES[torch.float16]
    assert_close(np.ones(3), torch.ones(3, dtype=torch.float64))
    assert_close(torch.tensor([True, False]), torch.tensor([True, False]))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([True, False]), torch.tensor([True, True]))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([1, 2]), torch.tensor([1, 3]))
    with pytest.raises(ValueError, match="no tolerance"):
        tolerance(torch.complex32)


def test_message_names_the_worst_element():
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    actual[0, 0] = 0.1
    with pytest.raises(AssertionError, match=r"weights: mismatch at \(1, 2\): got 0.5, expected 0"):
        assert_close(actual, expected, what="weights")


def test_empty_tensors_pass():
    assert_close(torch.zeros(0, 3), torch.zeros(0, 3))
