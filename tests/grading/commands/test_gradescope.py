"""The Gradescope autograder: built for one assignment, installed and run the way Gradescope does."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from grading_fake import require_sandbox

from mha_course.grading import gradescope

ROOT = Path(__file__).resolve().parents[3]
INSTALLED: dict[str, Path] = {}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert gradescope.main(["build", "--assignment", "a02_softmax", "-o", str(path)]) == 0
    return path


@pytest.mark.slow
def test_bundle_holds_the_grader_and_nothing_a_student_must_not_see(bundle):
    names = zipfile.ZipFile(bundle).namelist()
    assert {
        "setup.sh",
        "run_autograder",
        "course/pyproject.toml",
        "course/requirements-grader.txt",
        "course/mha_course/grading/grade.py",
        "course/BUNDLE.json",
    } <= set(names)
    assert not [n for n in names if n.split("/")[1:2] in (["solutions"], ["exercises"], ["notebooks"], ["tests"])]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".ipynb")]
    text = zipfile.ZipFile(bundle).read("run_autograder").decode()
    assert "--assignment a02_softmax" in text and "--one-submission" in text
    requirements = zipfile.ZipFile(bundle).read("course/requirements-grader.txt").decode()
    assert "-e ." not in requirements and "torch==" in requirements  # no path resolved against the cwd
    info = zipfile.ZipFile(bundle).getinfo("setup.sh")
    assert info.external_attr >> 16 & 0o111  # executable once unzipped


def test_unknown_assignment_is_a_usage_error(tmp_path, capsys):
    assert gradescope.main(["build", "--assignment", "a99_nothing", "-o", str(tmp_path / "x.zip")]) == 2
    assert "unknown" in capsys.readouterr().err


def _valid_test(**changes):
    test = {
        "name": "t",
        "number": "1.1",
        "score": 1.0,
        "max_score": 1.0,
        "status": "passed",
        "output": "",
        "tags": ["e"],
        "visibility": "visible",
    }
    return {**test, **changes}


def test_validator_knows_gradescopes_fields_and_hidden_scores():
    good = {
        "score": 1.0,
        "execution_time": 1.0,
        "output": "ok",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [_valid_test()],
    }
    assert gradescope.validate_results(good) == []
    assert gradescope.validate_results({**good, "max_score": 3}) == ["unknown top-level field 'max_score'"]
    assert "status" in gradescope.validate_results({**good, "tests": [_valid_test(status="ok")]})[0]
    assert "outside" in gradescope.validate_results({**good, "tests": [_valid_test(score=2.0)]})[0]
    assert "finite" in gradescope.validate_results({**good, "score": float("nan")})[0]
    leaky = {
        **good,
        "output": "Total: 2 / 2 points",
        "tests": [_valid_test(), _valid_test(visibility="after_published")],
    }
    assert "reveals the total" in gradescope.validate_results(leaky)[0]


@pytest.mark.slow
def test_simulated_gradescope_installs_and_grades_from_anywhere(bundle, tmp_path):
    require_sandbox()
    upload = tmp_path / "upload"
    upload.mkdir()
    shutil.copy(ROOT / "solutions" / "a02_softmax.ipynb", upload / "my homework.ipynb")
    (upload / "notes.txt").write_text("a stray file")
    data, problems, root, status = gradescope.simulate(bundle, upload, tmp_path / "autograder")
    assert status == 0
    INSTALLED["root"] = root  # the next test grades another upload with this set-up, as Gradescope would
    assert problems == [], problems
    assert data["score"] == data["extra_data"]["max_score"] > 0
    assert "visible tests" in data["output"] and "graded after grades are published" in data["output"]
    assert "notes.txt (not a notebook)" in data["output"]
    assert {t["visibility"] for t in data["tests"]} == {"visible", "after_published"}
    assert data["extra_data"]["isolation"]["tier"] == "B"  # Gradescope's Docker refuses namespaces: tier B
    installed = list((root / "venv" / "lib").glob("python3*/site-packages/mha_course/grading/grade.py"))
    assert installed, "setup.sh did not install the course into the autograder's venv"


@pytest.mark.slow
def test_simulated_gradescope_reports_a_wrong_assignment(bundle, tmp_path):
    require_sandbox()
    if "root" not in INSTALLED:
        pytest.skip("needs the set-up of test_simulated_gradescope_installs_and_grades_from_anywhere")
    upload = tmp_path / "upload"
    upload.mkdir()
    shutil.copy(ROOT / "solutions" / "a01_dot_products.ipynb", upload / "a02_softmax.ipynb")
    data, problems, _, _status = gradescope.simulate(bundle, upload, INSTALLED["root"], setup=False)
    assert problems == [] and data["score"] == 0
    assert "wrong assignment a01_dot_products, expected a02_softmax" in data["output"]
    json.dumps(data, allow_nan=False)


def test_simulate_exits_non_zero_when_the_grader_refused(tmp_path, monkeypatch, capsys):
    """A valid results.json written by a grader that refused (run_autograder exit 3) is no grade: say so, exit 3."""
    refused = {"score": 0.0, "output": "not graded: no isolation is available", "tests": []}
    monkeypatch.setattr(gradescope, "simulate", lambda *args, **kwargs: (refused, [], tmp_path, 3))
    status = gradescope.main(["simulate", str(tmp_path / "b.zip"), str(tmp_path), "--no-container"])
    out = capsys.readouterr()
    assert status == 3, out
    assert "REFUSED to grade" in out.out and "exit 3" in out.out
