"""The backward pass of the Triton FlashAttention kernel: gradients without the (T, S) matrix.

The forward kernel saved, per query row, the log-sum-exp of its scores (``lse``). That is all it
takes to rebuild any tile of the probabilities exactly, P = exp(S - lse), so the backward pass can
stream tiles the way the forward did and never hold P. The formulas are chapter 14's
(:mod:`mha_course.backward`), applied tile by tile:

    delta = rowsum(dO * O)                (T,)     one number per query row, computed first
    dV   += P^T dO                        a key block gathers from every query block
    dP    = dO V^T
    dS    = P * (dP - delta)              the softmax Jacobian, row by row
    dK   += dS^T Q * scale
    dQ   += dS K * scale                  a query block gathers from every key block

Two kernels, so that every output tile has exactly one owner and nothing needs atomic adds:

- ``_dkdv_kernel``: one program per key block; it walks the query blocks that can see it
  (in causal mode, only those at or after the block's first key) and accumulates dK and dV;
- ``_dq_kernel``: one program per query block; it walks the visible key blocks and accumulates dQ.

Each recomputes the score tile (P and dP), which costs one extra matmul pair per tile against
FlashAttention-2's single fused kernel with atomics, and buys deterministic results.
"""

from __future__ import annotations

import torch

from .runtime import INTERPRETED, LOG2E, LOG2E_K, ON_GPU, tl, triton


def _load_tile(base, rows, stride_row, n_rows, cols, stride_col, n_cols):
    """The (len(rows), len(cols)) tile at base[rows, cols]; entries out of range read as 0."""
    return tl.load(
        base + rows[:, None] * stride_row + cols[None, :] * stride_col,
        mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols),
        other=0.0,
    )


def _store_tile(base, rows, stride_row, n_rows, cols, stride_col, n_cols, tile):
    """Write the float32 tile to base[rows, cols] in base's dtype, skipping the padding."""
    tl.store(
        base + rows[:, None] * stride_row + cols[None, :] * stride_col,
        tile.to(base.dtype.element_ty),
        mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols),
    )


def _probabilities_t(
    q_base,
    do_base,
    LSE,
    row_stats,
    k,
    keys,
    key_ok,
    start_m,
    offs_m,
    dims,
    dims_v,
    stride_qt,
    stride_qd,
    stride_ot,
    stride_od,
    T,
    qk_scale_log2,
    causal_offset,
    D: tl.constexpr,
    DV: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One query block seen from a key block: (rows, q, dO, P^T tile), P rebuilt from the saved lse."""
    rows = start_m + offs_m  # (BLOCK_M,)
    row_ok = rows < T
    q = _load_tile(q_base, rows, stride_qt, T, dims, stride_qd, D)  # (BLOCK_M, BLOCK_D)
    do = _load_tile(do_base, rows, stride_ot, T, dims_v, stride_od, DV)  # (BLOCK_M, BLOCK_DV)
    # Padding rows get lse = +inf, so their probabilities come out as exactly 0.
    lse = tl.load(LSE + row_stats + rows, mask=row_ok, other=float("inf"))  # (BLOCK_M,)
    s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M) = S^T tile
    p_t = tl.math.exp2(s_t * qk_scale_log2 - lse[None, :] * LOG2E_K)  # P^T tile
    visible = key_ok[:, None] & row_ok[None, :]
    if CAUSAL:
        visible = visible & (keys[:, None] <= rows[None, :] + causal_offset)
    return rows, q, do, tl.where(visible, p_t, 0.0)


def _dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK_OUT,
    DV_OUT,
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
    stride_dkb,
    stride_dkh,
    stride_dks,
    stride_dkd,
    stride_dvb,
    stride_dvh,
    stride_dvs,
    stride_dvd,
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
    TWO_PASS: tl.constexpr = False,
):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), summed over every query block.

    ``TWO_PASS`` walks the query blocks twice, dV first (stored), then dK, so that only one
    (BLOCK_N, D) float32 accumulator is alive at a time: one more matmul per tile (P is rebuilt
    twice) for about a third fewer live registers, which keeps Ampere's mma.sync version from
    spilling at D = 128 (see ``python -m mha_course.gpu_report``).
    """
    # A 1-D grid (any B * H launches) and int64 batch and head indices (see the forward kernel).
    n_blocks = tl.cdiv(S, BLOCK_N)
    block_n = tl.program_id(0) % n_blocks
    batch_head = tl.program_id(0) // n_blocks
    b = (batch_head // num_heads).to(tl.int64)
    h = (batch_head % num_heads).to(tl.int64)
    row_stats = batch_head.to(tl.int64) * T  # where this head's lse and delta start

    keys = block_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_m = tl.arange(0, BLOCK_M)  # query offsets within a block (BLOCK_M,)
    dims = tl.arange(0, BLOCK_D)
    dims_v = tl.arange(0, BLOCK_DV)
    key_ok = keys < S
    q_base = Q + b * stride_qb + h * stride_qh
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    do_base = DO + b * stride_ob + h * stride_oh
    # dK and dV have strides of their own: k and v may be views into packed or sliced storage.
    dk_base = DK_OUT + b * stride_dkb + h * stride_dkh
    dv_base = DV_OUT + b * stride_dvb + h * stride_dvh

    k = _load_tile(k_base, keys, stride_ks, S, dims, stride_kd, D)  # (BLOCK_N, BLOCK_D)
    # In causal mode query i sees key j iff j <= i + causal_offset (0: top-left, S - T: bottom-right):
    # query blocks whose last row cannot see this key block's first key see none of it.
    first = tl.maximum(block_n * BLOCK_N - causal_offset, 0) // BLOCK_M * BLOCK_M if CAUSAL else 0
    if TWO_PASS:
        dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
        for start_m in range(first, T, BLOCK_M):
            rows, q, do, p_t = _probabilities_t(
                q_base,
                do_base,
                LSE,
                row_stats,
                k,
                keys,
                key_ok,
                start_m,
                offs_m,
                dims,
                dims_v,
                stride_qt,
                stride_qd,
                stride_ot,
                stride_od,
                T,
                qk_scale_log2,
                causal_offset,
                D,
                DV,
                CAUSAL,
                PRECISION,
            )
            dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)  # (BLOCK_N, BLOCK_DV)
        _store_tile(dv_base, keys, stride_dvs, S, dims_v, stride_dvd, DV, dv)
    v = _load_tile(v_base, keys, stride_vs, S, dims_v, stride_vd, DV)  # (BLOCK_N, BLOCK_DV)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    for start_m in range(first, T, BLOCK_M):
        rows, q, do, p_t = _probabilities_t(
            q_base,
            do_base,
            LSE,
            row_stats,
            k,
            keys,
            key_ok,
            start_m,
            offs_m,
            dims,
            dims_v,
            stride_qt,
            stride_qd,
            stride_ot,
            stride_od,
            T,
            qk_scale_log2,
            causal_offset,
            D,
            DV,
            CAUSAL,
            PRECISION,
        )
        if not TWO_PASS:
            dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)  # (BLOCK_N, BLOCK_DV)
        delta = tl.load(DELTA + row_stats + rows, mask=rows < T, other=0.0)  # (BLOCK_M,)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M) = dP^T tile
        ds_t = p_t * (dp_t - delta[None, :])  # (BLOCK_N, BLOCK_M)
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)  # (BLOCK_N, BLOCK_D)

    dk = dk * scale  # S = Q K^T * scale, so the scale reaches dK once, at the end
    _store_tile(dk_base, keys, stride_dks, S, dims, stride_dkd, D, dk)
    if not TWO_PASS:
        _store_tile(dv_base, keys, stride_dvs, S, dims_v, stride_dvd, DV, dv)


def _dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
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
    n_blocks = tl.cdiv(T, BLOCK_M)
    block_m = tl.program_id(0) % n_blocks
    batch_head = tl.program_id(0) // n_blocks
    b = (batch_head // num_heads).to(tl.int64)
    h = (batch_head % num_heads).to(tl.int64)
    row_stats = batch_head.to(tl.int64) * T

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    dims_v = tl.arange(0, BLOCK_DV)
    row_ok = rows < T

    q = _load_tile(Q + b * stride_qb + h * stride_qh, rows, stride_qt, T, dims, stride_qd, D)  # (BLOCK_M, BLOCK_D)
    do = _load_tile(
        DO + b * stride_ob + h * stride_oh, rows, stride_ot, T, dims_v, stride_od, DV
    )  # (BLOCK_M, BLOCK_DV)
    lse = tl.load(LSE + row_stats + rows, mask=row_ok, other=float("inf"))  # (BLOCK_M,)
    delta = tl.load(DELTA + row_stats + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    # Keys after this block's last query are invisible to all its rows in causal mode: not visited.
    stop = tl.minimum(S, (block_m + 1) * BLOCK_M + causal_offset) if CAUSAL else S
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + offs_n  # (BLOCK_N,)
        key_ok = keys < S
        k = _load_tile(k_base, keys, stride_ks, S, dims, stride_kd, D)  # (BLOCK_N, BLOCK_D)
        v = _load_tile(v_base, keys, stride_vs, S, dims_v, stride_vd, DV)  # (BLOCK_N, BLOCK_DV)

        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(s * qk_scale_log2 - lse[:, None] * LOG2E_K)
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + causal_offset)
        p = tl.where(visible, p, 0.0)

        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # (BLOCK_M, BLOCK_D)

    dq = dq * scale
    _store_tile(DQ_OUT + b * stride_dqb + h * stride_dqh, rows, stride_dqt, T, dims, stride_dqd, D, dq)


def _dkdv_configs():
    """Autotuning space of the dK/dV kernel (CUDA only): every config is TWO_PASS, which compiles
    without spills for D = 64 and 128, fp16 and bf16, on sm_80 and sm_90; the one-pass kernel
    spills 48 B or more on sm_80 at D = 128 in every tile shape (``python -m mha_course.gpu_report``).
    Outputs are overwritten, never accumulated across launches, so autotuning's repeated launches are harmless."""
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "TWO_PASS": True}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [
            (16, 64, 8, 2),
            (32, 64, 8, 2),
            (64, 64, 8, 2),
            (16, 64, 8, 3),
            (32, 64, 8, 3),
            (16, 64, 4, 2),
        ]
    ]


def _dq_configs():
    """Autotuning space of the dQ kernel (CUDA only): 64 query rows and 8 warps keep the (BLOCK_M, D)
    accumulator, q and dO in registers without spills (BLOCK_M = 128, or 4 warps, spill at D = 128)."""
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [
            (64, 16, 8, 2),
            (64, 32, 8, 2),
            (64, 64, 8, 2),
            (64, 16, 8, 3),
            (64, 32, 8, 3),
            (64, 64, 8, 3),
        ]
    ]


if triton is not None:
    _load_tile = triton.jit(_load_tile)  # the kernels call them by these global names
    _store_tile = triton.jit(_store_tile)
    _probabilities_t = triton.jit(_probabilities_t)
    _dkdv_jitted = triton.jit(_dkdv_kernel)
    _dq_jitted = triton.jit(_dq_kernel)
    _tuning_key = ["T", "S", "D", "DV", "CAUSAL"]
    _dkdv_autotuned = (
        triton.autotune(configs=_dkdv_configs(), key=_tuning_key)(_dkdv_jitted) if ON_GPU and not INTERPRETED else None
    )
    _dq_autotuned = (
        triton.autotune(configs=_dq_configs(), key=_tuning_key)(_dq_jitted) if ON_GPU and not INTERPRETED else None
    )


def flash_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: bool,
    scale: float,
    block_m: int | None = None,
    block_n: int | None = None,
    two_pass: bool = False,
    causal_offset: int = 0,
):
    """Launch the two backward kernels. Inputs are already checked (by ``triton_attention``).

    Args:
        q: (B, H, T, D); k: (B, H, S, D); v: (B, H, S, Dv), one dtype.
        out: (B, H, T, Dv), the forward output; lse: (B, H, T) float32 natural-log log-sum-exp.
        grad_out: (B, H, T, Dv), dLoss/dout.
        causal, scale: as in the forward call.
        block_m, block_n: tile sizes (powers of two >= 16); autotuned on a GPU when omitted.
        causal_offset: in causal mode query i sees key j iff j <= i + causal_offset (0: top-left, S - T:
            bottom-right), as in the forward call.
        two_pass: with given block sizes, the dK/dV kernel's two-pass variant (``TWO_PASS``; autotuned
            configs set it themselves).

    Returns:
        (dq, dk, dv) with the shapes and dtype of (q, k, v).
    """
    B, H, T, D = q.shape
    S, Dv = v.shape[2], v.shape[3]
    dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))  # contiguous
    if T == 0 or S == 0 or B * H == 0:  # no score at all: every gradient is zero
        return dq.zero_(), dk.zero_(), dv.zero_()
    grad_out = grad_out.to(q.dtype)
    # delta = rowsum(dO * O) is O(T * Dv) work with no reuse: plain torch does it well.
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()  # (B, H, T)
    lse = lse.contiguous()  # (B, H, T): the kernels index it as batch_head * T + row

    strides = (*q.stride(), *k.stride(), *v.stride(), *grad_out.stride())
    shared = (H, T, S, scale, scale * LOG2E, causal_offset)
    meta = dict(
        D=D,
        DV=Dv,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
        BLOCK_DV=max(16, triton.next_power_of_2(Dv)),
        CAUSAL=causal,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    # Each gradient is written with its own strides (contiguous here), never with its input's: q, k, v
    # may be views into packed or sliced storage, whose strides would write outside dq, dk, dv.
    dkdv_args = (q, k, v, grad_out, lse, delta, dk, dv, *strides, *dk.stride(), *dv.stride(), *shared)
    dq_args = (q, k, v, grad_out, lse, delta, dq, *strides, *dq.stride(), *shared)
    if block_m is None and block_n is None and _dkdv_autotuned is not None:
        _dkdv_autotuned[lambda cfg: (triton.cdiv(S, cfg["BLOCK_N"]) * B * H,)](*dkdv_args, **meta)
        _dq_autotuned[lambda cfg: (triton.cdiv(T, cfg["BLOCK_M"]) * B * H,)](*dq_args, **meta)
    else:
        block_m = block_m or (64 if ON_GPU else 32)
        block_n = block_n or (64 if ON_GPU else 32)
        _dkdv_jitted[(triton.cdiv(S, block_n) * B * H,)](
            *dkdv_args, **meta, BLOCK_M=block_m, BLOCK_N=block_n, TWO_PASS=two_pass
        )
        _dq_jitted[(triton.cdiv(T, block_m) * B * H,)](*dq_args, **meta, BLOCK_M=block_m, BLOCK_N=block_n)
    return dq, dk, dv


__all__ = ["flash_backward"]
