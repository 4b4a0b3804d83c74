"""Feedback a student can read: the first cause first, then one line per root cause, pointing at the cell to fix.

A wrong softmax typically fails five tests with two messages; listing twenty verdicts hides the one
thing to change. Here the failing tests of each exercise are grouped by their *cause*, the hint
with what varies between cases masked (values, indices, shapes: "weights: the mask is inverted ...";
formulas such as "1/sqrt(D)" stay whole), and each cause is one line naming the tests it explains and
the cell that defines the exercise's function, by that cell's first line. Specific hints ("subtract
each row's own maximum") come before the generic value comparison ("values differ from the expected
ones"), which then only says where; what did not run (not attempted, a time or memory limit) comes last.

A cell that raised (``import seaborn`` in the first cell) comes before everything: the failures it
explains (a name never defined) are listed under it, not as causes of their own.

The same causes, counted over a class, are the first causes and "misconceptions" of the class report
(:mod:`.report`); :func:`summary` is one line of them for a grades export's comment column.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..safe_text import clean, code_span, shorten
from ..safe_text import markdown as md
from ..static.scan import parse
from ..verdicts import Status, SubmissionResult, TestResult
from . import manual, review_flags

#: Hints that only say *that* something is wrong, not what: shown after the specific ones.
GENERIC = (
    "values differ from the expected ones",
    "passes with the published inputs but not with fresh",
    "not attempted",
    "NotImplementedError",
    "rows do not sum to 1",
)


class CauseKind(StrEnum):
    """What a root cause is: the report groups causes by it."""

    MISTAKE = "mistake"  # a wrong result: a misconception
    CELL_ERROR = "cell error"  # a cell raised, and tests failed because of it
    NOT_RUN = "not run"  # not attempted, or stopped by a time or memory limit


#: Statuses that say the code did not (fully) run, not that it computes the wrong thing: the report
#: lists them apart from the misconceptions.
NOT_A_MISTAKE = (Status.NOT_ATTEMPTED, Status.TIMEOUT, Status.MEMORY, Status.NOT_RUN)

#: What varies between two occurrences of one mistake: measured values, indices and shapes, counts.
#: Small integers inside formulas ("1/sqrt(D)", "axis -1", "sum to 1") are part of the hint and stay.
_VARYING = (
    (re.compile(r"\((?:\s*-?\d+\s*,)*\s*-?\d+\s*,?\s*\)|\(\s*\)"), "(…)"),  # a shape or an index
    (re.compile(r"(?<![\w.])-?\d+\.\d*(?:e[-+]?\d+)?|(?<![\w.])-?\d+e[-+]?\d+"), "…"),  # a measured value
    (re.compile(r"\[\s*-?\d[\d.,\s-]*\]"), "[…]"),  # a list of values ("[B, T, S]" stays)
    (re.compile(r"\b\d+ of \d+\b"), "some of the"),  # "NaN in 3 of 40 entries"
    (re.compile(r"(\b(?:size|length|[TSDBHE]) (?:= )?)\d+\b"), r"\1…"),  # "T = 5", "a size 7"
)

#: A note of the grader saying that a cell raised: "cell 3 raised ModuleNotFoundError: ...".
_CELL_ERROR = re.compile(r"^cell (\d+) raised (.+)$", re.S)


def cause_of(output: str) -> str:
    """A hint with what varies between cases masked (values, indices, shapes), so equal mistakes read equal.

    Formulas and the words of the hint are kept: "multiply q k^T by 1/sqrt(D)" stays as it is.

    >>> cause_of("weights: values differ from the expected ones; worst at index (0, 3): got 0.1, expected 0.2")
    'weights: values differ from the expected ones'
    >>> cause_of("out: shape expected (2, 5, 7) [B, T, S], got (2, 7, 5) (the last two axes are swapped: transposed?)")
    'out: shape expected (…) [B, T, S], got (…) (the last two axes are swapped: transposed?)'
    """
    text = output.split("; worst at")[0]
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return re.sub(r"\s+", " ", text).strip(" :;,")


def is_generic(cause: str) -> bool:
    return any(marker in cause for marker in GENERIC)


def first_cell_error(result: SubmissionResult) -> tuple[int, str] | None:
    """(cell number, error) of the earliest cell that raised, from the grader's notes; None if none did."""
    found = [(int(m[1]), m[2]) for m in map(_CELL_ERROR.match, result.notes) if m]
    return min(found, default=None)


def follows_cell_error(test: TestResult) -> bool:
    """Whether a failure is the kind an earlier cell's error causes: a name never defined."""
    return test.status != Status.PASSED and ("NameError" in test.output or "does not define" in test.output)


@dataclass
class Cause:
    """One root cause in one exercise: the hint and the tests it explains.

    ``kind`` is a :class:`CauseKind`; a cell error is the first cause, fixed first.
    """

    exercise: str
    text: str
    example: str  # one full hint, numbers included
    tests: list[TestResult] = field(default_factory=list)
    kind: CauseKind = CauseKind.MISTAKE

    @property
    def points_lost(self) -> float:
        return sum(t.points - t.score for t in self.tests)

    @property
    def generic(self) -> bool:
        return is_generic(self.text)


def root_causes(result: SubmissionResult) -> list[Cause]:
    """The failed tests grouped by cause: the earliest cell error first (with every failure it explains),
    then per exercise the specific causes, the generic ones, and what did not run."""
    causes: dict[tuple[str, str], Cause] = {}
    first = first_cell_error(result)
    cell_cause = None
    if first is not None:
        cell_cause = Cause(
            "", f"a cell raised {cause_of(first[1])}", f"cell {first[0]} raised {first[1]}", [], CauseKind.CELL_ERROR
        )
    for t in result.tests:
        if t.status == Status.PASSED or t.exercise.startswith(manual.PREFIX):  # graded by hand: no cause
            continue
        if cell_cause is not None and follows_cell_error(t):
            cell_cause.tests.append(t)
            continue
        text = cause_of(t.output)
        kind = CauseKind.NOT_RUN if t.status in NOT_A_MISTAKE else CauseKind.MISTAKE
        cause = causes.setdefault((t.exercise, text), Cause(t.exercise, text, t.output, kind=kind))
        cause.tests.append(t)
    order = {t.exercise: i for i, t in reversed(list(enumerate(result.tests)))}
    rest = sorted(
        causes.values(),
        key=lambda c: (order[c.exercise], c.kind != CauseKind.MISTAKE, c.generic, -c.points_lost, c.text),
    )
    return ([cell_cause] if cell_cause is not None else []) + rest


def summary(result: SubmissionResult) -> str:
    """One line for a grades export's comment column: the score, the first cause, the top hint."""
    if result.error:
        return f"not graded: {shorten(clean(result.error), 200)}"
    parts = [f"{result.score:g} / {result.max_score:g} points"]
    if result.late_note:
        parts.append(result.late_note)
    causes = root_causes(result)
    cell = next((c for c in causes if c.kind == CauseKind.CELL_ERROR and c.tests), None)
    if cell is not None:
        parts.append(f"first fix {shorten(clean(cell.example), 160)} ({len(cell.tests)} test(s) fail because of it)")
    top = next((c for c in causes if c.kind == CauseKind.MISTAKE), None)
    if top is not None:
        parts.append(f"{top.exercise}: {shorten(clean(top.text), 160)}")
    elif cell is None and not any(c.tests for c in causes):
        parts.append("all tests pass")
    if manual.pending(result):
        parts.append(f"written answers pending ({len(manual.pending(result))})")
    parts += [shorten(clean(sentence), 240).rstrip(".") for sentence in review_flags.learner_sentences(result)]
    return "; ".join(parts)


def defining_cells(cells: list[tuple[int, str]], targets: list[str]) -> dict[str, str]:
    """Target name -> "cell N (`first line`)" of the last cell that defines it (the one that counts)."""
    found: dict[str, str] = {}
    for index, source in cells:
        try:
            tree = parse(source)
        except SyntaxError:
            continue
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in targets:
                found[node.name] = f"cell {index + 1} ({code_span(first[:70])})"
    return found


def feedback_markdown(
    result: SubmissionResult, cells: list[tuple[int, str]] | None = None, targets: dict[str, str] | None = None
) -> str:
    """One submission's feedback as Markdown.

    Args:
        result: the graded submission.
        cells: its code cells as (index, source), to point at the cell to fix (optional).
        targets: exercise key -> the name the exercise grades (function or class).
    """
    # learner text (names, keys, hints quoting exceptions, code) goes through md() or code_span(): no raw HTML
    who = result.student_name or result.student or clean(Path(result.path).name)
    lines = [
        f"# Feedback: {md(result.title or result.assignment or 'submission')}",
        "",
        f"**{md(who)}**, {code_span(result.key or clean(Path(result.path).name))}",
        "",
    ]
    if result.error:
        return "\n".join(lines + [f"This submission could not be graded: {md(result.error)}", ""])
    lines += [
        f"**{result.score:g} / {result.max_score:g} points** (assignment {result.assignment}, "
        f"version {result.version}). Tests marked *hidden* ran only in the grader.",
        "",
    ]
    if result.late_note:
        before = f" ({result.adjusted_score:g} points before the penalty)" if result.late_penalty else ""
        lines += [f"**Late:** {md(result.late_note)}{before}.", ""]
    review = review_flags.learner_sentences(result)
    if review:
        lines += ["## For review", "", *[md(sentence) for sentence in review], ""]
    where = defining_cells(cells or [], list((targets or {}).values()))
    causes = root_causes(result)
    # a cell that raised without failing any test is no first fix: the notes below still name it
    first = next((c for c in causes if c.kind == CauseKind.CELL_ERROR and c.tests), None)
    if first is not None:
        # the real cause before its consequences: every NameError below follows from it
        names = md(", ".join(t.name + (" (hidden)" if t.hidden else "") for t in first.tests)) or "none"
        lines += [
            "## Fix this first",
            "",
            f"{md(first.example)}  \nThe tests that failed because of it ({len(first.tests)}, "
            f"{first.points_lost:g} point(s)): {names}. Fix this cell, run the notebook from the top, then "
            "look at what still fails.",
            "",
        ]
    raw = result.raw_exercise_scores()
    for exercise, (got, most) in raw.items():
        title = next(t.exercise_title for t in result.tests if t.exercise == exercise)
        adjusted = result.adjustments.get(exercise, got) if exercise in result.adjustments else got
        status = "waived" if adjusted is None else f"{adjusted:g} / {most:g}"
        if exercise.startswith(manual.PREFIX):  # graded by hand: the points and comment, or pending
            status = manual.PENDING if exercise in manual.pending(result) and adjusted is not None else status
            said = [md(t.output) for t in result.tests if t.exercise == exercise]
            lines += [f"## {md(title)} ({code_span(exercise)}): {status}", *said, ""]
            continue
        lines.append(f"## {md(title)} ({code_span(exercise)}): {status}")
        mine = [c for c in causes if c.exercise == exercise]
        after_cell = [t for t in (first.tests if first else []) if t.exercise == exercise]
        if after_cell:
            lines.append(f"- {len(after_cell)} test(s) failed because of the cell error above (fix it first)")
        if not mine:
            lines += [] if after_cell else ["All tests pass."]
            lines.append("")
            continue
        cell = where.get((targets or {}).get(exercise, ""), "")
        for cause in mine:
            names = md(", ".join(t.case + (" (hidden)" if t.hidden else "") for t in cause.tests))
            prefix = "Also: " if cause.generic and any(not c.generic for c in mine) else ""
            prefix = "Not run: " if cause.kind == CauseKind.NOT_RUN else prefix
            lines.append(
                f"- {prefix}{md(cause.example)}  \n  _{len(cause.tests)} test(s), "
                f"{cause.points_lost:g} point(s): {names}_" + (f"; look at {cell}" if cell else "")
            )
        lines.append("")
    extra = [n for n in result.notes if not n.startswith("ignored ")]
    if extra:
        lines += ["## Notes", *[f"- {md(n)}" for n in extra], ""]
    return "\n".join(lines)
