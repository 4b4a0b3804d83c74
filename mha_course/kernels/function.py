"""``triton_attention``: the Triton FlashAttention kernels as one differentiable function.

Checks the inputs, brings them to (B, H, T, D), and runs the forward kernel (:mod:`.forward`)
directly or, when an input requires grad, through :class:`_TritonAttention`, whose backward runs
the two kernels of :mod:`.backward` with the forward's saved log-sum-exp.
"""

from __future__ import annotations

import torch

from ..efficient.tiled.plan import causal_diagonal
from ..validation import check_qkv, resolve_scale
from .backward import flash_backward
from .forward import _autotuned, _check_blocks, _forward
from .runtime import IMPORTED_TOO_EARLY, INTERPRETED, MAX_HEAD_DIM, MIN_HEAD_DIM, ON_GPU, SUPPORTED_DTYPES, triton


def triton_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    return_lse: bool = False,
    causal_align: str = "top_left",
):
    """softmax(q k^T * scale [+ causal mask]) v computed by the fused Triton kernel.

    Args:
        q: (B, H, T, D), or (H, T, D) / (T, D) (leading dims are added and removed).
        k: (B, H, S, D), same leading dims as q.
        v: (B, H, S, Dv).
        causal: causal mask, aligned as ``causal_align`` says.
        scale: multiplies the scores; default 1/sqrt(D).
        block_m, block_n: tile sizes (powers of two >= 16). On a GPU they are autotuned when
            omitted; under the interpreter they default to 32.
        return_lse: also return the natural-log log-sum-exp of each row's scores, (B, H, T), float32.
        causal_align: "top_left" (key j visible to query i iff j <= i, torch's ``is_causal``) or
            "bottom_right" (iff j <= i + S - T: the T queries are the last T of S positions, as when
            decoding with a KV cache; FlashAttention's convention). The same option as
            :func:`mha_course.tiled_attention`'s; :func:`mha_course.causal_mask` with ``diagonal=S - T``
            is the bottom-right mask. A row that sees no key (bottom-right with T > S) gives zeros.

    Returns:
        out (B, H, T, Dv) in q's dtype (and lse if asked). float16, bfloat16 and float32;
        D and Dv from 16 to 128 (any value in between: the kernel pads to a power of two).
        Differentiable: when q, k or v requires grad, backward runs the two Triton kernels of
        :mod:`mha_course.kernels.backward` (the forward's lse rebuilds P tile by tile).

    Raises:
        RuntimeError: Triton is not installed (only Linux has wheels).
        TypeError: inputs are not tensors of one supported dtype.
        ValueError: mismatched shapes, unsupported head dim, leading dims that differ, bad blocks.
    """
    if triton is None:
        raise RuntimeError(
            "triton_attention needs Triton, which ships wheels for Linux only: "
            "`pip install triton` there, or use mha_course.tiled_attention / torch's SDPA instead"
        )
    if IMPORTED_TOO_EARLY:
        raise RuntimeError(
            "no GPU here, so Triton must run in its interpreter, but `triton` was imported "
            "before TRITON_INTERPRET=1 was set: import mha_course before triton, or "
            "`export TRITON_INTERPRET=1` before starting Python"
        )
    T, S, D = check_qkv(q, k, v)
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"triton_attention supports {SUPPORTED_DTYPES}, got {q.dtype}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(
            f"q, k, v must have identical leading dims (B, H), got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.dim() > 4:
        raise ValueError(f"q must have shape (B, H, T, D) or fewer leading dims, got {tuple(q.shape)}")
    Dv = v.shape[-1]
    for name, dim in (("D", D), ("Dv", Dv)):
        if not MIN_HEAD_DIM <= dim <= MAX_HEAD_DIM:
            raise ValueError(
                f"head dim {name} must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {dim} "
                f"(q {tuple(q.shape)}, v {tuple(v.shape)})"
            )
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    causal_offset = causal_diagonal(causal_align, T, S)
    scale = resolve_scale(scale, D)
    if q.device.type != "cuda" and not INTERPRETED:
        raise ValueError(f"tensors are on {q.device} but Triton was set up for the GPU; move them to cuda")
    if block_m is not None or block_n is not None or _autotuned is None:
        block_m = block_m or (64 if ON_GPU else 32)
        block_n = block_n or (64 if ON_GPU else 32)
        _check_blocks(block_m, block_n, causal)

    lead = q.shape[:-2]
    q4, k4, v4 = (x.reshape((1,) * (4 - x.dim()) + tuple(x.shape)) for x in (q, k, v))  # (B, H, ., .)
    for name, x in (("q", q4), ("k", k4), ("v", v4)):
        _check_head_offsets(name, x)
    if INTERPRETED and q.dtype == torch.bfloat16:
        q4, k4, v4 = q4.float(), k4.float(), v4.float()  # the interpreter mishandles bfloat16
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q4, k4, v4)):
        out, lse = _TritonAttention.apply(q4, k4, v4, causal, scale, block_m, block_n, causal_offset)
    else:
        out, lse = _forward(q4, k4, v4, causal, scale, block_m, block_n, causal_offset)
    out = out.to(q.dtype).reshape(*lead, T, Dv)  # back to the caller's dtype and leading dims
    return (out, lse.reshape(*lead, T)) if return_lse else out


_INT32_MAX = 2**31 - 1


def _check_head_offsets(name: str, x4: torch.Tensor) -> None:
    """The kernels add a 64-bit offset per (batch, head) and 32-bit offsets inside one head: those must fit."""
    _, _, n, d = x4.shape
    last = (n - 1) * abs(x4.stride(2)) + (d - 1) * abs(x4.stride(3)) if n and d else 0
    if last > _INT32_MAX:
        raise ValueError(
            f"{name}: one head spans {last + 1} elements (shape {tuple(x4.shape)}, strides {x4.stride()}); "
            f"the kernel's offsets inside a head are 32-bit (at most {_INT32_MAX}): make the tensor contiguous"
        )


class _TritonAttention(torch.autograd.Function):
    """The forward kernel, and the two backward kernels of :mod:`mha_course.kernels.backward`."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_m, block_n, causal_offset):
        out, lse = _forward(q, k, v, causal, scale, block_m, block_n, causal_offset)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.blocks, ctx.causal_offset = causal, scale, (block_m, block_n), causal_offset
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        block_m, block_n = ctx.blocks
        dq, dk, dv = flash_backward(
            q, k, v, out, lse, grad_out, ctx.causal, ctx.scale, block_m, block_n, causal_offset=ctx.causal_offset
        )
        return dq, dk, dv, None, None, None, None, None


__all__ = ["triton_attention"]
