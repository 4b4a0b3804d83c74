"""`python -m mha_course.grading.assign new NAME` makes an assignment that grades end to end and keeps the checks green."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from grading_fake import require_sandbox

from mha_course.grading.authoring.scaffold import new_assignment, next_number

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the course's package, solutions, exercises and README, with a new assignment in it."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "mha_course", root / "mha_course", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("solutions", "exercises"):
        shutil.copytree(ROOT / folder, root / folder)
    shutil.copy(ROOT / "README.md", root / "README.md")
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.assign", "new", "row_shift", "--root", str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "reference implementation" in done.stdout and "mha_course/grading/exercises/" in done.stdout
    return root, env


# The suite's tests that check every assignment: hints, the timing table and workshop plan, the README's
# syllabus and the site made from it, heading points, the exercises' sync with their solutions.
ASSIGNMENT_WIDE = (
    "tests/grading/classroom/test_report_feedback.py",
    "tests/grading/exercises/test_exercises_content.py",
    "tests/site/test_site.py",
    "tests/notebooks/test_heading_points.py",
    "tests/notebooks/test_assign_sync.py",
    "tests/notebooks/test_answers_rule.py",
    "tests/notebooks/test_leftover_words.py",
    "tests/repo/test_structure.py",
)


@pytest.mark.slow
def test_a_new_assignment_passes_the_suites_assignment_wide_tests(tmp_path):
    """Scaffold into a copy of the repository's tracked files, then run the tests that check every assignment there."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    root = tmp_path / "course"
    for name in tracked.stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    env = dict(os.environ, PYTHONPATH=str(root))
    new = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.assign", "new", "row_shift", "--root", str(root)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert new.returncode == 0, new.stdout + new.stderr
    assert "not measured" not in new.stdout, new.stdout
    key = f"a{int(next_number(ROOT)):02d}_row_shift"
    for path in ("README.md", "benchmarks/RESULTS.md", "docs/INSTRUCTORS.md"):
        assert key in (root / path).read_text(encoding="utf-8"), path
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-m", "not slow", "-p", "no:cacheprovider", *ASSIGNMENT_WIDE],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    # the new assignment's own hints were among those checked
    assert f"test_no_hint_hands_over_code[{key}.py] PASSED" in suite.stdout


def _grade(course, notebook):
    root, env = course
    out = root / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.grade", str(notebook), "--json", str(out), "--quiet"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_new_assignment_files_and_numbering(course):
    root, env = course
    key = f"a{int(next_number(ROOT)):02d}_row_shift"
    for path in (
        f"solutions/{key}.ipynb",
        f"exercises/{key}.ipynb",
        f"mha_course/grading/exercises/{key}.py",
        f"mha_course/grading/calls/{key}.py",
    ):
        assert (root / path).is_file(), path
    readme = (root / "README.md").read_text().split("\n")
    rows = [line for line in readme if f"exercises/{key}.ipynb" in line]
    assert len(rows) == 1 and rows[0].startswith("|"), rows
    at = readme.index(rows[0])
    # the last row of the syllabus table: a table row above it, none below
    assert readme.index("## Syllabus") < at and readme[at - 1].startswith("| ") and not readme[at + 1].startswith("|")
    lint = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            f"mha_course/grading/exercises/{key}.py",
            f"mha_course/grading/calls/{key}.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.grading.assign",
            "--check",
            "--solutions",
            "solutions",
            "--exercises",
            "exercises",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout
    found = subprocess.run(  # the new exercise module imports: the registry finds it and lists no error
        [
            sys.executable,
            "-c",
            "from mha_course.grading.engine import registry; "
            f"print(registry.discovery_errors() or registry.get_assignment({key!r}).key)",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == key, found.stdout + found.stderr
    with pytest.raises(ValueError, match="exists already"):
        new_assignment(root, "row_shift")
    with pytest.raises(ValueError, match="lowercase Python identifier"):
        new_assignment(root, "Row Shift")


@pytest.mark.slow
def test_new_assignment_grades_end_to_end(course):
    require_sandbox()
    root, _ = course
    solution = next((root / "solutions").glob("a*_row_shift.ipynb"))
    graded = _grade(course, solution)
    assert graded["score"] == graded["extra_data"]["max_score"] == 5, graded["output"]
    untouched = _grade(course, root / "exercises" / solution.name)
    assert untouched["score"] == 0 and untouched["extra_data"]["max_score"] == 5
