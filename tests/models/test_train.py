"""Training: a small configuration learns its task on a fixed seed; the command prints its summary line."""

import re
import warnings

import pytest
import torch

from mha_course.models.model import build_model
from mha_course.models.tasks import get_task
from mha_course.models.train import HELD_OUT_SEED_OFFSET, evaluate, main, train, train_task


def test_small_model_learns_grammar_past_threshold():
    torch.set_num_threads(1)
    model, result = train_task("grammar", seed=0, steps=400, num_layers=1, embed_dim=32, target_accuracy=0.97)
    assert result.accuracy >= 0.97, result.history
    assert result.steps < 400
    # the held-out figure is real: a fresh sample from an unseen seed scores as well
    task = get_task("grammar")
    fresh = evaluate(model, task.sample(500, 12345), task)
    assert fresh["accuracy"] >= 0.95
    assert set(fresh["relations"]) == set(task.relation_names)


def test_untrained_model_is_near_chance():
    task = get_task("grammar")
    torch.manual_seed(0)
    model = build_model(task, num_layers=1, embed_dim=32)
    assert evaluate(model, task.sample(300, 1), task)["accuracy"] < 0.3


def test_training_is_seeded_and_history_is_recorded():
    task = get_task("sort", length=4)
    results = []
    for _ in range(2):
        torch.manual_seed(3)
        model = build_model(task, num_layers=1, embed_dim=16, num_heads=2)
        results.append(train(model, task, steps=30, eval_every=10, seed=3, target_accuracy=None, progress=False))
    assert [h["loss"] for h in results[0].history] == [h["loss"] for h in results[1].history]
    assert results[0].losses == results[1].losses and len(results[0].losses) == 30
    assert all(isinstance(x, float) for x in results[0].losses)
    assert [h["step"] for h in results[0].history] == [10, 20, 30]
    assert [h["loss"] for h in results[0].history] == [results[0].losses[i - 1] for i in (10, 20, 30)]
    with pytest.raises(ValueError, match="steps"):
        train(model, task, steps=0)


@pytest.mark.slow
def test_command_line_ends_with_accuracy_line(capsys):
    assert (
        main(
            [
                "--task",
                "grammar",
                "--layers",
                "1",
                "--embed-dim",
                "32",
                "--steps",
                "400",
                "--no-progress",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    match = re.fullmatch(r"accuracy (\d\.\d{3}) in (\d+\.\d) s", last)
    assert match, last
    assert float(match.group(1)) >= 0.99


def test_command_line_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--task", "--steps", "--seed", "--positions", "--heads", "--kv-heads", "--causal"):
        assert flag in out


def test_training_with_a_progress_bar_warns_nothing(capsys):
    # float(loss) on a tensor that requires grad used to warn in the progress-bar update
    task = get_task("copy", length=3)
    torch.manual_seed(0)
    model = build_model(task, num_layers=1, embed_dim=16, num_heads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = train(model, task, steps=4, eval_every=2, target_accuracy=None, progress=True)
    assert result.steps == 4 and len(result.history) == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "--steps must be a positive integer"),
        (["--batch-size", "-3"], "--batch-size must be a positive integer"),
        (["--heads", "3"], "must be divisible by --heads"),
        (["--task", "translate", "--causal"], "--causal applies to encoder-only tasks"),
        (["--task", "nope"], "invalid choice"),
        (["--kv-heads", "3"], "--kv-heads must be a positive divisor"),
        (["--kv-heads", "2", "--positions", "rotary"], "--kv-heads applies to encoder-only tasks without rotary"),
    ],
)
def test_command_line_rejects_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_held_out_set_comes_from_its_own_seed():
    task = get_task("copy", length=3)
    calls = []
    sample = task.sample

    def spy(n, seed=0):
        calls.append(seed)
        return sample(n, seed)

    task.sample = spy
    torch.manual_seed(0)
    model = build_model(task, num_layers=1, embed_dim=16, num_heads=2)
    train(model, task, steps=3, eval_every=3, seed=5, target_accuracy=None, progress=False)
    held_out = [s for s in calls if not isinstance(s, torch.Generator)]
    assert held_out == [5 + HELD_OUT_SEED_OFFSET]  # one fixed held-out set, never the training stream
    assert sum(isinstance(s, torch.Generator) for s in calls) == 3  # a fresh training batch per step
