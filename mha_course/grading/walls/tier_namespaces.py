"""TRIAL ONLY, for tests: a "namespaces-only" tier that walls nothing in (plain processes under the letter N).

A contributor's trial of CONTRIBUTING.md's "Add a sandbox tier": it is registered weaker than every
real tier (strength 5, below tier C's 10) and never a guarantee: a submission under it could read and
change this machine's files. It holds only where ``MHA_COURSE_TRIAL_TIER=namespaces`` is set, so the
grader never falls back to it on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from .resources import Resources
from .tier import OpenTier, Tier, Walls
from .tier_a import BubblewrapSandbox


class NamespacesOnlyForTests(Tier):
    """Holds only when asked for by the environment; each submission process is a plain child process."""

    def why_not(self) -> str | None:
        if os.environ.get("MHA_COURSE_TRIAL_TIER") == "namespaces":
            return None
        return "a trial tier for tests only: set MHA_COURSE_TRIAL_TIER=namespaces to use it"

    def open(self, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
        sentence = f"{self.title}: no walls at all, a trial for tests only"
        walls = Walls(self.name, "trial, testing only", {}, self.label, dict(refused), sentence)

        def start(view: Path | None, fd: int, res: Resources) -> BubblewrapSandbox:
            return BubblewrapSandbox(None, fd, res, cgroup=False)  # a real tier would unshare namespaces here

        return OpenTier(walls, start)


NAMESPACES = NamespacesOnlyForTests(
    name="namespaces", label="N", strength=5, mechanism="namespaces only (trial: plain processes, for tests only)"
)
