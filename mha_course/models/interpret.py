"""Looking inside a trained model: attention grids, head ablation, and what each head attends to.

* :func:`attention_grid` draws every layer x head for one example, with the tokens as labels.
* :func:`ablate` switches heads off (``MultiHeadAttention.head_gate[h] = 0``: the head's output
  is zeroed before the output projection) and :func:`ablation_table` measures, for every head,
  the accuracy on each relation with that head switched off (or with only that head left on).
* :func:`relation_attention` measures, for every head, the mean attention mass that positions of
  a relation put on that relation's target position (the "previous token", the "matching key",
  "the subject of the verb"...); :func:`describe_heads` turns it into one sentence per head.
* :func:`head_picker` is an ipywidgets layer/head picker, with a static grid where widgets are
  not available.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager

import numpy as np
import torch

from .model import run_model
from .tasks import IGNORE, Task, TaskData
from .train import evaluate


def _gates(model) -> list[torch.Tensor]:
    if not hasattr(model, "attention_modules"):
        raise TypeError(
            f"model must have attention_modules() (TinyTransformer, EncoderDecoder), got {type(model).__name__}"
        )
    return [module.head_gate for module in model.attention_modules()]


@contextmanager
def ablate(model, heads):
    """Switch heads off inside a ``with`` block; they are switched back on afterwards.

    Args:
        model: a TinyTransformer (its self-attention heads) or EncoderDecoder (its cross-attention heads).
        heads: iterable of (layer, head) pairs.

    Raises:
        TypeError: model has no ``attention_modules()``.
        ValueError: a (layer, head) pair is out of range.
    """
    gates = _gates(model)
    saved = [g.clone() for g in gates]
    try:
        for layer, head in heads:
            if not (0 <= layer < len(gates) and 0 <= head < gates[layer].numel()):
                raise ValueError(
                    f"(layer, head) must be within (L={len(gates)}, H={gates[0].numel()}), got ({layer}, {head})"
                )
            gates[layer][head] = 0.0
        yield model
    finally:
        for gate, value in zip(gates, saved, strict=True):
            gate.copy_(value)


def ablation_table(model, data: TaskData, task: Task, keep_only: bool = False) -> dict:
    """Accuracy per relation with each single head switched off (or, with ``keep_only``, left on alone).

    Switching one head off asks "is this head necessary?"; keeping only one head on asks "is it
    sufficient?". A relation can survive every single ablation (several heads share it) and still
    need one particular head when the others are gone, so the two tables answer different questions.

    Returns {"baseline": (R,) accuracy per relation with every head on,
             "ablated": (L, H, R) accuracy per relation with head (l, h) off (keep_only=False)
                        or with every head but (l, h) off (keep_only=True),
             "relations": the R relation names} (NumPy arrays).

    Raises:
        TypeError: model has no ``attention_modules()``.
    """
    names = task.relation_names
    gates = _gates(model)
    L, H = len(gates), gates[0].numel()
    everyone = [(layer, head) for layer in range(L) for head in range(H)]
    baseline = np.array([evaluate(model, data, task)["relations"][n] for n in names])
    ablated = np.zeros((L, H, len(names)))
    for layer, head in everyone:
        switched_off = [pair for pair in everyone if pair != (layer, head)] if keep_only else [(layer, head)]
        with ablate(model, switched_off):
            scores = evaluate(model, data, task)["relations"]
        ablated[layer, head] = [scores[n] for n in names]
    return {"baseline": baseline, "ablated": ablated, "relations": names}


@torch.no_grad()
def relation_attention(model, data: TaskData, task: Task) -> np.ndarray:
    """Mean attention mass each head puts on each relation's target position, shape (L, H, R).

    For relation r, head (l, h): the average over the positions t where relation r is scored
    (``data.source_pos[b, t, r] >= 0``) of weights[l, b, h, t, source_pos[b, t, r]].
    1.0 means the head always looks exactly there; 1/S is what a uniform head would get.

    Raises:
        whatever ``model`` raises on ``data`` (see :func:`mha_course.models.model.run_model`).
    """
    model.eval()
    _, attention = run_model(model, data)  # (L, B, H, T, S)
    attention = attention.permute(0, 2, 1, 3, 4)  # (L, H, B, T, S)
    L, H = attention.shape[:2]
    scored = data.targets != IGNORE  # (B, T)
    result = np.zeros((L, H, len(task.relation_names)))
    for r in range(len(task.relation_names)):
        target = data.source_pos[..., r]  # (B, T)
        chosen = scored & (target >= 0)  # (B, T)
        if not chosen.any():
            continue
        index = target.clamp(min=0)[None, None, :, :, None].expand(L, H, -1, -1, 1)  # (L, H, B, T, 1)
        mass = torch.gather(attention, 4, index).squeeze(-1)  # (L, H, B, T)
        result[:, :, r] = mass[:, :, chosen].mean(dim=-1).numpy()  # (L, H)
    return result


@torch.no_grad()
def previous_token_attention(model, data: TaskData) -> np.ndarray:
    """Mean attention mass on the previous position (t - 1), over positions t >= 1, shape (L, H).

    result[l, h] = mean over b and t >= 1 of weights[l, b, h, t, t - 1]; raises what ``model`` raises.
    """
    model.eval()
    _, attention = run_model(model, data)  # (L, B, H, T, S)
    T = attention.shape[-2]
    diagonal = torch.diagonal(attention[..., 1:, : T - 1], dim1=-2, dim2=-1)  # (L, B, H, T-1)
    return diagonal.mean(dim=(1, 3)).numpy()


def describe_heads(model, data: TaskData, task: Task, threshold: float = 0.5) -> list[str]:
    """One line per head saying what it attends to, e.g. 'layer 0 head 2: previous token (0.97)'.

    A head is named after the relation on whose target it puts the most mass, if that mass is at
    least ``threshold``; otherwise it is called 'mixed / other' with its best guess in brackets.
    Returns L * H strings, from :func:`relation_attention`'s (L, H, R) masses; raises what it raises.
    """
    mass = relation_attention(model, data, task)  # (L, H, R)
    lines = []
    for layer in range(mass.shape[0]):
        for head in range(mass.shape[1]):
            best = int(mass[layer, head].argmax())
            name, value = task.relation_names[best], mass[layer, head, best]
            what = f"{name} ({value:.2f})" if value >= threshold else f"mixed / other (best: {name} {value:.2f})"
            lines.append(f"layer {layer} head {head}: {what}")
    return lines


def example_labels(task: Task, data: TaskData, index: int = 0) -> tuple[list[str], list[str]]:
    """Query and key tick labels (the tokens) of example ``index``: (T labels, S labels).

    Raises:
        IndexError: ``index`` is outside the batch.
    """
    query = task.decode(data.inputs[index])
    key = task.decode(data.source[index]) if data.source is not None else query
    return query, key


@torch.no_grad()
def attention_grid(model, task: Task, data: TaskData, index: int = 0, title: str | None = None):
    """Heatmaps of every layer x head for example ``index``, tokens on both axes.

    Returns the matplotlib Figure of :func:`mha_course.plots.figures.plot_attention_grid`: L * H panels
    titled 'layer l, head h', rows = queries (T), columns = keys (S).

    Raises:
        ValueError: ``index`` is not in [0, N).
    """
    from ..plots.figures import plot_attention_grid

    model.eval()
    one = _select(data, index)
    _, attention = run_model(model, one)  # (L, 1, H, T, S)
    query, key = example_labels(task, one, 0)
    return plot_attention_grid(
        attention[:, 0], query_labels=query, key_labels=key, title=title or f"{task.name}: attention of every head"
    )


def _select(data: TaskData, index: int) -> TaskData:
    if not 0 <= index < len(data):
        raise ValueError(f"index must be in [0, {len(data)}), got {index}")
    pick = slice(index, index + 1)
    return TaskData(
        data.inputs[pick],
        data.targets[pick],
        data.source_pos[pick],
        None if data.source is None else data.source[pick],
        None if data.source_lengths is None else data.source_lengths[pick],
    )


def plot_ablation(table: dict, ax=None, title: str = "accuracy with one head switched off"):
    """Heatmap of :func:`ablation_table`: one row per head, one column per relation.

    Returns the matplotlib Axes (y labels 'layer l head h', x labels the relation names).
    Draws the (1 + L*H, R) grid [baseline; ablated reshaped]; raises KeyError if ``table`` lacks a key.
    """
    import matplotlib.pyplot as plt

    ablated = table["ablated"]  # (L, H, R)
    L, H, R = ablated.shape
    rows = ablated.reshape(L * H, R)  # (L*H, R)
    labels = ["all heads on"] + [f"layer {l} head {h}" for l in range(L) for h in range(H)]
    grid = np.vstack([table["baseline"][None], rows])  # (1 + L*H, R)
    if ax is None:
        _, ax = plt.subplots(figsize=(2.0 + 1.6 * R, 1.0 + 0.4 * len(labels)), layout="constrained")
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(R), table["relations"])
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("accuracy on relation")
    ax.set_ylabel("head switched off")
    ax.axhline(0.5, color="black", lw=1.5)
    ax.figure.colorbar(image, ax=ax, fraction=0.05)
    ax.set_title(title)
    return ax


def plot_relation_attention(
    mass: np.ndarray, relations, ax=None, title: str = "attention mass on each relation's target"
):
    """Heatmap of :func:`relation_attention` (L, H, R): rows are heads, columns relations. Returns the Axes.

    Raises:
        ValueError: ``mass`` is not 3-D (from the unpacking of its shape).
    """
    import matplotlib.pyplot as plt

    L, H, R = mass.shape
    rows = mass.reshape(L * H, R)
    labels = [f"layer {l} head {h}" for l in range(L) for h in range(H)]
    if ax is None:
        _, ax = plt.subplots(figsize=(2.0 + 1.6 * R, 1.0 + 0.4 * len(labels)), layout="constrained")
    image = ax.imshow(rows, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(rows):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9, color="black" if value > 0.5 else "white")
    ax.set_xticks(range(R), list(relations))
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("relation")
    ax.set_ylabel("head")
    ax.figure.colorbar(image, ax=ax, fraction=0.05)
    ax.set_title(title)
    return ax


def head_picker(model, task: Task, data: TaskData):
    """Pick an example, a layer and a head with sliders and see that head's attention heatmap.

    Uses :func:`mha_course.plots.sliders.interactive` when ipywidgets is installed; otherwise draws the
    static grid of every layer x head for example 0. Returns the widget, or the static Figure
    (closed, so that Jupyter shows it once, as the cell's result): make the call the last line of
    a cell. The heatmap is weights[layer, example, head], (T, S), from the model's
    (L, N, H, T, S) attention; raises what ``model`` raises on ``data``.
    """
    import matplotlib.pyplot as plt

    from ..plots.figures import plot_attention

    model.eval()
    with torch.no_grad():
        _, attention = run_model(model, data)  # (L, N, H, T, S)
    L, N, H = attention.shape[:3]

    def show(example=0, layer=0, head=0):
        query, key = example_labels(task, data, example)
        ax = plot_attention(
            attention[layer, example, head],
            query_labels=query,
            key_labels=key,
            title=f"layer {layer}, head {head}, example {example}",
        )
        plt.show()
        return ax

    if (
        importlib.util.find_spec("ipywidgets") is None
    ):  # no sliders: a static grid of every layer x head says the same thing
        fig = attention_grid(model, task, data, 0)
        plt.close(fig)  # shown by the cell's result; left open, Jupyter would draw it a second time
        return fig
    from ..plots.sliders import interactive

    return interactive(
        show,
        example=lambda w: w.IntSlider(value=0, min=0, max=max(N - 1, 0)),
        layer=lambda w: w.IntSlider(value=0, min=0, max=L - 1),
        head=lambda w: w.IntSlider(value=0, min=0, max=H - 1),
    )
