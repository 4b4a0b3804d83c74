"""nbgrader interop: the solution notebooks carry nbgrader's cell metadata, real nbgrader accepts them,
and the course's grader grades nbgrader's release notebooks like its own exercises."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from grading_fake import require_sandbox

from mha_course.grading.authoring import nbgrader_cells
from mha_course.grading.engine import notebook
from mha_course.grading.engine.pipeline import grade_notebook
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]
NBGRADER_BIN = ROOT / ".venv-nbgrader" / "bin"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_solution_cells_carry_nbgrader_metadata(path):
    nb = notebook.load(path)
    assert nbgrader_cells.problems(nb) == [], (
        "run nbgrader_cells.apply on it (see mha_course/grading/authoring/nbgrader_cells.py)"
    )
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"] if "nbgrader" in c["metadata"]]
    assert len(ids) == len(set(ids)) and all(ids)


def test_metadata_follows_the_markers():
    cell = {"id": "c1", "cell_type": "code", "metadata": {}, "source": "x = 1\n### BEGIN SOLUTION\ny\n### END SOLUTION"}
    nb = {"cells": [cell, {"id": "c2", "cell_type": "code", "metadata": {"nbgrader": {"grade": True}}, "source": "1"}]}
    assert len(nbgrader_cells.problems(nb)) == 2 and nbgrader_cells.apply(nb) == 2
    assert nb["cells"][0]["metadata"]["nbgrader"]["solution"] is True and "nbgrader" not in nb["cells"][1]["metadata"]
    assert nbgrader_cells.apply(nb) == 0 and nbgrader_cells.problems(nb) == []


def _nbgrader() -> Path:
    tool = NBGRADER_BIN / "nbgrader"
    if not tool.exists():
        message = "nbgrader is not installed: `make nbgrader` makes .venv-nbgrader (make test does it)"
        if os.environ.get("MHA_COURSE_REQUIRE_NBGRADER"):
            pytest.fail(message)
        pytest.skip(message)
    return tool


def _run(tool: Path, course: Path, *command: str) -> None:
    env = dict(os.environ, PATH=f"{NBGRADER_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)  # mha_course must come from the environment itself, as for an instructor
    done = subprocess.run([str(tool), *command], cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, " ".join(command) + "\n" + done.stdout[-2000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> tuple[Path, Path]:
    """nbgrader's tool and a course folder where it released a02 once (the student's copy is submitted too)."""
    tool = _nbgrader()
    course = tmp_path_factory.mktemp("nbgrader") / "course"
    (course / "source" / "a02_softmax").mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "a02_softmax.ipynb", course / "source" / "a02_softmax")
    submitted = course / "submitted" / "student1" / "a02_softmax"
    submitted.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "a02_softmax.ipynb", submitted)
    (course / "nbgrader_config.py").write_text(
        f'c = get_config()\nc.CourseDirectory.course_id = "mha"\nc.CourseDirectory.db_url = "sqlite:///{course}/gradebook.db"\n'
    )
    _run(tool, course, "generate_assignment", "a02_softmax", "--force")
    return tool, course


@pytest.mark.slow
def test_real_nbgrader_releases_a_notebook_this_grader_grades(course, tmp_path):
    require_sandbox()
    release = course[1] / "release" / "a02_softmax" / "a02_softmax.ipynb"
    nb = json.loads(release.read_text())
    text = json.dumps(nb)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text and "YOUR CODE HERE" in text

    limits = Limits(case_timeout=10)
    untouched = grade_notebook(release, limits, seed=5)
    assert untouched.error is None and untouched.score == 0 and untouched.max_score > 0
    solution = {
        c["id"]: c["source"] for c in json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())["cells"]
    }
    for cell in nb["cells"]:
        if "YOUR CODE HERE" in "".join(cell["source"]):
            cell["source"] = solution[cell["id"]]  # the student answers in nbgrader's release
    answered = tmp_path / "answered.ipynb"
    answered.write_text(json.dumps(nb))
    result = grade_notebook(answered, limits, seed=5)
    assert result.score == result.max_score == untouched.max_score, [
        t.output for t in result.tests if t.score < t.points
    ]


@pytest.mark.slow
def test_real_nbgrader_autogrades_a_course_notebook_end_to_end(course, tmp_path):
    """nbgrader's own autograde runs the solution's check and hidden-test cells (they import mha_course from
    .venv-nbgrader, outside the repository) and gives the answered notebook every point of its grade cells."""
    tool, course = course
    _run(tool, course, "autograde", "a02_softmax", "--force", "--create")
    _run(tool, course, "export", "--to", str(tmp_path / "grades.csv"))
    graded = json.loads((course / "autograded" / "student1" / "a02_softmax" / "a02_softmax.ipynb").read_text())
    checks = [c for c in graded["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    assert checks, "the hidden-test cells lost their nbgrader metadata"
    for cell in graded["cells"]:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (cell["id"], errors)
    printed = json.dumps([o for c in checks for o in c.get("outputs", [])])
    assert "passed" in printed and "failed" not in printed.replace("0 failed", ""), printed[-2000:]


@pytest.mark.slow
def test_the_guides_make_targets_release_and_autograde_without_activating_the_environment(tmp_path):
    """`make nbgrader-generate` / `make nbgrader-autograde` as docs/INSTRUCTORS.md gives them, with nbgrader's
    environment not on PATH (nbgrader runs `alembic` by name: FileNotFoundError unless the target puts it first)."""
    _nbgrader()
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    course = tmp_path / "nbgrader"
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if ".venv-nbgrader" not in p)
    env = dict(os.environ, PATH=path)
    env.pop("PYTHONPATH", None)
    # the environments exist already (the test's precondition): do not remake them from their stamps
    make = ["make", "-s", "-o", ".venv/.installed-stamp", "-o", ".venv-nbgrader/.installed-stamp"]
    where = [f"NBGRADER_COURSE={course}", "ASSIGNMENT=a02_softmax"]

    def run(target: str) -> str:
        done = subprocess.run(
            [*make, target, *where], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, target + "\n" + done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    assert "alembic" not in run("nbgrader-generate").lower().replace("alembic_version", "")
    release = course / "release" / "a02_softmax" / "a02_softmax.ipynb"
    assert "YOUR CODE HERE" in release.read_text() and "BEGIN SOLUTION" not in release.read_text()
    missing = subprocess.run([*make, "nbgrader-autograde", *where], cwd=ROOT, env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "no submissions" in missing.stdout + missing.stderr
    submitted = course / "submitted" / "student1" / "a02_softmax"
    submitted.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "a02_softmax.ipynb", submitted)
    run("nbgrader-autograde")
    assert (course / "autograded" / "student1" / "a02_softmax" / "a02_softmax.ipynb").is_file()
    assert "a02_softmax,,,student1," in (course / "grades.csv").read_text()
    unnamed = subprocess.run([*make, "nbgrader-generate", f"NBGRADER_COURSE={course}"], cwd=ROOT, env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert unnamed.returncode != 0 and "ASSIGNMENT=" in unnamed.stdout + unnamed.stderr
