"""Set-up the grader's sandbox tests share.

``isolator``: one :class:`~mha_course.grading.engine.process.Isolator` per test module (its views are built per
assignment on first use, so a module that changes ``sys.path`` before grading keeps its own). Its walls are
tier A (bubblewrap; the test is skipped where that cannot run) unless MHA_COURSE_EXPECT_TIER names another
tier: tests/grading/test_tier_b.py runs tests/grading/test_redteam_channel.py again inside the Docker
reproduction with ``MHA_COURSE_EXPECT_TIER=B``, where the same tests must hold under tier B.

Every test that takes an ``isolator`` (this one or a module's own) starts sandboxes: it is marked slow here.
"""

from __future__ import annotations

import os

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
def no_scan(monkeypatch):
    """The static scan off: what a red-team test checks is the runtime alone."""
    monkeypatch.setattr(pipeline, "scan", lambda cells, assignment: ScanReport())


def pytest_itemcollected(item):
    if "isolator" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.slow)
