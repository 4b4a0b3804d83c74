"""Errors the learner's code raised, turned into advice: a matrix product whose inner sizes differ, a
broadcast that fails (``keepdims`` forgotten, T used where S belongs).

Used by the self-check and the grader alike; the error arrives as one line of text.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np


def exception_hint(error: str, inputs: Any = None) -> str | None:
    """Advice for a common error line (``"RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."``).

    Recognises: a matrix product whose inner sizes differ (``k.T`` on batched input reverses every axis;
    a missing transpose as in ``dK = dS @ Q``), a broadcasting mismatch (``keepdims`` forgotten, or T
    used where S belongs, named with the case's own sizes when ``inputs`` has q and k). None if nothing fits.
    """
    text = str(error)
    sizes = _query_key_lengths(inputs)
    if re.search(
        r"shapes cannot be multiplied|size mismatch|mismatch in its core dimension|matmul: Input operand", text
    ):
        return (
            "the inner sizes of a matrix product do not match: did you forget a transpose? On batched "
            "tensors swap only the last two axes (k.T reverses *every* axis), and check which side of each "
            "product is (T, .) and which (S, .)"
        )
    match = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text) or re.search(
        r"could not be broadcast together with shapes \(([\d, ]*)\) \(([\d, ]*)\)", text
    )
    if match:
        a, b = match.group(1), match.group(2)
        if sizes and {a.strip(), b.strip()} == {str(sizes[0]), str(sizes[1])} and sizes[0] != sizes[1]:
            return (
                f"a size {sizes[0]} met a size {sizes[1]}: here T = {sizes[0]} queries and S = {sizes[1]} keys; "
                "check that every axis you use has the length you mean (scores are (T, S))"
            )
        return (
            "shapes do not broadcast: did a sum or a max drop the reduced axis (look at keepdims, keepdim in "
            "torch), which must stay as size 1 to broadcast back? Or did you use .T on a batched tensor (it "
            "reverses every axis: swap only the last two axes)?"
        )
    return None


def _query_key_lengths(inputs: Any) -> tuple[int, int] | None:
    try:
        return int(np.shape(inputs["q"])[-2]), int(np.shape(inputs["k"])[-2])
    except (KeyError, TypeError, IndexError):
        return None


def with_exception_hint(error: str, inputs: Any = None) -> str:
    """``error`` followed by :func:`exception_hint`'s advice, when there is one."""
    hint = exception_hint(error, inputs)
    return f"{error} -> {hint}" if hint else error
