"""Bad input raises TypeError/ValueError, and the message names the expected and the actual shape."""

import re

import numpy as np
import pytest
import torch
from torch import nn

from mha_course.attention import scaled_dot_product_attention as sdpa
from mha_course.attention import scaled_dot_product_attention_np as sdpa_np
from mha_course.mha import MultiHeadAttention
from mha_course.testing import assert_close


def shape(*dims):
    """A regex matching the tuple as Python prints it, e.g. (2, 3, 4)."""
    return re.escape(str(tuple(dims)))


def qkv(q=(2, 3, 4), k=(2, 5, 4), v=(2, 5, 6), dtype=torch.float32):
    return torch.randn(q, dtype=dtype), torch.randn(k, dtype=dtype), torch.randn(v, dtype=dtype)


# --- scaled_dot_product_attention -------------------------------------------------------------


def test_mismatched_query_key_dim():
    q, k, v = qkv(q=(2, 3, 4), k=(2, 5, 7))
    with pytest.raises(ValueError, match=f"{shape(2, 3, 4)}.*{shape(2, 5, 7)}"):
        sdpa(q, k, v)


def test_mismatched_key_value_length():
    q, k, v = qkv(k=(2, 5, 4), v=(2, 6, 6))
    with pytest.raises(ValueError, match=f"S=5.*{shape(2, 6, 6)}|{shape(2, 5, 4)}.*{shape(2, 6, 6)}"):
        sdpa(q, k, v)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_rank_below_two(which):
    q, k, v = qkv()
    bad = {"q": q, "k": k, "v": v}
    bad[which] = torch.randn(4)
    legend = {"q": r"\(\.\.\., T, D\)", "k": r"\(\.\.\., S, D\)", "v": r"\(\.\.\., S, Dv\)"}[which]
    with pytest.raises(ValueError, match=rf"{which} must have shape {legend}.*got {shape(4)}"):
        sdpa(**bad)


def test_unbroadcastable_batch_dims():
    q, k, v = qkv(q=(2, 3, 4), k=(3, 5, 4), v=(3, 5, 6))
    with pytest.raises(ValueError, match=r"q \(2,\).*k \(3,\)"):
        sdpa(q, k, v)


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], np.ones((3, 4)), None, 3.0])
def test_non_tensor_input(bad):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        sdpa(bad, k, v)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_non_floating_input(dtype):
    q, k, v = qkv()
    with pytest.raises(TypeError, match=str(dtype)):
        sdpa(q, k.to(dtype), v)


def test_mixed_dtypes():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="float32.*float64"):
        sdpa(q, k, v.double())


@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), (2, 3, 6), (4, 5), (3, 1, 5)])
def test_mask_of_wrong_shape(mask_shape):
    q, k, v = qkv(q=(2, 3, 4), k=(2, 5, 4), v=(2, 5, 6))
    with pytest.raises(ValueError, match=rf"T=3, S=5|{shape(2, 3, 5)}"):
        sdpa(q, k, v, mask=torch.ones(mask_shape, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape(str(mask_shape))):
        sdpa(q, k, v, mask=torch.ones(mask_shape, dtype=torch.bool))


def test_mask_wrong_shape_message_names_scores_shape():
    q, k, v = qkv(q=(2, 3, 4), k=(2, 5, 4), v=(2, 5, 6))
    with pytest.raises(ValueError, match=rf"T=3, S=5.*{shape(3, 4)}"):
        sdpa(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_mask_of_wrong_dtype(dtype):
    q, k, v = qkv()
    with pytest.raises(TypeError, match=str(dtype)):
        sdpa(q, k, v, mask=torch.ones(3, 5, dtype=dtype))


def test_mask_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        sdpa(q, k, v, mask=[[True] * 5] * 3)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scale(scale):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="scale must be a finite number"):
        sdpa(q, k, v, scale=scale)


@pytest.mark.parametrize("scale", ["0.5", True, torch.tensor(0.5), [0.5]])
def test_scale_of_the_wrong_type(scale):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="scale must be a real number"):
        sdpa(q, k, v, scale=scale)


@pytest.mark.parametrize("scale", [0, 0.0, -1.0, -0.3])
def test_zero_and_negative_scales_behave_like_torch(scale):
    q, k, v = qkv()
    out, weights = sdpa(q.double(), k.double(), v.double(), scale=scale)
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale)
    assert_close(out, expected)
    if scale == 0:
        assert_close(weights, torch.full_like(weights, 1 / weights.shape[-1]))


def test_numpy_scalar_scale_is_fine():
    q, k, v = qkv(dtype=torch.float64)
    assert torch.allclose(sdpa(q, k, v, scale=np.float32(0.5))[0], sdpa(q, k, v, scale=0.5)[0])


def test_zero_head_dim_without_scale():
    q, k, v = qkv(q=(3, 0), k=(5, 0), v=(5, 2))
    with pytest.raises(ValueError, match="D=0"):
        sdpa(q, k, v)


# --- MultiHeadAttention -----------------------------------------------------------------------


@pytest.mark.parametrize("E,H", [(10, 3), (8, 0), (0, 2), (-4, 2), (4, 8)])
def test_embed_dim_not_divisible(E, H):
    with pytest.raises(ValueError, match=f"embed_dim={E}.*num_heads={H}"):
        MultiHeadAttention(E, H)


@pytest.mark.parametrize("E,H", [(8.0, 2), (8, 2.0), ("8", 2), (8, True)])
def test_non_int_sizes(E, H):
    with pytest.raises(TypeError, match="must be an int"):
        MultiHeadAttention(E, H)


@pytest.mark.parametrize("x_shape", [(4, 8), (1, 2, 4, 8), (8,)])
def test_mha_wrong_rank(x_shape):
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=rf"\(B, T, E\).*{shape(*x_shape)}"):
        m(torch.randn(x_shape))


def test_mha_wrong_embed_dim():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=rf"E=8.*{shape(2, 3, 6)}"):
        m(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=rf"key.*E=8.*{shape(2, 3, 6)}"):
        m(torch.randn(2, 3, 8), torch.randn(2, 3, 6), torch.randn(2, 3, 8))


def test_mha_key_value_lengths_differ():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=f"{shape(2, 5, 8)}.*{shape(2, 4, 8)}"):
        m(torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 8))


def test_mha_batch_differs():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=f"{shape(2, 3, 8)}.*{shape(3, 5, 8)}"):
        m(torch.randn(2, 3, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8))


def test_mha_non_tensor_and_int_input():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        m([[0.0] * 8])
    with pytest.raises(TypeError, match="int64"):
        m(torch.ones(2, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="float32.*float64"):
        m(torch.randn(2, 3, 8, dtype=torch.float64))


@pytest.mark.parametrize("mask_shape", [(3, 4), (2, 3, 6), (3, 3, 5), (3, 1, 1, 5), (2, 3, 1, 5), (1, 2, 1, 1, 5)])
def test_mha_mask_wrong_shape(mask_shape):
    m = MultiHeadAttention(8, 2)
    x, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=rf"T=3, S=5.*{shape(*mask_shape)}"):
        m(x, kv, kv, mask=torch.ones(mask_shape, dtype=torch.bool))


def test_mha_mask_wrong_dtype():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="int64"):
        m(torch.randn(2, 3, 8), mask=torch.ones(3, 3, dtype=torch.long))


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(TypeError, match="Linear"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True))


# --- NumPy twin ---------------------------------------------------------------------------------


def test_numpy_twin_bad_input():
    q, k, v = np.ones((3, 4)), np.ones((5, 4)), np.ones((5, 2))
    with pytest.raises(TypeError, match="q must be a floating numpy.ndarray"):
        sdpa_np(torch.ones(3, 4), k, v)
    with pytest.raises(TypeError, match="floating"):
        sdpa_np(q.astype(int), k, v)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 3\)"):
        sdpa_np(q, np.ones((5, 3)), v)
    with pytest.raises(ValueError, match=r"\(5, 4\).*\(6, 2\)"):
        sdpa_np(q, k, np.ones((6, 2)))
    with pytest.raises(ValueError, match=r"\(4,\)"):
        sdpa_np(np.ones(4), k, v)
    with pytest.raises(ValueError, match=r"\(3, 5\).*\(3, 4\)"):
        sdpa_np(q, k, v, mask=np.ones((3, 4), dtype=bool))
    with pytest.raises(TypeError, match="int"):
        sdpa_np(q, k, v, mask=np.ones((3, 5), dtype=int))
    with pytest.raises(ValueError, match="scale"):
        sdpa_np(q, k, v, scale=float("nan"))
