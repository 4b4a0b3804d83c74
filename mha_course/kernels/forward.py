"""A FlashAttention-2 style forward kernel in Triton: attention without the (T, S) matrix.

Each program instance owns BLOCK_M queries of one (batch, head) pair, keeps them in fast memory,
and streams the keys and values past them BLOCK_N at a time with the online softmax:

    m_new = max(m, rowmax(s))                 running maximum of the scores seen so far
    l     = l * exp(m - m_new) + rowsum(exp(s - m_new))
    acc   = acc * exp(m - m_new) + exp(s - m_new) @ V_block
    out   = acc / l                           once every key block has been seen

so the (T, S) scores never exist in memory: extra memory is O(T) (m and l) instead of O(T * S).
Scores are computed in base 2 (``exp2``) with log2(e) folded into the scale, and the row maximum
is taken of the raw scores and scaled once per row, so each score costs one fused multiply-add
(``s * scale - m``) before its exponential. In causal mode (query i sees key j iff
j <= i + causal_offset: 0 is top-left aligned like ``torch``'s ``is_causal``, S - T bottom-right)
key blocks entirely in a query block's future are skipped, which halves the work.

The key blocks are walked in two loops: the full blocks every row of the program sees, with no
mask at all, then the blocks that need one (the causal diagonal, and the last block when S is
not a multiple of BLOCK_N). Masking costs a compare and a select per score, so it is paid only
where it changes something.

This module holds the kernel, its configs (``FORWARD_CONFIGS``) and its launcher :func:`_forward`,
and registers them at its end (:mod:`.registry`, the entry ``FORWARD``); the public
:func:`mha_course.kernels.triton_attention` (checks, dtypes, autograd) is in :mod:`.function`, and
whether the kernel runs on a GPU or in Triton's interpreter is decided in :mod:`.runtime`.
"""

from __future__ import annotations

import torch

from ..core.softmax import LOG2E
from .config_table import ConfigRow, ConfigTable
from .registry import KernelEntry, autotuned, constexprs, register
from .rows import _load_cols, _load_rows, _program, _store_rows, _visible_keys
from .runtime import INTERPRETED, LOG2E_K, MAX_HEAD_DIM, MIN_HEAD_DIM, ON_GPU, tl, triton


def _attend_key_range(
    q, state, k_rows, v_rows, rows, keys, qk_scale_log2, causal_offset, MASKED: tl.constexpr, SHAPE: tl.constexpr
):
    """Fold key blocks [start, stop) into the running (m_i, l_i, acc) with the online softmax.

    state: (m_i, l_i, acc), returned updated. k_rows, v_rows: (base pointer of this head, stride along
    keys, stride along the head dim). rows: (BLOCK_M,) query positions. keys: (start, stop, S).
    SHAPE: the kernel's constexprs (D, DV, BLOCK_N, CAUSAL, NEGATIVE_SCALE, PRECISION), one constexpr tuple.
    MASKED: the blocks may hold keys past S or (CAUSAL) in some row's future; otherwise every key
    of every block is visible to every row, and no score is compared or selected.
    """
    D: tl.constexpr = SHAPE[0]
    DV: tl.constexpr = SHAPE[1]
    BLOCK_N: tl.constexpr = SHAPE[2]
    CAUSAL: tl.constexpr = SHAPE[3]
    NEGATIVE_SCALE: tl.constexpr = SHAPE[4]
    PRECISION: tl.constexpr = SHAPE[5]
    m_i, l_i, acc = state
    start, stop, S = keys
    cols = tl.arange(0, BLOCK_N)  # key offsets within a block (BLOCK_N,)
    dims = tl.arange(0, q.shape[1])  # padded head dims: BLOCK_D of q, BLOCK_DV of acc
    dims_v = tl.arange(0, acc.shape[1])
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        keys_n = start_n + cols  # (BLOCK_N,)
        k = _load_cols(k_rows[0], keys_n, k_rows[1], S, dims, k_rows[2], D, MASKED)  # (BLOCK_D, BLOCK_N) = K^T
        s = tl.dot(q, k, input_precision=PRECISION)  # (BLOCK_M, BLOCK_N) raw scores
        if MASKED:
            visible = keys_n[None, :] < S
            if CAUSAL:
                visible = visible & (keys_n[None, :] <= rows[:, None] + causal_offset)
            s = tl.where(visible, s * qk_scale_log2, float("-inf"))  # base-2 scores, -inf where invisible
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen only masked keys so far has m_new = -inf; shift by 0 to avoid inf - inf.
            m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s - m_shift[:, None])
        else:
            # max(s * c) = max(s) * c for c >= 0 (min for c < 0): one multiply per row, not per score.
            peak = tl.min(s, 1) if NEGATIVE_SCALE else tl.max(s, 1)
            m_new = tl.maximum(m_i, peak * qk_scale_log2)
            m_shift = m_new  # finite: every row has seen a visible key by now
            p = tl.math.exp2(s * qk_scale_log2 - m_shift[:, None])  # one FFMA and one EX2 per score
        rescale = tl.math.exp2(m_i - m_shift)  # how much the old statistics shrink
        l_i = l_i * rescale + tl.sum(p, 1)
        v = _load_rows(v_rows[0], keys_n, v_rows[1], S, dims_v, v_rows[2], DV, MASKED)  # (BLOCK_N, BLOCK_DV)
        acc = acc * rescale[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)  # (BLOCK_M, BLOCK_DV)
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
    NEGATIVE_SCALE: tl.constexpr = False,
):
    """One program: BLOCK_M queries of one (batch, head); streams every visible key block past them."""
    block_m, batch_head, b, h = _program(tl.cdiv(T, BLOCK_M), num_heads, CAUSAL)
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query positions (BLOCK_M,)
    dims = tl.arange(0, BLOCK_D)  # padded head dim: D need not be a power of two
    dims_v = tl.arange(0, BLOCK_DV)
    q = _load_rows(
        Q + b * stride_qb + h * stride_qh, rows, stride_qt, T, dims, stride_qd, D, True
    )  # (BLOCK_M, BLOCK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base-2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)  # running weighted sum of values

    # Key blocks before full_end are seen by every row (no mask); those up to stop need one (the causal
    # diagonal, the last block when S % BLOCK_N != 0); keys past the last row's diagonal are skipped.
    full_end, stop = _visible_keys(block_m * BLOCK_M, S, causal_offset, BLOCK_M, BLOCK_N, CAUSAL)
    shape: tl.constexpr = tl.constexpr((D, DV, BLOCK_N, CAUSAL, NEGATIVE_SCALE, PRECISION))
    k_rows = (K + b * stride_kb + h * stride_kh, stride_ks, stride_kd)
    v_rows = (V + b * stride_vb + h * stride_vh, stride_vs, stride_vd)
    scores = (qk_scale_log2, causal_offset)
    state = _attend_key_range(q, (m_i, l_i, acc), k_rows, v_rows, rows, (0, full_end, S), *scores, False, shape)
    m_i, l_i, acc = _attend_key_range(q, state, k_rows, v_rows, rows, (full_end, stop, S), *scores, True, shape)

    # Rows with no visible key (l = 0) give zeros, the library's convention for fully masked rows.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    _store_rows(O + b * stride_ob + h * stride_oh, rows, stride_ot, T, dims_v, stride_od, DV, out)
    # Natural-log log-sum-exp of each row's scores: what a backward pass needs to rebuild P.
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) / LOG2E_K)
    tl.store(LSE + batch_head.to(tl.int64) * T + rows, lse, mask=rows < T)


# The (BLOCK_M, BLOCK_N, warps, stages) shipped per GPU, head dim and mask, for the autotuner to choose
# from; ``python -m mha_course.gpu_report`` says which spill (on sm_90, (128, 128, 8, 2) in the
# causal D = 128 kernel: a few bytes per thread, which its best-configuration pick leaves out).
FORWARD_CONFIGS = ConfigTable(
    # Hopper's wgmma gives each warpgroup (4 warps) 64 rows of the accumulator, so 8 warps need
    # BLOCK_M = 128: with 64 rows both warpgroups would compute the same scores.
    ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, ((128, 128, 8, 2), (128, 64, 8, 3))),
    # Ampere's mma.sync keeps the (BLOCK_M, D) accumulator and q in registers: 64-wide key blocks.
    # 4 warps on 128 rows spill 32 B in the causal kernel (its diagonal loop).
    ConfigRow(80, (MIN_HEAD_DIM, 64), True, ((64, 64, 4, 3), (128, 64, 8, 3))),
    ConfigRow(80, (MIN_HEAD_DIM, 64), False, ((128, 64, 4, 3), (64, 64, 4, 3))),
    ConfigRow(80, (65, MAX_HEAD_DIM), None, ((128, 64, 8, 3), (64, 64, 4, 3))),
)


def _arguments(q4, k4, v4, out, lse, scale, causal, causal_offset=0):
    """The launch's positional arguments and constexprs (all but the config's) for (B, H, T, D) inputs."""
    H, T, D = q4.shape[1], q4.shape[2], q4.shape[3]
    S, Dv = v4.shape[2], v4.shape[3]
    args = (
        *(q4, k4, v4, out, lse),
        *(*q4.stride(), *k4.stride(), *v4.stride(), *out.stride()),
        *(H, T, S, scale * LOG2E, causal_offset),
    )
    # The kernel scales the row maximum of the raw scores: their minimum when the scale is negative.
    meta = dict(constexprs(D, Dv, causal, q4.dtype), NEGATIVE_SCALE=scale < 0)
    return args, meta


def example_launch(q4, k4, v4, causal):
    """What :func:`_forward` passes for contiguous (B, H, T, D) inputs (gpu_report compiles from it)."""
    B, H, T, _ = q4.shape
    out = torch.empty((B, H, T, v4.shape[3]), dtype=q4.dtype, device=q4.device)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=q4.device)
    return _arguments(q4, k4, v4, out, lse, q4.shape[3] ** -0.5, causal)


_autotuned = None  # the autotuned launcher, on a GPU only
FORWARD = None  # the registry's entry, where Triton is installed
if triton is not None:
    _attend_key_range = triton.jit(_attend_key_range)  # the kernel calls it by this global name
    _jitted = triton.jit(_flash_forward_kernel)
    FORWARD = register(KernelEntry("forward", _jitted, FORWARD_CONFIGS, example_launch, products=2))
    # Autotune needs a live GPU driver; under the interpreter block sizes are chosen by the caller.
    if ON_GPU and not INTERPRETED:
        _autotuned = autotuned(FORWARD, key=["T", "S", "D", "DV", "CAUSAL"])


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
    Dv = v4.shape[3]
    out = torch.empty((B, H, T, Dv), dtype=q4.dtype, device=q4.device)  # (B, H, T, Dv)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=q4.device)  # (B, H, T)
    if T == 0 or B * H == 0:
        return out, lse
    args, meta = _arguments(q4, k4, v4, out, lse, scale, causal, causal_offset)
    if block_m is None and block_n is None and _autotuned is not None:
        grid = lambda cfg: (triton.cdiv(T, cfg["BLOCK_M"]) * B * H,)
        _autotuned[grid](*args, **meta)
    else:
        _jitted[(triton.cdiv(T, block_m) * B * H,)](*args, **meta, BLOCK_M=block_m, BLOCK_N=block_n)
    return out, lse


__all__ = ["FORWARD", "FORWARD_CONFIGS", "example_launch"]
