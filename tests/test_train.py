"""Training: a small configuration learns its task on a fixed seed; the command prints its summary line."""

import re

import pytest
import torch

from mha_course.model import build_model
from mha_course.tasks import get_task
from mha_course.train import evaluate, main, train, train_task


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
    assert [h["step"] for h in results[0].history] == [10, 20, 30]
    with pytest.raises(ValueError, match="steps"):
        train(model, task, steps=0)


def test_command_line_ends_with_accuracy_line(capsys):
    assert main(["--task", "grammar", "--layers", "1", "--embed-dim", "32", "--steps", "400",
                 "--no-progress", "--seed", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    match = re.fullmatch(r"accuracy (\d\.\d{3}) in (\d+\.\d) s", last)
    assert match, last
    assert float(match.group(1)) >= 0.99


def test_command_line_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--task", "--steps", "--seed", "--positions", "--heads"):
        assert flag in out
