"""The dQ kernel of the backward pass: one program per query block, dQ summed over every visible key block.

It recomputes the score tile S and dP = dO V^T to get dS (3 tile products per tile: S, dP, dS K); the
formulas and the ranges it walks are described in :mod:`.backward`, which launches it.
"""

from __future__ import annotations

from typing import Any

from .config_table import ConfigRow, ConfigTable
from .rows import _load_rows, _program, _store_rows, _visible_keys
from .runtime import MAX_HEAD_DIM, MIN_HEAD_DIM, tl, triton


def _dq_range(
    dq, query_rows, k_rows, v_rows, rows, keys, qk_scale_log2, causal_offset, MASKED: tl.constexpr, SHAPE: tl.constexpr
):
    """Add the key blocks [start, stop) to one query block's dQ (S and dP recomputed: 3 products per tile).

    query_rows: the block's (q, do, lse2, delta) tiles. k_rows, v_rows: (base pointer of this head,
    stride along keys, stride along the head dim). rows: (BLOCK_M,) query positions. keys: (start, stop, S).
    SHAPE: the kernel's constexprs (D, DV, BLOCK_N, CAUSAL, PRECISION), one constexpr tuple.
    """
    D: tl.constexpr = SHAPE[0]
    DV: tl.constexpr = SHAPE[1]
    BLOCK_N: tl.constexpr = SHAPE[2]
    CAUSAL: tl.constexpr = SHAPE[3]
    PRECISION: tl.constexpr = SHAPE[4]
    q, do, lse2, delta = query_rows
    start, stop, S = keys
    offs_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, q.shape[1])  # padded head dims: BLOCK_D of q, BLOCK_DV of dO
    dims_v = tl.arange(0, do.shape[1])
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        keys_n = start_n + offs_n  # (BLOCK_N,)
        k = _load_rows(k_rows[0], keys_n, k_rows[1], S, dims, k_rows[2], D, MASKED)  # (BLOCK_N, BLOCK_D)
        v = _load_rows(v_rows[0], keys_n, v_rows[1], S, dims_v, v_rows[2], DV, MASKED)  # (BLOCK_N, BLOCK_DV)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N), unscaled
        p = tl.math.exp2(s * qk_scale_log2 - lse2[:, None])
        if MASKED and CAUSAL:
            p = tl.where(keys_n[None, :] <= rows[:, None] + causal_offset, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # (BLOCK_M, BLOCK_D)
    return dq


def _dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE2,
    DELTA,
    DQ_OUT,
    stride_qb,
    stride_qh,
    stride_qt,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_ot,
    stride_od,
    stride_dqb,
    stride_dqh,
    stride_dqt,
    stride_dqd,
    num_heads,
    T,
    S,
    scale,
    qk_scale_log2,
    causal_offset,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One program: dQ for BLOCK_M queries of one (batch, head), summed over every visible key block."""
    block_m, batch_head, b, h = _program(tl.cdiv(T, BLOCK_M), num_heads, CAUSAL)
    row_stats = batch_head.to(tl.int64) * T
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    dims = tl.arange(0, BLOCK_D)
    dims_v = tl.arange(0, BLOCK_DV)
    row_ok = rows < T

    q = _load_rows(
        Q + b * stride_qb + h * stride_qh, rows, stride_qt, T, dims, stride_qd, D, True
    )  # (BLOCK_M, BLOCK_D)
    do = _load_rows(DO + b * stride_ob + h * stride_oh, rows, stride_ot, T, dims_v, stride_od, DV, True)
    lse2 = tl.load(LSE2 + row_stats + rows, mask=row_ok, other=float("inf"))  # (BLOCK_M,), base 2
    delta = tl.load(DELTA + row_stats + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys before `full_end` are seen by every row of the block (and are < S); the rest up to `stop` need a mask.
    full_end, stop = _visible_keys(block_m * BLOCK_M, S, causal_offset, BLOCK_M, BLOCK_N, CAUSAL)
    shape: tl.constexpr = tl.constexpr((D, DV, BLOCK_N, CAUSAL, PRECISION))
    query_rows = (q, do, lse2, delta)
    k_rows = (K + b * stride_kb + h * stride_kh, stride_ks, stride_kd)
    v_rows = (V + b * stride_vb + h * stride_vh, stride_vs, stride_vd)
    scores = (qk_scale_log2, causal_offset)
    dq = _dq_range(dq, query_rows, k_rows, v_rows, rows, (0, full_end, S), *scores, False, shape)
    dq = _dq_range(dq, query_rows, k_rows, v_rows, rows, (full_end, stop, S), *scores, True, shape)

    dq = dq * scale
    _store_rows(DQ_OUT + b * stride_dqb + h * stride_dqh, rows, stride_dqt, T, dims, stride_dqd, D, dq)


# dQ: (BLOCK_M, BLOCK_N, warps, stages); BLOCK_M queries are the accumulator's rows.
DQ_CONFIGS = ConfigTable(
    ConfigRow(90, (MIN_HEAD_DIM, 64), None, ((128, 128, 8, 2), (128, 64, 8, 2))),
    ConfigRow(90, (65, MAX_HEAD_DIM), None, ((128, 64, 8, 2),)),
    ConfigRow(80, (MIN_HEAD_DIM, 64), None, ((64, 64, 4, 2), (64, 32, 4, 2))),
    ConfigRow(80, (65, MAX_HEAD_DIM), None, ((64, 64, 8, 2), (64, 32, 8, 2))),
)


_dq_jitted: Any = None  # without Triton: the name exists, nothing can launch (Triton ships no types)
if triton is not None:
    _dq_range = triton.jit(_dq_range)  # the kernel calls it by this global name
    _dq_jitted = triton.jit(_dq_kernel)
