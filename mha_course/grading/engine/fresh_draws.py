"""A case's fresh inputs (its second run under a salt), drawn so that plausible bugs are judged as on the published ones.

The grader runs each case a second time on numbers drawn with a salt (:func:`.case_inputs.salted`;
each student's salt comes from the class's seed, :func:`~mha_course.grading.classroom.seeds.student_seed`).
A draw can happen to hide a bug (large scores make attention one-hot with or without 1/sqrt(D)) or
to expose one the published inputs let pass: two students with the same function would then get
different grades. So a draw is kept only if every generic mutation (:mod:`.mutations`) that applies
to the case gets the verdict on it that it gets on the published inputs (judged here, with the
case's own judge). The draws of salts ``derived_salt(salt, 0)`` (the salt itself), ``(salt, 1)``, ...
are tried in order and the first that agrees is used; after :data:`ATTEMPTS` the published inputs
are (the second run then adds nothing). Deterministic: the grader and the learner's ``check()``
inside ``salted(salt)`` draw the same inputs.

Cost: the verdicts on the published inputs once per case and process; per salt, one reference
and the applicable mutations' outputs and judgements per attempt (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..spec import Case, Inputs
from . import case_inputs, mutations, registry
from .scoring import judge

ATTEMPTS = 16
_CACHE_LIMIT = 100_000  # entries; cleared when full (a class of 1000 students x 100 cases fits)

_lock = threading.Lock()
_published: dict[Case, tuple[bool | None, ...]] = {}
_chosen: dict[tuple[Case, int], int | None] = {}  # (case, salt) -> the salt drawn with, None: published


def derived_salt(salt: int, attempt: int) -> int:
    """The salt of attempt ``attempt`` (0: ``salt`` itself; else 31 bits of a hash of both)."""
    if attempt == 0:
        return salt
    digest = hashlib.sha256(f"{salt}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def draw(case: Case, salt: int | None) -> Inputs:
    """``case.make_inputs()`` with ``salt`` (None: the published inputs)."""
    with case_inputs.salted(salt):
        return case.make_inputs()


def inputs(case: Case) -> Inputs:
    """The inputs ``case`` is run on here: published, or inside ``salted(s)`` :func:`fresh_inputs` for ``s``."""
    salt = case_inputs.current_salt()
    return draw(case, None) if salt is None else fresh_inputs(case, salt)


def fresh_inputs(case: Case, salt: int) -> Inputs:
    """The fresh inputs of ``case`` under ``salt``: the first draw on which every mutation's verdict is the published one."""
    key = (case, salt)
    with _lock:
        known = key in _chosen
        chosen = _chosen.get(key)
    if not known:
        chosen = choose_salt(case, salt)
        with _lock:
            if len(_chosen) >= _CACHE_LIMIT:
                _chosen.clear()
            _chosen[key] = chosen
    return draw(case, chosen)


def choose_salt(case: Case, salt: int) -> int | None:
    """The salt of the first agreeing draw among :data:`ATTEMPTS`, or None (the published inputs)."""
    applicable = applicable_mutations(case)
    if not applicable:
        return salt
    published = published_verdicts(case, applicable)
    if all(v is None for v in published):
        return salt
    for attempt in range(ATTEMPTS):
        candidate = derived_salt(salt, attempt)
        if verdicts(case, applicable, draw(case, candidate)) == published:
            return candidate
    return None


def published_verdicts(case: Case, applicable: tuple[mutations.Mutation, ...]) -> tuple[bool | None, ...]:
    with _lock:
        found = _published.get(case)
    if found is None:
        found = verdicts(case, applicable, draw(case, None))
        with _lock:
            _published[case] = found
    return found


def verdicts(case: Case, applicable: tuple[mutations.Mutation, ...], given: Inputs) -> tuple[bool | None, ...]:
    """Per mutation: does its output pass ``case`` on ``given`` (None: it does not apply to these inputs)?

    A mutation whose output raises fails, as a submission that raises does.
    """
    try:
        expected = case.reference(given)
    except Exception:
        return tuple(None for _ in applicable)  # the reference's own failure: judged as "internal error" anyway
    found: list[bool | None] = []
    for mutation in applicable:
        try:
            with np.errstate(all="ignore"):  # buggy softmaxes overflow on purpose
                got = mutation.output(case.reference, given, expected)
                found.append(None if got is None else judge(case, got, given, expected=expected) is None)
        except Exception:
            found.append(False)
    return tuple(found)


def applicable_mutations(case: Case) -> tuple[mutations.Mutation, ...]:
    """The mutations of the exercise ``case`` belongs to (found in the registry by its input maker)."""
    return mutations.for_exercise(_exercise_key(case) or "")


def _exercise_key(case: Case) -> str | None:
    for assignment in registry.assignments():
        for exercise in assignment.exercises:
            for known in exercise.cases:
                if known.make_inputs is case.make_inputs and known.name == case.name:
                    return exercise.key
    return None


def clear_cache() -> None:
    """Forget every verdict and choice (tests; a grader that reloads its exercises)."""
    with _lock:
        _published.clear()
        _chosen.clear()


def chosen_salt(case: Case, salt: int) -> int | None:
    """The salt the fresh inputs of ``case`` under ``salt`` are drawn with (None: the published inputs)."""
    fresh_inputs(case, salt)
    with _lock:
        return _chosen.get((case, salt))
