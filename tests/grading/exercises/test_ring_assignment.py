"""Assignment a15 (merging partial attention, one ring step): cases, references, salts and hints.

The library's ``merge_partial_attention`` and ``ring_step`` must get full marks on the published
inputs and on fresh (salted) ones, an unattempted stub nothing, and typical slips the hint that
names them. The bug catalogue (``test_bug_catalogue.py``) runs the solution notebook's own edits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mha_course.grading.engine import case_inputs, registry
from mha_course.grading.engine.scoring import judge
from mha_course.grading.inside import wire
from mha_course.grading.learner import selfcheck
from mha_course.parallel.merge import merge_partial_attention
from mha_course.parallel.ring import ring_step

ASSIGNMENT = registry.get_assignment("a15_ring_attention")
LIBRARY = {"merge_partial_attention": merge_partial_attention, "ring_step": ring_step}
CASES = [pytest.param(e, c, id=f"{e.key}:{c.name}") for e in ASSIGNMENT.exercises for c in e.cases]


@pytest.mark.parametrize(("exercise", "case"), CASES)
def test_reference_passes_its_own_diagnosis_on_fresh_inputs_too(exercise, case):
    for salt in (None, 1, 2, 3):
        with case_inputs.salted(salt):
            inputs = case.make_inputs()
        assert all(v is None or isinstance(v, (np.ndarray, int, float, str, bool)) for v in inputs.values())
        assert judge(case, wire.roundtrip(case.reference(inputs)), inputs) is None, (case.name, salt)
        got = case.call(LIBRARY[exercise.target], inputs)  # the library through the sandbox's own call
        assert judge(case, wire.roundtrip(got), inputs) is None, (case.name, salt)


def test_library_gets_full_marks_and_a_stub_nothing():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    for exercise in ASSIGNMENT.exercises:
        assert any(c.hidden for c in exercise.cases) and any(not c.hidden for c in exercise.cases)
        result, _ = selfcheck.run_exercise(exercise, LIBRARY[exercise.key], include_hidden=True)
        assert result.score == exercise.max_points, [(r.case, r.hint) for r in result.rows if not r.passed]
        assert selfcheck.check(exercise.key, stub, include_hidden=True, show=False).score == 0
    assert ASSIGNMENT.max_points == 22


def _hints(key, target):
    from mha_course.grading.engine.registry import find_exercise

    # the bugs wrap the library's own code: judged by the cases alone (check() would first say the grader refuses it)
    result, _ = selfcheck.run_exercise(find_exercise(key), target, include_hidden=True)
    assert result.score < result.max_score
    return " | ".join(r.hint for r in result.rows if not r.passed)


def test_hint_for_an_average_and_for_nan_rows():
    def average(outs, lses):
        return torch.stack(outs).mean(0), torch.logsumexp(torch.stack(lses), 0)

    def nan_rows(outs, lses):
        lse = torch.logsumexp(torch.stack(lses), 0)
        return (torch.exp(torch.stack(lses) - lse).unsqueeze(-1) * torch.stack(outs)).sum(0), lse

    assert "averaged" in _hints("merge_partial_attention", average)
    assert "gives NaN" in _hints("merge_partial_attention", nan_rows)


def test_hint_for_a_mask_in_local_positions():
    def local(q, k, v, out, lse, q_offset, k_offset, causal=False):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        lse_b = torch.logsumexp(s, -1)
        out_b = torch.exp(s - torch.where(torch.isneginf(lse_b), 0.0, lse_b).unsqueeze(-1)) @ v
        return merge_partial_attention([out, out_b], [lse, lse_b])

    assert "global positions" in _hints("ring_step", local)
