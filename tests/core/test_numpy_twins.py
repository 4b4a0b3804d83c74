"""The NumPy twins (chapters that start in NumPy) agree with the torch versions."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.attention import scaled_dot_product_attention_np as sdpa_np
from mha_course.core.masks import causal_mask
from mha_course.core.softmax import softmax, softmax_np
from mha_course.testing import assert_close

FAST = settings(max_examples=30, deadline=None, derandomize=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@FAST
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1.0, 50.0, 1e4]),
)
def test_softmax_np_matches_softmax(shape, seed, spread, dtype):
    x = (spread * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)
    axis = seed % len(shape) - len(shape)  # some negative axis
    result = softmax_np(x, axis=axis)
    assert result.dtype == dtype and result.shape == x.shape
    assert np.isfinite(result).all()
    assert_close(result, softmax(torch.from_numpy(x), dim=axis))


def test_softmax_np_masked_rows():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    assert_close(softmax_np(x), np.array([[0.0, 0.0], [1.0, 0.0]]))
    assert softmax_np(np.zeros((2, 0))).shape == (2, 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@FAST
@given(
    lead=st.lists(st.integers(1, 3), max_size=2),
    T=st.integers(1, 5),
    S=st.integers(1, 5),
    D=st.integers(1, 4),
    Dv=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    mask_kind=st.sampled_from(["none", "causal", "bool", "float"]),
    scale=st.one_of(st.none(), st.floats(0.1, 2.0)),
)
def test_sdpa_np_matches_torch_version(lead, T, S, D, Dv, seed, mask_kind, scale, dtype):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, T, D)).astype(dtype)
    k = rng.standard_normal((*lead, S, D)).astype(dtype)
    v = rng.standard_normal((*lead, S, Dv)).astype(dtype)
    mask = {
        "none": None,
        "causal": causal_mask(T, S).numpy(),
        "bool": rng.random((T, S)) < 0.5,  # may block whole rows: both give zeros there
        "float": rng.standard_normal((T, S)).astype(dtype),
    }[mask_kind]
    out, weights = sdpa_np(q, k, v, mask=mask, scale=scale)
    assert out.dtype == weights.dtype == dtype
    assert out.shape == (*lead, T, Dv) and weights.shape == (*lead, T, S)
    t_mask = None if mask is None else torch.from_numpy(mask)
    t_out, t_weights = sdpa(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), mask=t_mask, scale=scale)
    assert_close(out, t_out, what="output")
    assert_close(weights, t_weights, what="weights")


def test_sdpa_np_float16_huge_scores():
    q = np.full((2, 4), 250.0, dtype=np.float16)
    k = np.full((3, 4), 250.0, dtype=np.float16)
    k[0] = -250.0
    v = np.arange(6, dtype=np.float16).reshape(3, 2)
    out, weights = sdpa_np(q, k, v)
    assert np.isfinite(out).all()
    assert_close(weights, np.array([[0.0, 0.5, 0.5]] * 2, dtype=np.float16))
