"""Split-KV decoding (flash-decoding): one query against a long cache, the cache cut into blocks.

A decoding step has a single query per head, so a kernel that gives each query its own worker has
B * H workers, too few to fill a GPU when the batch is small and the cache long. Flash-decoding
(Dao et al., 2023) cuts the cache into n blocks, lets n workers attend to one block each in
parallel, and merges their partial results exactly with :func:`merge_partial_attention`: the same
merge ring attention uses, with blocks spread over thread blocks instead of devices.
"""

from __future__ import annotations

import torch

from ..validation import check_qkv, require_positive_int, resolve_scale
from .merge import attention_with_lse, merge_partial_attention


def split_kv_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    num_splits: int,
    scale: float | None = None,
    return_lse: bool = False,
):
    """softmax(q k^T * scale) v computed as ``num_splits`` independent partial attentions, then merged.

        k, v cut along S into num_splits blocks (sizes as torch.tensor_split; a block may be empty)
        (out_b, lse_b) = attention_with_lse(q, k_b, v_b)          one worker per block, in parallel
        (out, lse) = merge_partial_attention(outs, lses)

    Here the blocks run one after the other in one process; the point is that they need not.

    Args:
        q: (..., T, D), usually T = 1 (one new token per sequence and head); k: (..., S, D) and
            v: (..., S, Dv), the cache; leading dims broadcast.
        num_splits: positive int; more splits than keys leave some blocks empty (lse = -inf),
            which the merge ignores.
        scale: default 1/sqrt(D).
        return_lse: also return lse (..., T).

    Returns:
        out (..., T, Dv) in q's dtype, or (out, lse) with lse in float32 (float64 for float64 inputs).

    Raises:
        TypeError / ValueError: as :func:`mha_course.scaled_dot_product_attention`; num_splits not a
            positive int.
    """
    _, _, D = check_qkv(q, k, v)
    scale = resolve_scale(scale, D)
    num_splits = require_positive_int(num_splits, "num_splits")
    partials = [
        attention_with_lse(q, k_b, v_b, scale=scale)  # (..., T, Dv), (..., T)
        for k_b, v_b in zip(
            torch.tensor_split(k, num_splits, dim=-2), torch.tensor_split(v, num_splits, dim=-2), strict=True
        )
    ]
    out, lse = merge_partial_attention([o for o, _ in partials], [l for _, l in partials])
    return (out.to(q.dtype), lse) if return_lse else out.to(q.dtype)
