"""The backward pass of attention, derived by hand.

Forward (per head; s is the scaled score matrix, b the mask's additive bias):

    S = Q K^T * scale + b        (T, S)
    P = softmax(S)               (T, S), row-wise
    O = P V                      (T, Dv)

Backward, given dO = dLoss/dO (T, Dv):

    dV = P^T dO                                  (S, Dv)
    dP = dO V^T                                  (T, S)
    dS = P * (dP - rowsum(dO * O))               (T, S)   the softmax Jacobian, applied row by row
    dQ = dS K * scale                            (T, D)
    dK = dS^T Q * scale                          (S, D)

The middle line is the softmax Jacobian J = diag(p) - p p^T applied to a row g of dP:
J g = p * g - p (p . g), and p . g = sum_j p_j (dO V^T)_j = dO . (P V) = dO . O, so the row sums
need only the output O, never a second pass over P. FlashAttention's backward uses exactly these
lines tile by tile, rebuilding P from the saved log-sum-exp.
"""

from __future__ import annotations

import math

import torch

from ..core.attention import scaled_dot_product_attention
from ..core.masks import causal_mask, mask_to_bias
from ..core.softmax import softmax
from ..validation import broadcast_shapes, check_mask, check_qkv, require_floating, require_tensor, resolve_scale


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """Jacobian of softmax at a point, from its output p: J = diag(p) - p p^T.

    J[..., i, j] = d softmax(x)_i / d x_j = p_i (delta_ij - p_j).

    Args:
        p: (..., S) probabilities (rows of softmax output).

    Returns:
        (..., S, S), symmetric; each row and column sums to 0.

    Raises:
        TypeError: ``p`` is not a floating tensor.
        ValueError: ``p`` has no dims.
    """
    require_tensor(p, "p")
    require_floating(p, "p")
    if p.dim() == 0:
        raise ValueError("p must have shape (..., S), got a scalar")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., S, S)


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of out = softmax(q k^T * scale + mask) v with respect to q, k and v.

    Computes dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = dS K * scale,
    dK = dS^T Q * scale (see the module docstring for the derivation).

    Args:
        q: (..., T, D), k: (..., S, D), v: (..., S, Dv); leading dims broadcast.
        grad_out: (..., T, Dv), dLoss/d out, with the output's leading dims (those of q, k, v
            and the mask, broadcast together).
        mask: optional bool (True = may attend) or float (added to the scores), broadcastable
            to (..., T, S). No gradient is returned for it.
        scale: default 1/sqrt(D).
        causal: also block key j for query i when j > i (top-left aligned, like torch's is_causal).

    Returns:
        (dq, dk, dv) with the shapes and dtype of q, k, v; gradients of broadcast leading dims are
        summed back. Computed in float32 at least. A query whose every key is masked has zero
        weights, zero output and contributes nothing: its dq row is 0.

    Raises:
        TypeError: inputs are not floating tensors of one dtype; mask of a wrong dtype.
        ValueError: mismatched shapes (grad_out included), bad mask, bad scale.
    """
    T, S, D = check_qkv(q, k, v)
    require_tensor(grad_out, "grad_out")
    require_floating(grad_out, "grad_out")
    lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        check_mask(mask, T, S, batch_shape=lead)
        # the forward's output takes the mask's leading dims too (as scaled_dot_product_attention)
        lead = broadcast_shapes(lead, mask.shape[:-2])
    expected = (*lead, T, v.shape[-1])
    if tuple(grad_out.shape) != expected:
        raise ValueError(
            f"grad_out must have the output's shape (..., T, Dv) = {expected}, got {tuple(grad_out.shape)}"
        )
    scale = resolve_scale(scale, D)
    work = torch.promote_types(q.dtype, torch.float32)
    q32, k32, v32, do = (x.detach().to(work) for x in (q, k, v, grad_out))

    scores = torch.matmul(q32, k32.transpose(-2, -1)) * scale  # (..., T, S)
    bias = mask_to_bias(mask.detach() if mask is not None else None, work)
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(~causal_mask(T, S, device=q.device), -math.inf)
    p = softmax(scores, dim=-1)  # (..., T, S); fully masked rows are 0
    out = torch.matmul(p, v32)  # (..., T, Dv)

    dv = torch.matmul(p.transpose(-2, -1), do)  # (..., S, Dv)
    dp = torch.matmul(do, v32.transpose(-2, -1))  # (..., T, S)
    row_dot = (do * out).sum(dim=-1, keepdim=True)  # (..., T, 1) = rowsum(P * dP)
    ds = p * (dp - row_dot)  # (..., T, S)
    dq = torch.matmul(ds, k32) * scale  # (..., T, D)
    dk = torch.matmul(ds.transpose(-2, -1), q32) * scale  # (..., S, D)
    return (_sum_to(dq, q.shape).to(q.dtype), _sum_to(dk, k.shape).to(k.dtype), _sum_to(dv, v.shape).to(v.dtype))


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum a gradient over the leading dims that were broadcast to reach it, back to ``shape``."""
    extra = grad.dim() - len(shape)
    if extra:
        grad = grad.sum(dim=tuple(range(extra)))
    dims = tuple(i for i, n in enumerate(shape[:-2]) if n == 1 and grad.shape[i] != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


class ManualAttention(torch.autograd.Function):
    """Attention whose backward is :func:`attention_backward` (not autograd's own graph).

    ``ManualAttention.apply(q, k, v, mask, scale, causal)`` returns out (..., T, Dv); lets
    ``torch.autograd.gradcheck`` test the hand-derived gradients.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask=None, scale=None, causal=False):
        """out (..., T, Dv) = softmax(q k^T * scale + mask [+ causal]) v; saves q, k, v for backward."""
        if causal:
            T, S = q.shape[-2], k.shape[-2]
            cm = causal_mask(T, S, device=q.device)
            mask_f = (
                cm if mask is None else (mask & cm if mask.dtype == torch.bool else mask + mask_to_bias(cm, mask.dtype))
            )
        else:
            mask_f = mask
        out, _ = scaled_dot_product_attention(q, k, v, mask_f, scale)
        ctx.save_for_backward(q, k, v)
        ctx.mask, ctx.scale, ctx.causal = mask, scale, causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        """(dq, dk, dv) from :func:`attention_backward`; None for mask, scale and causal."""
        q, k, v = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, grad_out, ctx.mask, ctx.scale, ctx.causal)
        return dq, dk, dv, None, None, None


def manual_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """out = softmax(q k^T * scale + mask) v, differentiable through :func:`attention_backward`.

    Args:
        q: (..., T, D), k: (..., S, D), v: (..., S, Dv); mask broadcastable to (..., T, S)
            (bool True = may attend, or float added); scale default 1/sqrt(D);
            causal: also block key j > i (top-left aligned).

    Returns:
        out (..., T, Dv) only (no weights).

    Raises:
        TypeError / ValueError: as :func:`mha_course.scaled_dot_product_attention`.
    """
    return ManualAttention.apply(q, k, v, mask, scale, causal)
