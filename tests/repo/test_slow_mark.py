"""The ``slow`` mark is kept honest (tests/conftest.py): a test that starts a process without it fails the
fast run and is listed after a full one; a test over the time limit is listed (advice: a busy machine
doubles times); the tests marked from the conftest still exist; each marker is documented."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = """
import subprocess, time
import pytest

def test_starts_unmarked():
    subprocess.run(["true"])

@pytest.mark.slow
def test_starts_marked():
    subprocess.run(["true"])

def test_takes_long():
    time.sleep(2.2)

def test_quick():
    pass
"""


def _pytest(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    environment = {**os.environ, **env}
    return subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300, env=environment)


@pytest.fixture
def sample(tmp_path):
    """A folder named ``slow`` (as a checkout may be: the listing must not read folder names as marks) with
    tests/conftest.py, the sample tests and an ini of its own that registers the mark."""
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (folder / "test_sample.py").write_text(SAMPLE)
    (folder / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n    slow: slow\n")
    return folder


@pytest.mark.slow
def test_an_unmarked_process_start_fails_the_fast_run_and_is_listed_in_a_full_one(sample):
    # the fast run with a limit of its own (far above the 2.2 s sleep, however busy the machine), in one process;
    # the full one under xdist, as `make test` runs
    fast = _pytest(sample, "-p", "no:xdist", "-m", "not slow", MHA_COURSE_FAST_LIMIT_S="60")
    assert fast.returncode == 1, fast.stdout[-3000:]
    assert "1 failed, 2 passed, 1 deselected" in fast.stdout, fast.stdout[-3000:]
    assert "test_starts_unmarked started a process (subprocess.Popen)" in fast.stdout
    listed = fast.stdout.split("not marked slow, yet started a process or took over 60 s")[1]
    assert "test_takes_long" not in listed and "load average" in listed
    full = _pytest(sample, "-n", "1")  # one worker: the reports still reach the listing through xdist's controller
    assert full.returncode == 0, full.stdout[-3000:]
    listed = full.stdout.split("not marked slow, yet started a process or took over 2 s")[1]
    assert "test_starts_unmarked: started subprocess.Popen" in listed
    took = re.search(r"test_takes_long: call took (\d+\.\d) s \(CPU 0\.\d s\)", listed)  # asleep: no CPU
    assert took and float(took[1]) >= 2.2, listed  # a busy machine may wake the sleeper late, never early
    assert "test_starts_marked" not in listed and "test_quick" not in listed


def _conftest_names(name: str) -> frozenset[str]:
    """The value of the frozenset ``name`` assigned in tests/conftest.py, read without importing it."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return frozenset(ast.literal_eval(node.value.args[0]))
    raise AssertionError(f"tests/conftest.py assigns no {name}")


def test_every_test_the_conftest_marks_slow_is_one_test_under_tests_grading():
    """A name marked from the conftest that no test has any more marks nothing, silently: the list went stale
    once when test files moved between folders, and their slow tests then ran in every fast run."""
    names = _conftest_names("SLOW_ELSEWHERE")
    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for name in re.findall(r"^\s*def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M):
            if name in names:
                defined.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    assert names, "SLOW_ELSEWHERE is empty: delete it and its hook"
    for name in sorted(names):
        places = defined.get(name, [])
        assert len(places) == 1, f"{name}: defined in {places or 'no test file'}; SLOW_ELSEWHERE needs one"
        assert places[0].startswith("tests/grading/"), f"{name} is in {places[0]}: mark it in its own file"


def test_every_marker_is_declared_and_documented_in_contributing():
    declared = [
        m.split(":")[0]
        for m in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    ]
    tests_section = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split("## Tests", 1)[1].split("\n## ", 1)[0]
    assert "slow" in declared
    for marker in declared:
        assert f"@pytest.mark.{marker}" in tests_section, f"CONTRIBUTING's Tests section does not explain {marker}"
    assert "MHA_COURSE_FAST_LIMIT_S" in tests_section, "the fast run's time limit is not explained"
