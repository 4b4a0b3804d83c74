"""The command lines the course documents keep their short names: ``python -m mha_course.grade`` and the rest.

Their code lives in the folders (``grading/grade``, ``models/train``, ...); the short names are part of
what instructors, graders and the README rely on, so each must still answer ``--help``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SHORT_NAMES = {
    "grade": "mha_course.grading.grade",
    "assign": "mha_course.grading.assign",
    "gradescope": "mha_course.grading.gradescope",
    "train": "mha_course.models.train",
    "bench": "mha_course.timing.bench",
    "gpu_report": "mha_course.kernels.gpu_report",
    "progress": "mha_course.grading.learner.progress",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHORT_NAMES))
def test_the_documented_command_answers_help(name):
    done = subprocess.run(
        [sys.executable, "-m", f"mha_course.{name}", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


@pytest.mark.parametrize("name", sorted(SHORT_NAMES))
def test_the_short_name_calls_the_folder_modules_main(name):
    import importlib

    short, full = importlib.import_module(f"mha_course.{name}"), importlib.import_module(SHORT_NAMES[name])
    assert short.main is full.main
