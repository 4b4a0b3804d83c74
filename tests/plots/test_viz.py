"""The plotting helpers draw what they say: panel counts, titles, tick labels, colours; bad shapes raise."""

import re
import subprocess
import sys

import ipywidgets  # pinned in requirements.txt; its absence is simulated below
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from mha_course import causal_mask, softmax
from mha_course.plots import figures as viz
from mha_course.plots import sliders, vectors

TOKENS = ["The", "bank", "approved", "the", "loan"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return softmax(torch.randn(*shape, generator=generator), dim=-1)


def _tick_texts(ax, axis):
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [label.get_text() for label in labels]


@pytest.mark.slow
def test_import_mha_course_does_not_import_matplotlib():
    code = "import sys, mha_course; mha_course.softmax; mha_course.core.LOG2E; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_plot_attention_draws_matrix_labels_and_colorbar(kind):
    weights = _weights(4, 5)
    data = weights if kind == "torch" else weights.numpy()
    ax = viz.plot_attention(data, query_labels=TOKENS[:4], key_labels=TOKENS, title="one head")
    assert ax.get_title() == "one head"
    assert _tick_texts(ax, "x") == TOKENS
    assert _tick_texts(ax, "y") == TOKENS[:4]
    assert len(ax.figure.axes) == 2  # heatmap + colorbar
    shown = np.asarray(ax.images[0].get_array())
    np.testing.assert_allclose(shown, weights.numpy(), rtol=1e-6)
    assert len(ax.texts) == 20  # small matrix: every cell annotated by default


def test_plot_attention_squeezes_leading_ones_and_keeps_single_query():
    ax = viz.plot_attention(_weights(1, 1, 3, 6))
    assert np.asarray(ax.images[0].get_array()).shape == (3, 6)
    ax = viz.plot_attention(_weights(1, 6))  # one query (a decoding step) stays a 1-row matrix
    assert np.asarray(ax.images[0].get_array()).shape == (1, 6)


def test_plot_attention_annotation_switches():
    big = _weights(12, 12)
    assert len(viz.plot_attention(big).texts) == 0
    assert len(viz.plot_attention(big, annotate=True).texts) == 144
    assert len(viz.plot_attention(_weights(3, 3), annotate=False).texts) == 0


def test_plot_attention_draws_on_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    returned = viz.plot_attention(_weights(3, 3), ax=right)
    assert returned is right
    assert not left.images and right.images


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (1, 2, 3, 4)])
def test_plot_attention_rejects_non_matrix_shapes(shape):
    with pytest.raises(ValueError, match=r"\(T, S\).*" + re.escape(str(shape))):
        viz.plot_attention(torch.rand(*shape))


def test_plot_attention_rejects_bad_labels_and_types():
    with pytest.raises(ValueError, match="key_labels has 2 labels"):
        viz.plot_attention(_weights(3, 3), key_labels=["a", "b"])
    with pytest.raises(TypeError, match="torch.Tensor or numpy.ndarray"):
        viz.plot_attention("not a matrix")


def test_plot_attention_grid_one_row_of_heads():
    fig = viz.plot_attention_grid(_weights(3, 4, 5), query_labels=TOKENS[:4], key_labels=TOKENS, title="three heads")
    panels, colorbar = fig.axes[:3], fig.axes[3:]
    assert len(fig.axes) == 4 and len(colorbar) == 1
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2"]
    assert fig._suptitle.get_text() == "three heads"
    assert _tick_texts(panels[0], "y") == TOKENS[:4]
    assert all(t == "" for t in _tick_texts(panels[1], "y"))  # query labels on the first column only
    assert _tick_texts(panels[2], "x") == TOKENS


def test_plot_attention_grid_layers_by_heads_share_one_scale():
    weights = _weights(2, 3, 4, 4)
    fig = viz.plot_attention_grid(weights, row_labels=["low", "high"], col_labels=["a", "b", "c"])
    panels = fig.axes[:6]
    assert len(fig.axes) == 7
    assert panels[4].get_title() == "high, b"
    limits = {ax.images[0].get_clim() for ax in panels}
    assert len(limits) == 1
    for index, ax in enumerate(panels):
        np.testing.assert_allclose(
            np.asarray(ax.images[0].get_array()), weights[index // 3, index % 3].numpy(), rtol=1e-6
        )


@pytest.mark.parametrize("shape", [(4, 4), (1, 2, 2, 3, 3)])
def test_plot_attention_grid_rejects_bad_rank(shape):
    with pytest.raises(ValueError, match=r"\(H, T, S\) or \(L, H, T, S\)"):
        viz.plot_attention_grid(torch.rand(*shape))


def test_plot_attention_grid_rejects_wrong_label_count():
    with pytest.raises(ValueError, match="col_labels has 2 labels"):
        viz.plot_attention_grid(_weights(3, 4, 4), col_labels=["x", "y"])


def test_plot_side_by_side_shows_difference():
    expected = _weights(4, 4)
    yours = expected.clone()
    yours[1, 2] += 0.5
    fig = viz.plot_side_by_side(yours, expected, key_labels=TOKENS[:4])
    panels = fig.axes[:3]
    assert len(fig.axes) == 6  # three panels, three colorbars
    assert panels[0].get_title() == "yours" and panels[1].get_title() == "expected"
    assert "0.5" in panels[2].get_title()
    difference = np.asarray(panels[2].images[0].get_array())
    np.testing.assert_allclose(difference, (yours - expected).numpy(), atol=1e-6)
    assert np.unravel_index(np.abs(difference).argmax(), difference.shape) == (1, 2)
    low, high = panels[2].images[0].get_clim()
    assert low == pytest.approx(-high)  # diverging colours centred on zero


def test_plot_side_by_side_picks_the_worst_matrix_and_flags_nans():
    expected = _weights(2, 3, 5, 5)
    yours = expected.clone()
    yours[1, 2] = softmax(torch.randn(5, 5))  # a whole head wrong
    yours[0, 1, 0, 0] += 0.01  # a small error elsewhere
    fig = viz.plot_side_by_side(yours, expected, title="weights")
    assert "[1, 2]" in fig._suptitle.get_text()
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), yours[1, 2].numpy(), rtol=1e-6)

    yours = expected[0, 0].clone()
    yours[0, 0] = float("nan")
    fig = viz.plot_side_by_side(yours, expected[0, 0])
    assert "1 NaN" in fig.axes[0].get_title()


def test_annotations_stay_readable_on_a_diverging_colormap():
    # the difference panel is dark at both ends and white at zero: text colour must follow the cell
    expected = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    yours = torch.tensor([[0.0, 1.0], [0.0, 1.0]])  # differences -1, +1, 0, 0
    fig = viz.plot_side_by_side(yours, expected, annotate=True)
    colours = {text.get_text(): text.get_color() for text in fig.axes[2].texts}
    assert colours["-1.00"] == "white" and colours["1.00"] == "white"
    assert colours["0.00"] == "black"
    viridis = {t.get_text(): t.get_color() for t in fig.axes[1].texts}
    assert viridis["1.00"] == "black" and viridis["0.00"] == "white"  # yellow vs dark purple


def test_plot_side_by_side_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(5, 4\)"):
        viz.plot_side_by_side(torch.rand(4, 5), torch.rand(5, 4))
    with pytest.raises(ValueError, match="at least 2 dims"):
        viz.plot_side_by_side(torch.rand(4), torch.rand(4))


def test_plot_mask_colours_and_legend():
    mask = causal_mask(4, 5)
    ax = viz.plot_mask(mask, query_labels=TOKENS[:4], key_labels=TOKENS, title="causal")
    assert ax.get_title() == "causal"
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), mask.numpy().astype(int))
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["True: may attend", "False: blocked"]
    assert _tick_texts(ax, "x") == TOKENS


def test_plot_mask_accepts_padding_mask_of_one_sequence():
    mask = torch.tensor([[[[True, True, False]]]])  # (1, 1, 1, S)
    ax = viz.plot_mask(mask)
    assert np.asarray(ax.images[0].get_array()).shape == (1, 3)


def test_plot_mask_rejects_float_masks_and_bad_shapes():
    with pytest.raises(TypeError, match="boolean"):
        viz.plot_mask(torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"\(2, 3, 3\)"):
        viz.plot_mask(torch.ones(2, 3, 3, dtype=torch.bool))


def test_plot_vectors_2d_draws_one_arrow_per_vector():
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    ax = vectors.plot_vectors_2d(keys, ["x", "y", "xy"], query=np.array([0.8, 0.3]), title="keys")
    arrows = [child for child in ax.texts if getattr(child, "arrow_patch", None) is not None]
    assert len(arrows) == 4
    assert {t.get_text() for t in ax.texts} >= {"x", "y", "xy", "query"}
    with pytest.raises(ValueError, match=r"\(S, 2\)"):
        vectors.plot_vectors_2d(np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"\(2,\)"):
        vectors.plot_vectors_2d(keys, query=np.ones(3))


def test_colorbars_are_labelled():
    ax = viz.plot_attention(_weights(3, 3))
    assert ax.figure.axes[1].get_ylabel() == "weight"
    ax = viz.plot_attention(torch.randn(3, 3), colorbar_label="score")
    assert ax.figure.axes[1].get_ylabel() == "score"
    fig = viz.plot_attention_grid(_weights(2, 3, 3), colorbar_label="attention")
    assert fig.axes[-1].get_ylabel() == "attention"
    fig = viz.plot_side_by_side(_weights(3, 3), _weights(3, 3, seed=1))
    assert [ax.get_ylabel() for ax in fig.axes[3:]] == ["weight", "weight", "difference"]


def test_side_by_side_keeps_rounding_noise_white():
    expected = _weights(4, 4)
    yours = expected + 3e-8 * torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
    fig = viz.plot_side_by_side(yours, expected)
    low, high = fig.axes[2].images[0].get_clim()
    assert high == pytest.approx(-low) and high >= 1e-3 * float(expected.max())
    assert "e-08" in fig.axes[2].get_title()  # the title still reports the tiny difference
    # a real error still uses the whole colour range
    yours = expected.clone()
    yours[0, 0] += 0.2
    assert viz.plot_side_by_side(yours, expected).axes[2].images[0].get_clim()[1] == pytest.approx(0.2)


def test_plot_mask_other_convention_labels():
    mask = ~causal_mask(3)
    ax = viz.plot_mask(mask, true_label="blocked", false_label="may attend")
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["True: blocked", "False: may attend"]
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), mask.numpy().astype(int))


def test_plot_vectors_2d_keeps_close_labels_apart():
    # tips closer together than a line of text: written at the tips, the names would collide
    keys = np.array([[0.95, 0.05], [0.93, 0.07], [0.9, 0.03], [0.0, 0.9], [0.03, 0.92]])
    names = ["money", "loan", "cash", "water", "river"]
    ax = vectors.plot_vectors_2d(keys, names, query=np.array([0.75, 0.55]))
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text()]
    assert len(boxes) == 6
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), "two arrow labels overlap"


def test_interactive_builds_a_widget_and_runs_the_function_once():
    calls = []

    def draw(tau=1.0, word="bank"):
        calls.append((tau, word))

    widget = sliders.interactive(draw, tau=ipywidgets.FloatSlider(value=0.5, min=0.1, max=2.0), word=["bank", "loan"])
    assert isinstance(widget, ipywidgets.interactive)
    assert calls == [(0.5, "bank")]
    widget.children[0].value = 1.5  # moving the slider calls the function again
    assert calls[-1] == (1.5, "bank")


def test_interactive_builds_controls_that_need_ipywidgets():
    seen = []
    widget = sliders.interactive(
        lambda tau=1.0: seen.append(tau), tau=lambda w: w.FloatLogSlider(value=0.1, base=10, min=-2, max=1)
    )
    assert isinstance(widget.children[0], ipywidgets.FloatLogSlider)
    assert seen == [pytest.approx(0.1)]


def test_interactive_first_call_errors_propagate():
    def broken(n=1):
        raise RuntimeError("drawing failed")

    with pytest.raises(RuntimeError, match="drawing failed"):
        sliders.interactive(broken, n=(1, 5))


def test_interactive_static_fallback_without_ipywidgets(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets -> ImportError
    calls = []
    result = sliders.interactive(lambda tau=1.0: calls.append(tau), static=[{"tau": 0.3}, {"tau": 3.0}], tau=(0.1, 5.0))
    assert result is None and calls == [0.3, 3.0]
    assert "ipywidgets is not installed" in capsys.readouterr().out
    assert sliders.interactive(lambda tau=1.0: calls.append(tau)) is None and calls[-1] == 1.0


def test_interactive_rejects_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        sliders.interactive("not a function")
    with pytest.raises(TypeError, match="sequence of keyword-argument dicts"):
        sliders.interactive(lambda tau=1.0: None, static={"tau": 1.0})


def test_side_by_side_names_what_is_not_attention_weights():
    import numpy as np

    fig = viz.plot_side_by_side(
        np.zeros((3, 4)), np.ones((3, 4)), value_name="value", axis_names=("position", "coordinate")
    )
    assert (fig.axes[0].get_ylabel(), fig.axes[0].get_xlabel()) == ("position", "coordinate")
    assert [a.get_ylabel() for a in fig.axes[3:]] == ["value", "value", "difference"]
