"""Assignment notebooks: metadata, solution/hidden-test markers, and the student version.

A solution notebook (``solutions/aNN_*.ipynb``) is the single source of an assignment. It carries

    metadata["mha_course"] = {"assignment": "a02_softmax", "version": 1}

which names the assignment (the grader never looks at the file name, so a renamed copy grades the
same) and marks its answers with nbgrader's markers:

* ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (code or markdown cells): in the student version
  the lines between them become ``# YOUR CODE HERE`` and ``raise NotImplementedError()`` at the
  marker's indentation (markdown: ``YOUR ANSWER HERE``).
* ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS`` (code cells): removed; a cell left empty is
  dropped. (The grader's hidden cases live in the exercise modules; these regions let the solution
  notebook run them under nbval.)

:func:`make_exercise` builds the student version (outputs cleared, same metadata and cell ids) and
:func:`dumps` serialises a notebook deterministically (sorted keys, one-space indent, trailing
newline), so ``exercises/`` can be compared byte for byte with what the generator writes.
:func:`generate` does this for a whole folder (``python -m mha_course.assign``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

META_KEY = "mha_course"
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = ("YOUR ANSWER HERE",)


class MarkerError(ValueError):
    """A BEGIN/END marker without its partner (names the notebook cell and line)."""


@dataclass(frozen=True)
class AssignmentMeta:
    """What a notebook says about itself: the assignment key and version."""

    assignment: str
    version: int


def read(path: str | Path) -> Any:
    """Read a notebook (any nbformat 4 minor) as a NotebookNode; raises ValueError if unreadable."""
    import nbformat

    try:
        return nbformat.read(str(path), as_version=4)
    except Exception as exc:  # nbformat raises several types (JSON, validation, OS)
        raise ValueError(f"{path}: not a readable notebook ({type(exc).__name__}: {exc})") from exc


#: A notebook file larger than this is not read at all (it bounds the grader's memory). Saved outputs
#: (plots) count here only: :func:`load` drops them, and the grader's limit on code is far smaller.
MAX_FILE_BYTES = 128 * 2**20


def read_regular(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; raises ValueError otherwise.

    Opened non-blocking and checked with ``fstat`` before reading: a FIFO (``tar`` keeps them) or a
    device named like a notebook would block the reader or never end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ValueError(f"{type(exc).__name__}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (a pipe, device or socket named like a notebook)")
        if info.st_size > limit:
            raise ValueError(f"the file is {info.st_size / 2**20:.1f} MiB; at most {limit // 2**20} MiB is read")
        os.set_blocking(fd, True)
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"the file grew past {limit // 2**20} MiB while it was read")
    return data


def parse_json(data: bytes) -> object:
    """JSON text (UTF-8) as Python objects; raises ValueError also for nesting too deep to parse."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("RecursionError: JSON nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def load(path: str | Path) -> dict:
    """Read a notebook as plain JSON (fast: no nbformat/jsonschema import); for the grader.

    Only a regular file of at most :data:`MAX_FILE_BYTES` is read (:func:`read_regular`). Code cells'
    saved outputs are dropped: the grader never looks at them, and a notebook of plots stays small.
    nbformat 4 files are returned as parsed; older formats go through :func:`read` (conversion).
    Raises ValueError if the file is not a notebook.
    """
    try:
        nb = parse_json(read_regular(path))
    except ValueError as exc:
        raise ValueError(f"{path}: not a readable notebook ({exc})") from None
    if not isinstance(nb, dict):
        raise ValueError(f"{path}: not a readable notebook (JSON but not an object)")
    if nb.get("nbformat") != 4:
        return read(path)
    if not isinstance(nb.get("cells"), list) or not all(isinstance(c, dict) for c in nb["cells"]):
        raise ValueError(f"{path}: not a readable notebook (no list of cells)")
    for cell in nb["cells"]:
        if "outputs" in cell:
            cell["outputs"] = []
    return nb


# Keys assignments had before they were renumbered -> their keys now. A notebook handed out earlier
# carries the old key in its metadata, and an instructor may still type it: both keep working.
RENAMED_ASSIGNMENTS = {"a05_debug_mha": "a06_debug_mha"}


def current_key(key: str) -> str:
    """The assignment's key now: a key it had before a renumbering (:data:`RENAMED_ASSIGNMENTS`) maps to it."""
    return RENAMED_ASSIGNMENTS.get(key, key)


def metadata(nb: Any) -> AssignmentMeta | None:
    """The notebook's ``metadata["mha_course"]`` as an :class:`AssignmentMeta`, or None if absent."""
    meta = nb.get("metadata") or {}
    meta = meta.get(META_KEY) if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("assignment"), str):
        return None
    version = meta.get("version", 0)
    return AssignmentMeta(current_key(meta["assignment"]), int(version) if isinstance(version, (int, float)) else 0)


def set_metadata(nb: Any, assignment: str, version: int) -> None:
    """Write ``metadata["mha_course"] = {"assignment": ..., "version": ...}`` into ``nb``."""
    nb.setdefault("metadata", {})[META_KEY] = {"assignment": assignment, "version": int(version)}


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def _replace_regions(lines: list[str], begin: str, end: str, stub: tuple[str, ...] | None, where: str) -> list[str]:
    """Replace each begin..end region (markers included) by ``stub`` at the marker's indentation."""
    out: list[str] = []
    start: int | None = None
    indent = ""
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith(begin):
            if start is not None:
                raise MarkerError(f"{where}, line {number}: {begin!r} inside another {begin!r}")
            start, indent = number, line[: len(line) - len(line.lstrip())]
        elif stripped.startswith(end):
            if start is None:
                raise MarkerError(f"{where}, line {number}: {end!r} without {begin!r}")
            if stub is not None:
                out.extend(indent + s for s in stub)
            start = None
        elif start is None:
            out.append(line)
    if start is not None:
        raise MarkerError(f"{where}, line {start}: {begin!r} without {end!r}")
    return out


def has_markers(nb: Any) -> bool:
    """True if any cell holds a solution or hidden-test marker."""
    return any(m in _source(c) for c in nb["cells"] for m in (BEGIN_SOLUTION, BEGIN_HIDDEN))


def make_exercise(solution: Any, name: str = "notebook") -> Any:
    """The student version of a solution notebook (a new notebook; ``solution`` is not changed).

    Answers become stubs, hidden-test regions disappear (and cells they leave empty), outputs and
    execution counts are cleared; metadata and cell ids are kept. Raises :class:`MarkerError` on
    an unmatched marker.
    """
    nb = copy.deepcopy(solution)
    cells = []
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        lines = _source(cell).split("\n")
        if cell.cell_type == "code":
            lines = _replace_regions(lines, BEGIN_HIDDEN, END_HIDDEN, None, where)
            if BEGIN_HIDDEN in _source(cell) and not "\n".join(lines).strip():
                continue  # the whole cell was hidden tests
            lines = _replace_regions(lines, BEGIN_SOLUTION, END_SOLUTION, CODE_STUB, where)
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            lines = _replace_regions(lines, BEGIN_SOLUTION, END_SOLUTION, MARKDOWN_STUB, where)
        cell.source = "\n".join(lines)
        cells.append(cell)
    nb.cells = cells
    _ensure_ids(nb, name)
    return nb


def _ensure_ids(nb: Any, name: str) -> None:
    """Give cells without an id a deterministic one (nbformat >= 4.5 requires ids)."""
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) < (4, 5):
        return
    for index, cell in enumerate(nb.cells):
        if not cell.get("id"):
            cell["id"] = hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:8]


def dumps(nb: Any) -> str:
    """Deterministic JSON text of a notebook: sorted keys, indent 1, trailing newline."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


# --- reading code out of a notebook (the grader and the static scan) -----------------------------

_CELL_MAGICS_WITH_PYTHON_BODY = {"time", "capture", "timeit"}


def python_source(source: str) -> str:
    """A code cell's text with IPython syntax removed, so plain ``exec`` can run it.

    Line magics (``%matplotlib inline``) and shell lines (``!pip ...``) become ``pass`` (keeping line
    numbers and indentation); a cell magic (``%%time``) keeps its Python body for ``time``,
    ``capture`` and ``timeit`` and drops the cell otherwise (``%%bash``, ``%%html``, ...).
    """
    lines = source.split("\n")
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        magic = re.split(r"\s+", first[2:], maxsplit=1)[0]
        if magic not in _CELL_MAGICS_WITH_PYTHON_BODY:
            return ""
        lines = ["pass"] + lines[1:]
    out = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        is_magic = stripped.startswith(("%", "!")) or re.match(r"^[\w.]+\s*=\s*[!%]", stripped)
        if is_magic or (
            stripped.endswith("?") and not stripped.startswith("#") and re.fullmatch(r"[\w.]+\?\??", stripped)
        ):
            out.append(indent + "pass")
        else:
            out.append(line)
    return "\n".join(out)


def code_cells(nb: Any) -> list[tuple[int, str]]:
    """``(cell index, Python source)`` for every non-empty code cell, IPython syntax removed."""
    cells = []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        source = python_source(_source(cell))
        if source.strip():
            cells.append((index, source))
    return cells


# --- the generator ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """One solution notebook and the exercise file it produces."""

    solution: Path
    exercise: Path
    text: str

    @property
    def up_to_date(self) -> bool:
        return self.exercise.exists() and self.exercise.read_text(encoding="utf-8") == self.text


def plan(solutions_dir: str | Path, exercises_dir: str | Path) -> list[Generated]:
    """What :func:`generate` would write: one entry per solution notebook with assignment metadata.

    Raises ValueError for a notebook that cannot be read and :class:`MarkerError` for bad markers.
    """
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    planned = []
    for path in sorted(solutions_dir.glob("*.ipynb")):
        nb = read(path)
        if metadata(nb) is None:
            continue  # not an assignment (e.g. a scratch notebook)
        text = dumps(make_exercise(nb, name=path.name))
        planned.append(Generated(path, exercises_dir / path.name, text))
    return planned


def stale_exercises(solutions_dir: str | Path, exercises_dir: str | Path) -> list[str]:
    """Human-readable reasons why ``exercises_dir`` differs from the generator's output ([] if none)."""
    planned = plan(solutions_dir, exercises_dir)
    problems = [
        f"{g.exercise}: {'differs from' if g.exercise.exists() else 'missing, expected from'} {g.solution}"
        for g in planned
        if not g.up_to_date
    ]
    expected = {g.exercise.name for g in planned}
    for extra in sorted(Path(exercises_dir).glob("*.ipynb")):
        if extra.name not in expected:
            problems.append(f"{extra}: has no solution notebook in {solutions_dir}")
    return problems


def generate(solutions_dir: str | Path, exercises_dir: str | Path) -> list[Generated]:
    """Write ``exercises_dir/<name>.ipynb`` for every assignment notebook in ``solutions_dir``.

    Files already up to date are not touched. Returns what was planned (see :func:`plan`).
    """
    planned = plan(solutions_dir, exercises_dir)
    Path(exercises_dir).mkdir(parents=True, exist_ok=True)
    for g in planned:
        if not g.up_to_date:
            g.exercise.write_text(g.text, encoding="utf-8")
    return planned
