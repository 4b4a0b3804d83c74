"""What a sandbox tier is: the interface every tier implements, the walls it reports, the error of a machine without one.

A :class:`Tier` is one way of walling a submission in, named by its mechanism (``bubblewrap``,
``landlock``, ``uid``) and by the documented letter instructors pass to ``--min-isolation`` and read
in results.json (``A``, ``B``, ``C``). It says whether it holds on this machine (:meth:`Tier.why_not`)
and, for one grading run, sets itself up (:meth:`Tier.open`): the :class:`Walls` every output names
and how one :class:`Sandbox` starts behind them. :mod:`mha_course.grading.walls.tiers` holds the
registry and picks the strongest tier that holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .resources import Resources

NO_WALLS = "none"  # the kind of walls of plain processes (--unsafe-no-isolation), as every output writes it


class IsolationError(RuntimeError):
    """No tier as strong as asked holds here (or a view cannot be built); the message says why and what to do."""


@dataclass(frozen=True)
class Walls:
    """What isolated the submissions of a grading run, as the CSV, the report and results.json name it.

    ``kind`` is the tier's name (the CSV's isolation column), ``tier`` its letter ("" for none),
    ``refused`` why each stronger tier does not hold here, ``sentence`` the tier's own summary.
    """

    kind: str
    detail: str = ""  # the mechanism's version, or why there are no walls
    limits: dict[str, str] = field(default_factory=dict)
    tier: str = ""
    refused: dict[str, str] = field(default_factory=dict)
    sentence: str = ""

    @property
    def isolated(self) -> bool:
        return self.kind != NO_WALLS

    def summary(self) -> str:
        return self.sentence

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "detail": self.detail,
            "limits": dict(self.limits),
            "summary": self.summary(),
            "tier": self.tier,
            "refused": dict(self.refused),
        }


def limits_text(limits: dict[str, str]) -> str:
    """The limits as a summary lists them: ``memory ..., processes ...``."""
    return ", ".join(f"{k} {v}" for k, v in limits.items())


class Sandbox(Protocol):
    """One submission process behind a tier's walls, as the grader's watchdog drives it.

    A sandbox whose scratch folder is no size-limited tmpfs also has ``scratch_overuse() -> str | None``
    (the watchdog calls it twice a second and kills the sandbox when it says why).
    """

    pid: int

    def startup_error(self) -> str: ...  # the last lines printed before the runtime took over

    def tasks(self) -> list[int]: ...  # host pids of every process in it, for the memory watch

    def kill(self) -> None: ...  # every process in it, at once

    def close(self) -> None: ...  # kill, wait, and remove what it left


@dataclass(frozen=True)
class OpenTier:
    """A tier set up for one grading run: its walls, and ``start(view, fd, resources)`` for each submission process.

    ``view`` is the package's view for the assignment (None when there are no walls), ``fd`` the
    submission's end of the socket pair to the grader.
    """

    walls: Walls
    start: Callable[[Path | None, int, Resources], Sandbox]


@dataclass(frozen=True)
class Tier(ABC):
    """One kind of walls. Subclass it with :meth:`why_not` and :meth:`open`, then register one instance.

    ``name`` is the mechanism (written as results.json's ``kind`` and the CSV's isolation column),
    ``label`` the documented letter (``--min-isolation``, results.json's ``tier``), ``strength``
    orders the tiers (the strongest that holds is used; ``--min-isolation`` refuses a weaker one),
    ``mechanism`` says in a few words what the walls are (``Landlock, seccomp, own uid``).
    """

    name: str
    label: str
    strength: int
    mechanism: str

    @property
    def title(self) -> str:
        """How a refusal or a help text names the tier: ``tier B (Landlock, seccomp, own uid)``."""
        return f"tier {self.label} ({self.mechanism})"

    @abstractmethod
    def why_not(self) -> str | None:
        """None when this tier's walls hold on this machine, else one sentence saying why not (and what to do)."""

    @abstractmethod
    def open(self, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
        """Set up for one grading run: ``root`` is the run's folder (mode 0711, the views are in it),
        ``cgroup`` the kind of cgroup a sandbox can have here (None: none), ``refused`` why each stronger
        tier does not hold (for the walls to report)."""
