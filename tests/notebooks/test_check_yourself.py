""" "Check yourself" cells ask for a prediction before showing an answer, and still run top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from mha_course.testing import prediction

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_prediction_falls_back_only_while_the_learner_has_not_answered(capsys):
    assert prediction(..., 8, "D") == 8 and "no prediction yet" in capsys.readouterr().out
    assert prediction(7, 8, "D") == 7 and capsys.readouterr().out == ""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_predictions_ship_empty_and_answers_collapsed(path):
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or "prediction(" not in cell.source:
            continue
        names = re.findall(r"^(\w+) = prediction\((\w+),", cell.source, re.M)
        assert names, f"{path.name} cell {i}: prediction(...) should rebind the learner's variable"
        for name, _ in names:
            assert re.search(rf"^{name} = \.\.\.", cell.source, re.M), f"{path.name}: {name} should ship as ..."
        answers = cells[i - 1]
        assert answers.source.startswith("# The course's answers"), f"{path.name}: answers cell above cell {i}"
        assert answers.metadata.get("jupyter", {}).get("source_hidden") is True, f"{path.name}: answers not collapsed"
