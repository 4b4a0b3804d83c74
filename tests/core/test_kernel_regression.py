"""Nadaraya-Watson regression: against a loop over the kernel's formula, and as dot-product attention."""

import math

import pytest
import torch

from mha_course import attention_loop_reference, scaled_dot_product_attention
from mha_course.core.kernel_regression import as_attention, nadaraya_watson
from mha_course.testing import assert_close


def test_against_the_kernel_formula_in_a_loop():
    torch.manual_seed(0)
    x_train, y_train = torch.rand(9, dtype=torch.float64) * 5, torch.randn(9, dtype=torch.float64)
    x_query, h = torch.linspace(-1, 6, 7, dtype=torch.float64), 0.7
    pred, weights = nadaraya_watson(x_query, x_train, y_train, h)
    for t, x in enumerate(x_query.tolist()):
        kernel = [math.exp(-((x - xi) ** 2) / (2 * h * h)) for xi in x_train.tolist()]
        assert float(pred[t]) == pytest.approx(
            sum(k * y for k, y in zip(kernel, y_train.tolist(), strict=True)) / sum(kernel), rel=1e-9
        )
    assert_close(weights.sum(-1), torch.ones(7, dtype=torch.float64))


def test_it_is_dot_product_attention_with_a_float_mask():
    torch.manual_seed(1)
    x_train, y_train = torch.rand(12, dtype=torch.float64) * 5, torch.randn(12, 3, dtype=torch.float64)
    x_query = torch.linspace(0, 5, 10, dtype=torch.float64)
    pred, weights = nadaraya_watson(x_query, x_train, y_train, 0.4)
    q, k, bias = as_attention(x_query, x_train, 0.4)
    out, w = scaled_dot_product_attention(q, k, y_train, mask=bias, scale=1.0)
    assert_close(out, pred)
    assert_close(w, weights)
    ref_out, _ = attention_loop_reference(q, k, y_train, mask=bias.expand(10, 12), scale=1.0)
    assert_close(pred, ref_out)


def test_bandwidth_is_the_temperature():
    x_train, y_train = torch.arange(5.0), torch.arange(5.0) * 10
    _, sharp = nadaraya_watson(torch.tensor([1.2]), x_train, y_train, 0.05)
    _, flat = nadaraya_watson(torch.tensor([1.2]), x_train, y_train, 100.0)
    assert float(sharp[0, 1]) > 0.999  # the nearest point takes everything
    assert_close(flat[0], torch.full((5,), 0.2), dtype=torch.float16)  # almost uniform


def test_bad_inputs_name_what_was_expected():
    x = torch.rand(4)
    with pytest.raises(ValueError, match="> 0"):
        nadaraya_watson(x, x, x, 0.0)
    with pytest.raises(TypeError, match="bandwidth"):
        nadaraya_watson(x, x, x, "wide")
    with pytest.raises(ValueError, match=r"\(S=4, ...\)"):
        nadaraya_watson(x, x, torch.rand(3), 1.0)
    with pytest.raises(ValueError, match=r"\(T,\)"):
        nadaraya_watson(torch.rand(2, 2), x, x, 1.0)
    with pytest.raises(TypeError, match="floating"):
        as_attention(torch.arange(3), x, 1.0)
