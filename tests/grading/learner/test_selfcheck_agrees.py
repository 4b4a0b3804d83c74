"""check() in the learner's kernel and the grader give the same verdict when a target reaches the course's own code.

The sandbox's ``mha_course`` holds only the self-check helpers and the assignment's provided building blocks,
so ``from mha_course.core.masks import causal_mask`` scores 0 in the grader. The self-check says so before the
learner submits, instead of showing full marks. (That the grader gives 0 is asserted beside the honest idioms it
grades in the same run: tests/grading/redteam/test_cheat_the_real_assignments.py.)
"""

from __future__ import annotations

import warnings
from pathlib import Path

import nbformat
import pytest

from mha_course.grading.engine import registry
from mha_course.grading.learner import selfcheck

ROOT = Path(__file__).resolve().parents[3]

WRAPPED = (
    "from mha_course.core.masks import causal_mask as _library_mask\n\n\n"
    "def causal_mask(T, S=None):\n    return _library_mask(T, S)\n"
)
THROUGH_PACKAGE = "import mha_course\n\n\ndef causal_mask(T, S=None):\n    return mha_course.causal_mask(T, S)\n"


def _define(source: str, name: str):
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - the test's own snippets
    return namespace[name]


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(lambda: __import__("mha_course.core.masks", fromlist=["x"]).causal_mask, id="imported"),
        pytest.param(lambda: _define(WRAPPED, "causal_mask"), id="wrapped"),
        pytest.param(lambda: _define(THROUGH_PACKAGE, "causal_mask"), id="through-the-package"),
    ],
)
def test_check_gives_zero_and_says_why_for_the_course_own_code(target):
    result = selfcheck.check("causal_mask", target(), show=False)
    assert result.score == 0 and result.rows, result
    assert all(
        "mha_course.core.masks.causal_mask" in row.hint and "grader cannot import" in row.hint for row in result.rows
    )


@pytest.mark.slow  # runs every solution notebook's cells (about 5 s)
def test_own_code_and_provided_blocks_are_not_flagged():
    """Every solution's targets reach only what the sandbox offers (a provided module included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for assignment in registry.assignments():
            path = ROOT / "solutions" / f"{assignment.key}.ipynb"
            nb = nbformat.read(path, as_version=4)
            namespace = {"__name__": "__main__"}
            for cell in nb.cells:
                if cell.cell_type == "code" and "check(" not in cell.source:
                    try:
                        exec(compile(cell.source, "<cell>", "exec"), namespace)  # noqa: S102 - course files
                    except Exception:
                        pass
            for exercise in assignment.exercises:
                target = namespace.get(exercise.target)
                assert target is not None, (assignment.key, exercise.target)
                assert selfcheck.library_reach(target, tuple(assignment.provided)) is None, (
                    assignment.key,
                    exercise.key,
                )
    assert any(a.provided for a in registry.assignments()), "no assignment provides a module: the test checks less"


def test_check_with_the_hidden_cases_gives_zero_as_the_grader_does():
    """The grader's half: tests/grading/redteam/test_cheat_the_real_assignments.py grades an a04 notebook whose
    causal_mask is ``WRAPPED`` (every defence on, in the command-line run it shares with the honest idioms) and
    asserts every causal_mask row scores 0. The self-check says the same with the hidden cases counted."""
    assert selfcheck.check("causal_mask", _define(WRAPPED, "causal_mask"), include_hidden=True, show=False).score == 0
