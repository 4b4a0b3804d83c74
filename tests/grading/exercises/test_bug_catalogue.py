"""The bug catalogue: realistic buggy implementations, injected into copies of the solution notebooks.

Each bug is a source edit of a solution notebook (old -> new, checked to apply), catalogued by assignment in
tests/grading/bug_catalogue/ (one module per exercise module of mha_course/grading/exercises/). Every bug must
lose points:

* all of them through the self-check logic in this process (fast: one exec per bug);
* a representative subset (``GRADED``) through the real grader, ``python -m mha_course.grading.grade``, in
  ONE invocation over a folder of them: on every case, hidden ones included, the grader's verdict is the
  self-check's (each bug fails exactly the cases it fails in the self-check and passes all the others in
  the same run: a lost point means the bug, not the run). That every solution gets full marks and every
  unedited exercise zero is checked by tests/notebooks/test_assign_sync.py, which grades all of them once.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bug_catalogue import BUGS, ROOT, mutated, targets

from mha_course.grading.engine import fresh_draws, registry
from mha_course.grading.learner import selfcheck

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # buggy softmaxes overflow on purpose


# Through the real grader: one bug per classic mistake the course's design names.
GRADED = {
    "scores_kqT",
    "scale_by_D",
    "scale_np_sqrt_dtype",
    "softmax_no_max",
    "softmax_axis0",
    "softmax_global_max",
    "softmax_inplace",
    "attn_np_wrong_order",
    "attn_np_transposed_weights",
    "sdpa_scale_ignored",
    "sdpa_only_square",
    "causal_upper",
    "causal_strict",
    "padding_wrong_axis",
    "mask_ignored",
    "mask_inverted",
    "mask_after_softmax",
    "mask_float_multiplied",
    "mask_minus_1e9",
    "split_no_transpose",
    "merge_wrong_transpose",
    "mha_no_out_proj",
    "mha_qk_swapped",
    "mha_value_from_key",
    "mha_no_bias",
    "mha_scale_sqrt_E",
    "debug_seed_unfixed",
    "debug_scale_per_head",
    "debug_kv_not_transposed",
    "debug_mask_inverted",
    "xmask_query_axis",
    "xmask_causal",
    "cross_no_mask",
    "ablate_one_feature",
    "ablate_after_out_proj",
    "ablate_no_bias",
    "ablate_zero_queries",
    "ablate_head_gate",
    "alibi_h_from_zero",
    "rope_inverse",
    "paged_no_table",
    "merge_average",
    "merge_nan_empty_rows",
    "ring_local_positions",
    "ring_no_merge",
    "gate_before_softmax",
    "delta_sign_plus",
    "topk_future",
    "chunk_shifted",
}


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """What lives before these tests (torch, the library) is frozen: the many collections while the bugs'
    notebooks run here walk only what those notebooks made."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def test_catalogue_is_large_and_edits_apply():
    assert len(BUGS) >= 15 and len({b.id for b in BUGS}) == len(BUGS)
    assert GRADED <= {b.id for b in BUGS}
    for bug in BUGS:
        mutated(bug)


@functools.cache
def _self_check(bug_id: str) -> tuple[float, dict[str, bool]]:
    """(score, {"exercise: case": passed}) of the bug's notebook in the self-check, hidden cases included.

    Kept per process: the grader's test compares its verdicts with these (plain data, computed once)."""
    bug = next(b for b in BUGS if b.id == bug_id)
    assignment = registry.get_assignment(bug.notebook)
    namespace = targets(mutated(bug))
    score, verdicts = 0.0, {}
    for exercise in assignment.exercises:
        target = namespace.get(exercise.target)
        if target is None:
            verdicts.update({f"{exercise.key}: {case.name}": False for case in exercise.cases})
            continue
        result = selfcheck.check(exercise.key, target, include_hidden=True, show=False)
        score += result.score
        verdicts.update({f"{exercise.key}: {row.case}": row.passed for row in result.rows})
    return score, verdicts


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.id)
def test_every_bug_loses_points_in_the_self_check(bug):
    score, _ = _self_check(bug.id)
    assert score < registry.get_assignment(bug.notebook).max_points, f"{bug.id} ({bug.what}) got full marks"


#: The grader's --seed for the fresh inputs: fixed, so a failure can be replayed (the draws test below
#: checks that each bug fails the same cases on other draws).
SEED = 20240611


@pytest.mark.slow
def test_grader_catches_bugs_exactly_as_the_self_check_does(tmp_path):
    from grading_fake import require_sandbox

    require_sandbox()
    submissions, out = tmp_path / "submissions", tmp_path / "each"
    submissions.mkdir()
    graded = [bug for bug in BUGS if bug.id in GRADED]
    for bug in graded:
        nbformat.write(mutated(bug), submissions / f"bug__{bug.id}.ipynb")
    files = sorted(str(p) for p in submissions.glob("*.ipynb"))
    argv = [sys.executable, "-m", "mha_course.grading.grade", *files, "--results-dir", str(out), "--quiet"]
    done = subprocess.run([*argv, "--seed", str(SEED)], cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in out.glob("*.results.json"))
    }
    assert sorted(each) == sorted(f"bug__{bug.id}" for bug in graded)
    problems = []
    for bug in graded:
        data = each[f"bug__{bug.id}"]
        top = data["extra_data"]["max_score"]
        if not (top > 0 and data["score"] < top):
            problems.append(f"{bug.id}: {data['score']}/{top}, expected to lose points")
        grader = {t["name"]: t["status"] == "passed" for t in data["tests"]}
        _, check = _self_check(bug.id)
        differ = sorted(name for name in set(grader) | set(check) if grader.get(name) != check.get(name))
        if differ:
            problems.append(f"{bug.id}: the grader and the self-check disagree on {differ} ({data['output'][:300]})")
    assert problems == []


# Fresh draws per bug: a regrade draws new inputs, and a bug must lose the same points on each. CI takes 6
# (about a minute on 2 cores); `MHA_COURSE_BUG_DRAWS=50 pytest -k same_cases` is the full check (RESULTS.md).
DRAWS = int(os.environ.get("MHA_COURSE_BUG_DRAWS", "6"))


def _draw_verdicts(assignment, namespace, salts, expected_cache):
    """(exercise, case) -> the salts on which ``namespace``'s targets pass it, on the grader's fresh inputs
    (:func:`~mha_course.grading.engine.fresh_draws.fresh_inputs`; the reference computed once per draw)."""
    import dataclasses

    passed: dict[tuple[str, str], list] = {}
    for exercise in assignment.exercises:
        target = namespace.get(exercise.target)
        if target is None:
            continue
        for case in exercise.cases:
            for salt in salts:
                key = (exercise.key, case.name, salt)
                inputs = fresh_draws.fresh_inputs(case, salt)

                def reference(inputs, key=key, compute=case.reference):
                    if key not in expected_cache:
                        expected_cache[key] = compute(inputs)
                    return expected_cache[key]

                row, _, _ = selfcheck.run_case(dataclasses.replace(case, reference=reference), target, inputs=inputs)
                if row.passed:
                    passed.setdefault((exercise.key, case.name), []).append(salt)
    return passed


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted({b.notebook for b in BUGS}))
def test_every_bug_loses_the_same_cases_on_every_draw(key):
    """A grade is a promise: a catalogued bug fails each case it fails on every one of DRAWS fresh draws
    (regrades, and students given different inputs, get the same score), and the solution passes every draw."""
    assignment = registry.get_assignment(key)
    salts = list(range(1, DRAWS + 1))
    cache: dict = {}
    solution = targets(nbformat.read(ROOT / "solutions" / f"{key}.ipynb", as_version=4))
    everything = {(e.key, c.name) for e in assignment.exercises for c in e.cases}
    solved = _draw_verdicts(assignment, solution, salts, cache)
    unsteady = {case: len(s) for case, s in solved.items() if len(s) != len(salts)}
    assert set(solved) == everything and not unsteady, f"the solution fails some draws: {unsteady}"
    for bug in (b for b in BUGS if b.notebook == key):
        verdicts = _draw_verdicts(assignment, targets(mutated(bug)), salts, cache)
        lucky = {case: f"{len(s)}/{len(salts)} draws" for case, s in verdicts.items() if len(s) != len(salts)}
        assert not lucky, f"{bug.id} ({bug.what}) passes these cases on some draws only: {lucky}"
