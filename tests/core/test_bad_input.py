"""Bad input raises TypeError/ValueError, and the message names the expected and the actual shape.

The first tests probe attention and MultiHeadAttention case by case; the table at the end walks every
public entry point once: a ValueError/TypeError whose message says what was expected and what it got,
never a bare torch/NumPy internal error."""

import re

import numpy as np
import pytest
import torch
from torch import nn

from mha_course import (
    MultiHeadAttention,
    attention_backward,
    causal_mask,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    softmax_np,
    split_heads,
    tiled_attention,
)
from mha_course.core.attention import scaled_dot_product_attention as sdpa
from mha_course.core.attention import scaled_dot_product_attention_np as sdpa_np
from mha_course.core.masks import from_torch_attn_mask, to_torch_attn_mask
from mha_course.core.positions import LearnedPositions, apply_rotary
from mha_course.inference.kv_cache import KVCache, decode_step
from mha_course.inference.variants import (
    GroupedQueryAttention,
    grouped_query_attention,
    linformer_projections,
    repeat_kv,
    sliding_window_mask,
)
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


# --- every public entry point once ------------------------------------------------------------
q4, k4, v4 = torch.zeros(2, 3, 4, 8), torch.zeros(2, 3, 5, 8), torch.zeros(2, 3, 5, 6)
g4 = torch.zeros(2, 3, 4, 6)
MHA = MultiHeadAttention(8, 2)
X = torch.zeros(2, 4, 8)

# (label, call, exception, regex the message must match: expected ... actual)
CASES = [
    (
        "sdpa q/k D differ",
        lambda: scaled_dot_product_attention(q4, torch.zeros(2, 3, 5, 7), v4),
        ValueError,
        r"same last dim D.*\(2, 3, 4, 8\).*\(2, 3, 5, 7\)",
    ),
    (
        "sdpa k/v S differ",
        lambda: scaled_dot_product_attention(q4, k4, torch.zeros(2, 3, 6, 6)),
        ValueError,
        r"same length S.*S=5.*S=6",
    ),
    (
        "sdpa rank 1",
        lambda: scaled_dot_product_attention(torch.zeros(8), k4, v4),
        ValueError,
        r"\(\.\.\., T, D\).*got \(8,\)",
    ),
    (
        "sdpa non-tensor",
        lambda: scaled_dot_product_attention(np.zeros((4, 8)), k4, v4),
        TypeError,
        r"q must be a torch.Tensor, got ndarray",
    ),
    (
        "sdpa integer",
        lambda: scaled_dot_product_attention(q4.long(), k4.long(), v4.long()),
        TypeError,
        r"floating-point.*int64",
    ),
    (
        "sdpa batch",
        lambda: scaled_dot_product_attention(q4, torch.zeros(3, 3, 5, 8), torch.zeros(3, 3, 5, 6)),
        ValueError,
        r"broadcast.*q \(2, 3\).*k \(3, 3\)",
    ),
    (
        "sdpa mask transposed",
        lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(5, 4, dtype=torch.bool)),
        ValueError,
        r"T=4, S=5.*got \(5, 4\)",
    ),
    (
        "sdpa mask batch",
        lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(3, 1, 4, 5, dtype=torch.bool)),
        ValueError,
        r"\(2, 3, 4, 5\).*got \(3, 1, 4, 5\)",
    ),
    (
        "sdpa mask int",
        lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(4, 5, dtype=torch.int64)),
        TypeError,
        r"bool.*floating.*int64",
    ),
    (
        "backward mask batch",
        lambda: attention_backward(q4, k4, v4, g4, mask=torch.ones(3, 1, 4, 5, dtype=torch.bool)),
        ValueError,
        r"\(2, 3, 4, 5\).*got \(3, 1, 4, 5\)",
    ),
    (
        "backward grad_out",
        lambda: attention_backward(q4, k4, v4, g4[..., :5]),
        ValueError,
        r"\(2, 3, 4, 6\), got \(2, 3, 4, 5\)",
    ),
    (
        "tiled D",
        lambda: tiled_attention(q4, torch.zeros(2, 3, 5, 7), v4, 2),
        ValueError,
        r"\(2, 3, 4, 8\).*\(2, 3, 5, 7\)",
    ),
    ("mha E % H", lambda: MultiHeadAttention(10, 3), ValueError, r"embed_dim=10.*num_heads=3"),
    ("mha rank", lambda: MHA(torch.zeros(4, 8)), ValueError, r"\(B, T, E\).*got \(4, 8\)"),
    ("mha E", lambda: MHA(torch.zeros(2, 4, 6)), ValueError, r"E=8.*got \(2, 4, 6\)"),
    ("mha k/v S", lambda: MHA(X, torch.zeros(2, 5, 8), torch.zeros(2, 6, 8)), ValueError, r"\(2, 5, 8\).*\(2, 6, 8\)"),
    (
        "mha mask",
        lambda: MHA(X, mask=torch.ones(4, 5, dtype=torch.bool)),
        ValueError,
        r"\(B=2, H=2, T=4, S=4\).*got \(4, 5\)",
    ),
    ("mha mask dtype", lambda: MHA(X, mask=torch.ones(4, 4, dtype=torch.int64)), TypeError, r"int64"),
    ("mha int input", lambda: MHA(X.long()), TypeError, r"floating-point.*int64"),
    ("split E % H", lambda: split_heads(torch.zeros(2, 3, 10), 3), ValueError, r"E=10.*\(2, 3, 10\).*num_heads=3"),
    ("split H = 0", lambda: split_heads(torch.zeros(2, 3, 10), 0), ValueError, r"positive.*num_heads=0"),
    ("merge rank", lambda: merge_heads(torch.zeros(2, 3, 10)), ValueError, r"\(B, H, T, D\).*\(2, 3, 10\)"),
    ("softmax dim type", lambda: softmax(torch.zeros(3, 4), 1.0), TypeError, r"dim must be an int, got float"),
    ("softmax dim None", lambda: softmax(torch.zeros(3, 4), None), TypeError, r"dim must be an int, got NoneType"),
    ("softmax dim range", lambda: softmax(torch.zeros(3, 4), 2), ValueError, r"\[-2, 1\].*\(3, 4\).*got 2"),
    ("softmax_np axis range", lambda: softmax_np(np.zeros((3, 4)), 2), ValueError, r"\[-2, 1\].*\(3, 4\).*got 2"),
    ("softmax_np axis type", lambda: softmax_np(np.zeros((3, 4)), 1.0), TypeError, r"axis must be an int"),
    ("causal float", lambda: causal_mask(3.0), TypeError, r"T must be an int, got float"),
    ("padding > S", lambda: padding_mask([2, 5], 4), ValueError, r"\[0, S=4\].*\[2, 5\]"),
    ("padding str", lambda: padding_mask("ab", 4), TypeError, r"lengths must be a \(B,\) sequence of ints"),
    ("padding float", lambda: padding_mask([1.5], 4), TypeError, r"integers.*float"),
    ("padding 2-D", lambda: padding_mask([[1, 2]], 4), ValueError, r"\(B,\).*\(1, 2\)"),
    (
        "to_torch_attn_mask int",
        lambda: to_torch_attn_mask(torch.ones(2, 3, dtype=torch.int64)),
        TypeError,
        r"bool or floating.*int64",
    ),
    (
        "from_torch_attn_mask int",
        lambda: from_torch_attn_mask(torch.ones(2, 3, dtype=torch.uint8)),
        TypeError,
        r"bool or floating.*uint8",
    ),
    (
        "gqa D",
        lambda: grouped_query_attention(torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 3, 7), torch.zeros(1, 2, 3, 8)),
        ValueError,
        r"one D.*\(1, 4, 3, 8\).*\(1, 2, 3, 7\)",
    ),
    ("repeat_kv float", lambda: repeat_kv(torch.zeros(1, 2, 3, 4), 4.0), TypeError, r"num_heads must be an int"),
    ("GQA module float", lambda: GroupedQueryAttention(8.0, 2, 1), TypeError, r"embed_dim must be an int"),
    ("GQA module E", lambda: GroupedQueryAttention(8, 2, 1)(torch.zeros(1, 3, 6)), ValueError, r"E=8.*\(1, 3, 6\)"),
    ("window float", lambda: sliding_window_mask(3.5, 1), TypeError, r"T must be an int"),
    ("linformer rank float", lambda: linformer_projections(4, 2.0), TypeError, r"rank must be an int"),
    ("KVCache max_len bool", lambda: KVCache(1, 2, 4, max_len=True), TypeError, r"max_len.*True"),
    (
        "decode_step k rank",
        lambda: decode_step(torch.zeros(1, 2, 1, 4), torch.zeros(2, 1, 4), torch.zeros(1, 2, 1, 4), KVCache(1, 2, 4)),
        ValueError,
        r"\(B, G, T, D\).*\(2, 1, 4\)",
    ),
    (
        "rope positions list",
        lambda: apply_rotary(torch.zeros(3, 4), [0, 1, 2]),
        TypeError,
        r"positions must be a torch.Tensor, got list",
    ),
    ("learned positions", lambda: LearnedPositions(0, 4), ValueError, r"max_len must be a positive int, got 0"),
    (
        "from_torch kdim",
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4)),
        ValueError,
        r"embed_dim=8.*kdim=4",
    ),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_readable_error(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    message = str(info.value)
    assert type(info.value) in (ValueError, TypeError), type(info.value)
    assert 20 <= len(message) <= 400, message  # says something, and fits on a screen
