"""The registry of sandbox tiers: which exist, which holds here, and the sentence the grader refuses with.

Each tier is a module of its own (:class:`~mha_course.grading.walls.tier.Tier`) and one line of
:data:`SHIPPED` below. :func:`choose` asks the registered tiers, strongest first, whether
they hold (:meth:`~mha_course.grading.walls.tier.Tier.why_not`) and returns the first that does, with
the reason each stronger one failed; ``--min-isolation`` takes a tier's documented letter
(:func:`labels`), and :func:`refusal` says what each stronger tier lacks and what the instructor can do.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from . import bubblewrap, confined
from .tier import IsolationError, OpenTier, Tier

_REGISTERED: dict[str, Tier] = {}  # by name


def register_tier(tier: Tier) -> Tier:
    """Add ``tier`` to the tiers the grader chooses from; returns it. Raises ValueError on a name, letter or
    strength another registered tier has, and TypeError for anything but a :class:`~mha_course.grading.walls.tier.Tier`."""
    if not isinstance(tier, Tier):
        raise TypeError(f"register_tier takes a Tier, got {type(tier).__name__}")
    if not tier.name or not tier.label:
        raise ValueError(f"a tier needs a name and a letter, got name {tier.name!r} and label {tier.label!r}")
    for other in _REGISTERED.values():
        for what in ("name", "label", "strength"):
            if getattr(other, what) == getattr(tier, what):
                raise ValueError(f"{what} {getattr(tier, what)!r} is already {other.title}'s")
    _REGISTERED[tier.name] = tier
    return tier


def unregister_tier(name: str) -> None:
    """Remove the tier named ``name`` (a test's own); raises KeyError when none is registered by that name."""
    del _REGISTERED[name]


#: The grader's tiers, each as "its module.its Tier" in this folder. A new tier: its module, and one line here.
SHIPPED = (
    "bubblewrap.BUBBLEWRAP",
    "confined.LANDLOCK",
    "confined.UID",
)
for _shipped in SHIPPED:
    _module, _, _tier = _shipped.partition(".")
    register_tier(getattr(importlib.import_module(f"{__package__}.{_module}"), _tier))

#: What --min-isolation is when not given: what root can build in a default Docker container (Gradescope's)
DEFAULT_MIN_ISOLATION = confined.LANDLOCK.label


def registered() -> tuple[Tier, ...]:
    """The registered tiers, strongest first."""
    return tuple(sorted(_REGISTERED.values(), key=lambda t: -t.strength))


def open_walls(tier: Tier | None, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
    """One grading run's walls: the chosen tier's, or plain child processes where none was (``tier`` None,
    --unsafe-no-isolation; every output says so)."""
    return tier.open(root, cgroup, refused) if tier is not None else bubblewrap.no_walls(refused)


def labels() -> tuple[str, ...]:
    """The letters ``--min-isolation`` takes, strongest first."""
    return tuple(t.label for t in registered())


def by_label(label: str) -> Tier:
    """The tier whose letter is ``label``; ValueError for another."""
    for tier in registered():
        if tier.label == label:
            return tier
    raise ValueError(f"min_isolation must be one of {', '.join(labels())}, got {label!r}")


def help_text() -> str:
    """The tiers as a command's help lists them: ``A bubblewrap; B Landlock, seccomp, own uid; ...``."""
    return "; ".join(f"{t.label} {t.mechanism}" for t in registered())


def choose(min_isolation: str = DEFAULT_MIN_ISOLATION, unsafe: bool = False) -> tuple[Tier | None, dict[str, str]]:
    """(the strongest tier that holds here, or None for plain processes; {letter: why that tier does not hold}).

    Stops at the first tier that holds. Raises ValueError for a letter no tier has and
    :class:`~mha_course.grading.walls.tier.IsolationError` when the tier found is weaker than ``min_isolation``
    (or none holds), unless ``unsafe``: then None (plain processes, as ``--unsafe-no-isolation`` says).
    """
    floor = by_label(min_isolation)
    refused: dict[str, str] = {}
    found = None
    for tier in registered():
        why = tier.why_not()
        if why is None:
            found = tier
            break
        refused[tier.label] = why
    if found is None or found.strength < floor.strength:
        if not unsafe:
            raise IsolationError(refusal(found.label if found else "", min_isolation, refused))
        if found is not None:
            refused[found.label] = f"weaker than --min-isolation {min_isolation}"
        return None, refused  # as the instructor asked: plain processes
    return found, refused


def refusal(found: str, min_tier: str, refused: dict[str, str]) -> str:
    """The sentence the grader exits with: what each stronger tier lacks here, and the instructor's choices.

    ``found`` is the letter of the tier that holds ("" for none), ``refused`` {letter: why not}.
    """
    titles = {t.label: t.title for t in registered()}
    reasons = "; ".join(f"{titles.get(label, f'tier {label}')}: {why}" for label, why in refused.items())
    have = f"only {titles[found]} holds" if found else "no tier holds"
    options = []
    if found and found != min_tier:
        options.append(f"accept {titles[found]} with --min-isolation {found}")
    options.append("run the grader as root on a Linux kernel with Landlock (>= 5.13)")
    options.append("or pass --unsafe-no-isolation to run submissions as plain processes (only for code you trust)")
    return (
        f"refusing to grade: {have}, and --min-isolation is {min_tier}. {reasons}. Submissions are untrusted code: "
        + ", ".join(options)
    )
