"""check() in the learner's kernel and the grader give the same verdict when a target reaches the course's own code.

The sandbox's ``mha_course`` holds only the self-check helpers and the assignment's provided building blocks,
so ``from mha_course.core.masks import causal_mask`` scores 0 in the grader. The self-check says so before the
learner submits, instead of showing full marks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from grading_fake import require_sandbox

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


@pytest.mark.slow
def test_grader_agrees_with_check(tmp_path):
    require_sandbox()
    nb = json.loads((ROOT / "solutions" / "a04_masks.ipynb").read_text())
    cell = next(c for c in nb["cells"] if re.search(r"^def causal_mask\b", "".join(c["source"]), re.M))
    cell["source"] = WRAPPED
    path = tmp_path / "a04_library.ipynb"
    path.write_text(json.dumps(nb))
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.grade", str(path), "--json", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [t for t in json.loads(out.read_text())["tests"] if t["name"].startswith("causal_mask:")]
    assert rows and all(t["score"] == 0 for t in rows), rows
    assert selfcheck.check("causal_mask", _define(WRAPPED, "causal_mask"), include_hidden=True, show=False).score == 0
