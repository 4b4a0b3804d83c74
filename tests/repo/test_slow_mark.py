"""The ``slow`` mark is kept honest (tests/conftest.py): a test that starts a process without it fails the
fast run and is listed after a full one; a test over the time limit is listed."""

from __future__ import annotations

import subprocess
import sys
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


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args]
    return subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture
def sample(tmp_path):
    """A folder with tests/conftest.py, the sample tests and an ini of its own that registers the mark."""
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n    slow: slow\n")
    return tmp_path


@pytest.mark.slow
def test_an_unmarked_process_start_fails_the_fast_run_and_is_listed_in_a_full_one(sample):
    fast = _pytest(sample, "-m", "not slow")
    assert fast.returncode == 1, fast.stdout[-3000:]
    assert "1 failed, 2 passed, 1 deselected" in fast.stdout, fast.stdout[-3000:]
    assert "test_starts_unmarked started a process (subprocess.Popen)" in fast.stdout
    full = _pytest(sample)
    assert full.returncode == 0, full.stdout[-3000:]
    listed = full.stdout.split("not marked slow, yet started a process or took over 2 s")[1]
    assert "test_starts_unmarked: started subprocess.Popen" in listed
    assert "test_takes_long: call took 2." in listed
    assert "test_starts_marked" not in listed and "test_quick" not in listed
