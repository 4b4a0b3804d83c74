"""The registry: every assignment the grader and the self-check know about.

Each module in :mod:`mha_course.grading.exercises` defines ``ASSIGNMENT`` (see
:mod:`mha_course.grading.spec`); :func:`assignments` imports them all (``pkgutil``) the first time
it is asked, so adding an assignment means adding one module and touching no shared file.

A module that fails to import does not take the others down: it is left out and its error is
listed by :func:`discovery_errors` (a test asserts there are none). Exercise keys must be unique
across assignments; :func:`find_exercise` raises if one is ambiguous.

Tests (and instructors trying an exercise out) can add a module from elsewhere with
:func:`register` / :func:`registered`; the grader's submission process imports the assignment's
module by name (:func:`module_name`), so a registered module must be importable there too.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

from ..spec import Assignment, Exercise
from .notebook import AssignmentMeta, current_key, metadata

_PACKAGE = "mha_course.grading.exercises"

_discovered: dict[str, tuple[Assignment, str]] | None = None  # key -> (assignment, module name)
_extra: dict[str, tuple[Assignment, str]] = {}
_errors: dict[str, str] = {}


def _discover() -> dict[str, tuple[Assignment, str]]:
    global _discovered
    if _discovered is None:
        found: dict[str, tuple[Assignment, str]] = {}
        package = importlib.import_module(_PACKAGE)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            name = f"{_PACKAGE}.{info.name}"
            try:
                assignment = getattr(importlib.import_module(name), "ASSIGNMENT", None)
            except Exception as exc:  # a broken module must not hide the others
                _errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            if isinstance(assignment, Assignment):
                found[assignment.key] = (assignment, name)
        _discovered = found
    return {**_discovered, **_extra}


def assignments() -> list[Assignment]:
    """Every known assignment, sorted by key."""
    return [a for _, (a, _m) in sorted(_discover().items())]


def discovery_errors() -> dict[str, str]:
    """Exercise modules that failed to import: module name -> error line."""
    _discover()
    return dict(_errors)


def get_assignment(key: str) -> Assignment:
    """The assignment with this key; raises KeyError listing the known keys."""
    found = _discover().get(current_key(key))
    if found is None:
        raise KeyError(f"unknown assignment {key!r}; known: {', '.join(sorted(_discover())) or 'none'}")
    return found[0]


def module_name(assignment_key: str) -> str:
    """Dotted name of the module that defines the assignment (imported by the submission process)."""
    get_assignment(assignment_key)
    return _discover()[current_key(assignment_key)][1]


def find_exercise(key: str, assignment: str | None = None) -> Exercise:
    """The exercise with this key (e.g. ``"softmax"``), optionally within one assignment.

    Raises KeyError for an unknown key (listing the known ones) or one defined by two assignments.
    """
    pool = [get_assignment(assignment)] if assignment else assignments()
    matches = [e for a in pool for e in a.exercises if e.key == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise KeyError(f"exercise key {key!r} is defined by more than one assignment; pass assignment=...")
    known = sorted(e.key for a in pool for e in a.exercises)
    raise KeyError(f"unknown exercise {key!r}; known: {', '.join(known) or 'none'}")


def identify(nb: Any) -> Assignment:
    """The assignment a notebook belongs to, from its metadata (never from its file name).

    Raises LookupError when the notebook has no ``metadata["mha_course"]`` or names an unknown assignment.
    """
    return assignment_for(metadata(nb))


def assignment_for(meta: AssignmentMeta | None) -> Assignment:
    """The assignment a notebook's metadata (:func:`.notebook.metadata`, read once) names.

    Raises LookupError when there is none (None) or it names an unknown assignment.
    """
    if meta is None:
        raise LookupError(
            "this notebook has no mha_course metadata (metadata['mha_course']['assignment']); "
            "was it created from the course's exercises/ folder?"
        )
    try:
        return get_assignment(meta.assignment)
    except KeyError as exc:
        raise LookupError(str(exc.args[0])) from None


def register(module: str) -> Assignment:
    """Add the ``ASSIGNMENT`` of an importable module (dotted name); returns it."""
    assignment = importlib.import_module(module).ASSIGNMENT
    if not isinstance(assignment, Assignment):
        raise TypeError(f"{module}.ASSIGNMENT should be an Assignment, got {type(assignment).__name__}")
    _extra[assignment.key] = (assignment, module)
    return assignment


def unregister(key: str) -> None:
    """Remove an assignment added with :func:`register` (no error if absent)."""
    _extra.pop(key, None)


@contextlib.contextmanager
def registered(module: str) -> Iterator[Assignment]:
    """``with registered("my_module") as assignment:`` -- register for the block only."""
    assignment = register(module)
    try:
        yield assignment
    finally:
        unregister(assignment.key)
