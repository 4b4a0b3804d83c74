"""One heatmap on a matplotlib axis, the building block of :mod:`.viz`'s pictures: ticks that thin
out when there are many, each cell's value written in a colour that reads on it, NaN in magenta,
and the colour range (``[0, 1]`` for probabilities, else the data's).

matplotlib is imported only when a colormap is looked up; callers pass the axis they drew.
"""

from __future__ import annotations

import numpy as np

# Matrices up to this many cells get their numbers written in by default (annotate=None).
ANNOTATE_MAX_CELLS = 64
NAN_COLOR = "#ff00ff"  # magenta: a colour no sequential colormap uses, so NaNs stand out


def set_ticks(ax, labels: list[str] | None, n: int, axis: str, show_labels: bool = True) -> None:
    """Put one tick per row/column (with labels if given); thin out unlabelled ticks when many."""
    positions = np.arange(n)
    if labels is None:
        step = max(1, int(np.ceil(n / 16)))
        positions = positions[::step]
        labels = [str(p) for p in positions]
    setter = ax.set_xticks if axis == "x" else ax.set_yticks
    setter(positions)
    if not show_labels:
        labels = [""] * len(positions)
    if axis == "x":
        rotate = max((len(s) for s in labels), default=0) > 3
        ax.set_xticklabels(
            labels, rotation=60 if rotate else 0, ha="right" if rotate else "center", rotation_mode="anchor"
        )
    else:
        ax.set_yticklabels(labels)


def annotate_cells(ax, matrix: np.ndarray, image) -> None:
    """Write each cell's value, dark text on light cells and light text on dark ones.

    Lightness comes from the cell's actual colour, so this also works for diverging colormaps
    (dark at both ends, white in the middle).
    """
    for (i, j), value in np.ndenumerate(matrix):
        if np.isnan(value):
            text, color = "nan", "black"  # on magenta
        else:
            red, green, blue, _ = image.cmap(image.norm(value))
            lightness = 0.299 * red + 0.587 * green + 0.114 * blue  # perceived brightness, 0..1
            text, color = f"{value:.2f}", "black" if lightness > 0.5 else "white"
        ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)


def cmap_with_nan(cmap):
    import matplotlib

    cmap = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    return cmap.with_extremes(bad=NAN_COLOR)


def draw_heatmap(
    ax,
    matrix,
    query_labels,
    key_labels,
    *,
    cmap,
    vmin,
    vmax,
    annotate,
    show_x=True,
    show_y=True,
    colorbar=True,
    colorbar_label=None,
    axis_names=("query (T)", "key (S)"),
):
    """Draw one (T, S) heatmap on ``ax``; returns the image. ``axis_names``: (rows, columns) labels."""
    T, S = matrix.shape
    image = ax.imshow(
        np.ma.masked_invalid(matrix),
        cmap=cmap_with_nan(cmap),
        vmin=vmin,
        vmax=vmax,
        aspect="auto",
        interpolation="nearest",
    )
    set_ticks(ax, key_labels, S, "x", show_x)
    set_ticks(ax, query_labels, T, "y", show_y)
    if show_x:
        ax.set_xlabel(axis_names[1])
    if show_y:
        ax.set_ylabel(axis_names[0])
    if annotate is None:
        annotate = T * S <= ANNOTATE_MAX_CELLS
    if annotate:
        annotate_cells(ax, matrix, image)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        if colorbar_label:
            bar.set_label(colorbar_label)
    return image


def value_range(*matrices: np.ndarray) -> tuple[float, float]:
    """Colour range: [0, 1] for weights that look like probabilities, else the data's range."""
    finite = np.concatenate([m[np.isfinite(m)].ravel() for m in matrices])
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, max(hi, 1e-12)
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
