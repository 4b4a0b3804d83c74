"""Online softmax: the softmax of a row that arrives one block at a time.

The ordinary stable softmax needs the whole row twice: once for its maximum m, once for the sum
l = sum_j exp(x_j - m). The online version (Milakov & Gimelshein, 2018; the heart of
FlashAttention) keeps a *running* maximum m and a *running* sum l, and when a new block raises
the maximum it rescales the old sum by exp(m_old - m_new):

    m_new = max(m_old, max_j x_j)                                   (j in the new block)
    l_new = l_old * exp(m_old - m_new) + sum_j exp(x_j - m_new)

After the last block, softmax(x)_j = exp(x_j - m) / l. Attention adds a third running quantity,
the unnormalised output acc = sum_j exp(s_j - m) v_j, rescaled by the same factor.

:func:`online_softmax_attention` is the textbook loop, one query block and one key block at a
time; :func:`mha_course.tiled_attention` computes the same thing, engineered for speed.
"""

from __future__ import annotations

import math

import torch

from ..validation import (
    broadcast_shapes,
    check_qkv,
    require_floating,
    require_positive_int,
    require_tensor,
    resolve_scale,
)


def online_softmax_update(
    m: torch.Tensor, l: torch.Tensor, x_block: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one block of scores into the running maximum and sum.

        m_new = max(m, max_j x_block_j)
        l_new = l * exp(m - m_new) + sum_j exp(x_block_j - m_new)

    Args:
        m: (...,) running maximum so far (-inf before the first block).
        l: (...,) running sum of exp(x - m) so far (0 before the first block).
        x_block: (..., b) the next b scores of each row (-inf = masked).

    Returns:
        (m_new, l_new, correction) where correction = exp(m - m_new), (...,), is the factor that
        rescales anything accumulated against the old maximum. Rows that have seen only -inf
        keep m = -inf, l = 0 and get correction 1.

    Raises:
        TypeError: an argument is not a floating tensor.
        ValueError: the leading shapes of m, l and x_block differ.
    """
    for name, t in (("m", m), ("l", l), ("x_block", x_block)):
        require_tensor(t, name)
        require_floating(t, name)
    if m.shape != l.shape or tuple(x_block.shape[:-1]) != tuple(m.shape):
        raise ValueError(
            f"m and l must have shape (...,) = x_block.shape[:-1]; got m {tuple(m.shape)}, "
            f"l {tuple(l.shape)}, x_block {tuple(x_block.shape)}"
        )
    m_new = torch.maximum(m, x_block.amax(dim=-1)) if x_block.shape[-1] else m.clone()
    # Shift by 0 where a row has seen nothing but -inf: exp(-inf - 0) = 0 instead of NaN.
    shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    correction = torch.exp(m - shift)  # (...,); exp(-inf) = 0 kills an empty old sum
    correction = torch.where(torch.isneginf(m_new), torch.ones_like(correction), correction)
    l_new = l * correction + torch.exp(x_block - shift.unsqueeze(-1)).sum(dim=-1)
    return m_new, l_new, correction


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax along the last dim, with the statistics gathered block by block.

    One streaming pass over blocks of ``block_size`` finds m and l with
    :func:`online_softmax_update`; then softmax(x)_j = exp(x_j - m) / l. Equals
    :func:`mha_course.core.softmax` (rows of -inf give zeros).

    Args:
        x: (..., S) scores, floating (float16/bfloat16 are computed in float32).
        block_size: positive int, the number of scores read per step.

    Returns:
        (..., S) probabilities, same dtype as ``x``.

    Raises:
        TypeError: ``x`` is not a floating tensor or ``block_size`` not an int.
        ValueError: ``x`` has no dims or ``block_size`` < 1.
    """
    require_tensor(x, "x")
    require_floating(x, "x")
    block_size = require_positive_int(block_size, "block_size")
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dim (..., S), got a scalar")
    work = x.to(torch.promote_types(x.dtype, torch.float32))
    m = torch.full(work.shape[:-1], -math.inf, dtype=work.dtype, device=x.device)  # (...,)
    l = torch.zeros_like(m)  # (...,)
    for j0 in range(0, work.shape[-1], block_size):
        m, l, _ = online_softmax_update(m, l, work[..., j0 : j0 + block_size])
    shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    probs = torch.exp(work - shift.unsqueeze(-1)) / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)
    return probs.to(x.dtype)


def online_softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int = 64,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention by the textbook online-softmax loop (readable; slow in Python).

    For each block of queries: start with m = -inf, l = 0, acc = 0; for each block of keys:

        s   = q_blk k_blk^T * scale            (block_q, block_k), causal: -inf where j > i
        m, l, c = online_softmax_update(m, l, s)
        acc = acc * c + exp(s - m) v_blk
    and finally out_blk = acc / l (0 for a row that saw only masked keys).

    Args:
        q: (..., T, D), k: (..., S, D), v: (..., S, Dv); leading dims broadcast.
        block_size: positive int, the query and key block.
        causal: mask key j for query i when j > i (top-left aligned, like torch's is_causal).
        scale: default 1/sqrt(D).

    Returns:
        (..., T, Dv) in q's dtype (computed in float32 at least).

    Raises:
        TypeError / ValueError: as :func:`mha_course.scaled_dot_product_attention`; bad block_size.
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    block_size = require_positive_int(block_size, "block_size")
    in_dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v = (x.to(work) for x in (q, k, v))
    lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = torch.zeros(*lead, T, v.shape[-1], dtype=work, device=q.device)  # (..., T, Dv)
    for i0 in range(0, T, block_size):
        q_blk = q[..., i0 : i0 + block_size, :]  # (..., bq, D)
        rows = torch.arange(i0, i0 + q_blk.shape[-2], device=q.device)  # (bq,)
        m = torch.full((*lead, q_blk.shape[-2]), -math.inf, dtype=work, device=q.device)  # (..., bq)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(out[..., i0 : i0 + block_size, :])  # (..., bq, Dv)
        for j0 in range(0, S, block_size):
            if causal and j0 > rows[-1]:
                break  # every later key is in every query's future
            s = q_blk @ k[..., j0 : j0 + block_size, :].transpose(-2, -1) * scale  # (..., bq, bk)
            if causal:
                cols = torch.arange(j0, j0 + s.shape[-1], device=q.device)  # (bk,)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
            m, l, correction = online_softmax_update(m, l, s)
            shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            p = torch.exp(s - shift.unsqueeze(-1))  # (..., bq, bk)
            acc = acc * correction.unsqueeze(-1) + p @ v[..., j0 : j0 + block_size, :]
        out[..., i0 : i0 + block_size, :] = acc / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)
    return out.to(in_dtype)
