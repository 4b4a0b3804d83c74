"""The code a graded submission holds, read once for the report stage (feedback, similarity).

:func:`read_code` returns each submission's code cells as ``{path: [(cell index, source), ...]}``:
empty for a submission that was not graded (an error, no assignment), that cannot be read, or that
holds more code than the grader agreed to read (:data:`..engine.pipeline.MAX_CODE_BYTES`), so no
report parses what the grader refused. :func:`cells_of` is one submission's cells from that reading
(from disk where it holds no entry).
"""

from __future__ import annotations

from ..engine import notebook
from ..engine.pipeline import MAX_CODE_BYTES
from ..verdicts import SubmissionResult

Cells = list[tuple[int, str]]  # (code cell index, its source), in notebook order


def read_code(results: list[SubmissionResult]) -> dict[str, Cells]:
    """Each submission's code cells by its path, read from disk once (see the module docstring)."""
    return {r.path: code_of(r) for r in results if r.path}


def cells_of(result: SubmissionResult, code: dict[str, Cells] | None) -> Cells:
    """The submission's code cells from ``code`` (:func:`read_code`) when it holds them, else read from disk."""
    return code[result.path] if code is not None and result.path in code else code_of(result)


def code_of(result: SubmissionResult) -> Cells:
    """One submission's code cells; ``[]`` when it was not graded, is unreadable, or is too large."""
    if result.error or not result.assignment or not result.path:
        return []
    try:
        cells = notebook.code_cells(notebook.load(result.path))
    except (ValueError, OSError, KeyError, TypeError):
        return []
    if sum(len(source) for _, source in cells) > MAX_CODE_BYTES:
        return []  # the grader refused to read this much code
    return cells
