"""The shipped checkpoints: each loads, reaches the accuracy it states, is small, and (slow) is what its recipe makes."""

from __future__ import annotations

import importlib

import pytest
import torch

from mha_course.models.train import TrainResult, evaluate

# the module: mha_course.models.pretrained is the function of that name (mha_course.models exports it)
pt = importlib.import_module("mha_course.models.pretrained")

MAX_KB = 100  # a checkpoint stays a small download: a few tens of KB of float16


@pytest.mark.parametrize("name", sorted(pt.RECIPES))
def test_each_shipped_checkpoint_loads_small_and_reaches_its_stated_accuracy(name):
    path = pt.checkpoint_path(name)
    assert path.is_file(), f"{name}: no shipped checkpoint; python -m mha_course.models.pretrained --make {name}"
    assert path.stat().st_size < MAX_KB * 1024
    model, made = pt.pretrained(name)
    assert made.source == "shipped checkpoint" and made.steps > 0 and made.seconds is None
    assert not model.training
    recipe = pt.RECIPES[name]
    accuracy = evaluate(model, recipe.held_out(), recipe.task())["accuracy"]
    assert accuracy >= made.accuracy - 0.005, f"{name}: {accuracy:.4f} against the stated {made.accuracy:.4f}"


def test_a_checkpoint_holds_only_tensors_and_numbers_stored_in_float16():
    saved = torch.load(pt.checkpoint_path("recent_digit_rotary"), weights_only=True)  # refuses pickled objects
    assert set(saved) == {"state_dict", "steps", "accuracy"}
    assert all(v.dtype == torch.float16 for v in saved["state_dict"].values() if v.is_floating_point())


def _tiny_recipe(name):
    from mha_course.models.model import TinyTransformer
    from mha_course.models.tasks import get_task
    from mha_course.models.train import train

    task = lambda: get_task("recent_digit", length=8)

    def build():
        torch.manual_seed(0)
        return TinyTransformer(task().vocab_size, 9, embed_dim=8, num_heads=2, num_layers=1, causal=True)

    def fit(model) -> TrainResult:
        return train(model, task(), steps=3, seed=0, target_accuracy=None, eval_every=3, eval_size=20, progress=False)

    return pt.Recipe(name, build, fit, task, "a test's", eval_size=20)


def test_make_then_load_round_trips_and_the_switch_trains_here(tmp_path, monkeypatch):
    monkeypatch.setattr(pt, "RECIPES", dict(pt.RECIPES))
    pt.register(_tiny_recipe("tiny_for_test"))
    path, made = pt.make_checkpoint("tiny_for_test", tmp_path)
    assert path == tmp_path / "tiny_for_test.pt" and made.steps == 3 and made.source == "trained here"
    loaded, loaded_made = pt.pretrained("tiny_for_test", folder=tmp_path)
    trained, trained_made = pt.pretrained("tiny_for_test", train_from_scratch=True, folder=tmp_path)
    assert trained_made.source == "trained here" and loaded_made.steps == trained_made.steps == 3
    for a, b in zip(loaded.state_dict().values(), trained.state_dict().values(), strict=True):
        assert a.dtype == b.dtype == torch.float32
        assert float((a - b).abs().max()) <= 1e-3 * max(1.0, float(b.abs().max()))  # float16 storage, same seeds
    assert "tiny_for_test" in pt.checkpoint_path("tiny_for_test", tmp_path).name


def test_bad_names_and_switches_say_what_was_expected(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no recipe named 'nope'; known"):
        pt.pretrained("nope")
    with pytest.raises(TypeError, match="True or False"):
        pt.pretrained("recent_digit_rotary", train_from_scratch="yes")
    with pytest.raises(FileNotFoundError, match="--make recent_digit_rotary"):
        pt.load_pretrained("recent_digit_rotary", folder=tmp_path)
    with pytest.raises(ValueError, match="already registered"):
        pt.register(pt.RECIPES["recent_digit_rotary"])
    monkeypatch.setattr(pt, "RECIPES", dict(pt.RECIPES))
    with pytest.raises(ValueError, match="identifier"):
        pt.register(_tiny_recipe("../escape"))
    with pytest.raises(TypeError, match="needs a Recipe"):
        pt.register("recent_digit_rotary")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(pt.RECIPES))
def test_the_recipe_remakes_the_shipped_checkpoint(name, tmp_path):
    """Training is seeded and single-threaded; other CPUs or torch versions may round differently, so the
    remade weights must match the shipped ones to float16 resolution and reach the same steps and accuracy."""
    path, made = pt.make_checkpoint(name, tmp_path)
    shipped = torch.load(pt.checkpoint_path(name), weights_only=True)
    remade = torch.load(path, weights_only=True)
    assert remade["steps"] == shipped["steps"] and abs(remade["accuracy"] - shipped["accuracy"]) < 0.005
    for key, value in shipped["state_dict"].items():
        gap = float((remade["state_dict"][key].float() - value.float()).abs().max())
        assert gap <= 2e-3 * max(1.0, float(value.float().abs().max())), f"{name}: {key} differs by {gap}"
