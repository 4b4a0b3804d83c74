"""Every memory layout a caller hands the Triton kernel, forward and backward, against float64 SDPA.

q, k and v are often views, not dense tensors: slices of one packed QKV projection, of a packed KV
projection, of a KV cache longer than the keys in use, or (B, T, H, D) activations transposed to
(B, H, T, D). The kernels read them with their own strides and write the gradients with the
gradients' strides (under Triton's interpreter on CPU here).
"""

import importlib

import pytest
import torch
import torch.nn.functional as F

from mha_course.testing import assert_close

pytest.importorskip("triton")
flash = importlib.import_module("mha_course.kernels.function")

B, H, T, S, D = 2, 2, 19, 23, 16


def _leaf(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).requires_grad_()


def packed_qkv(dtype):
    """One (B, T, 3, H, D) projection; q, k, v are its three (B, H, T, D) views (T = S)."""
    qkv = _leaf(B, T, 3, H, D, dtype=dtype, seed=1)
    return [qkv], lambda qkv: [qkv[:, :, i].transpose(1, 2) for i in range(3)]


def packed_kv(dtype):
    """q (B, T, H, D) transposed; k and v from one (B, S, 2, H, D) projection."""
    q, kv = _leaf(B, T, H, D, dtype=dtype, seed=2), _leaf(B, S, 2, H, D, dtype=dtype, seed=3)
    return [q, kv], lambda q, kv: [q.transpose(1, 2), kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)]


def cache_slices(dtype):
    """k and v: the first S positions of (B, H, 40, D) caches; q: the first rows of a longer block."""
    q, kc, vc = (
        _leaf(B, H, 32, D, dtype=dtype, seed=4),
        _leaf(B, H, 40, D, dtype=dtype, seed=5),
        _leaf(B, H, 40, D, dtype=dtype, seed=6),
    )
    return [q, kc, vc], lambda q, kc, vc: [q[:, :, :T], kc[:, :, :S], vc[:, :, :S]]


def transposed(dtype):
    """(B, T, H, D) activations seen as (B, H, T, D); v's head dim is a slice of a wider tensor."""
    q, k, v = (
        _leaf(B, T, H, D, dtype=dtype, seed=7),
        _leaf(B, S, H, D, dtype=dtype, seed=8),
        _leaf(B, S, H, 2 * D, dtype=dtype, seed=9),
    )
    return [q, k, v], lambda q, k, v: [q.transpose(1, 2), k.transpose(1, 2), v[..., D:].transpose(1, 2)]


def head_major(dtype):
    """(H, B, T, D) storage seen as (B, H, T, D); k and v broadcast over heads (stride 0), as in MQA."""
    q, k, v = (
        _leaf(H, B, T, D, dtype=dtype, seed=10),
        _leaf(B, 1, S, D, dtype=dtype, seed=11),
        _leaf(B, 1, S, D, dtype=dtype, seed=12),
    )
    return [q, k, v], lambda q, k, v: [q.transpose(0, 1), k.expand(B, H, S, D), v.expand(B, H, S, D)]


LAYOUTS = [packed_qkv, packed_kv, cache_slices, transposed, head_major]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_views_give_the_float64_outputs_and_gradients(layout, causal, dtype):
    leaves, views = layout(dtype)
    q, k, v = views(*leaves)
    assert not all(x.is_contiguous() for x in (q, k, v))  # the point of the test
    grad_out = torch.randn(q.shape[:-1] + v.shape[-1:], generator=torch.Generator().manual_seed(0)).to(dtype)
    out = flash.triton_attention(q, k, v, causal=causal)
    (out.float() * grad_out.float()).sum().backward()
    got = [x.grad for x in leaves]

    ref_leaves = [x.detach().double().requires_grad_() for x in leaves]
    expected = F.scaled_dot_product_attention(*views(*ref_leaves), is_causal=causal)
    (expected * grad_out.double()).sum().backward()
    assert_close(out, expected.to(dtype), dtype=dtype, what=f"out {layout.__name__}")
    for i, (g, r) in enumerate(zip(got, ref_leaves, strict=True)):
        assert g.shape == r.shape and g.dtype == dtype
        assert_close(g, r.grad.to(dtype), dtype=dtype, what=f"grad of leaf {i} ({layout.__name__}, causal={causal})")


def test_gradients_are_contiguous_tensors_of_their_own():
    """Never views into the inputs' storage: written with strides of their own."""
    (qkv,), views = packed_qkv(torch.float32)
    q, k, v = (x.detach().requires_grad_() for x in views(qkv))
    flash.triton_attention(q, k, v).sum().backward()
    for x in (q, k, v):
        assert x.grad.is_contiguous() and x.grad.shape == x.shape


def test_a_head_larger_than_32_bit_offsets_is_rejected():
    storage = torch.empty(2**31 + 16, dtype=torch.float16)  # 4 GiB of address space, never touched
    q = storage.as_strided((1, 1, 2, 16), (0, 0, 2**31, 1))
    with pytest.raises(ValueError, match="32-bit"):
        flash.triton_attention(q, q, q)


class _RecordingLauncher:
    """Stands in for a jitted kernel: records the grid of each launch, then runs the real kernel."""

    def __init__(self, kernel, grids):
        self.kernel, self.grids = kernel, grids

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def test_every_launch_is_a_1d_grid_so_any_batch_times_heads_fits(monkeypatch):
    """A grid's y and z stop at 65535; B * H rides in x (up to 2**31 - 1) with the blocks."""
    from mha_course.kernels import backward, dq, forward

    grids = []
    monkeypatch.setattr(forward, "_jitted", _RecordingLauncher(forward._jitted, grids))
    monkeypatch.setattr(backward, "_dkdv_jitted", _RecordingLauncher(backward._dkdv_jitted, grids))
    monkeypatch.setattr(backward, "_dq_jitted", _RecordingLauncher(dq._dq_jitted, grids))
    (qkv,), views = packed_qkv(torch.float32)  # B = 2, H = 2, T = S = 19
    flash.triton_attention(*views(qkv), block_m=16, block_n=16).sum().backward()
    blocks = 2  # cdiv(19, 16), for queries and for keys
    assert grids == [(blocks * B * H,)] * 3
