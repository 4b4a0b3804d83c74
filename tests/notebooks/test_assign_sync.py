"""solutions/ and exercises/ stay in step, and the real assignments grade as they should.

* exercises/ is byte for byte what ``python -m mha_course.assign`` writes from solutions/;
* solution and exercise notebooks carry the same assignment metadata, which the registry knows,
  so any renamed copy is recognised as the same assignment;
* graded through the sandbox (one batch for both folders): every solution gets full marks, with
  every one of its cells run without error there, and every unedited exercise notebook gets zero.

nbval runs each solution too (``solutions/`` is a test path), and that second run is not duplicated
work: nbval runs the cells in an IPython kernel, as Jupyter does (rich display, figures), while the
grader runs them with ``exec`` inside the sandbox (``display`` and ``get_ipython`` stubbed, the
tripwire and audit hook installed, the OS walls up). A cell can fail in one and not the other, so
each run proves its own half: runs as the learner sees it, and grades in full where it is graded.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mha_course.grading.classroom.batch import grade_many
from mha_course.grading.engine import notebook, registry
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_registry_imports_every_exercise_module_and_keys_are_unique():
    assert registry.discovery_errors() == {}
    keys = [e.key for a in registry.assignments() for e in a.exercises]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_exercises_folder_is_what_the_generator_writes():
    problems = notebook.stale_exercises(ROOT / "solutions", ROOT / "exercises")
    assert problems == [], "exercises/ is stale: run `python -m mha_course.assign`\n" + "\n".join(problems)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_metadata_names_a_known_assignment(path):
    nb = notebook.read(path)
    meta = notebook.metadata(nb)
    assert meta is not None, f"{path.name} has no metadata['mha_course']"
    assignment = registry.identify(nb)
    assert (assignment.key, assignment.version, assignment.notebook) == (meta.assignment, meta.version, path.name)
    assert notebook.has_markers(nb), f"{path.name} has no ### BEGIN SOLUTION markers"
    exercise = notebook.read(ROOT / "exercises" / path.name)
    assert notebook.metadata(exercise) == meta
    assert not notebook.has_markers(exercise)


def test_a_renamed_copy_is_the_same_assignment(tmp_path):
    for path in SOLUTIONS + EXERCISES:
        copy = tmp_path / f"my homework - {path.stem} (final v2).ipynb"
        shutil.copy(path, copy)
        assert registry.identify(notebook.read(copy)).key == registry.identify(notebook.read(path)).key


@pytest.fixture(scope="module")
def graded():
    from grading_fake import require_sandbox

    require_sandbox()
    limits = Limits(case_timeout=30, cell_timeout=120, notebook_timeout=300)
    results = grade_many(SOLUTIONS + EXERCISES, limits, workers=2, progress=False)
    return {(p.parent.name, p.name): r for p, r in zip(SOLUTIONS + EXERCISES, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_gets_full_marks(graded, path):
    r = graded[("solutions", path.name)]
    lost = [f"{t.name}: {t.output}" for t in r.tests if t.status != "passed"]
    assert r.error is None and r.max_score > 0 and r.score == r.max_score, "\n".join(lost + r.notes)
    # the grader notes each cell that raised (pipeline: "cell N raised ..."): full marks must not hide one
    raised = [note for note in r.notes if re.match(r"cell \d+ raised ", note)]
    assert raised == [], "\n".join(raised)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_unedited_exercise_gets_zero(graded, path):
    r = graded[("exercises", path.name)]
    assert r.error is None and r.max_score > 0 and r.score == 0, [t.name for t in r.tests if t.score]
