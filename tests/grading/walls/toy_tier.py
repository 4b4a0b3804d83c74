"""A toy sandbox tier for the grader's own tests: plain processes under the letter T, weaker than every real tier.

It walls nothing in (a submission could read and change this machine's files): it only shows what a tier
is. CONTRIBUTING.md's "Add a sandbox tier" shows this module as the worked example, and
tests/grading/walls/test_tier_registry.py registers it (one line) and grades through it.
"""

from __future__ import annotations

from pathlib import Path

from mha_course.grading.walls.bubblewrap import BubblewrapSandbox
from mha_course.grading.walls.resources import Resources
from mha_course.grading.walls.tier import OpenTier, Tier, Walls


class PlainForTests(Tier):
    """Holds everywhere; each submission process is a plain child process, as --unsafe-no-isolation starts it."""

    def why_not(self) -> str | None:
        return None  # a real tier probes here: None only where its walls really hold

    def open(self, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
        sentence = f"{self.title}: no walls at all, for the grader's own tests only"
        walls = Walls(self.name, "testing only", {}, self.label, dict(refused), sentence)

        def start(view: Path | None, fd: int, res: Resources) -> BubblewrapSandbox:
            return BubblewrapSandbox(None, fd, res, cgroup=False)  # a real tier confines it to the view here

        return OpenTier(walls, start)


TOY = PlainForTests(name="toy", label="T", strength=1, mechanism="plain processes, for tests only")
