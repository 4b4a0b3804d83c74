"""The tile configs a kernel ships, as plain data: rows by GPU, head-dim range and mask.

A row says: on GPUs from ``gpu`` up (compute capability, 90 for an H100) to the next row's GPU,
for launches whose larger head dim ``max(D, Dv)`` lies in ``head_dims`` (both ends included)
with this mask (``None``: both), the autotuner tries these (BLOCK_M, BLOCK_N, warps, stages)::

    ConfigTable(
        ConfigRow(90, (16, 128), None, ((128, 128, 8, 2),)),
        ConfigRow(80, (16, 64), None, ((64, 64, 4, 3),)),
        ConfigRow(80, (65, 128), None, ((64, 64, 4, 2),)),
    )

Each launch a GPU may see (every head dim ``triton_attention`` takes, both masks) must match
exactly one row of its GPU's rows: a table where a row is never selected (its head dims are
never launched, or an earlier row covers them) or where a launch finds no row raises
ValueError when it is built, naming the row. GPUs older than every row take the oldest rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .runtime import MAX_HEAD_DIM, MIN_HEAD_DIM

Shape = tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)


@dataclass(frozen=True)
class ConfigRow:
    """The shapes shipped for GPUs from ``gpu`` up, head dims ``head_dims`` and a mask."""

    gpu: int  # compute capability: 80 (A100), 90 (H100), 100 (B200)
    head_dims: tuple[int, int]  # (lowest, highest) of max(D, Dv), both included
    causal: bool | None  # None: causal and not
    shapes: tuple[Shape, ...]

    def covers(self, head_dim: int, causal: bool) -> bool:
        low, high = self.head_dims
        return low <= head_dim <= high and self.causal in (None, causal)

    def __str__(self) -> str:
        mask = {None: "either mask", True: "causal", False: "non-causal"}[self.causal]
        low, high = self.head_dims
        return f"sm_{self.gpu}+ D={low}..{high} {mask}"


class ConfigTable:
    """A kernel's rows, checked when built: every row selected by some launch, every launch by one row."""

    def __init__(self, *rows: ConfigRow) -> None:
        if not rows:
            raise ValueError("a ConfigTable needs at least one ConfigRow, got none")
        self.rows = rows
        for row in rows:
            _check_row(row)
        for gpu in self.gpus():
            _check_coverage([r for r in rows if r.gpu == gpu])

    def gpus(self) -> list[int]:
        """The GPUs the rows name, oldest first."""
        return sorted({row.gpu for row in self.rows})

    def tier(self, gpu: int) -> int:
        """The rows' GPU that ``gpu`` takes: the newest at or below it (the oldest for older GPUs)."""
        named = self.gpus()
        return max((g for g in named if g <= gpu), default=named[0])

    def select(self, gpu: int, head_dim: int, causal: bool) -> tuple[Shape, ...]:
        """The shapes shipped for one launch: GPU ``gpu``, ``max(D, Dv) = head_dim``, the mask."""
        tier = self.tier(gpu)
        for row in self.rows:
            if row.gpu == tier and row.covers(head_dim, causal):
                return row.shapes
        raise ValueError(
            f"no config for sm_{gpu}, head dim {head_dim}, causal={causal}: "
            f"head dims must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]"
        )

    def shipped(self, gpu: int) -> tuple[Shape, ...]:
        """Every shape shipped for GPU ``gpu``, of every row (head dims and masks), without repeats."""
        tier = self.tier(gpu)
        every = (shape for row in self.rows if row.gpu == tier for shape in row.shapes)
        return tuple(dict.fromkeys(every))


def _check_row(row: ConfigRow) -> None:
    low, high = row.head_dims
    if not MIN_HEAD_DIM <= low <= high <= MAX_HEAD_DIM:
        raise ValueError(
            f"config row {row} is never selected in full: launches have head dims in "
            f"[{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {low}..{high}"
        )
    if not row.shapes:
        raise ValueError(f"config row {row} ships no shape")
    for shape in row.shapes:
        block_m, block_n, warps, stages = shape
        sizes_ok = all(b >= 16 and b & (b - 1) == 0 for b in (block_m, block_n))
        if not (sizes_ok and warps >= 1 and stages >= 1):
            raise ValueError(
                f"config row {row}: expected (BLOCK_M, BLOCK_N, warps, stages) with blocks "
                f"powers of two >= 16, got {shape}"
            )


def _check_coverage(rows: list[ConfigRow]) -> None:
    """Every (head dim, mask) one GPU's launches may have matches exactly one of its rows."""
    for head_dim in range(MIN_HEAD_DIM, MAX_HEAD_DIM + 1):
        for causal in (False, True):
            matching = [i for i, row in enumerate(rows) if row.covers(head_dim, causal)]
            if not matching:
                raise ValueError(f"no config row for sm_{rows[0].gpu}+ at head dim {head_dim}, causal={causal}")
            if len(matching) > 1:
                first, other = rows[matching[0]], rows[matching[1]]
                raise ValueError(
                    f"config rows {first} and {other} both match head dim {head_dim}, "
                    f"causal={causal}: one of them is never selected there"
                )
