"""Judging one case: the expected output, the exercise's diagnosis, and the engine's safety nets.

Shared by the self-check (learner's kernel) and the grader (its own trusted process), so both
give the same verdict and the same hint. ``got`` is always plain data (what :mod:`mha_course.grading.inside.wire` lets
through), never the learner's objects.

    expected = case.reference(inputs)
    hint     = case.diagnose(got, expected, inputs)        # None = passed
    if passed and case.exact_shape:                        # safety net against lenient diagnoses
        same structure, same shapes, no NaN/inf where the reference is finite

A diagnosis or reference that raises is the course's fault, not the learner's: the case fails
with "internal grader error", so grading always finishes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..inside.convert import count_of, exception_line
from ..spec import Case


def _structure_hint(got: Any, expected: Any, where: str = "the output") -> str | None:
    if isinstance(expected, np.ndarray) or np.isscalar(expected) and not isinstance(expected, str):
        exp = np.asarray(expected)
        if isinstance(got, (tuple, list, dict)) or got is None or isinstance(got, str):
            return f"{where}: expected an array of shape {exp.shape}, got {type(got).__name__}"
        arr = np.asarray(got)
        if arr.shape != exp.shape:
            return f"{where}: shape expected {exp.shape}, got {arr.shape}"
        if arr.dtype.kind in "fc" and exp.dtype.kind in "biufc":
            bad = ~np.isfinite(arr) & np.isfinite(exp)
            if bad.any():
                return f"{where}: NaN or inf where the expected values are finite"
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"{where}: expected {len(expected)} values, got {count_of(got)}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            hint = _structure_hint(g, e, f"{where}[{i}]")
            if hint:
                return hint
    return None


_UNSET: Any = object()


def judge(case: Case, got: Any, inputs: dict, *, expected: Any = _UNSET) -> str | None:
    """None if ``got`` passes ``case``, else a one-line hint for the learner.

    ``expected``: ``case.reference(inputs)`` when the caller has it already (it judges many outputs).
    """
    try:
        if expected is _UNSET:
            expected = case.reference(inputs)
        hint = case.diagnose(got, expected, inputs)
    except Exception as exc:  # a bug in the checker must not abort grading
        return f"internal grader error while checking this case (tell your instructor): {exception_line(exc)}"
    if hint is None and case.exact_shape:
        try:
            hint = _structure_hint(got, expected)
        except Exception as exc:
            hint = f"internal grader error while checking the output's shape: {exception_line(exc)}"
    return hint
