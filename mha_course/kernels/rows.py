"""What every kernel shares: its program's block and head, the key blocks a query block sees, row tiles.

A leaf of :mod:`.forward`, :mod:`.backward` and :mod:`.dq`: the kernels call these ``triton.jit`` helpers by name.
"""

from __future__ import annotations

from .runtime import tl, triton


def _program(n_blocks, num_heads, LONGEST_FIRST: tl.constexpr):
    """(block, batch_head, b, h) of this program in a 1-D grid of n_blocks * B * H programs.

    A 1-D grid launches any B * H (a grid's y and z stop at 65535). b and h are int64: b * stride_b
    passes 2**31 elements in a large batch. LONGEST_FIRST reverses the blocks (causal: later query
    blocks see more keys, so the last programs are short ones).
    """
    block = tl.program_id(0) % n_blocks
    batch_head = tl.program_id(0) // n_blocks
    if LONGEST_FIRST:
        block = n_blocks - 1 - block
    return block, batch_head, (batch_head // num_heads).to(tl.int64), (batch_head % num_heads).to(tl.int64)


def _visible_keys(first_row, S, causal_offset, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(full_end, stop) for the query block from first_row: keys [0, full_end) in whole BLOCK_N blocks are
    seen by every row of it (and are < S); keys [full_end, stop) need a mask; keys from stop on, none.

    Query i sees key j iff j <= i + causal_offset (CAUSAL), otherwise every key.
    """
    full_end = S // BLOCK_N * BLOCK_N  # blocks before this hold no key past S
    if CAUSAL:
        full_end = tl.minimum(full_end, tl.maximum(first_row + causal_offset + 1, 0) // BLOCK_N * BLOCK_N)
        stop = tl.maximum(tl.minimum(S, first_row + BLOCK_M + causal_offset), 0)
    else:
        stop = S
    return full_end, stop


def _load_rows(base, idx, stride_idx, n_idx, dims, stride_d, N_DIM: tl.constexpr, CHECK_IDX: tl.constexpr):
    """The (len(idx), len(dims)) tile at base[idx, dims]: zeros past n_idx (if CHECK_IDX) and past N_DIM."""
    ptrs = base + idx[:, None] * stride_idx + dims[None, :] * stride_d
    if CHECK_IDX:
        return tl.load(ptrs, mask=(idx[:, None] < n_idx) & (dims[None, :] < N_DIM), other=0.0)
    elif dims.shape[0] != N_DIM:
        return tl.load(ptrs, mask=dims[None, :] < N_DIM, other=0.0)
    else:
        return tl.load(ptrs)


def _load_cols(base, idx, stride_idx, n_idx, dims, stride_d, N_DIM: tl.constexpr, CHECK_IDX: tl.constexpr):
    """The transposed tile, (len(dims), len(idx)) at base[idx, dims]: K^T for Q K^T, loaded as K^T directly."""
    ptrs = base + idx[None, :] * stride_idx + dims[:, None] * stride_d
    if CHECK_IDX:
        return tl.load(ptrs, mask=(idx[None, :] < n_idx) & (dims[:, None] < N_DIM), other=0.0)
    elif dims.shape[0] != N_DIM:
        return tl.load(ptrs, mask=dims[:, None] < N_DIM, other=0.0)
    else:
        return tl.load(ptrs)


def _store_rows(base, idx, stride_idx, n_idx, dims, stride_d, N_DIM: tl.constexpr, tile):
    """Write the float32 tile to base[idx, dims] in base's dtype, skipping the padding."""
    tl.store(
        base + idx[:, None] * stride_idx + dims[None, :] * stride_d,
        tile.to(base.dtype.element_ty),
        mask=(idx[:, None] < n_idx) & (dims[None, :] < N_DIM),
    )


if triton is not None:
    _load_rows = triton.jit(_load_rows)  # the kernels call them by these global names
    _load_cols = triton.jit(_load_cols)
    _program = triton.jit(_program)
    _visible_keys = triton.jit(_visible_keys)
    _store_rows = triton.jit(_store_rows)
