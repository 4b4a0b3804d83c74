"""Looking inside: ablation switches heads off and back on, attention summaries, and the plots' axes."""

import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

from mha_course.core.mha import MultiHeadAttention
from mha_course.models.interpret import (
    ablate,
    ablation_table,
    attention_grid,
    describe_heads,
    head_picker,
    plot_ablation,
    plot_relation_attention,
    previous_token_attention,
    relation_attention,
)
from mha_course.models.model import build_model
from mha_course.models.tasks import get_task


class KnownAttention(nn.Module):
    """A stand-in model whose head 0 looks at the previous token and head 1 at the 'next letter' item."""

    def __init__(self, task):
        super().__init__()
        self.task = task
        self.attn = MultiHeadAttention(8, 2)

    def attention_modules(self):
        return [self.attn]

    def forward(self, tokens):
        B, T = tokens.shape
        data = self.task.last
        weights = torch.zeros(1, B, 2, T, T)
        for r in range(2):
            where = data.source_pos[..., r].clamp(min=0)  # (B, T)
            weights[0, :, r].scatter_(-1, where[..., None], 1.0)
        logits = torch.zeros(B, T, self.task.vocab_size)
        return logits, weights


@pytest.fixture
def two_relations():
    task = get_task("two_relations")
    task.last = task.sample(50, 0)
    return task, task.last


def test_relation_attention_measures_mass_on_targets(two_relations):
    task, data = two_relations
    mass = relation_attention(KnownAttention(task), data, task)
    assert mass.shape == (1, 2, 2)
    assert np.allclose(np.diag(mass[0]), 1.0)
    assert mass[0, 0, 1] < 0.3 and mass[0, 1, 0] < 0.3  # coincidences only (next letter sits just before)
    lines = describe_heads(KnownAttention(task), data, task)
    assert lines == ["layer 0 head 0: previous token (1.00)", "layer 0 head 1: next letter (1.00)"]
    prev = previous_token_attention(KnownAttention(task), data)
    assert prev.shape == (1, 2) and prev[0, 0] > 0.85  # position 0 has no previous token


def test_ablate_switches_heads_off_and_restores_them():
    torch.manual_seed(0)
    task = get_task("grammar")
    model = build_model(task, num_layers=2, embed_dim=16, num_heads=4)
    gates = [m.head_gate for m in model.attention_modules()]
    with ablate(model, [(1, 2), (0, 0)]):
        assert gates[1].tolist() == [1, 1, 0, 1] and gates[0].tolist() == [0, 1, 1, 1]
    assert all(g.tolist() == [1, 1, 1, 1] for g in gates)
    with pytest.raises(ValueError, match="layer, head"):
        with ablate(model, [(2, 0)]):
            pass
    assert all(g.tolist() == [1, 1, 1, 1] for g in gates)
    table = ablation_table(model, task.sample(100, 0), task)
    assert table["ablated"].shape == (2, 4, 3) and table["baseline"].shape == (3,)
    assert table["relations"] == task.relation_names


def test_attention_grid_has_a_labelled_panel_per_head():
    torch.manual_seed(0)
    task = get_task("grammar")
    model = build_model(task, num_layers=2, embed_dim=16, num_heads=4)
    data = task.sample(3, 0)
    fig = attention_grid(model, task, data, index=1)
    panels = fig.axes[:8]
    assert [ax.get_title() for ax in panels] == [f"layer {l}, head {h}" for l in range(2) for h in range(4)]
    words = task.decode(data.inputs[1])
    assert [t.get_text() for t in panels[0].get_yticklabels()] == words
    assert [t.get_text() for t in panels[4].get_xticklabels()] == words
    assert panels[4].get_xlabel() == "key (S)" and panels[0].get_ylabel() == "query (T)"
    plt.close(fig)


def test_ablation_and_relation_plots_label_heads_and_relations(two_relations):
    task, _ = two_relations
    table = {
        "baseline": np.array([1.0, 0.9]),
        "ablated": np.random.default_rng(0).random((2, 3, 2)),
        "relations": task.relation_names,
    }
    ax = plot_ablation(table)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(task.relation_names)
    assert [t.get_text() for t in ax.get_yticklabels()][:3] == ["all heads on", "layer 0 head 0", "layer 0 head 1"]
    assert ax.get_ylabel() == "head switched off"
    assert len(ax.texts) == 7 * 2
    plt.close(ax.figure)
    ax = plot_relation_attention(table["ablated"], task.relation_names)
    assert len(ax.get_yticklabels()) == 6 and ax.get_xlabel() == "relation"
    plt.close(ax.figure)


def test_head_picker_falls_back_to_a_static_grid(monkeypatch):
    torch.manual_seed(0)
    task = get_task("sort", length=3)
    model = build_model(task, num_layers=1, embed_dim=16, num_heads=2)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    fig = head_picker(model, task, task.sample(4, 0))
    assert len(fig.axes) == 3  # two panels and the colorbar
    plt.close(fig)


def test_ablation_table_keep_only_leaves_exactly_one_head_on(monkeypatch):
    import mha_course.models.interpret as interpret

    torch.manual_seed(0)
    task = get_task("grammar")
    model = build_model(task, num_layers=2, embed_dim=16, num_heads=4)
    gates = [m.head_gate for m in model.attention_modules()]

    def fake_evaluate(model, data, task):
        # relation r is "right" iff head (0, r) is on; records which heads were on
        on = torch.stack(gates).clone()  # (L, H)
        return {"accuracy": 0.0, "relations": {n: float(on[0, r]) for r, n in enumerate(task.relation_names)}}

    monkeypatch.setattr(interpret, "evaluate", fake_evaluate)
    R = len(task.relation_names)
    only = ablation_table(model, None, task, keep_only=True)["ablated"]
    off = ablation_table(model, None, task)["ablated"]
    for layer in range(2):
        for head in range(4):
            expected_only = [1.0 if (layer, head) == (0, r) else 0.0 for r in range(R)]
            expected_off = [0.0 if (layer, head) == (0, r) else 1.0 for r in range(R)]
            assert only[layer, head].tolist() == expected_only
            assert off[layer, head].tolist() == expected_off
    assert all(g.tolist() == [1, 1, 1, 1] for g in gates)
