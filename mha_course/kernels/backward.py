"""The backward pass of the Triton FlashAttention kernel: gradients without the (T, S) matrix.

The forward kernel saved, per query row, the log-sum-exp of its scores (``lse``). That is all it
takes to rebuild any tile of the probabilities exactly, P = exp(S - lse), so the backward pass can
stream tiles the way the forward did and never hold P. The formulas are chapter 14's
(:mod:`mha_course.efficient.gradients`), applied tile by tile:

    delta = rowsum(dO * O)                (T,)     one number per query row, computed first
    dV   += P^T dO                        a key block gathers from every query block
    dP    = dO V^T
    dS    = P * (dP - delta)              the softmax Jacobian, row by row
    dK   += dS^T Q * scale
    dQ   += dS K * scale                  a query block gathers from every key block

Two kernels, so that every output tile has exactly one owner and nothing needs atomic adds:

- ``_dkdv_kernel``: one program per key block; it walks the query blocks that can see it and
  accumulates dK and dV in one pass: 4 tile products per (query block, key block): S^T, dV, dP^T, dK;
- ``_dq_kernel`` (in :mod:`.dq`): one program per query block; it walks the visible key blocks and
  accumulates dQ: it recomputes S and dP to get dS, 3 products per tile.

That is 7 products per tile against FlashAttention-2's 5 (one kernel, dQ added with atomics), and
buys deterministic results. P is rebuilt as exp2(s * scale * log2 e - lse * log2 e): one fused
multiply-add and one exponential per score, with lse * log2 e computed once per row by the launcher.
Masks are paid only where they change something: each kernel walks its blocks in three ranges, the
causal diagonal (masked), the full blocks (no mask), and the last, partial block (masked loads);
keys past S and query rows past T load as zeros (lse = +inf there, so P = 0) and are never stored.
"""

from __future__ import annotations

import torch

from ..core.softmax import LOG2E
from .config_table import ConfigRow, ConfigTable
from .dq import DQ_CONFIGS, _dq_jitted
from .registry import KernelEntry, autotuned, constexprs, register
from .rows import _load_rows, _program, _store_rows
from .runtime import INTERPRETED, MAX_HEAD_DIM, MIN_HEAD_DIM, ON_GPU, tl, triton


def _dkdv_range(
    state,
    kv,
    q_rows,
    do_rows,
    row_stats,
    keys,
    queries,
    qk_scale_log2,
    causal_offset,
    MASKED: tl.constexpr,
    SHAPE: tl.constexpr,
):
    """Add the query blocks [start, stop) to one key block's dK and dV (4 products per tile).

    state: (dk, dv), returned updated. kv: the key block's (k, v) tiles. q_rows, do_rows: (base pointer of
    this head, stride along queries, stride along the head dim). row_stats: this head's (lse2, delta)
    pointers. keys: (BLOCK_N,) key positions. queries: (start, stop, T).
    SHAPE: the kernel's constexprs (D, DV, BLOCK_M, CAUSAL, PRECISION), one constexpr tuple.
    """
    D: tl.constexpr = SHAPE[0]
    DV: tl.constexpr = SHAPE[1]
    BLOCK_M: tl.constexpr = SHAPE[2]
    CAUSAL: tl.constexpr = SHAPE[3]
    PRECISION: tl.constexpr = SHAPE[4]
    dk, dv = state
    k, v = kv
    lse2_base, delta_base = row_stats
    start, stop, T = queries
    offs_m = tl.arange(0, BLOCK_M)  # query offsets within a block (BLOCK_M,)
    dims = tl.arange(0, k.shape[1])  # padded head dims: BLOCK_D of k, BLOCK_DV of v
    dims_v = tl.arange(0, v.shape[1])
    for start_m in range(start, stop, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m  # (BLOCK_M,)
        q = _load_rows(q_rows[0], rows, q_rows[1], T, dims, q_rows[2], D, MASKED)  # (BLOCK_M, BLOCK_D)
        do = _load_rows(do_rows[0], rows, do_rows[1], T, dims_v, do_rows[2], DV, MASKED)  # (BLOCK_M, BLOCK_DV)
        if MASKED:  # padding rows get lse = +inf: their probabilities come out as exactly 0
            lse2 = tl.load(lse2_base + rows, mask=rows < T, other=float("inf"))
            delta = tl.load(delta_base + rows, mask=rows < T, other=0.0)
        else:
            lse2 = tl.load(lse2_base + rows)
            delta = tl.load(delta_base + rows)
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M) = S^T tile, unscaled
        p_t = tl.math.exp2(s_t * qk_scale_log2 - lse2[None, :])  # P^T tile
        if MASKED and CAUSAL:
            p_t = tl.where(keys[:, None] <= rows[None, :] + causal_offset, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)  # (BLOCK_N, BLOCK_DV)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M) = dP^T tile
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)  # (BLOCK_N, BLOCK_D)
    return dk, dv


def _dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE2,
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
):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), summed over every query block."""
    block_n, batch_head, b, h = _program(tl.cdiv(S, BLOCK_N), num_heads, False)
    row_stats = batch_head.to(tl.int64) * T  # where this head's lse and delta start

    keys = block_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    dims = tl.arange(0, BLOCK_D)
    dims_v = tl.arange(0, BLOCK_DV)
    k = _load_rows(
        K + b * stride_kb + h * stride_kh, keys, stride_ks, S, dims, stride_kd, D, True
    )  # (BLOCK_N, BLOCK_D)
    v = _load_rows(V + b * stride_vb + h * stride_vh, keys, stride_vs, S, dims_v, stride_vd, DV, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)

    # Query i sees key j iff j <= i + causal_offset: query blocks before `first` see none of these keys,
    # blocks from `full` on see all of them. Without CAUSAL every block sees every key.
    full_end = T // BLOCK_M * BLOCK_M  # blocks before this hold no row past T
    if CAUSAL:
        first = tl.maximum(block_n * BLOCK_N - causal_offset, 0) // BLOCK_M * BLOCK_M
        full = tl.cdiv(tl.maximum(block_n * BLOCK_N + BLOCK_N - 1 - causal_offset, 0), BLOCK_M) * BLOCK_M
        diagonal_end = tl.minimum(tl.maximum(full, first), T)
    else:
        first = 0
        diagonal_end = 0
    middle_end = tl.maximum(diagonal_end, full_end)
    shape: tl.constexpr = tl.constexpr((D, DV, BLOCK_M, CAUSAL, PRECISION))
    q_rows = (Q + b * stride_qb + h * stride_qh, stride_qt, stride_qd)
    do_rows = (DO + b * stride_ob + h * stride_oh, stride_ot, stride_od)
    tiles = ((k, v), q_rows, do_rows, (LSE2 + row_stats, DELTA + row_stats), keys)
    scores = (qk_scale_log2, causal_offset)
    state = _dkdv_range((dk, dv), *tiles, (first, diagonal_end, T), *scores, True, shape)  # the causal diagonal
    state = _dkdv_range(state, *tiles, (diagonal_end, middle_end, T), *scores, False, shape)  # full blocks
    dk, dv = _dkdv_range(state, *tiles, (middle_end, T, T), *scores, True, shape)  # the last, partial block

    dk = dk * scale  # S = Q K^T * scale, so the scale reaches dK once, at the end
    # dK and dV have strides of their own: k and v may be views into packed or sliced storage.
    _store_rows(DK_OUT + b * stride_dkb + h * stride_dkh, keys, stride_dks, S, dims, stride_dkd, D, dk)
    _store_rows(DV_OUT + b * stride_dvb + h * stride_dvh, keys, stride_dvs, S, dims_v, stride_dvd, DV, dv)


# dK/dV: (BLOCK_M, BLOCK_N, warps, stages); BLOCK_N keys are the accumulators' rows, 64 per Hopper
# warpgroup. None spills (``python -m mha_course.gpu_report``).
DKDV_CONFIGS = ConfigTable(
    ConfigRow(90, (MIN_HEAD_DIM, 64), None, ((64, 128, 8, 1), (64, 128, 8, 2))),
    # At D = 128 the two (BLOCK_N, D) float32 accumulators take 128 registers a thread, so the causal
    # kernel (which adds the diagonal's masked loop) walks 32 queries at a time, and stages = 1 keeps
    # the copies of q and dO out of the registers.
    ConfigRow(90, (65, MAX_HEAD_DIM), True, ((32, 128, 8, 1),)),
    ConfigRow(90, (65, MAX_HEAD_DIM), False, ((64, 128, 8, 1), (32, 128, 8, 2))),
    # 64 x 64 tiles on 4 warps spill 40 B (136 B causal) at D = 64
    ConfigRow(80, (MIN_HEAD_DIM, 64), None, ((32, 64, 4, 2), (32, 64, 8, 2))),
    ConfigRow(80, (65, MAX_HEAD_DIM), None, ((32, 64, 8, 2), (16, 64, 4, 2))),
)


def _arguments(kernel, q, k, v, grad_out, lse2, delta, grads, scale, causal, causal_offset=0):
    """Positional arguments and constexprs of a launch of ``kernel`` ("dkdv" or "dq") on (B, H, ., .) tensors."""
    H, T, D = q.shape[1], q.shape[2], q.shape[3]
    S, Dv = v.shape[2], v.shape[3]
    strides = (*q.stride(), *k.stride(), *v.stride(), *grad_out.stride())
    # Each gradient is written with its own strides (contiguous here), never with its input's: q, k, v
    # may be views into packed or sliced storage, whose strides would write outside dq, dk, dv.
    grad_strides = tuple(s for g in grads for s in g.stride())
    args = (
        q,
        k,
        v,
        grad_out,
        lse2,
        delta,
        *grads,
        *strides,
        *grad_strides,
        H,
        T,
        S,
        scale,
        scale * LOG2E,
        causal_offset,
    )
    return args, constexprs(D, Dv, causal, q.dtype)


def _example_launch(kernel, q4, k4, v4, causal):
    """What :func:`flash_backward` passes to ``kernel`` ("dkdv" or "dq") for contiguous (B, H, T, D) inputs."""
    B, H, T, _ = q4.shape
    stats = torch.empty((B, H, T), dtype=torch.float32, device=q4.device)
    grads = (torch.empty_like(k4), torch.empty_like(v4)) if kernel == "dkdv" else (torch.empty_like(q4),)
    grad_out = torch.empty(B, H, T, v4.shape[3], dtype=q4.dtype, device=q4.device)
    return _arguments(kernel, q4, k4, v4, grad_out, stats, stats, grads, q4.shape[3] ** -0.5, causal)


def dkdv_example_launch(q4, k4, v4, causal):
    """The dK/dV kernel's launch for contiguous (B, H, T, D) inputs (gpu_report compiles from it)."""
    return _example_launch("dkdv", q4, k4, v4, causal)


def dq_example_launch(q4, k4, v4, causal):
    """The dQ kernel's launch for contiguous (B, H, T, D) inputs (gpu_report compiles from it)."""
    return _example_launch("dq", q4, k4, v4, causal)


_dkdv_autotuned = _dq_autotuned = None  # the autotuned launchers, on a GPU only
DKDV = DQ = None  # the registry's entries, where Triton is installed
if triton is not None:
    _dkdv_range = triton.jit(_dkdv_range)  # the kernel calls it by this global name
    _dkdv_jitted = triton.jit(_dkdv_kernel)
    DKDV = register(KernelEntry("dkdv", _dkdv_jitted, DKDV_CONFIGS, dkdv_example_launch, products=4))
    DQ = register(KernelEntry("dq", _dq_jitted, DQ_CONFIGS, dq_example_launch, products=3))
    if ON_GPU and not INTERPRETED:
        _tuning_key = ["T", "S", "D", "DV", "CAUSAL"]
        _dkdv_autotuned, _dq_autotuned = autotuned(DKDV, _tuning_key), autotuned(DQ, _tuning_key)


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

    Returns:
        (dq, dk, dv) with the shapes and dtype of (q, k, v), contiguous.
    """
    B, H, T, D = q.shape
    S = v.shape[2]
    dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))  # contiguous
    if T == 0 or S == 0 or B * H == 0:  # no score at all: every gradient is zero
        return dq.zero_(), dk.zero_(), dv.zero_()
    grad_out = grad_out.to(q.dtype)
    # delta = rowsum(dO * O) is O(T * Dv) work with no reuse: plain torch does it well.
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()  # (B, H, T)
    lse2 = (lse * LOG2E).contiguous()  # (B, H, T), base 2: the kernels index it as batch_head * T + row

    dkdv_args, meta = _arguments("dkdv", q, k, v, grad_out, lse2, delta, (dk, dv), scale, causal, causal_offset)
    dq_args, _ = _arguments("dq", q, k, v, grad_out, lse2, delta, (dq,), scale, causal, causal_offset)
    if block_m is None and block_n is None and _dkdv_autotuned is not None and _dq_autotuned is not None:
        _dkdv_autotuned[lambda cfg: (triton.cdiv(S, cfg["BLOCK_N"]) * B * H,)](*dkdv_args, **meta)
        _dq_autotuned[lambda cfg: (triton.cdiv(T, cfg["BLOCK_M"]) * B * H,)](*dq_args, **meta)
    else:
        block_m = block_m or (64 if ON_GPU else 32)
        block_n = block_n or (64 if ON_GPU else 32)
        _dkdv_jitted[(triton.cdiv(S, block_n) * B * H,)](*dkdv_args, **meta, BLOCK_M=block_m, BLOCK_N=block_n)
        _dq_jitted[(triton.cdiv(T, block_m) * B * H,)](*dq_args, **meta, BLOCK_M=block_m, BLOCK_N=block_n)
    return dq, dk, dv


__all__ = ["flash_backward"]
