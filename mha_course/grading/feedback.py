"""Feedback a student can read: one line per root cause, pointing at the cell to fix.

A wrong softmax typically fails five tests with two messages; listing twenty verdicts hides the one
thing to change. Here the failing tests of each exercise are grouped by their *cause*, the hint
with numbers taken out ("weights: the mask is inverted ..."), and each cause is one line naming
the tests it explains and the cell that defines the exercise's function, by that cell's first line.
Specific hints ("subtract each row's own maximum") come before the generic value comparison
("values differ from the expected ones"), which then only says where.

The same causes, counted over a class, are the "misconceptions" of the class report
(:mod:`.report`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from .safe_text import clean, code_span
from .safe_text import markdown as md
from .scan import parse
from .verdicts import SubmissionResult, TestResult

#: Hints that only say *that* something is wrong, not what: shown after the specific ones.
GENERIC = (
    "values differ from the expected ones",
    "passes with the published inputs but not with fresh",
    "not attempted",
    "NotImplementedError",
    "rows do not sum to 1",
)


def cause_of(output: str) -> str:
    """A hint with its numbers and quoted values removed, so that equal mistakes read equal.

    >>> cause_of("weights: values differ from the expected ones; worst at index (0, 3): got 0.1, expected 0.2")
    'weights: values differ from the expected ones'
    """
    text = output.split("; worst at")[0].split(" (got ")[0]
    text = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", text)
    text = re.sub(r"\[[^\]]*\]|\([#, ]*\)", "", text)
    return re.sub(r"\s+", " ", text).strip(" :;,")


def is_generic(cause: str) -> bool:
    return any(marker in cause for marker in GENERIC)


@dataclass
class Cause:
    """One root cause in one exercise: the hint and the tests it explains."""

    exercise: str
    text: str
    example: str  # one full hint, numbers included
    tests: list[TestResult] = field(default_factory=list)

    @property
    def points_lost(self) -> float:
        return sum(t.points - t.score for t in self.tests)

    @property
    def generic(self) -> bool:
        return is_generic(self.text)


def root_causes(result: SubmissionResult) -> list[Cause]:
    """The failed tests grouped by exercise and cause; specific causes first, then by points lost."""
    causes: dict[tuple[str, str], Cause] = {}
    for t in result.tests:
        if t.status == "passed":
            continue
        text = cause_of(t.output)
        cause = causes.setdefault((t.exercise, text), Cause(t.exercise, text, t.output))
        cause.tests.append(t)
    order = {t.exercise: i for i, t in reversed(list(enumerate(result.tests)))}
    return sorted(causes.values(), key=lambda c: (order[c.exercise], c.generic, -c.points_lost, c.text))


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
    where = defining_cells(cells or [], list((targets or {}).values()))
    causes = root_causes(result)
    raw = result.raw_exercise_scores()
    for exercise, (got, most) in raw.items():
        title = next(t.exercise_title for t in result.tests if t.exercise == exercise)
        adjusted = result.adjustments.get(exercise, got) if exercise in result.adjustments else got
        status = "waived" if adjusted is None else f"{adjusted:g} / {most:g}"
        lines.append(f"## {md(title)} ({code_span(exercise)}): {status}")
        mine = [c for c in causes if c.exercise == exercise]
        if not mine:
            lines += ["All tests pass.", ""]
            continue
        cell = where.get((targets or {}).get(exercise, ""), "")
        for cause in mine:
            names = md(", ".join(t.case + (" (hidden)" if t.hidden else "") for t in cause.tests))
            prefix = "Also: " if cause.generic and any(not c.generic for c in mine) else ""
            lines.append(
                f"- {prefix}{md(cause.example)}  \n  _{len(cause.tests)} test(s), "
                f"{cause.points_lost:g} point(s): {names}_" + (f"; look at {cell}" if cell else "")
            )
        lines.append("")
    extra = [n for n in result.notes if not n.startswith("ignored ")]
    if extra:
        lines += ["## Notes", *[f"- {md(n)}" for n in extra], ""]
    return "\n".join(lines)
