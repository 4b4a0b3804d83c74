"""nbgrader's cell metadata on the solution notebooks, so that ``nbgrader generate_assignment`` accepts them.

The course writes its answers with nbgrader's own markers (``### BEGIN SOLUTION``, ``### BEGIN
HIDDEN TESTS``), and nbgrader refuses a marker in a cell that its metadata does not declare:
"Solution region detected in a non-solution cell". Each cell therefore carries
``metadata["nbgrader"]``:

=========================== =======================================================================
cell holds                  nbgrader metadata
=========================== =======================================================================
a solution region           ``solution: true`` (code: autograded answer; markdown: written answer)
a hidden-test region        ``grade: true, locked: true, points: 0``: nbgrader runs it and removes
                            the region; the points stay with this course's grader, which grades
                            nbgrader's release notebooks like its own exercises
anything else               nothing (nbgrader leaves such cells as they are)
=========================== =======================================================================

``grade_id`` is the cell's id, which the course keeps stable (``cell-N`` for a cell without one). :func:`apply` is idempotent and
:func:`problems` lists what is missing or stale (a test keeps every solution notebook in order).
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 3


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def expected(cell: Any, index: int) -> dict | None:
    """The nbgrader metadata the ``index``-th cell should carry (None: none)."""
    source = _source(cell)
    solution = "### BEGIN SOLUTION" in source
    hidden_tests = "### BEGIN HIDDEN TESTS" in source
    if not (solution or hidden_tests):
        return None
    return {
        "grade": hidden_tests,
        "grade_id": str(cell.get("id") or f"cell-{index}"),
        "locked": hidden_tests and not solution,
        **({"points": 0} if hidden_tests else {}),
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }


def apply(nb: Any) -> int:
    """Write the expected nbgrader metadata into every cell of ``nb`` (and drop stale ones); returns cells changed."""
    changed = 0
    for index, cell in enumerate(nb.get("cells", [])):
        want = expected(cell, index)
        meta = cell.setdefault("metadata", {})
        if want is None and "nbgrader" in meta:
            del meta["nbgrader"]
            changed += 1
        elif want is not None and meta.get("nbgrader") != want:
            meta["nbgrader"] = want
            changed += 1
    return changed


def problems(nb: Any) -> list[str]:
    """Cells whose nbgrader metadata differs from :func:`expected` (empty: nbgrader will accept the notebook)."""
    out = []
    for index, cell in enumerate(nb.get("cells", [])):
        have = (cell.get("metadata") or {}).get("nbgrader")
        if have != expected(cell, index):
            out.append(f"cell {index + 1}: nbgrader metadata {have!r}, expected {expected(cell, index)!r}")
    return out
