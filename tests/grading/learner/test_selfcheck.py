"""The self-check in the learner's kernel (``check``) on the fake assignment (grading_fake.py): its table, its
hints naming the cell and line, hidden cases left out, a no-op while grading, subclasses and forbidden calls refused.

(From test_grading_engine.py before the tests mirrored the package.)
"""

from __future__ import annotations

import pytest

from mha_course.grading.engine import registry
from mha_course.grading.learner import selfcheck


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def test_check_table_hints_and_no_op_in_grader(fake, capsys):
    def add_arrays(a, b):
        return a + b

    result = selfcheck.check("fake_add", add_arrays)
    assert result.score == result.max_score == 3 and len(result.rows) == 2  # the hidden case is not run
    assert "PASS" in capsys.readouterr().out
    assert selfcheck.check("fake_add", add_arrays, include_hidden=True).max_score == 4

    def transposed(a, b):
        return (a + b).T

    rows = selfcheck.check("fake_add", transposed, show=False).rows
    assert not rows[0].passed and "shape expected (3, 4), got (4, 3)" in rows[0].hint

    def todo(a, b):
        raise NotImplementedError()

    assert {r.status for r in selfcheck.check("fake_add", todo, show=False).rows} == {"not attempted"}

    def broken(a, b):
        return a + b + undefined_name  # noqa: F821

    hint = selfcheck.check("fake_add", broken, show=False).rows[0].hint
    assert hint.startswith("NameError: name 'undefined_name' is not defined (test_selfcheck.py, line ")
    assert hint.endswith(") -> define it, or run the cell that defines it, before check()")
    assert "<table>" in selfcheck.check("fake_add", add_arrays, show=False)._repr_html_()

    selfcheck.GRADING = True
    try:
        assert selfcheck.check("fake_add", add_arrays) is None
    finally:
        selfcheck.GRADING = False
    with pytest.raises(KeyError, match="unknown exercise"):
        selfcheck.check("no_such_exercise", add_arrays)


def test_check_rejects_subclasses_and_forbidden_calls(fake):
    import torch

    class Lying(torch.Tensor):
        def __eq__(self, other):
            return True

    def lying(x):
        return (2 * x).as_subclass(Lying)

    assert "subclass of torch.Tensor" in selfcheck.check("fake_double", lying, show=False).rows[0].hint

    def via_softmax(x):
        return 2 * x + 0 * torch.softmax(x, 0)

    row = selfcheck.check("fake_double", via_softmax, show=False).rows[0]
    assert not row.passed and "torch.softmax" in row.hint and "write it yourself" in row.hint
