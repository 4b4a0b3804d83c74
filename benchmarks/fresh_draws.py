"""Do students with the same bug get the same score? Scores over six students' fresh draws, before and after validation.

For catalogued bugs (tests/grading/bug_catalogue/, by id) and generic mutations
(mha_course/grading/engine/mutations.py, as ``exercise:mutation``), the grader's score of one assignment
(a case earns its points if it passes the published inputs and the student's fresh ones), judged in
this process: "before" draws the fresh inputs with the student's salt alone, "after" validates the
draw (mha_course/grading/engine/fresh_draws.py). Then the cost of validation: CPU seconds per
submission (every case of the assignment, one new salt per submission) and per class of 30.

    OMP_NUM_THREADS=1 python benchmarks/fresh_draws.py mask_no_scale attn_np_no_scale masked_sdpa:missing_scale

(OMP_NUM_THREADS=1: otherwise torch's idle threads, spinning, are counted as the work's CPU time.)
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "grading"))

from mha_course.grading.classroom.seeds import student_seed  # noqa: E402
from mha_course.grading.engine import case_inputs, fresh_draws, mutations, registry  # noqa: E402
from mha_course.grading.engine.scoring import judge  # noqa: E402
from mha_course.grading.inside import wire  # noqa: E402


def _old(case, salt):
    with case_inputs.salted(salt):
        return case.make_inputs()


def _target_verdict(namespace):
    def passes(exercise, case, inputs):
        try:
            got = wire.roundtrip(case.call(namespace[exercise.target], inputs))
        except Exception:
            return False
        return judge(case, got, inputs) is None

    return passes


def _mutation_verdict(mutation):
    def passes(exercise, case, inputs):
        found = fresh_draws.verdicts(case, (mutation,), inputs)[0]
        return True if found is None else found  # not applicable here: as right as the reference

    return passes


def score(assignment, passes, salt, fresh, only=None) -> float:
    total = 0.0
    for exercise in assignment.exercises:
        if only is not None and exercise.key != only:
            total += exercise.max_points  # the other exercises: right (the mutation is of this one)
            continue
        for case in exercise.cases:
            if passes(exercise, case, fresh_draws.draw(case, None)) and passes(exercise, case, fresh(case, salt)):
                total += case.points
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="+", help="catalogued bug ids, or exercise:mutation")
    parser.add_argument("--class-seed", type=int, default=2026)
    parser.add_argument("--students", type=int, default=6)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from bug_catalogue import BUGS
    from bug_catalogue import mutated as _mutated
    from bug_catalogue import targets as _targets

    salts = [student_seed(args.class_seed, f"student-{i}") for i in range(args.students)]
    print(f"class seed {args.class_seed}, students student-0 .. student-{args.students - 1}")
    timed = set()
    for what in args.what:
        if ":" in what:
            key, mid = what.split(":")
            exercise = registry.find_exercise(key)
            assignment = next(a for a in registry.assignments() if exercise in a.exercises)
            passes, only = _mutation_verdict(next(m for m in mutations.MUTATIONS if m.id == mid)), key
        else:
            bug = next(b for b in BUGS if b.id == what)
            assignment = registry.get_assignment(bug.notebook)
            passes, only = _target_verdict(_targets(_mutated(bug))), None
        before = [score(assignment, passes, s, _old, only) for s in salts]
        after = [score(assignment, passes, s, fresh_draws.fresh_inputs, only) for s in salts]
        print(f"{what} ({assignment.key}, of {assignment.max_points:g}): before {before} after {after}")
        timed.add(assignment.key)
    for key in sorted(timed):
        assignment = registry.get_assignment(key)
        cases = [c for e in assignment.exercises for c in e.cases]
        fresh_draws.clear_cache()
        start = time.process_time()
        for c in cases:  # the published verdicts: once per case and grader process
            fresh_draws.published_verdicts(c, fresh_draws.applicable_mutations(c))
        once = time.process_time() - start
        per, attempts, published = [], [], 0
        for i in range(30):
            salt = student_seed(args.class_seed + 1, f"class-{i}")
            start = time.process_time()
            for c in cases:
                fresh_draws.fresh_inputs(c, salt)
            per.append(time.process_time() - start)
            for c in cases:
                chosen = fresh_draws.chosen_salt(c, salt)
                derived = [fresh_draws.derived_salt(salt, a) for a in range(fresh_draws.ATTEMPTS)]
                published += chosen is None
                attempts += [derived.index(chosen)] if chosen is not None else []
        print(
            f"{key}: validation CPU {once:.2f} s once per grader process, then {sorted(per)[15] * 1000:.0f} ms "
            f"median per submission ({max(per) * 1000:.0f} ms max); class of 30: {once + sum(per):.1f} s; "
            f"{len(cases)} cases x 30 salts: {sum(a > 0 for a in attempts)} draws replaced (attempt <= "
            f"{max(attempts) if attempts else 0}), {published} on the published inputs"
        )


if __name__ == "__main__":
    main()
