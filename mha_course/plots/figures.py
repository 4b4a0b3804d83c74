"""Pictures of attention: heatmaps of weights, grids of heads, masks, and "yours vs expected".

(:func:`interactive`, the notebooks' sliders with a static fallback, lives in :mod:`.widgets` and is
re-exported here.)

Every function takes torch tensors or NumPy arrays (tensors are detached and moved to the CPU)
and returns the matplotlib object it drew on, so that a notebook can add to it and a test can
inspect it. Rows are always queries (T) and columns keys (S), as in ``weights[t, s]``.

``import mha_course`` imports neither this module nor matplotlib, so the library stays light for
the grader and the command-line tools; the modules that draw (this one and its building block
:mod:`.heatmap`, :mod:`.vectors_plot`, :mod:`.widgets`, :mod:`.interpret`, :mod:`.bench_report`,
and the grader's self-check and class report) import matplotlib inside the functions that draw.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._checks import _check_labels, _squeeze_leading, _to_numpy
from .heatmap import draw_heatmap, set_ticks, value_range

# The difference panel's colour range is at least this fraction of the values' range.
_DIFF_COLOR_FLOOR = 1e-3


def plot_attention(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    cmap: str = "viridis",
    annotate: bool | None = None,
    colorbar_label: str | None = "weight",
):
    """Heatmap of one attention matrix: cell (t, s) is how much query t attends to key s.

    Args:
        weights: (T, S) tensor or array; leading size-1 dims are dropped, so (1, 1, T, S) from
            a batch of one with one head is fine. NaNs are drawn in magenta.
        query_labels: T tick labels for the rows (e.g. the tokens), or None for 0..T-1.
        key_labels: S tick labels for the columns, or None for 0..S-1.
        ax: matplotlib Axes to draw on; None makes a new figure.
        title: axes title.
        cmap: matplotlib colormap name.
        annotate: write the numbers into the cells; None = only when T * S <= 64.
        colorbar_label: what the colours mean ("weight"; pass "score" for unnormalised scores).

    Returns:
        the matplotlib Axes.

    Raises:
        TypeError: ``weights`` is not a tensor/array of numbers.
        ValueError: ``weights`` is not 2-D after dropping leading size-1 dims, or a label list
            has the wrong length.
    """
    import matplotlib.pyplot as plt

    matrix = _squeeze_leading(_to_numpy(weights, "weights"), 2, "weights", "(T, S)")
    T, S = matrix.shape
    query_labels = _check_labels(query_labels, T, "query_labels", "query (T)")
    key_labels = _check_labels(key_labels, S, "key_labels", "key (S)")
    if ax is None:
        width = min(12.0, 2.5 + 0.45 * S)
        height = min(10.0, 1.5 + 0.45 * T)
        _, ax = plt.subplots(figsize=(max(width, 3.5), max(height, 2.5)), layout="constrained")
    vmin, vmax = value_range(matrix)
    draw_heatmap(
        ax,
        matrix,
        query_labels,
        key_labels,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        annotate=annotate,
        colorbar_label=colorbar_label,
    )
    if title is not None:
        ax.set_title(title)
    return ax


def plot_attention_grid(
    weights,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    annotate: bool = False,
    colorbar_label: str | None = "weight",
):
    """A grid of heatmaps: one row of heads (H, T, S), or layers x heads (L, H, T, S).

    All panels share one colour scale and one colorbar, so heads can be compared by eye.

    Args:
        weights: (H, T, S) or (L, H, T, S) tensor/array. Weights of a batch, (B, H, T, S),
            are drawn with one row per batch element.
        row_labels: L names for the rows; default "layer 0", "layer 1", ... (none for 3-D input).
        col_labels: H names for the columns; default "head 0", "head 1", ...
        query_labels: T tick labels (shown on the first column).
        key_labels: S tick labels (shown on the bottom row).
        title: figure title.
        cmap: matplotlib colormap name.
        annotate: write the numbers into every cell.
        colorbar_label: what the colours mean.

    Returns:
        the matplotlib Figure; its first L * H axes are the panels, row by row, then the colorbar.

    Raises:
        TypeError: ``weights`` is not a tensor/array of numbers.
        ValueError: ``weights`` is neither 3-D nor 4-D, or a label list has the wrong length.
    """
    import matplotlib.pyplot as plt

    grid = _to_numpy(weights, "weights")
    if grid.ndim == 3:
        grid = grid[None]  # (1, H, T, S)
        default_rows = [""]
    elif grid.ndim == 4:
        default_rows = [f"layer {i}" for i in range(grid.shape[0])]
    else:
        raise ValueError(f"weights must have shape (H, T, S) or (L, H, T, S), got {tuple(grid.shape)}")
    L, H, T, S = grid.shape
    row_labels = _check_labels(row_labels, L, "row_labels", "layer (L)") or default_rows
    col_labels = _check_labels(col_labels, H, "col_labels", "head (H)") or [f"head {h}" for h in range(H)]
    query_labels = _check_labels(query_labels, T, "query_labels", "query (T)")
    key_labels = _check_labels(key_labels, S, "key_labels", "key (S)")

    panel = min(3.2, max(1.8, 0.3 * max(T, S)))
    fig, axes = plt.subplots(L, H, figsize=(panel * H + 1.2, panel * L + 0.6), squeeze=False, layout="constrained")
    vmin, vmax = value_range(grid)
    image = None
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            image = draw_heatmap(
                ax,
                grid[layer, head],
                query_labels,
                key_labels,
                cmap=cmap,
                vmin=vmin,
                vmax=vmax,
                annotate=annotate,
                show_x=layer == L - 1,
                show_y=head == 0,
                colorbar=False,
            )
            name = col_labels[head] if not row_labels[layer] else f"{row_labels[layer]}, {col_labels[head]}"
            ax.set_title(name, fontsize=10)
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    if colorbar_label:
        bar.set_label(colorbar_label)
    if title is not None:
        fig.suptitle(title)
    return fig


def _worst_slice(yours: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """For (..., T, S) inputs pick the (T, S) matrix where the two differ most (NaN counts as worst)."""
    lead = yours.shape[:-2]
    if not lead:
        return yours, expected, ()
    flat_y = yours.reshape(-1, *yours.shape[-2:])  # (N, T, S)
    flat_e = expected.reshape(-1, *expected.shape[-2:])  # (N, T, S)
    diff = np.abs(flat_y - flat_e)
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = int(diff.reshape(len(diff), -1).max(axis=1).argmax()) if diff.size else 0
    index = tuple(int(i) for i in np.unravel_index(worst, lead))
    return flat_y[worst], flat_e[worst], index


def plot_side_by_side(
    yours,
    expected,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    names: tuple[str, str] = ("yours", "expected"),
    annotate: bool | None = None,
    value_name: str = "weight",
    axis_names: tuple[str, str] = ("query (T)", "key (S)"),
):
    """Three panels: your weights, the expected weights, and their difference (yours - expected).

    Used by the self-check when a learner's attention weights are wrong: the difference panel
    (red = too much weight, blue = too little) shows *where* they are wrong, e.g. above the
    diagonal when a causal mask was ignored. Differences below a thousandth of the values'
    range (rounding) stay white.

    Args:
        yours, expected: tensors/arrays of the same shape (..., T, S). With leading dims (heads,
            batch) the (T, S) matrix where the two differ most is drawn, and its index is in
            the title.
        query_labels: T tick labels; key_labels: S tick labels.
        title: figure title (the worst index is appended when there are leading dims).
        names: titles of the first two panels.
        annotate: write numbers into the cells; None = only for small matrices.
        value_name, axis_names: what the colour and the (row, column) axes mean, for matrices that are
            not attention weights (an output is (query, feature), a position table (position, coordinate)).

    Returns:
        the matplotlib Figure; axes 0-2 are the panels (then their colorbars).

    Raises:
        TypeError: an input is not a tensor/array of numbers.
        ValueError: the shapes differ, or are less than 2-D.
    """
    import matplotlib.pyplot as plt

    mine = _to_numpy(yours, "yours").astype(np.float64)
    ref = _to_numpy(expected, "expected").astype(np.float64)
    if mine.shape != ref.shape:
        raise ValueError(f"yours has shape {tuple(mine.shape)} but expected has shape {tuple(ref.shape)}")
    if mine.ndim < 2:
        raise ValueError(f"weights must have shape (..., T, S) (at least 2 dims), got {tuple(mine.shape)}")
    mine, ref, index = _worst_slice(mine, ref)
    T, S = mine.shape
    query_labels = _check_labels(query_labels, T, "query_labels", "query (T)")
    key_labels = _check_labels(key_labels, S, "key_labels", "key (S)")

    panel = min(5.0, max(3.2, 0.5 * max(T, S)))
    fig, axes = plt.subplots(1, 3, figsize=(3 * panel + 2.0, panel + 0.8), layout="constrained")
    if annotate is None:  # three panels side by side leave less room per cell than one
        annotate = T * S <= 36
    vmin, vmax = value_range(mine, ref)
    for ax, matrix, name in zip(axes[:2], (mine, ref), names, strict=True):
        draw_heatmap(
            ax,
            matrix,
            query_labels,
            key_labels,
            cmap="viridis",
            vmin=vmin,
            vmax=vmax,
            annotate=annotate,
            colorbar_label=value_name,
            axis_names=axis_names,
        )
        nan_count = int(np.isnan(matrix).sum())
        ax.set_title(name if not nan_count else f"{name} ({nan_count} NaN, magenta)")
    difference = mine - ref
    finite = np.abs(difference[np.isfinite(difference)])
    largest = float(finite.max()) if finite.size else 0.0
    # The colour range never shrinks below a thousandth of the values' own size: rounding noise
    # (1e-8 between two correct implementations) stays white instead of filling the colour scale.
    floor = _DIFF_COLOR_FLOOR * max(vmax - vmin, abs(vmin), abs(vmax), 1e-12)
    limit = max(largest, floor)
    draw_heatmap(
        axes[2],
        difference,
        query_labels,
        key_labels,
        cmap="RdBu_r",
        vmin=-limit,
        vmax=limit,
        annotate=annotate,
        colorbar_label="difference",
        axis_names=axis_names,
    )
    axes[2].set_title(f"{names[0]} - {names[1]} (max |diff| {largest:.2g})")
    suptitle = title or ""
    if index:
        where = ", ".join(str(i) for i in index)
        suptitle = f"{suptitle} (matrix [{where}], where they differ most)".strip()
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_mask(
    mask,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    true_label: str = "may attend",
    false_label: str = "blocked",
):
    """Picture of a boolean mask: True cells blue, False cells grey, and a legend saying what each means.

    By default the legend reads the course's convention (True = may attend). For a mask in
    ``torch.nn.MultiheadAttention``'s opposite convention pass ``true_label="blocked",
    false_label="may attend"``: the colours still show the stored values, so the two
    conventions drawn side by side look inverted, as they are. Any other yes/no matrix (e.g.
    "output t depends on token j") can be drawn with its own two labels.

    Args:
        mask: bool (T, S) tensor/array; leading size-1 dims are dropped, so a padding mask
            (1, 1, 1, S) or a (1, 1, T, S) mask is fine.
        query_labels: T tick labels; key_labels: S tick labels.
        ax: Axes to draw on; None makes a new figure.
        title: axes title.
        true_label, false_label: legend text for True and False cells.

    Returns:
        the matplotlib Axes, with a legend naming both colours.

    Raises:
        TypeError: ``mask`` is not boolean (a float mask is added to scores; plot it with
            :func:`plot_attention` instead).
        ValueError: ``mask`` is not 2-D after dropping leading size-1 dims, or a label list
            has the wrong length.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    array = _to_numpy(mask, "mask")
    if array.dtype != bool:
        raise TypeError(
            f"mask must be boolean (True = may attend), got dtype {array.dtype}; "
            "draw a float (additive) mask with plot_attention"
        )
    matrix = _squeeze_leading(array, 2, "mask", "(T, S)")
    T, S = matrix.shape
    query_labels = _check_labels(query_labels, T, "query_labels", "query (T)")
    key_labels = _check_labels(key_labels, S, "key_labels", "key (S)")
    if ax is None:
        _, ax = plt.subplots(
            figsize=(max(3.5, min(10.0, 2.0 + 0.4 * S)), max(3.0, min(10.0, 1.8 + 0.4 * T))), layout="constrained"
        )
    false_color, true_color = "#d9d9d9", "#2c7fb8"
    ax.imshow(
        matrix.astype(int),
        cmap=ListedColormap([false_color, true_color]),
        vmin=0,
        vmax=1,
        aspect="equal",
        interpolation="nearest",
    )
    # thin white grid lines between cells so single cells can be counted
    ax.set_xticks(np.arange(-0.5, S, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, T, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    set_ticks(ax, key_labels, S, "x")
    set_ticks(ax, query_labels, T, "y")
    ax.set_xlabel("key (S)")
    ax.set_ylabel("query (T)")
    ax.legend(
        handles=[
            Patch(color=true_color, label=f"True: {true_label}"),
            Patch(color=false_color, label=f"False: {false_label}"),
        ],
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize=9,
    )
    if title is not None:
        ax.set_title(title)
    return ax
