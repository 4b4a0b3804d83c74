"""Word vectors in the plane (chapter 01): arrows from the origin, labels that do not collide, a query in red."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._checks import _check_labels, _to_numpy


def _label_positions(tips: np.ndarray, names: list[str], span: float) -> list[tuple[float, float, str]]:
    """Where to write each arrow's name: just beyond its tip, nudged so that names do not overlap.

    A name continues its arrow: to the right of an arrow that points right, centred above one
    that points up, to the left of one that points left. Clashing names are moved up or down, one
    line at a time. Text sizes are estimated in data units from ``span`` (the axis extent), which
    is close enough for the short words the course draws. Empty names take no room.

    Returns one (x, y, horizontal alignment) per tip.
    """
    line = 0.055 * span  # height of one line of 10-pt text, in data units
    char = 0.028 * span  # width of one character
    placed: list[tuple[float, float, float]] = []  # (left, right, y) of the names written so far
    spots: list[tuple[float, float, str]] = []
    for (x, y), name in zip(tips, names, strict=True):
        length = float(np.hypot(x, y)) or 1.0
        ux, uy = x / length, y / length  # direction of the arrow
        px, py = x + 0.04 * span * ux, y + 0.04 * span * uy
        width = char * len(name)
        if ux > 0.35:
            align, left = "left", px
        elif ux < -0.35:
            align, left = "right", px - width
        else:
            align, left = "center", px - width / 2
            py += 0.5 * line * np.sign(uy)  # clear the arrow head
        for _ in range(len(placed) + 1):  # every placed name can push this one at most once
            clash = [
                qy for qleft, qright, qy in placed if abs(qy - py) < line and left < qright and qleft < left + width
            ]
            if not clash:
                break
            nearest = min(clash, key=lambda qy: abs(qy - py))
            py = nearest + line if py >= nearest else nearest - line  # step away from it
        spots.append((px, py, align))
        if name:
            placed.append((left, left + width, py))
    return spots


def plot_vectors_2d(
    vectors,
    labels: Sequence[str] | None = None,
    query=None,
    query_label: str = "query",
    ax=None,
    title: str | None = None,
):
    """Arrows from the origin for 2-D vectors (keys), and optionally a query arrow in red.

    Args:
        vectors: (S, 2) tensor/array, one key per row.
        labels: S names written at the arrow tips.
        query: optional (2,) vector drawn in red.
        query_label: its name.
        ax: Axes to draw on; None makes a new figure.
        title: axes title.

    Returns:
        the matplotlib Axes (equal aspect, so angles look like angles).

    Raises:
        TypeError: not a tensor/array of numbers.
        ValueError: ``vectors`` is not (S, 2), ``query`` is not (2,), or labels have the wrong length.
    """
    import matplotlib.pyplot as plt

    keys = _to_numpy(vectors, "vectors")
    if keys.ndim != 2 or keys.shape[1] != 2:
        raise ValueError(f"vectors must have shape (S, 2), got {tuple(keys.shape)}")
    labels = _check_labels(labels, keys.shape[0], "labels", "vector (S)")
    points = [keys]
    if query is not None:
        query = _to_numpy(query, "query")
        if query.shape != (2,):
            raise ValueError(f"query must have shape (2,), got {tuple(query.shape)}")
        points.append(query[None])
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4.5), layout="constrained")
    everything = np.concatenate(points + [np.zeros((1, 2))])
    span = float(np.abs(everything).max()) * 1.25 or 1.0
    names = list(labels) if labels is not None else [None] * len(keys)
    tips = list(keys)
    if query is not None:
        names.append(query_label)
        tips.append(query)
    spots = _label_positions(np.array(tips), [name or "" for name in names], span)
    for i, (x, y) in enumerate(keys):
        ax.annotate("", xy=(x, y), xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="tab:blue", lw=1.5))
        if labels is not None:
            px, py, align = spots[i]
            ax.text(px, py, labels[i], color="tab:blue", fontsize=10, ha=align, va="center")
    if query is not None:
        ax.annotate("", xy=tuple(query), xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=2.2))
        px, py, align = spots[-1]
        ax.text(px, py, query_label, color="tab:red", fontsize=10, fontweight="bold", ha=align, va="center")
    lo = np.minimum(everything.min(axis=0), 0) * 1.25
    ax.set_xlim(min(lo[0], -0.1 * span), span)
    ax.set_ylim(min(lo[1], -0.1 * span), span)
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axvline(0, color="0.7", lw=0.8)
    ax.set_aspect("equal")
    if title is not None:
        ax.set_title(title)
    return ax
