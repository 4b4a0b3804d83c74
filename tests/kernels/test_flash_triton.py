"""The Triton FlashAttention kernel against torch and the library (under Triton's interpreter on CPU)."""

import importlib
import sys

import pytest
import torch
import torch.nn.functional as F

import mha_course
from mha_course.testing import assert_close

triton = pytest.importorskip("triton")
flash = importlib.import_module("mha_course.kernels.function")

# Awkward shapes: T not a multiple of the block, T != S both ways, single query, odd head dims.
SHAPES = [
    # B, H, T, S, D, Dv
    (1, 2, 37, 37, 16, 16),
    (2, 1, 50, 21, 80, 32),
    (1, 1, 1, 5, 64, 64),
    (1, 2, 45, 70, 32, 48),
    (1, 1, 33, 33, 128, 128),
    (2, 3, 17, 64, 24, 24),
]


def make_qkv(B, H, T, S, D, Dv, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=gen).to(dtype)
    k = torch.randn(B, H, S, D, generator=gen).to(dtype)
    v = torch.randn(B, H, S, Dv, generator=gen).to(dtype)
    return q, k, v


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matches_torch_sdpa(shape, causal, dtype):
    q, k, v = make_qkv(*shape, dtype)
    out = flash.triton_attention(q, k, v, causal=causal)
    # torch's SDPA in float32 is the yardstick; the tolerance is that of the input dtype.
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    assert out.dtype == dtype and out.shape == expected.shape
    assert_close(out, expected.to(dtype), dtype=dtype, what=f"triton {shape} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_matches_library_with_causal_mask_and_scale(causal):
    q, k, v = make_qkv(1, 2, 40, 40, 32, 32, torch.float32, seed=3)
    mask = mha_course.causal_mask(40) if causal else None
    expected, _ = mha_course.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.3)
    assert_close(flash.triton_attention(q, k, v, causal=causal, scale=0.3), expected)


def test_bfloat16_is_close_to_float32():
    q, k, v = make_qkv(1, 1, 33, 33, 64, 64, torch.bfloat16, seed=1)
    out = flash.triton_attention(q, k, v, causal=True)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert out.dtype == torch.bfloat16
    assert_close(out, expected.to(torch.bfloat16), dtype=torch.bfloat16)


@pytest.mark.parametrize("block_m,block_n", [(16, 16), (32, 16), (64, 32)])
def test_block_sizes_do_not_change_the_result(block_m, block_n):
    q, k, v = make_qkv(1, 1, 70, 70, 32, 32, torch.float32, seed=2)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(flash.triton_attention(q, k, v, causal=True, block_m=block_m, block_n=block_n), expected)


def test_non_contiguous_inputs_and_fewer_leading_dims():
    q, k, v = make_qkv(2, 3, 20, 20, 16, 16, torch.float32, seed=4)
    qt = q.transpose(0, 1)  # (H, B, T, D): strided, not contiguous
    out = flash.triton_attention(qt, k.transpose(0, 1), v.transpose(0, 1))
    assert_close(out, F.scaled_dot_product_attention(qt, k.transpose(0, 1), v.transpose(0, 1)))
    out3 = flash.triton_attention(q[0], k[0], v[0])  # (H, T, D)
    assert out3.shape == (3, 20, 16)
    assert_close(out3, F.scaled_dot_product_attention(q[0], k[0], v[0]))


def test_log_sum_exp_is_returned():
    q, k, v = make_qkv(1, 2, 19, 23, 16, 16, torch.float32, seed=5)
    out, lse = flash.triton_attention(q, k, v, return_lse=True)
    scores = q @ k.transpose(-2, -1) / 4.0  # (B, H, T, S); scale 1/sqrt(16)
    assert lse.shape == (1, 2, 19)
    assert_close(lse, torch.logsumexp(scores, dim=-1))


@pytest.mark.parametrize(
    "bad,exc,pattern",
    [
        (lambda q, k, v: (q, k[..., :8], v), ValueError, r"same last dim D"),
        (lambda q, k, v: (q, k, v[:, :, :3]), ValueError, r"same length S"),
        (lambda q, k, v: (q[..., :8], k[..., :8], v), ValueError, r"\[16, 128\], got 8"),
        (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, r"supports"),
        (lambda q, k, v: (q, k[:1, :1], v[:1, :1]), ValueError, r"identical leading dims"),
        (lambda q, k, v: (q.numpy(), k, v), TypeError, r"torch.Tensor"),
    ],
)
def test_bad_input_is_rejected(bad, exc, pattern):
    q, k, v = make_qkv(2, 2, 8, 8, 16, 16, torch.float32)
    with pytest.raises(exc, match=pattern):
        flash.triton_attention(*bad(q, k, v))


def test_bad_block_size_is_rejected():
    q, k, v = make_qkv(1, 1, 8, 8, 16, 16, torch.float32)
    with pytest.raises(ValueError, match="power of two"):
        flash.triton_attention(q, k, v, block_m=24)
    with pytest.raises(ValueError, match="multiple of block_n"):
        flash.triton_attention(q, k, v, causal=True, block_m=16, block_n=32)


def test_module_imports_and_explains_when_triton_is_missing(monkeypatch):
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    # a fresh copy of the whole kernels package; monkeypatch puts the real one back afterwards
    for name in [m for m in sys.modules if m.startswith("mha_course.kernels")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(mha_course, "kernels", sys.modules["mha_course"].kernels)
    without = importlib.import_module("mha_course.kernels.function")
    assert without is not flash
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(RuntimeError, match="Linux"):
        without.triton_attention(q, q, q)


def test_lazy_export_is_the_function():
    assert mha_course.triton_attention is flash.triton_attention


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_large_matches_flash_backend(dtype):
    q, k, v = (x.cuda() for x in make_qkv(2, 4, 1000, 1000, 128, 128, dtype))
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert_close(flash.triton_attention(q, k, v, causal=causal), expected, dtype=dtype)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is only used without a GPU")
def test_explains_when_triton_was_imported_before_the_interpreter_was_chosen():
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import triton, torch\n"
        "from mha_course.kernels import triton_attention\n"
        "q = torch.randn(1, 1, 4, 16)\n"
        "try:\n    triton_attention(q, q, q)\nexcept RuntimeError as e:\n    print('explained:', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "explained:" in result.stdout and "TRITON_INTERPRET" in result.stdout, result.stderr


# ---- the backward kernels (mha_course.kernels.backward) ----


def grads_of(fn, q, k, v, grad_out):
    """(dq, dk, dv) of sum(fn(q, k, v) * grad_out), on fresh leaves of the inputs' dtype."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    fn(*leaves).backward(grad_out)
    return [x.grad for x in leaves]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_backward_matches_float64_autograd(shape, causal, dtype):
    q, k, v = make_qkv(*shape, dtype, seed=6)
    grad_out = torch.randn(*shape[:3], shape[5], generator=torch.Generator().manual_seed(7)).to(dtype)
    got = grads_of(lambda q, k, v: flash.triton_attention(q, k, v, causal=causal), q, k, v, grad_out)
    expected = grads_of(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        q.double(),
        k.double(),
        v.double(),
        grad_out.double(),
    )
    for name, g, e in zip("qkv", got, expected, strict=True):
        assert g.dtype == dtype and g.shape == e.shape
        assert_close(g, e.to(dtype), dtype=dtype, what=f"d{name} {shape} causal={causal}")


def test_backward_matches_the_hand_derived_library_version_with_a_scale():
    q, k, v = make_qkv(2, 2, 29, 41, 32, 16, torch.float32, seed=8)
    grad_out = torch.randn(2, 2, 29, 16, generator=torch.Generator().manual_seed(9))
    got = grads_of(lambda q, k, v: flash.triton_attention(q, k, v, causal=True, scale=0.7), q, k, v, grad_out)
    expected = mha_course.attention_backward(
        q.double(), k.double(), v.double(), grad_out.double(), scale=0.7, causal=True
    )
    for name, g, e in zip("qkv", got, expected, strict=True):
        assert_close(g, e.float(), what=f"d{name}")


# (16, 64) is non-causal only: causal forward needs block_m to be a multiple of block_n.
@pytest.mark.parametrize(
    "block_m,block_n,causal",
    [
        (16, 16, False),
        (16, 16, True),
        (32, 16, False),
        (32, 16, True),
        (16, 64, False),
        (64, 32, False),
        (64, 32, True),
    ],
)
def test_backward_block_sizes_do_not_change_the_gradients(block_m, block_n, causal):
    q, k, v = make_qkv(1, 1, 70, 53, 32, 32, torch.float32, seed=10)
    grad_out = torch.randn(1, 1, 70, 32, generator=torch.Generator().manual_seed(11))
    got = grads_of(
        lambda q, k, v: flash.triton_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n),
        q,
        k,
        v,
        grad_out,
    )
    expected = grads_of(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v, grad_out)
    for name, g, e in zip("qkv", got, expected, strict=True):
        assert_close(g, e, what=f"d{name} blocks ({block_m}, {block_n})")


def test_backward_with_a_broadcast_gradient_and_fewer_leading_dims():
    q, k, v = make_qkv(1, 3, 20, 20, 16, 16, torch.float32, seed=12)
    leaves = [x[0].clone().requires_grad_() for x in (q, k, v)]  # (H, T, D)
    flash.triton_attention(*leaves).sum().backward()  # grad_out is an expanded tensor, strides 0
    ref = [x[0].clone().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*ref).sum().backward()
    for name, a, b in zip("qkv", leaves, ref, strict=True):
        assert a.grad.shape == (3, 20, 16)
        assert_close(a.grad, b.grad, what=f"d{name}")


def test_only_inputs_that_need_gradients_build_a_graph():
    q, k, v = make_qkv(1, 1, 8, 8, 16, 16, torch.float32)
    assert flash.triton_attention(q, k, v).grad_fn is None
    with torch.no_grad():
        assert flash.triton_attention(q.requires_grad_(), k, v).grad_fn is None
    out = flash.triton_attention(q, k, v)  # q requires grad now
    out.sum().backward()
    assert q.grad is not None and k.grad is None and v.grad is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_backward_matches_flash_backend(dtype):
    q, k, v = (x.cuda() for x in make_qkv(2, 4, 1000, 1000, 128, 128, dtype))
    grad_out = torch.randn_like(q)
    for causal in (False, True):
        got = grads_of(lambda q, k, v, c=causal: flash.triton_attention(q, k, v, causal=c), q, k, v, grad_out)
        expected = grads_of(
            lambda q, k, v, c=causal: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=c),
            q,
            k,
            v,
            grad_out,
        )
        for name, g, e in zip("qkv", got, expected, strict=True):
            assert_close(g, e.to(dtype), dtype=dtype, what=f"d{name} causal={causal}")


@pytest.mark.parametrize("scale", [-0.4, 0.0])
@pytest.mark.parametrize("causal", [False, True])
def test_negative_and_zero_scales(scale, causal):
    """The kernel scales each row's peak raw score: the minimum when the scale is negative."""
    q, k, v = make_qkv(1, 2, 40, 70, 16, 16, torch.float32, seed=14)
    grad_out = torch.randn(1, 2, 40, 16, generator=torch.Generator().manual_seed(15))
    got = grads_of(
        lambda q, k, v: flash.triton_attention(q, k, v, causal=causal, scale=scale, block_m=16, block_n=16),
        q,
        k,
        v,
        grad_out,
    )
    mask = mha_course.causal_mask(40, 70) if causal else None  # torch's SDPA gives NaN for causal with scale < 0

    def reference(q, k, v):
        return mha_course.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)[0]

    expected = grads_of(reference, q.double(), k.double(), v.double(), grad_out.double())
    out = flash.triton_attention(q, k, v, causal=causal, scale=scale, block_m=16, block_n=16)
    assert_close(out, reference(q.double(), k.double(), v.double()).float())
    for name, g, e in zip("qkv", got, expected, strict=True):
        assert_close(g, e.float(), what=f"d{name} scale={scale}")
