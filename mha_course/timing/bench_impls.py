"""The attention implementations the benchmark times, and how a forward becomes a training step.

Each :class:`Impl` is a name, what runs in words, and fn(q, k, v, causal) -> out (B, H, T, D):
the textbook three lines, the course's checked SDPA, ``tiled_attention``, torch's SDPA with each
backend forced, and the Triton kernel on CUDA. :func:`with_backward` turns any of them into
forward + gradients of q, k and v. Used by :mod:`mha_course.timing.bench`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.attention import scaled_dot_product_attention
from ..core.masks import causal_mask

TORCH_BACKENDS = {
    "cpu": ("FLASH_ATTENTION", "MATH"),
    "cuda": ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"),
}


MATERIALIZING = ("naive", "mha_course.sdpa", "torch.sdpa[MATH]")  # hold (B, H, T, S) matrices


@dataclass
class Impl:
    name: str
    backend: str  # what actually runs, in words
    fn: Callable[..., torch.Tensor]  # fn(q, k, v, causal) -> out (B, H, T, D)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """The textbook three lines, softmax(q k^T / sqrt(D) + bias) v, (B, H, T, D) -> (B, H, T, D)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)


def with_backward(fn: Callable[..., torch.Tensor], grad_out: torch.Tensor) -> Callable[..., torch.Tensor]:
    """fn(q, k, v, causal) -> out turned into a training step -> (dq, dk, dv) stacked on a new first dim.

    The inputs are detached into fresh leaves on every call, so repeated calls time the same work.
    """

    def step(q, k, v, causal):
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves, causal)
        grads = torch.autograd.grad(out, leaves, grad_out)
        return torch.stack(grads)  # (3, B, H, T, D): dq, dk, dv (D = Dv in this benchmark)

    return step


def available_impls(device: str, block_size: int | None) -> tuple[list[Impl], list[str]]:
    """The implementations that can run on ``device``, and a note for each that cannot."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    impls = [
        Impl("naive", "torch matmul + softmax", naive_attention),
        Impl(
            "mha_course.sdpa",
            "mha_course.scaled_dot_product_attention",
            lambda q, k, v, causal: scaled_dot_product_attention(
                q, k, v, mask=causal_mask(q.shape[-2], k.shape[-2], device=q.device) if causal else None
            )[0],
        ),
    ]
    notes = []
    try:
        from ..efficient.tiled.forward import tiled_attention

        impls.append(
            Impl(
                "tiled",
                f"mha_course.tiled_attention(block_size={block_size or 'default'})",
                lambda q, k, v, causal: tiled_attention(q, k, v, block_size, causal=causal),
            )
        )
    except ImportError as err:
        notes.append(f"tiled: skipped, mha_course.efficient.tiled.forward is not importable ({err})")
    for backend in TORCH_BACKENDS[device]:
        member = getattr(SDPBackend, backend, None)
        if member is None:
            notes.append(f"torch.sdpa[{backend}]: skipped, this torch has no SDPBackend.{backend}")
            continue

        def run(q, k, v, causal, member=member):
            with sdpa_kernel(member):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        impls.append(Impl(f"torch.sdpa[{backend}]", f"SDPBackend.{backend}", run))
    if device == "cuda":
        try:
            from ..kernels import triton_attention

            impls.append(
                Impl(
                    "triton",
                    "mha_course.triton_attention (autotuned)",
                    lambda q, k, v, causal: triton_attention(q, k, v, causal=causal),
                )
            )
        except (ImportError, RuntimeError) as err:
            notes.append(f"triton: skipped ({err})")
    else:
        notes.append("triton: skipped on CPU (the kernel needs CUDA; chapter 13 runs it in the interpreter)")
    return impls, notes
