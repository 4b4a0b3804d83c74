"""A FlashAttention-2 style forward kernel in Triton: attention without the (T, S) matrix.

Each program instance owns BLOCK_M queries of one (batch, head) pair, keeps them in fast memory,
and streams the keys and values past them BLOCK_N at a time with the online softmax:

    m_new = max(m, rowmax(s))                 running maximum of the scores seen so far
    l     = l * exp(m - m_new) + rowsum(exp(s - m_new))
    acc   = acc * exp(m - m_new) + exp(s - m_new) @ V_block
    out   = acc / l                           once every key block has been seen

so the (T, S) scores never exist in memory: extra memory is O(T) (m and l) instead of O(T * S).
Scores are computed in base 2 (``exp2``) with log2(e) folded into the scale: one multiply saved
per score. In causal mode (top-left aligned like ``torch``'s ``is_causal``: key j is visible to
query i iff j <= i) key blocks entirely in a query block's future are skipped, which halves the
work.

This module holds the kernel and its launcher :func:`_forward`; the public
:func:`mha_course.kernels.triton_attention` (checks, dtypes, autograd) is in :mod:`.function`,
and whether the kernel runs on a GPU or in Triton's interpreter is decided in :mod:`.runtime`.
"""

from __future__ import annotations

import torch

from .runtime import INTERPRETED, LOG2E, LOG2E_K, ON_GPU, tl, triton


def _attend_key_range(
    q,
    m_i,
    l_i,
    acc,
    k_base,
    v_base,
    rows,
    cols,
    dims,
    dims_v,
    stride_ks,
    stride_kd,
    stride_vs,
    stride_vd,
    S,
    qk_scale_log2,
    causal_offset,
    start,
    stop,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASK_FUTURE: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Fold key blocks [start, stop) into the running (m_i, l_i, acc) with the online softmax."""
    for start_n in range(start, stop, BLOCK_N):
        keys = start_n + cols  # (BLOCK_N,)
        k = tl.load(
            k_base + keys[None, :] * stride_ks + dims[:, None] * stride_kd,
            mask=(keys[None, :] < S) & (dims[:, None] < D),
            other=0.0,
        )  # (BLOCK_D, BLOCK_N) = K^T block
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale_log2  # (BLOCK_M, BLOCK_N), base-2 scores
        visible = keys[None, :] < S
        if MASK_FUTURE:  # only the diagonal blocks need the causal comparison
            visible = visible & (keys[None, :] <= rows[:, None] + causal_offset)
        s = tl.where(visible, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen only masked keys so far has m_new = -inf; shift by 0 to avoid inf - inf.
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_shift[:, None])  # (BLOCK_M, BLOCK_N)
        rescale = tl.math.exp2(m_i - m_shift)  # how much the old statistics shrink
        l_i = l_i * rescale + tl.sum(p, 1)
        v = tl.load(
            v_base + keys[:, None] * stride_vs + dims_v[None, :] * stride_vd,
            mask=(keys[:, None] < S) & (dims_v[None, :] < DV),
            other=0.0,
        )  # (BLOCK_N, BLOCK_DV)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return m_i, l_i, acc


def _flash_forward_kernel(
    Q,
    K,
    V,
    O,
    LSE,
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
    num_heads,
    T,
    S,
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
    """One program: BLOCK_M queries of one (batch, head); streams every visible key block past them."""
    # A 1-D grid of cdiv(T, BLOCK_M) * B * H programs: any B * H launches (a grid's y and z stop at 65535).
    n_blocks = tl.cdiv(T, BLOCK_M)
    block_m = tl.program_id(0) % n_blocks
    batch_head = tl.program_id(0) // n_blocks
    # int64 before multiplying by a stride: b * stride_qb passes 2**31 elements in a large batch.
    b = (batch_head // num_heads).to(tl.int64)
    h = (batch_head % num_heads).to(tl.int64)

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query positions (BLOCK_M,)
    cols = tl.arange(0, BLOCK_N)  # key offsets within a block (BLOCK_N,)
    dims = tl.arange(0, BLOCK_D)  # padded head dim: D need not be a power of two
    dims_v = tl.arange(0, BLOCK_DV)

    q_ptrs = Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=(rows[:, None] < T) & (dims[None, :] < D), other=0.0)  # (BLOCK_M, BLOCK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base-2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)  # running weighted sum of values

    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    if CAUSAL:
        # Query i sees key j iff j <= i + causal_offset (0: top-left aligned; S - T: bottom-right).
        # Key blocks wholly at or before the block's first query's diagonal are visible to all its rows:
        # no causal test needed there.
        diagonal = tl.minimum(S, tl.maximum(block_m * BLOCK_M + causal_offset + 1, 0) // BLOCK_N * BLOCK_N)
        m_i, l_i, acc = _attend_key_range(
            q,
            m_i,
            l_i,
            acc,
            k_base,
            v_base,
            rows,
            cols,
            dims,
            dims_v,
            stride_ks,
            stride_kd,
            stride_vs,
            stride_vd,
            S,
            qk_scale_log2,
            causal_offset,
            0,
            diagonal,
            D,
            DV,
            BLOCK_N,
            False,
            PRECISION,
        )
        # The diagonal blocks; keys past the block's last query are invisible to every row: skipped.
        m_i, l_i, acc = _attend_key_range(
            q,
            m_i,
            l_i,
            acc,
            k_base,
            v_base,
            rows,
            cols,
            dims,
            dims_v,
            stride_ks,
            stride_kd,
            stride_vs,
            stride_vd,
            S,
            qk_scale_log2,
            causal_offset,
            diagonal,
            tl.minimum(S, (block_m + 1) * BLOCK_M + causal_offset),
            D,
            DV,
            BLOCK_N,
            True,
            PRECISION,
        )
    else:
        m_i, l_i, acc = _attend_key_range(
            q,
            m_i,
            l_i,
            acc,
            k_base,
            v_base,
            rows,
            cols,
            dims,
            dims_v,
            stride_ks,
            stride_kd,
            stride_vs,
            stride_vd,
            S,
            qk_scale_log2,
            causal_offset,
            0,
            S,
            D,
            DV,
            BLOCK_N,
            False,
            PRECISION,
        )

    # Rows with no visible key (l = 0) give zeros, the library's convention for fully masked rows.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims_v[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(rows[:, None] < T) & (dims_v[None, :] < DV))
    # Natural-log log-sum-exp of each row's scores: what a backward pass needs to rebuild P.
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) / LOG2E_K)
    tl.store(LSE + batch_head.to(tl.int64) * T + rows, lse, mask=rows < T)


def _gpu_configs():
    """Autotuning space (CUDA only): (BLOCK_M, BLOCK_N, warps, stages) that compile without register
    spills for D = 64 and 128, fp16 and bf16, on sm_80 and sm_90 (``python -m mha_course.gpu_report``).

    128 x 128 tiles, and 128 x 64 or 64 x 64 tiles with only 4 warps, spill at D = 128: the
    (BLOCK_M, D) float32 accumulator and the q tile need more than 255 registers per thread.
    """
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [(128, 32, 8, 3), (64, 64, 8, 3), (64, 32, 4, 3), (64, 32, 4, 4)]
    ]


_autotuned = None  # the autotuned launcher, on a GPU only
if triton is not None:
    _attend_key_range = triton.jit(_attend_key_range)  # the kernel calls it by this global name
    _jitted = triton.jit(_flash_forward_kernel)
    # Autotune needs a live GPU driver; under the interpreter block sizes are chosen by the caller.
    _autotuned = (
        triton.autotune(configs=_gpu_configs(), key=["T", "S", "D", "DV", "CAUSAL"])(_jitted)
        if ON_GPU and not INTERPRETED
        else None
    )


def _check_blocks(block_m, block_n, causal):
    for name, blk in (("block_m", block_m), ("block_n", block_n)):
        if blk < 16 or blk & (blk - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's minimum), got {blk}")
    if causal and block_m % block_n:
        raise ValueError(f"causal mode needs block_m to be a multiple of block_n, got {block_m} and {block_n}")


def _forward(q4, k4, v4, causal, scale, block_m, block_n, causal_offset=0):
    """Launch the forward kernel on (B, H, T, D) / (B, H, S, D) / (B, H, S, Dv); returns (out, lse).

    ``causal_offset``: query i sees key j iff j <= i + causal_offset (0 top-left, S - T bottom-right).
    """
    B, H, T, D = q4.shape
    S, Dv = v4.shape[2], v4.shape[3]
    out = torch.empty((B, H, T, Dv), dtype=q4.dtype, device=q4.device)  # (B, H, T, Dv)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=q4.device)  # (B, H, T)
    if T == 0 or B * H == 0:
        return out, lse
    args = (
        *(q4, k4, v4, out, lse),
        *(*q4.stride(), *k4.stride(), *v4.stride(), *out.stride()),
        *(H, T, S, scale * LOG2E, causal_offset),
    )
    meta = dict(
        D=D,
        DV=Dv,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
        BLOCK_DV=max(16, triton.next_power_of_2(Dv)),
        CAUSAL=causal,
        PRECISION="ieee" if q4.dtype == torch.float32 else "tf32",
    )
    if block_m is None and block_n is None and _autotuned is not None:
        grid = lambda cfg: (triton.cdiv(T, cfg["BLOCK_M"]) * B * H,)
        _autotuned[grid](*args, **meta)
    else:
        _jitted[(triton.cdiv(T, block_m) * B * H,)](*args, **meta, BLOCK_M=block_m, BLOCK_N=block_n)
    return out, lse
