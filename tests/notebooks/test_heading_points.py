"""The points an assignment promises are the points the grader gives.

Each exercise's section heading says what it is worth, e.g. ``## 2. Softmax in torch (15 points)``,
and that number must equal the grader's maximum for the exercise (its cases' points, hidden ones
included: ``mha_course.grading.engine.registry``). The heading that owns an exercise is the last ``## ``
heading above the first ``check("key", ...)`` of that exercise. Checked in ``solutions/`` and in
the generated ``exercises/`` (what learners read).

The self-check runs only the public cases, so a heading also says which part of its points the learner
can check and which the grader's hidden cases hold: ``(14 points: 10 checked here, 4 by hidden tests
when graded)``, each number the registry's. (The self-check's table ends with the same split.)
"""

import re
from pathlib import Path

import nbformat
import pytest

from mha_course.grading.engine import registry

ROOT = Path(__file__).resolve().parents[2]
# From the files, not the registry: an exercise module that fails to import fails here, not vanishes.
NOTEBOOKS = sorted(
    p.relative_to(ROOT) for folder in ("solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb")
)

# "(15 points)", "(1 point)", "(10 points + 1 bonus)"
POINTS = re.compile(r"\((\d+) points?\b(?:\s*\+\s*(\d+) bonus)?[^)]*\)")
# "1 of the 11 points": the total named must be an exercise's or the assignment's
OF_THE = re.compile(r"\bof the (\d+) points\b")
CHECK = re.compile(r"""\bcheck\(\s*["'](\w+)["']""")
# "(14 points: 10 checked here, 4 by hidden tests when graded)"
SPLIT = re.compile(r"\((\d+) points?: (\d+) checked here, (\d+) by hidden tests when graded\)")


def split_heading(exercise) -> str:
    """What an exercise's heading states: its points, the self-checked part, the hidden part."""
    checked = sum(c.points for c in exercise.cases if not c.hidden)
    hidden = sum(c.points for c in exercise.cases if c.hidden)
    if not hidden:
        return f"({exercise.max_points:g} points)"
    return f"({exercise.max_points:g} points: {checked:g} checked here, {hidden:g} by hidden tests when graded)"


def _heading_points(heading: str) -> int | None:
    match = POINTS.search(heading)
    return None if match is None else int(match[1]) + int(match[2] or 0)


def _sections(path: Path) -> tuple[dict[str, str], list[str], str]:
    """{exercise key: its heading}, every level-2 heading that states points, and all markdown."""
    nb = nbformat.read(path, as_version=4)
    heading, owner, with_points, markdown = "", {}, [], []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            markdown.append(cell.source)
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    heading = line
                    if _heading_points(line) is not None:
                        with_points.append(line)
        elif cell.cell_type == "code":
            for key in CHECK.findall(cell.source):
                owner.setdefault(key, heading)
    return owner, with_points, "\n".join(markdown)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p) for p in NOTEBOOKS])
def test_each_exercise_heading_states_the_graders_points(path):
    assignment = registry.identify(nbformat.read(ROOT / path, as_version=4))
    assert not registry.discovery_errors(), registry.discovery_errors()
    owner, with_points, markdown = _sections(ROOT / path)
    wrong = []
    for exercise in assignment.exercises:
        heading = owner.get(exercise.key)
        assert heading is not None, f"no check({exercise.key!r}, ...) cell in {assignment.notebook}"
        stated = _heading_points(heading)
        if stated != exercise.max_points:
            wrong.append(
                f"{heading!r} states {stated} points; the grader gives {exercise.key!r} {exercise.max_points:g}"
            )
    assert wrong == [], "\n".join(wrong)
    # no stale heading with points that no exercise owns, and the headings add up to the total
    owned = {owner[e.key] for e in assignment.exercises}
    assert [h for h in with_points if h not in owned] == [], "a heading states points but owns no exercise"
    assert sum(_heading_points(h) for h in owned) == assignment.max_points
    split = [
        f"{owner[e.key]!r} must say {split_heading(e)}"
        for e in assignment.exercises
        if split_heading(e) not in owner[e.key]
    ]
    assert split == [], "\n".join(split)
    totals = {e.max_points for e in assignment.exercises} | {assignment.max_points}
    for total in OF_THE.findall(markdown):
        assert int(total) in totals, f"'of the {total} points' matches no exercise or assignment total"


def test_the_split_is_the_registrys_and_adds_up():
    """Every exercise has hidden cases, and the heading's split adds up to its points (whole numbers)."""
    for assignment in registry.assignments():
        for exercise in assignment.exercises:
            match = SPLIT.search(split_heading(exercise))
            assert match is not None, f"{exercise.key}: no hidden cases, so the heading cannot name a hidden part"
            total, checked, hidden = (int(g) for g in match.groups())
            assert total == checked + hidden == exercise.max_points
            assert _heading_points(f"## 1. X {match[0]}") == total


def test_the_heading_parser_reads_every_form():
    assert _heading_points("## 2. Softmax in torch (15 points)") == 15
    assert _heading_points("## 1. One step (1 point)") == 1
    assert _heading_points("## 1. One decoding step (10 points + 1 bonus)") == 11
    assert _heading_points("## Bug log") is None
    assert CHECK.findall('check("softmax", softmax, include_hidden=True)\ncheck(f, (q,))') == ["softmax"]
