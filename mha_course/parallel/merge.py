"""Partial attention over a block of keys, and the exact merge of partial results through their log-sum-exp.

Split the keys of one query into blocks b = 1..n. Each block alone gives a *partial* result: its
own softmax-weighted output and the log-sum-exp of its scores,

    lse_b = log sum_{j in b} exp(s_j),        out_b = sum_{j in b} exp(s_j - lse_b) v_j .

The full softmax weights block b's keys by exp(s_j - lse) with lse = log sum_b exp(lse_b), so

    lse = log sum_b exp(lse_b),               out = sum_b exp(lse_b - lse) out_b .

Nothing is approximated: the merge is exact, in any order and any grouping (it is associative and
commutative), which is why ring attention (blocks on other devices) and split-KV decoding
(flash-decoding: blocks of one long cache on other thread blocks) can both use it. A block in which
a query sees no key has lse_b = -inf and out_b = 0; its weight exp(-inf - lse) is 0, so it drops
out. When every block is empty for a query, lse = -inf and out = 0 (the library's convention for a
fully masked row), never 0/0 = NaN.
"""

from __future__ import annotations

import math

import torch

from ..efficient.tiled.forward import tiled_attention
from ..validation import check_mask, check_qkv, require_floating, require_tensor, resolve_scale


def attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the queries over one block of keys, with the block's log-sum-exp.

        s = q k^T * scale (-inf where ``mask`` is False, or where j > i when causal),
        lse = logsumexp_j s,  out = exp(s - lse) v

    Without a mask, float32 and float64 inputs go through :func:`mha_course.tiled_attention`
    (``return_lse=True``), the course's fast tiled loop, which also skips the causal future's tiles.

    Args:
        q: (..., T, D); k: (..., S, D); v: (..., S, Dv); leading dims broadcast.
        mask: optional bool, True = may attend, broadcastable to (..., T, S).
        scale: default 1/sqrt(D).
        causal: query i sees key j only when j <= i (top-left aligned, as everywhere in the course).

    Returns:
        out (..., T, Dv) and lse (..., T), both in float32 (float64 for float64 inputs), so that
        merging them loses nothing. A query with no visible key (S = 0 or fully masked) gets
        out = 0 and lse = -inf.

    Raises:
        TypeError / ValueError: as :func:`mha_course.scaled_dot_product_attention` (shapes, dtypes,
            a mask that is not bool or does not broadcast to (..., T, S)).
    """
    T, S, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    work = torch.promote_types(q.dtype, torch.float32)
    if mask is None and q.dtype == work:
        return tiled_attention(q, k, v, causal=bool(causal), scale=scale, return_lse=True)
    if mask is not None:
        check_mask(mask, T, S)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool here (True = may attend), got dtype {mask.dtype}")
    if causal:
        future = torch.ones(T, S, dtype=torch.bool, device=q.device).tril_()  # (T, S): True = may attend
        mask = future if mask is None else mask & future
    scores = torch.matmul(q.to(work) * scale, k.to(work).transpose(-2, -1))  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)  # (..., T); -inf for a row with no visible key (and for S = 0)
    finite = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)  # shift by 0 there: exp(-inf) = 0, no NaN
    out = torch.matmul(torch.exp(scores - finite.unsqueeze(-1)), v.to(work))  # (..., T, Dv)
    return out, lse


def merge_partial_attention(outs, lses) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial attention results over disjoint key blocks into the result over all their keys.

        lse = log sum_b exp(lse_b),   out = sum_b exp(lse_b - lse) out_b

    computed stably (the exponents are <= 0). Blocks with lse_b = -inf count for nothing; a row
    where every block has lse_b = -inf gets out = 0 and lse = -inf.

    Args:
        outs: a non-empty list or tuple of n tensors (..., T, Dv), each a block's normalised output.
        lses: a list or tuple of n tensors (..., T), each block's log-sum-exp of its scores.

    Returns:
        (out, lse): (..., T, Dv) in the dtype of ``outs``, (..., T) in the dtype of ``lses``
        (computed in float32 at least).

    Raises:
        TypeError: not lists/tuples of floating tensors, or outs of different dtypes.
        ValueError: empty, different lengths, or shapes that disagree (every out (..., T, Dv) the
            same, every lse equal to out.shape[:-1]).
    """
    _check_partials(outs, lses)
    work = torch.promote_types(torch.promote_types(outs[0].dtype, lses[0].dtype), torch.float32)
    lse_stack = torch.stack([x.to(work) for x in lses])  # (n, ..., T)
    lse = torch.logsumexp(lse_stack, dim=0)  # (..., T); -inf where every block is -inf
    finite = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(lse_stack - finite)  # (n, ..., T); exp(-inf) = 0 for empty blocks
    out = sum(w.unsqueeze(-1) * o.to(work) for w, o in zip(weights, outs, strict=True))  # (..., T, Dv)
    return out.to(outs[0].dtype), lse.to(lses[0].dtype)


def _check_partials(outs, lses) -> None:
    for name, seq in (("outs", outs), ("lses", lses)):
        if not isinstance(seq, (list, tuple)):
            raise TypeError(f"{name} must be a list or tuple of tensors, got {type(seq).__name__}")
    if not outs or len(outs) != len(lses):
        raise ValueError(f"need one lse per out and at least one block, got {len(outs)} outs and {len(lses)} lses")
    for i, (o, l) in enumerate(zip(outs, lses, strict=True)):
        require_tensor(o, f"outs[{i}]")
        require_tensor(l, f"lses[{i}]")
        require_floating(o, f"outs[{i}]")
        require_floating(l, f"lses[{i}]")
        if o.dim() < 1 or tuple(l.shape) != tuple(o.shape[:-1]):
            raise ValueError(
                f"lses[{i}] must have shape outs[{i}].shape[:-1] (..., T) for outs[{i}] (..., T, Dv); "
                f"got outs[{i}] {tuple(o.shape)} and lses[{i}] {tuple(l.shape)}"
            )
        if o.shape != outs[0].shape:
            raise ValueError(
                f"every out must have the shape of outs[0] {tuple(outs[0].shape)}, got outs[{i}] {tuple(o.shape)}"
            )
        if o.dtype != outs[0].dtype:
            raise TypeError(f"every out must have the dtype of outs[0] ({outs[0].dtype}), got outs[{i}] {o.dtype}")
