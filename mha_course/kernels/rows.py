"""Row tiles for the backward kernels: load (len(idx), len(dims)) tiles with the masks a tile needs, store them.

A leaf of :mod:`.backward` and :mod:`.dq`: the kernels call these ``triton.jit`` helpers by name.
"""

from __future__ import annotations

from .runtime import tl, triton


def _load_rows(base, idx, stride_idx, n_idx, dims, stride_d, N_DIM: tl.constexpr, CHECK_IDX: tl.constexpr):
    """The (len(idx), len(dims)) tile at base[idx, dims]: zeros past n_idx (if CHECK_IDX) and past N_DIM."""
    ptrs = base + idx[:, None] * stride_idx + dims[None, :] * stride_d
    if CHECK_IDX:
        return tl.load(ptrs, mask=(idx[:, None] < n_idx) & (dims[None, :] < N_DIM), other=0.0)
    elif dims.shape[0] != N_DIM:
        return tl.load(ptrs, mask=dims[None, :] < N_DIM, other=0.0)
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
    _store_rows = triton.jit(_store_rows)
