"""Fair fresh draws: the same function scores the same for every student, on every seed.

The grader runs each case on its published inputs and again on fresh inputs drawn with the student's
salt (mha_course/grading/engine/fresh_draws.py). These tests judge in this process, as the grader's
own process does (the case's call on the target, the wire's round trip, the case's judge): no sandbox.
That every catalogued bug loses the same cases on every draw, and the solutions pass every draw, on
these fresh inputs, is tests/grading/exercises/test_bug_catalogue.py's ``test_every_bug_loses_the_same_cases_on_every_draw``.
"""

from __future__ import annotations

import warnings

import pytest
from bug_catalogue import BUGS, mutated, targets

from mha_course.grading.classroom.seeds import student_seed
from mha_course.grading.engine import case_inputs, fresh_draws, mutations, registry
from mha_course.grading.engine.scoring import judge
from mha_course.grading.inside import wire

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # buggy softmaxes overflow on purpose

# Six students of one class (the class's seed and their ids give their salts, as in the grader). On the
# draws before validation, a04's attention without 1/sqrt(D) passed "large scores with a causal mask" on
# the published inputs and on the fresh inputs of every one of them but the fourth (measured: 14, 14, 14,
# 13, 14, 14 out of 26).
CLASS_SEED = 2026
STUDENTS = [f"student-{i}" for i in (10, 11, 12, 14, 15, 16)]
SALTS = [student_seed(CLASS_SEED, s) for s in STUDENTS]
EXERCISES = [(a.key, e) for a in registry.assignments() if not a.key.startswith("a13") for e in a.exercises]


def _old_fresh(case, salt):
    """The fresh inputs before validation: the first draw with the salt, whatever it judges."""
    with case_inputs.salted(salt):
        return case.make_inputs()


def _passes(case, target, inputs) -> bool:
    """The grader's verdict of ``target`` on ``inputs``, judged here (a raising target fails)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = wire.roundtrip(case.call(target, inputs))
    except Exception:
        return False
    return judge(case, got, inputs) is None


def _score(assignment, namespace, salt, fresh=fresh_draws.fresh_inputs) -> float:
    """The grader's score: a case earns its points if it passes the published inputs and the fresh ones."""
    total = 0.0
    for exercise in assignment.exercises:
        target = namespace[exercise.target]
        for case in exercise.cases:
            published = fresh_draws.draw(case, None)
            if _passes(case, target, published) and _passes(case, target, fresh(case, salt)):
                total += case.points
    return total


def test_derived_salts_start_with_the_salt_and_differ():
    assert fresh_draws.derived_salt(123, 0) == 123
    salts = [fresh_draws.derived_salt(123, i) for i in range(fresh_draws.ATTEMPTS)]
    assert len(set(salts)) == len(salts) and all(0 <= s < 2**31 for s in salts)
    assert salts == [fresh_draws.derived_salt(123, i) for i in range(fresh_draws.ATTEMPTS)]


@pytest.mark.slow
def test_every_mutation_applies_where_listed_and_is_a_bug():
    """Each mutation applies to some case of every exercise it lists, and loses a case somewhere."""
    known = {e.key for _, e in EXERCISES}
    for mutation in mutations.MUTATIONS:
        assert mutation.exercises <= known, f"{mutation.id}: unknown exercises {mutation.exercises - known}"
        fails = 0
        for key in mutation.exercises:
            exercise = registry.find_exercise(key)
            found = [fresh_draws.verdicts(c, (mutation,), fresh_draws.draw(c, None))[0] for c in exercise.cases]
            assert any(v is not None for v in found), f"{mutation.id} applies to no case of {key}"
            fails += sum(v is False for v in found)
        assert fails, f"{mutation.id} passes every case it applies to: not a bug"


def _agree_on_every_students_draw(case) -> None:
    """Per mutation, the verdict on each student's fresh inputs is the one on the published inputs."""
    applicable = fresh_draws.applicable_mutations(case)
    published = fresh_draws.published_verdicts(case, applicable)
    for salt in SALTS:
        fresh = fresh_draws.verdicts(case, applicable, fresh_draws.fresh_inputs(case, salt))
        changed = [m.id for m, a, b in zip(applicable, published, fresh, strict=True) if a != b]
        assert not changed, f"{case.name!r}, salt {salt}: {changed} judged otherwise than on the published inputs"


def test_mutations_get_the_published_verdicts_where_first_draws_disagreed():
    """a04's "large scores" case: three mutations pass its published inputs and often fail a first fresh draw."""
    case = next(c for c in registry.find_exercise("masked_sdpa").cases if c.name.startswith("large scores"))
    _agree_on_every_students_draw(case)


@pytest.mark.slow
@pytest.mark.parametrize("exercise", [e for _, e in EXERCISES], ids=[e.key for _, e in EXERCISES])
def test_every_mutation_gets_the_published_verdicts_on_every_students_draw(exercise):
    for case in exercise.cases:
        _agree_on_every_students_draw(case)


@pytest.mark.slow
def test_the_first_draw_is_kept_when_it_agrees():
    """Validation changes a draw only where it must: most cases keep the salt's own draw (as before)."""
    kept = total = 0
    for _, exercise in EXERCISES:
        for case in exercise.cases:
            total += 1
            kept += fresh_draws.chosen_salt(case, SALTS[0]) == SALTS[0]
    assert kept >= 0.95 * total, f"{kept} of {total} cases kept their first draw"


def test_a_disagreeing_draw_is_replaced_and_none_falls_back_to_the_published_inputs(monkeypatch):
    case = registry.find_exercise("masked_sdpa").cases[0]

    def choose(answers):
        """choose_salt(case, 99) where the published draw passes and attempt i passes iff answers[i]."""
        given = iter([True, *answers])
        monkeypatch.setattr(fresh_draws, "verdicts", lambda case, applicable, inputs: (next(given),))
        fresh_draws.clear_cache()
        try:
            return fresh_draws.choose_salt(case, 99)
        finally:
            fresh_draws.clear_cache()

    assert choose([True]) == 99  # the salt's own draw agrees: kept
    assert choose([False, False, True]) == fresh_draws.derived_salt(99, 2)
    assert choose([False] * fresh_draws.ATTEMPTS) is None  # none agrees: the published inputs


def _a04(bug_id):
    return targets(mutated(next(b for b in BUGS if b.id == bug_id)))


@pytest.mark.slow
def test_a04_without_scale_scored_unevenly_before_and_the_same_now():
    assignment = registry.get_assignment("a04_masks")
    buggy = _a04("mask_no_scale")
    before = [_score(assignment, buggy, s, fresh=_old_fresh) for s in SALTS]
    assert before == [14, 14, 14, 13, 14, 14]
    fresh_draws.clear_cache()
    after = [_score(assignment, buggy, s) for s in SALTS]
    assert after == [14] * 6
    # the solution keeps full marks on every student's draw
    solution = targets(_solution("a04_masks"))
    assert [_score(assignment, solution, s) for s in SALTS] == [assignment.max_points] * 6


def _solution(key):
    import nbformat
    from bug_catalogue import ROOT

    return nbformat.read(ROOT / "solutions" / f"{key}.ipynb", as_version=4)


def test_the_self_check_draws_the_graders_fresh_inputs():
    """A student's ``with salted(s): check(...)`` reproduces the grader's fresh inputs, validated draw included."""
    from mha_course.grading.learner import selfcheck

    exercise = registry.find_exercise("masked_sdpa")
    case = next(c for c in exercise.cases if c.name.startswith("large scores"))
    salt = SALTS[3]
    assert fresh_draws.chosen_salt(case, salt) != salt  # this draw was replaced
    with case_inputs.salted(salt):
        _, _, seen = selfcheck.run_case(case, lambda *a, **k: None)
    expected = fresh_draws.fresh_inputs(case, salt)
    assert wire.pack(seen) == wire.pack(expected)
