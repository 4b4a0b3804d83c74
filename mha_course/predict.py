"""Predict, then run: checks that say right or wrong without giving the answer away.

Every chapter asks the learner to predict before it shows. The rule the notebooks follow:

* a code cell tagged ``prediction`` sets each prediction to ``None``; the learner fills it in;
* :func:`check_prediction` compares a prediction with a value the notebook itself measured or
  computed (the experiment runs *after* the prediction, so its output is the reveal);
* :func:`check_choice` compares a conceptual answer with a salted digest made by
  :func:`answer_digest`, so the answer is not readable in the notebook's source;
* :func:`check_exercise` runs a "write it yourself" function (shipped raising
  ``NotImplementedError``) against the library's, and says "write it first" until it is written;
* the answers, with their reasons, sit in one collapsed markdown cell at the end of the notebook
  (tag ``answers``), one ``name: answer`` line each, which :func:`parse_answers` reads.

While a prediction is still ``None`` a check prints "make your prediction first" and returns
False without raising, so a notebook still runs top to bottom. A wrong prediction gets a hint of
what kind of mistake it is, never the value, nor a step that turns it into the value: "wrong sign",
"too large by a whole factor (2 to 16)", "too large by a power of ten", "about 2 orders of magnitude
too small", per entry for a shape or a list. An exact factor ("4 times too large"), the size alone
("right size, wrong sign") or "the right numbers in the wrong order" would let the learner divide,
negate or reorder their way to the answer without the idea.

A check returns a :class:`Verdict`, true when right: ``if check_exercise(...):`` reads as before, and a
check on a cell's last line shows nothing more than its message (a bare ``False`` under each check
cell told the learner nothing). Each verdict is also recorded in the learner's progress file
(:mod:`mha_course.tracking`; ``mha_course.progress()`` lists it); recording never raises.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

# Part of every digest, so that a table of sha256("GRU") does not read the notebooks' answers.
_SALT = "mha_course/predict/v1"
_DIGEST = re.compile(r"[0-9a-f]{16}")
# Ratios recognised as "off by a whole factor": the slips people make with halves, heads and powers of 2.
# The message names the range, never the factor, so dividing by it is not a way to the answer.
_FACTORS = range(2, 17)
_POWERS_OF_TEN = range(1, 13)


class Verdict(int):
    """A check's verdict: true when right, false otherwise (``if check_prediction(...):`` works).

    In Jupyter it shows nothing when it is a cell's last value (the check has printed its message);
    elsewhere it reads ``True`` or ``False``. ``Verdict(True) == True`` and ``sum(verdicts)`` counts the
    right ones; only ``is True`` differs from a bool.
    """

    def __new__(cls, right: Any) -> Verdict:
        return super().__new__(cls, bool(right))

    def __repr__(self) -> str:
        return "True" if self else "False"

    __str__ = __repr__

    def _ipython_display_(self) -> None:
        """Nothing: the check's printed message is the verdict the learner reads."""


def _verdict(name: str, right: bool, verdict: str | None = None) -> Verdict:
    """``right`` as a :class:`Verdict`, recorded in the progress file (never raising) under ``name``."""
    try:
        from .tracking.record import RIGHT, WRONG, record_check

        record_check(name, verdict or (RIGHT if right else WRONG))
    except Exception:  # a package without tracking/ (the grader's view of it), or anything else: no record
        pass
    return Verdict(right)


_NOT_YET = "not yet"


def _require_name(name: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"name must be the prediction's variable name (an identifier str), got {name!r}")


def normalise_answer(answer: Any) -> str:
    """The canonical text of a conceptual answer, as :func:`answer_digest` hashes it.

    Case, surrounding quotes or backticks, and spacing do not matter: ``"GRU"``, ``'gru'`` and
    ``GRU`` are one answer, and so are ``(2, 3)`` and the text ``"(2,3)"``, ``{"a", "b"}`` and
    the text ``{'b', 'a'}``. Booleans become ``true``/``false``, integers (and integral floats)
    their decimal digits.

    Raises:
        TypeError: ``answer`` is not a str, bool, int, float or a tuple/list/set of them.
    """
    if isinstance(answer, bool):
        return "true" if answer else "false"
    if isinstance(answer, (int, np.integer)):
        return str(int(answer))
    if isinstance(answer, (float, np.floating)):
        return str(int(answer)) if float(answer).is_integer() else repr(float(answer))
    if isinstance(answer, (tuple, list)):
        return "(" + ",".join(normalise_answer(part) for part in answer) + ")"
    if isinstance(answer, (set, frozenset)):  # order does not matter: sorted
        return "{" + ",".join(sorted(normalise_answer(part) for part in answer)) + "}"
    if isinstance(answer, str):
        text = " ".join(answer.strip().split()).casefold()
        text = re.sub(r"\s*([,(){}\[\]])\s*", r"\1", text).replace("[", "(").replace("]", ")")
        if len(text) >= 2 and text[0] == "{" and text[-1] == "}":  # a set written as text
            return "{" + ",".join(sorted(normalise_answer(part) for part in text[1:-1].split(",") if part)) + "}"
        if len(text) >= 2 and text[0] == "(" and text[-1] == ")":  # a tuple written as text
            return "(" + ",".join(normalise_answer(part) for part in text[1:-1].split(",") if part) + ")"
        while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
            text = text[1:-1].strip()
        return text
    raise TypeError(f"answer must be a str, bool, int, float or tuple/set of them, got {type(answer).__name__}")


def answer_digest(name: str, answer: Any) -> str:
    """16 hex digits of sha256 over the salt, ``name`` and :func:`normalise_answer` of ``answer``.

    Write the result into the notebook's :func:`check_choice` call; the answer itself goes only
    into the answers cell. The name is part of the digest, so two questions with the same answer
    do not share a digest.

    Raises:
        TypeError: ``name`` is not an identifier, or ``answer`` has a type normalise_answer refuses.
    """
    _require_name(name)
    text = f"{_SALT}\0{name}\0{normalise_answer(answer)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _not_yet(name: str, predicted: Any) -> bool:
    if predicted is None or predicted is ...:
        print(f"{name}: make your prediction first: set {name} in the prediction cell above, then rerun both cells")
        return True
    return False


def check_choice(name: str, predicted: Any, digest: str) -> Verdict:
    """Say whether a conceptual answer is right, checking it against ``answer_digest(name, answer)``.

    Args:
        name: the prediction's variable name (part of the digest).
        predicted: the learner's answer (str, bool, int, or a tuple of them), or None.
        digest: the 16 hex digits :func:`answer_digest` gave for the right answer.

    Returns:
        a :class:`Verdict`: true when right; false when wrong or not yet predicted (never raises for
        those, so the notebook runs on).

    Raises:
        TypeError: ``name`` is not an identifier str, or ``digest`` is not a str.
        ValueError: ``digest`` is not 16 lower-case hex digits.
    """
    _require_name(name)
    if not isinstance(digest, str):
        raise TypeError(f"digest must be a str from answer_digest(), got {type(digest).__name__}")
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"digest must be 16 lower-case hex digits from answer_digest(), got {digest!r}")
    if _not_yet(name, predicted):
        return _verdict(name, False, _NOT_YET)
    try:
        right = answer_digest(name, predicted) == digest
    except TypeError:
        print(f"{name}: not right: give a word, a number or True/False, not a {type(predicted).__name__}")
        return _verdict(name, False)
    if right:
        print(f"{name}: right")
    else:
        print(f"{name}: not right; check the spelling against the question's options, then think again")
    return _verdict(name, right)


def _as_numbers(value: Any) -> np.ndarray | None:
    """A float64 array of ``value`` (number, shape, sequence, array, tensor), or None if not numeric."""
    if isinstance(value, (str, bytes)):
        return None
    if hasattr(value, "detach"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array


def _kind_of_miss(p: float, a: float, close) -> str:
    """What kind of mistake ``p`` is against ``a``, in words that neither give ``a`` away nor a step to it.

    No exact factor, no "right size": a learner told "4 times too large" divides by 4 and is right
    without the idea. A whole factor is named by its range, a power of ten by its kind; an order of
    magnitude is named only when dividing by it does not land on the answer (not within tolerance).
    """
    if a == 0 or p == 0:
        return "too large" if p > a else "too small"
    if (p < 0) != (a < 0):
        return "wrong sign"
    ratio = p / a
    direction = "large" if ratio > 1 else "small"
    if any(close(p, a * k) or close(p * k, a) for k in _FACTORS):
        question = "is a count in it that does not belong" if ratio > 1 else "is a count missing"
        return f"too {direction} by a whole factor (2 to 16): {question} (heads, batch, bytes per number)?"
    if any(close(p, a * 10.0**n) or close(p * 10.0**n, a) for n in _POWERS_OF_TEN):
        return f"too {direction} by a power of ten: check the units (k, M, G; bits and bytes; ms and s)"
    magnitude = math.log10(abs(ratio))
    if abs(magnitude) >= 1:
        orders = round(abs(magnitude))
        return f"about {orders} order{'s' if orders > 1 else ''} of magnitude too {direction}"
    return f"too {direction}"


def check_prediction(name: str, predicted: Any, actual: Any, rel_tol: float = 0.05, abs_tol: float = 0.0) -> Verdict:
    """Say whether a prediction matches what the notebook measured, within a tolerance.

    ``actual`` comes from the notebook's own experiment, shown when the cell runs, so it is not
    hidden; the check only judges. Numbers, shapes and arrays (NumPy, torch, nested sequences)
    are compared entry by entry with ``|p - a| <= max(rel_tol * |a|, abs_tol)``; anything else
    (a word, a bool) must be equal.

    Args:
        name: the prediction's variable name, used in the messages.
        predicted: the learner's prediction, or None while there is none.
        actual: the measured or computed value; shape (...) like ``predicted``.
        rel_tol: relative tolerance, >= 0 (default 5%: a prediction, not a float comparison).
        abs_tol: absolute tolerance, >= 0, for answers near zero.

    Returns:
        a :class:`Verdict`: true when right; false when wrong or not yet predicted (never raises for those).

    Raises:
        TypeError: ``name`` is not an identifier str, or a tolerance is not a real number.
        ValueError: a tolerance is negative or not finite.
    """
    _require_name(name)
    for label, tol in (("rel_tol", rel_tol), ("abs_tol", abs_tol)):
        if isinstance(tol, bool) or not isinstance(tol, Real):
            raise TypeError(f"{label} must be a real number, got {type(tol).__name__}")
        if not math.isfinite(tol) or tol < 0:
            raise ValueError(f"{label} must be finite and >= 0, got {tol}")
    if _not_yet(name, predicted):
        return _verdict(name, False, _NOT_YET)

    def close(p: float, a: float) -> bool:
        return abs(p - a) <= max(rel_tol * abs(a), abs_tol)

    p_arr, a_arr = _as_numbers(predicted), _as_numbers(actual)
    if p_arr is None or a_arr is None or isinstance(predicted, bool) or isinstance(actual, bool):
        right = normalise_answer(predicted) == normalise_answer(actual) if _plain(predicted, actual) else False
        print(f"{name}: right" if right else f"{name}: not what the notebook found")
        return _verdict(name, right)
    if p_arr.shape != a_arr.shape:
        p_n, a_n = p_arr.size, a_arr.size
        hint = f"it has {p_n} entr{'y' if p_n == 1 else 'ies'}, the answer has {a_n}" if p_n != a_n else "wrong shape"
        print(f"{name}: not right: {hint}")
        return _verdict(name, False)
    p_flat, a_flat = p_arr.ravel(), a_arr.ravel()
    if np.isnan(p_flat).any():
        print(f"{name}: not right: the prediction contains NaN")
        return _verdict(name, False)
    wrong = [
        i for i, (p, a) in enumerate(zip(p_flat, a_flat, strict=True)) if not (p == a or close(float(p), float(a)))
    ]
    if not wrong:
        print(f"{name}: right")
        return _verdict(name, True)
    if a_arr.ndim == 0:
        print(f"{name}: not right: {_kind_of_miss(float(p_flat[0]), float(a_flat[0]), close)}")
    else:  # per entry, each in the same words (no "right numbers, wrong order": that is a reordering away)
        shown = "; ".join(f"entry {i} {_kind_of_miss(float(p_flat[i]), float(a_flat[i]), close)}" for i in wrong[:3])
        more = f"; and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        print(f"{name}: not right: {len(wrong)} of {p_flat.size} entries: {shown}{more}")
    return _verdict(name, False)


def _plain(*values: Any) -> bool:
    try:
        for value in values:
            normalise_answer(value)
    except TypeError:
        return False
    return True


def check_exercise(name: str, function: Any, reference: Any, cases: Sequence[tuple]) -> Verdict:
    """Run the learner's ``function`` on each case and compare it with ``reference``, never raising.

    For the "write it yourself" cells: the cell ships with a body that raises
    ``NotImplementedError`` (or is ``...``, which returns None), and this prints "write ... first"
    until the learner writes it. Outputs are compared as arrays: same shape, booleans exactly,
    numbers within the tolerance of :data:`mha_course.testing.TOLERANCES` for the reference's
    dtype (float64 for NumPy and Python floats).

    Args:
        name: the function's name, used in the messages.
        function: the learner's function.
        reference: the library function it must agree with.
        cases: argument tuples; each is passed as ``function(*case)`` and ``reference(*case)``.

    Returns:
        a :class:`Verdict`: true when every case agrees; false otherwise (the first problem is printed).

    Raises:
        TypeError: ``name`` is not an identifier, ``function``/``reference`` not callable, or
            ``cases`` not a non-empty sequence of tuples.
    """
    _require_name(name)
    for label, value in (("function", function), ("reference", reference)):
        if not callable(value):
            raise TypeError(f"{label} must be callable, got {type(value).__name__}")
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence) or not cases:
        raise TypeError(f"cases must be a non-empty sequence of argument tuples, got {cases!r}")
    if not all(isinstance(case, tuple) for case in cases):
        raise TypeError(f"each case must be a tuple of arguments, got {[type(c).__name__ for c in cases]}")
    for number, case in enumerate(cases):
        try:
            mine = function(*case)
        except NotImplementedError:
            print(f"{name}: write it first: its body still raises NotImplementedError")
            return _verdict(name, False, _NOT_YET)
        except Exception as error:  # the learner's bug: say what, and let the notebook run on
            print(f"{name}: raised {type(error).__name__} on case {number}: {error}")
            return _verdict(name, False)
        if mine is None:
            print(f"{name}: write it first: it returns None (is the body still `...`, or is `return` missing?)")
            return _verdict(name, False, _NOT_YET)
        problem = _disagreement(mine, reference(*case))
        if problem:
            print(f"{name}: case {number}: {problem}")
            return _verdict(name, False)
    print(f"{name}: right on all {len(cases)} case{'s' if len(cases) > 1 else ''}")
    return _verdict(name, True)


def _disagreement(mine: Any, expected: Any) -> str | None:
    """What differs between the learner's output and the reference's (None: they agree), as
    :func:`check_exercise` compares them."""
    from .testing import tolerance

    mine_arr, expected_arr = _as_array(mine), _as_array(expected)
    if mine_arr is None:
        return f"returns a {type(mine).__name__}, not an array or tensor"
    if mine_arr.shape != expected_arr.shape:
        return f"shape {mine_arr.shape}, expected {expected_arr.shape}"
    if expected_arr.dtype == bool:
        if mine_arr.dtype != bool:
            return f"give booleans (True = may attend), not {mine_arr.dtype}"
        if not np.array_equal(mine_arr, expected_arr):
            return f"{int((mine_arr != expected_arr).sum())} entries differ"
        return None
    if not np.isfinite(mine_arr).all() and np.isfinite(expected_arr).all():
        return "not finite (NaN or inf) where the reference is"
    atol, rtol = tolerance(_dtype_of(expected))
    if not np.allclose(mine_arr, expected_arr, rtol=rtol, atol=atol, equal_nan=True):
        worst = float(np.nanmax(np.abs(mine_arr.astype(np.float64) - expected_arr.astype(np.float64))))
        return f"values differ from the reference (largest difference {worst:.3g})"
    return None


def _as_array(value: Any) -> np.ndarray | None:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic, Real)) and not isinstance(value, bool):
        return np.asarray(value)
    return None


def _dtype_of(value: Any):
    if hasattr(value, "detach"):
        return value.dtype
    return np.asarray(value).dtype if isinstance(value, np.ndarray) else np.float64


_ANSWER_LINE = re.compile(r"^\s*[-*]\s+`(?P<name>[A-Za-z_]\w*)`\s*:\s*(?P<answer>.+?)\s*$")


def parse_answers(markdown: str) -> dict[str, str]:
    """The ``name: answer`` lines of an answers cell, as {name: answer text}.

    A line reads ``- `name`: answer — why`` (a bullet, the name in backticks); the answer is what
    comes before `` — `` (an em dash between spaces), with backticks around it dropped. Other
    lines (the ``<details>`` wrapper, prose) are ignored.

    Raises:
        TypeError: ``markdown`` is not a str.
        ValueError: one name is answered twice.
    """
    if not isinstance(markdown, str):
        raise TypeError(f"markdown must be a str, got {type(markdown).__name__}")
    answers: dict[str, str] = {}
    for line in markdown.splitlines():
        match = _ANSWER_LINE.match(line)
        if match is None:
            continue
        answer = match["answer"].split(" — ")[0].strip().strip("`").strip()
        if match["name"] in answers:
            raise ValueError(f"answers cell gives {match['name']!r} twice")
        answers[match["name"]] = answer
    return answers


def prediction_names(source: str) -> list[str]:
    """Names a ``prediction`` cell assigns (``name = None`` lines), in order.

    Raises:
        TypeError: ``source`` is not a str.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    return re.findall(r"^([A-Za-z_]\w*)\s*=", source, re.M)


__all__ = [
    "Verdict",
    "answer_digest",
    "check_choice",
    "check_exercise",
    "check_prediction",
    "normalise_answer",
    "parse_answers",
    "prediction_names",
]
