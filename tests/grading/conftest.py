"""Set-up the grader's sandbox tests share.

``isolator``: one :class:`~mha_course.grading.engine.process.Isolator` per test module (its views are built per
assignment on first use, so a module that changes ``sys.path`` before grading keeps its own). Its walls are
tier A (bubblewrap; the test is skipped where that cannot run) unless MHA_COURSE_EXPECT_TIER names another
tier: tests/grading/walls/test_confined.py runs tests/grading/redteam/test_take_over_the_channel.py again inside the Docker
reproduction with ``MHA_COURSE_EXPECT_TIER=B``, where the same tests must hold under tier B.

Every test that takes an ``isolator`` (this one or a module's own) starts sandboxes: it is marked slow here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from grading_fake import require_sandbox

from mha_course.grading.engine import pipeline
from mha_course.grading.engine.process import Isolator
from mha_course.grading.static.scan import ScanReport

EXPECTED_TIER = os.environ.get("MHA_COURSE_EXPECT_TIER", "")


@pytest.fixture(scope="module")
def isolator():
    if EXPECTED_TIER not in ("", "A"):
        isolator = Isolator(min_isolation=EXPECTED_TIER)
        assert isolator.walls.tier == EXPECTED_TIER, isolator.walls.summary()
    else:
        require_sandbox()
        isolator = Isolator(min_isolation="A")
    yield isolator
    isolator.close()


@pytest.fixture
def memory_tmp_path(tmp_path):
    """A fresh folder in memory (/dev/shm) where that is a writable tmpfs, else ``tmp_path``.

    For trees thousands of levels deep: on a disk each of their folders costs a journalled mkdir and rmdir
    (ext4 on 2 busy cores: 1500 rmdirs took 5 s; on tmpfs 0.01 s), and the test is the same test on either.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="mha-course-test-", dir=shm))
    try:
        yield folder
    finally:  # the test removes its deep trees itself (a recursive rmtree would overflow on them)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def no_scan(monkeypatch):
    """The static scan off: what a red-team test checks is the runtime alone."""
    monkeypatch.setattr(pipeline, "scan", lambda cells, assignment: ScanReport())


def pytest_itemcollected(item):
    if "isolator" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.slow)
