"""What a case is judged on: the random inputs it draws (published seeds, or salted so that memorised
answers are useless), and the "inputs unchanged" cases, compared bit for bit in the grader.

Runs in the grader and in the learner's own kernel (the self-check), never in the submission
process; exercise modules import it (``case_inputs.rng``, ``case_inputs.salted``, ``case_inputs.unchanged_case``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

# --- inputs (``make_inputs``, run in the grader) ----------------------------------------------------

_SALT: contextvars.ContextVar[int | None] = contextvars.ContextVar("mha_course_grading_salt", default=None)


def rng(seed: int) -> np.random.Generator:
    """The random generator a case draws its inputs from: ``default_rng(seed)``, or salted (see :func:`salted`).

    The self-check and the grader's first run of a case use the published seed; inside
    ``with salted(s):`` the same call draws different numbers of the same kind, which a submission
    that memorised the published (or the installed hidden) cases' answers cannot know.
    """
    salt = _SALT.get()
    return np.random.default_rng(seed if salt is None else [int(seed), int(salt)])


def salting() -> bool:
    """True inside :func:`salted`: a case with fixed inputs (sizes, hand-written logits) varies them then."""
    return _SALT.get() is not None


def current_salt() -> int | None:
    """The salt of the enclosing :func:`salted` block (None outside one)."""
    return _SALT.get()


@contextlib.contextmanager
def salted(salt: int | None) -> Iterator[None]:
    """Within the block (this thread only), :func:`rng` mixes ``salt`` into every seed."""
    token = _SALT.set(salt)
    try:
        yield
    finally:
        _SALT.reset(token)


# --- "inputs unchanged" cases (judged in the grader) -----------------------------------------------


def same_bits(got: Any, expected: Any) -> bool:
    """``got`` is ``expected`` bit for bit: both arrays, same shape, same dtype, same bytes (NaN matches NaN)."""
    if not isinstance(got, np.ndarray):
        return False
    expected = np.asarray(expected)
    return got.shape == expected.shape and got.dtype == expected.dtype and got.tobytes() == expected.tobytes()


def unchanged_case(
    reference: Callable[[Any], Any],
    diagnose: Callable[[Any, Any, Any], str | None],
    message: str,
    names: Sequence[str] | Callable[[Any], Sequence[np.ndarray]],
) -> tuple[Callable[[Any], Any], Callable[[Any, Any, Any], str | None]]:
    """(reference, diagnose) for a case whose ``call`` returns :func:`~mha_course.grading.inside.convert.with_inputs_after`'s pair.

    The call sends back (result, the objects it passed to the target, read after the call); whether
    they changed is decided here, in the grader, by comparing them bit for bit with what was sent:
    ``inputs[name]`` for each of ``names``, or the arrays ``names(inputs)`` returns when the watched
    objects are not plain inputs (e.g. the weights of a module built from them). The case passes
    only if nothing changed (else ``message``) *and* the result is right, so a function that returns
    nothing useful earns nothing here.
    """

    def before(inputs: Any) -> tuple[np.ndarray, ...]:
        if callable(names):
            return tuple(np.asarray(a) for a in names(inputs))
        return tuple(np.asarray(inputs[n]) for n in names)

    def ref(inputs: Any) -> tuple[Any, tuple[np.ndarray, ...]]:
        return reference(inputs), before(inputs)

    def judge(got: Any, expected: Any, inputs: Any) -> str | None:
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return f"expected (result, inputs after the call), got {type(got).__name__}"
        after, sent = got[1], expected[1]
        if not isinstance(after, (tuple, list)) or len(after) != len(sent):
            return message
        if not all(same_bits(a, b) for a, b in zip(after, sent, strict=True)):
            return message
        hint = diagnose(got[0], expected[0], inputs)
        return f"the inputs are left unchanged, but the result is wrong: {hint}" if hint else None

    return ref, judge
