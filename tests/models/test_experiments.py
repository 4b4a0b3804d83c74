"""The sqrt(D) experiments of chapter 03 give the trends the chapter claims, on fixed seeds."""

import math

import numpy as np
import pytest
import torch

from mha_course.models import experiments as ex

DIMS = [4, 16, 64, 256]


def test_unscaled_variance_grows_like_dim_and_scaled_stays_one():
    result = ex.score_variance_vs_dim(DIMS, n_samples=4000, seed=0)
    assert result["dims"].tolist() == DIMS
    np.testing.assert_allclose(result["unscaled"] / result["dims"], 1.0, rtol=0.1)
    np.testing.assert_allclose(result["scaled"], 1.0, rtol=0.1)
    slope = np.polyfit(np.log(result["dims"]), np.log(result["unscaled"]), 1)[0]
    assert 0.9 < slope < 1.1, f"log-log slope {slope:.3f}, expected ~1 (linear growth)"


def test_variance_is_seeded():
    a = ex.score_variance_vs_dim([8], n_samples=100, seed=3)
    b = ex.score_variance_vs_dim([8], n_samples=100, seed=3)
    c = ex.score_variance_vs_dim([8], n_samples=100, seed=4)
    assert a["unscaled"][0] == b["unscaled"][0] != c["unscaled"][0]


def test_unscaled_softmax_saturates_and_scaled_does_not():
    result = ex.softmax_saturation(DIMS, num_keys=16, n_samples=500, seed=0)
    assert np.all(np.diff(result["max_weight_unscaled"]) > 0)
    assert np.all(np.diff(result["entropy_unscaled"]) < 0)
    assert result["max_weight_unscaled"][-1] > 0.85
    assert result["entropy_unscaled"][-1] < 0.3 * result["max_entropy"]
    # scaled: the same distribution of scores for every D, so roughly constant
    assert np.ptp(result["max_weight_scaled"]) < 0.05
    assert np.all(result["entropy_scaled"] > 0.8 * result["max_entropy"])
    assert math.isclose(result["max_entropy"], math.log(16))


def test_gradient_norm_uses_the_one_softmax_jacobian():
    """One contract: the Jacobian is computed from probabilities (mha_course.efficient.gradients.softmax_jacobian)."""
    from mha_course.efficient.gradients import softmax_jacobian

    assert ex.softmax_jacobian is softmax_jacobian  # not a second function of the same name
    scores = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ours = softmax_jacobian(torch.softmax(scores, -1))
    for row in range(3):
        expected = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), scores[row])
        torch.testing.assert_close(ours[row], expected)


def test_unscaled_gradients_vanish_and_scaled_do_not():
    result = ex.softmax_gradient_norm(DIMS, num_keys=16, n_samples=500, seed=0)
    assert np.all(np.diff(result["unscaled"]) < 0)
    assert result["unscaled"][-1] < 0.5 * result["scaled"][-1]
    assert np.ptp(result["scaled"]) < 0.05
    assert result["fraction_tiny_unscaled"][-1] > 0.2
    assert np.all(result["fraction_tiny_scaled"] == 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_scaling_trains_faster_on_retrieval(seed):
    scaled = ex.train_retrieval(True, d_k=256, steps=200, seed=seed)
    unscaled = ex.train_retrieval(False, d_k=256, steps=200, seed=seed)
    for run in (scaled, unscaled):
        assert set(run) == {"loss", "accuracy", "max_weight", "correct_weight"}
        assert all(values.shape == (200,) for values in run.values())
    # both start from the same task; the unscaled softmax starts saturated
    assert unscaled["max_weight"][0] > 0.7 > 0.4 > scaled["max_weight"][0]
    assert scaled["accuracy"][-30:].mean() > 0.95
    assert unscaled["accuracy"][-30:].mean() < scaled["accuracy"][-30:].mean() - 0.2
    assert scaled["loss"][-30:].mean() < 0.5 * unscaled["loss"][-30:].mean()
    # chapter 03's reading of the right-hand panel: both end peaked, only the scaled one on the right key
    assert scaled["correct_weight"][-30:].mean() > 0.9
    assert unscaled["max_weight"][-30:].mean() > 0.9 > 0.5 > unscaled["correct_weight"][-30:].mean()


def test_correct_weight_is_the_weight_on_the_asked_pair():
    run = ex.train_retrieval(True, d_k=8, steps=3, seed=0, num_pairs=1, num_keys=4)
    np.testing.assert_allclose(run["correct_weight"], 1.0)  # one pair: all weight is on it
    run = ex.train_retrieval(True, d_k=8, steps=3, seed=0)
    assert np.all(run["correct_weight"] <= run["max_weight"] + 1e-7)


@pytest.mark.slow
def test_unscaled_gets_worse_with_dim_and_small_init_helps():
    # chapter 03's sweep, cut down: unscaled accuracy falls as D grows; scaled stays solved;
    # initialising W_Q, W_K smaller (unit-variance scores at the start) recovers the moderate D
    def accuracy(scaled, D, **kwargs):
        return np.mean(
            [ex.train_retrieval(scaled, d_k=D, steps=150, seed=s, **kwargs)["accuracy"][-30:].mean() for s in (0, 1)]
        )

    unscaled = [accuracy(False, D) for D in (16, 64, 256)]
    assert unscaled[0] > unscaled[1] > unscaled[2]
    assert unscaled[2] < 0.5
    assert min(accuracy(True, D) for D in (16, 256)) > 0.95
    assert accuracy(False, 64, qk_init_scale=64**-0.25) > 0.95


def test_single_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with ex.single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(KeyError), ex.single_thread():
        raise KeyError("inside")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad, error", [([], ValueError), ([0], ValueError), ([2.5], TypeError), ([True], TypeError)])
def test_bad_dims_raise(bad, error):
    with pytest.raises(error):
        ex.score_variance_vs_dim(bad)


def test_bad_training_arguments_raise():
    with pytest.raises(ValueError, match="num_keys"):
        ex.train_retrieval(num_pairs=8, num_keys=4)
    with pytest.raises(ValueError, match="lr"):
        ex.train_retrieval(lr=0.0)
    with pytest.raises(TypeError):
        ex.train_retrieval(d_k=16.0)
    with pytest.raises(ValueError, match="qk_init_scale"):
        ex.train_retrieval(qk_init_scale=0.0)
