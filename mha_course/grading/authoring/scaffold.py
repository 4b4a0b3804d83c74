"""``python -m mha_course.assign new NAME``: a new assignment that works from the first minute.

Writes the four pieces an assignment is made of (see docs/INSTRUCTORS.md, "Add a new exercise"),
as one small working example the instructor then edits, so ``make test`` stays green throughout:

=============================================== ==================================================
solutions/aNN_NAME.ipynb                        the single source: prose, the answer between
                                                solution markers, a ``check`` cell, hidden checks,
                                                nbgrader cell metadata
mha_course/grading/exercises/aNN_NAME.py        ``ASSIGNMENT``: the exercise, its cases, points,
                                                reference and hints (runs only in the grader)
mha_course/grading/calls/aNN_NAME.py            how the sandbox calls the student's function
exercises/aNN_NAME.ipynb                        generated from the solution (never edited by hand)
README.md                                       a link in the syllabus table's last chapter row (a
                                                test wants every exercise listed; move it to your
                                                lecture's row)
benchmarks/RESULTS.md, docs/INSTRUCTORS.md      its measured time, and a slot in the workshop plan
=============================================== ==================================================

The example exercise is ``NAME(scores)``: subtract each row's maximum (the first step of a stable
softmax). Its reference sits in the exercise module; a real exercise imports the library's own
implementation *inside* ``_reference`` (never at module top: the sandbox must not see it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..engine import notebook
from . import nbgrader_cells

CALLS = '''"""Calls of assignment {number} ({name}), run in the submission's sandbox: NumPy in, NumPy out."""

from __future__ import annotations

from ..inside.convert import to_numpy


def {name}(target, inputs):
    """``{name}(scores)`` on a copy, so that the grader's inputs cannot be changed in place."""
    return to_numpy(target(inputs["scores"].copy()))
'''

EXERCISE = '''"""Assignment {number}: {title}.

Exercise ``{name}(scores)``: subtract each row's maximum, (..., T, S) -> (..., T, S). Edit the
cases, points and hints; the reference below is the example's own. For a real exercise write the
reference in the library module the lecture teaches from (e.g. ``mha_course/core/softmax.py``) and import
it *inside* ``_reference``: exercise modules import no reference code at module top.
"""

from __future__ import annotations

import numpy as np

from ..calls import {key} as calls
from ..engine import case_inputs
from ..spec import Assignment, Case, Exercise
from ..learner import hints


def _scores(shape, seed, scale=1.0):
    def make():
        return {{"scores": scale * case_inputs.rng(seed).standard_normal(shape)}}

    return make


def _reference(inputs):
    scores = inputs["scores"]
    return scores - scores.max(axis=-1, keepdims=True)


def _diagnose(got, expected, inputs):
    arr, hint = hints.as_array(got, "the shifted scores")
    if hint:
        return hint
    scores = inputs["scores"]
    return hints.compare(
        arr,
        np.asarray(expected),
        "the shifted scores",
        alternatives=[
            (
                lambda: scores - scores.max(),
                "you subtracted the largest score of the whole array; subtract from each row its own maximum",
            ),
            (
                lambda: scores - scores.max(axis=0, keepdims=True),
                "you subtracted each column's maximum; a row's maximum runs along the last axis",
            ),
        ],
    )


EXERCISE_{upper} = Exercise(
    key="{name}",
    target="{name}",
    title="Subtract each row's maximum",
    cases=(
        Case("(3, 5) random scores", 2, _scores((3, 5), 0), calls.{name}, _reference, _diagnose),
        Case("a batch (2, 4, 6)", 2, _scores((2, 4, 6), 1), calls.{name}, _reference, _diagnose),
        Case(
            "large scores (4, 7)",
            1,
            _scores((4, 7), 2, scale=100.0),
            calls.{name},
            _reference,
            _diagnose,
            hidden=True,
        ),
    ),
)

ASSIGNMENT = Assignment(
    key="{key}",
    version=1,
    title="Assignment {number}: {title}",
    notebook="{key}.ipynb",
    exercises=(EXERCISE_{upper},),
)
'''


def _cell(kind: str, source: str, cell_id: str) -> dict:
    cell: dict[str, Any] = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _solution(key: str, name: str, number: str, title: str) -> dict:
    cells = [
        _cell(
            "markdown",
            f"# Assignment {number} — {title}\n\nA softmax is computed stably by first subtracting "
            "each row's largest score: $s_{ij} - \\max_k s_{ik}$. The result has the same shape, "
            "and every row's largest entry becomes 0.",
            f"{key}-00",
        ),
        _cell("code", "import numpy as np\n\nfrom mha_course import check", f"{key}-01"),
        _cell(
            "markdown",
            f"## 1. Subtract each row's maximum (5 points: 4 checked here, 1 by hidden tests when graded)\n\nWrite `{name}(scores)` for scores of "
            "shape (..., T, S): subtract from every row its own maximum (keep the dimensions, so "
            "that it broadcasts).",
            f"{key}-02",
        ),
        _cell(
            "code",
            f'def {name}(scores):\n    """Each row minus its maximum.\n\n    Args:\n        scores: '
            "array of shape (..., T, S).\n\n    Returns:\n        array of the same shape; each row's "
            'largest entry is 0.\n    """\n    ### BEGIN SOLUTION\n    return scores - scores.max(axis=-1, '
            "keepdims=True)\n    ### END SOLUTION",
            f"{key}-03",
        ),
        _cell("code", f'check("{name}", {name})', f"{key}-04"),
        _cell(
            "markdown", "## Check yourself\n\nEvery row of the result has a largest entry of exactly 0:", f"{key}-05"
        ),
        _cell("code", f"print({name}(np.array([[1.0, 3.0, 2.0], [-5.0, -7.0, -6.0]])))", f"{key}-06"),
        _cell(
            "code",
            f'### BEGIN HIDDEN TESTS\ncheck("{name}", {name}, include_hidden=True)\n### END HIDDEN TESTS',
            f"{key}-07",
        ),
    ]
    nb = {
        "cells": cells,
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    }
    notebook.set_metadata(nb, key, 1)
    nbgrader_cells.apply(nb)
    return nb


def next_number(root: Path) -> str:
    """The next free assignment number, two digits ("15" after a14_...)."""
    taken = [int(m.group(1)) for p in (root / "solutions").glob("a*.ipynb") if (m := re.match(r"a(\d+)", p.name))]
    return f"{max(taken, default=0) + 1:02d}"


def _readme_line(readme: Path, key: str, title: str) -> None:
    """A link to ``key`` in the assignment cell of the last chapter row of the README's syllabus table
    (the site's navigation needs every row to start with a chapter; the instructor moves the link to
    the lecture's own row), or, without a table, a list under a heading."""
    if not readme.is_file():
        return
    text = readme.read_text(encoding="utf-8")
    if f"exercises/{key}.ipynb" in text:
        return
    link = f"[{key.split('_', 1)[0]}](exercises/{key}.ipynb) {title}"
    lines = text.split("\n")
    try:
        start = lines.index("## Syllabus")
        header = next(i for i in range(start, len(lines)) if lines[i].startswith("| #"))
    except (ValueError, StopIteration):
        readme.write_text(text.rstrip("\n") + f"\n\n## More assignments\n\n- [{key}](exercises/{key}.ipynb): {title}\n")
        return
    end = header
    while end + 1 < len(lines) and lines[end + 1].startswith("|"):
        end += 1
    cells = lines[end].rstrip().rstrip("|").rsplit("|", 1)
    last = cells[1].strip()
    cells[1] = f" {link} " if last in {"", "—", "-"} else f" {last}; {link} "
    lines[end] = "|".join(cells) + "|"
    readme.write_text("\n".join(lines), encoding="utf-8")


#: The note on a workshop slot the scaffold adds (the next scaffolded assignment follows it on the same day).
NEW_SLOT = "(new: move it to its lecture's day)"


def _table_end(lines: list[str], start: int) -> int:
    """Index of the last row of the first Markdown table at or after ``start``."""
    at = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    while at + 1 < len(lines) and lines[at + 1].startswith("|"):
        at += 1
    return at


def _measure(root: Path, key: str) -> dict | None:
    """Words and execution seconds of the new assignment, by the course's own measuring command
    (``benchmarks/chapter_times.py``: the solution run once in a fresh kernel); None where it cannot run."""
    import subprocess
    import sys
    import tempfile

    script = root / "benchmarks" / "chapter_times.py"
    if not script.is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        done = subprocess.run(
            [sys.executable, str(script), "--only", key, "--json", str(out)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        rows = json.loads(out.read_text()) if done.returncode == 0 and out.is_file() else []
    row = next((r for r in rows if r["notebook"] == f"{key}.ipynb"), None)
    return row if row and row["seconds"] is not None else None


def _record_time(root: Path, key: str, row: dict) -> None:
    """The measured row in benchmarks/RESULTS.md's table of chapter and assignment times, and a slot of
    its own in the workshop plan of docs/INSTRUCTORS.md (after the plan's last day: move it where it belongs)."""
    results = root / "benchmarks" / "RESULTS.md"
    if results.is_file():
        lines = results.read_text(encoding="utf-8").split("\n")
        heading = next((i for i, line in enumerate(lines) if line.startswith("## Chapter and assignment times")), None)
        if heading is not None:
            words = row["words"]
            lines.insert(_table_end(lines, heading) + 1, f"| {key} | {words} | {words / 200:.0f} | {row['seconds']} |")
            results.write_text("\n".join(lines), encoding="utf-8")
    guide = root / "docs" / "INSTRUCTORS.md"
    if guide.is_file():
        lines = guide.read_text(encoding="utf-8").split("\n")
        heading = next((i for i, line in enumerate(lines) if line.startswith("## A workshop")), None)
        if heading is not None:
            at = _table_end(lines, heading)
            last = re.match(r"\| day (\d+), \d+:\d\d–(\d+):(\d\d) ", lines[at])
            # after the plan's last day, or after the slot of the assignment scaffolded before this one
            day, start = (int(last[1]) + 1, 9 * 60) if last else (3, 9 * 60)
            if last and NEW_SLOT in lines[at]:
                day, start = int(last[1]), int(last[2]) * 60 + int(last[3])
            # the plan's rule: reading at 200 words a minute, running every cell once, 10 minutes of work at least
            need = row["words"] / 200 + row["seconds"] / 60 + 10
            end = start + max(30, 5 * (int(need) // 5 + 2))
            slot = f"day {day}, {start // 60}:{start % 60:02d}–{end // 60}:{end % 60:02d}"
            lines.insert(at + 1, f"| {slot} | | {key} | | {key.split('_', 1)[0]} {NEW_SLOT} |")
            guide.write_text("\n".join(lines), encoding="utf-8")


def _format(paths: list[Path]) -> None:
    """Lay the new modules out as ``make lint`` expects (ruff is one of the course's pinned tools)."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--quiet", *map(str, paths)], check=False, capture_output=True
    )


def new_assignment(root: Path, name: str, title: str | None = None, measure: bool = True) -> list[Path]:
    """Create assignment ``aNN_name`` under the project ``root``; returns the files written.

    With ``measure``, the new solution is run once by ``benchmarks/chapter_times.py`` and its time is
    recorded where the course keeps them (benchmarks/RESULTS.md, the workshop plan of docs/INSTRUCTORS.md).

    Raises ValueError for a name that is not a lowercase Python identifier or already used.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(f"NAME must be a lowercase Python identifier such as 'row_shift', got {name!r}")
    number = next_number(root)
    key = f"a{number}_{name}"
    title = title or name.replace("_", " ")
    package = root / "mha_course" / "grading"
    paths = {
        "solution": root / "solutions" / f"{key}.ipynb",
        "exercise": package / "exercises" / f"{key}.py",
        "calls": package / "calls" / f"{key}.py",
    }
    if any(p.name.removesuffix(p.suffix).split("_", 1)[-1] == name for p in (root / "solutions").glob("a*.ipynb")):
        raise ValueError(f"an assignment named {name!r} exists already in {root / 'solutions'}")
    fields = {"key": key, "name": name, "number": number, "title": title, "upper": name.upper()}
    paths["calls"].write_text(CALLS.format(**fields), encoding="utf-8")
    paths["exercise"].write_text(EXERCISE.format(**fields), encoding="utf-8")
    _format([paths["calls"], paths["exercise"]])
    paths["solution"].write_text(notebook.dumps(_solution(key, name, number, title)), encoding="utf-8")
    json.loads(paths["solution"].read_text())  # fail here, not in a test, if the notebook were malformed
    written = list(paths.values())
    for generated in notebook.generate(root / "solutions", root / "exercises"):
        if generated.solution == paths["solution"]:
            written.append(generated.exercise)
    _readme_line(root / "README.md", key, title)
    written.append(root / "README.md")
    row = _measure(root, key) if measure else None
    if row is not None:
        _record_time(root, key, row)
        written += [root / "benchmarks" / "RESULTS.md", root / "docs" / "INSTRUCTORS.md"]
    return written
