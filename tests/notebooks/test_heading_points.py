"""The points an assignment promises are the points the grader gives.

Each exercise's section heading says what it is worth, e.g. ``## 2. Softmax in torch (15 points)``,
and that number must equal the grader's maximum for the exercise (its cases' points, hidden ones
included: ``mha_course.grading.engine.registry``). The heading that owns an exercise is the last ``## ``
heading above the first ``check("key", ...)`` of that exercise. Checked in ``solutions/`` and in
the generated ``exercises/`` (what learners read).
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
    totals = {e.max_points for e in assignment.exercises} | {assignment.max_points}
    for total in OF_THE.findall(markdown):
        assert int(total) in totals, f"'of the {total} points' matches no exercise or assignment total"


def test_the_heading_parser_reads_every_form():
    assert _heading_points("## 2. Softmax in torch (15 points)") == 15
    assert _heading_points("## 1. One step (1 point)") == 1
    assert _heading_points("## 1. One decoding step (10 points + 1 bonus)") == 11
    assert _heading_points("## Bug log") is None
    assert CHECK.findall('check("softmax", softmax, include_hidden=True)\ncheck(f, (q,))') == ["softmax"]
