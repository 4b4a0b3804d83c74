"""The grader: grade submission notebooks, each in its own operating-system sandbox.

For one submission (:func:`grade_notebook`)::

    read the notebook, identify the assignment from its metadata (never from its file name; a class's row
        brings it, read once when the class was collected)
    static scan (:mod:`mha_course.grading.static.scan`): tampering -> flags for review with their evidence (the
        tests still run; ``on_tamper="zero"`` scores the submission 0 until a person resolves them);
        forbidden name in a target -> that exercise 0
    start a submission process in a fresh sandbox (:mod:`mha_course.grading.walls`) and send it the cells
        a cell that kills the process is skipped on the next start; one that hangs ends the notebook there
    for each case, in the grader's process:
        inputs = case.make_inputs()                   -> sent as JSON + .npy
        a process forked from the notebook's state runs case.call(target, inputs) <- plain arrays back
        a forbidden call seen by the tripwire         -> 0 with the explanation
        hint = scoring.judge(case, got, inputs)       # the reference runs here, never in the child
        passed? run it again on fresh inputs of the same kind (:mod:`.fresh_draws`): memorised answers fail
        a hang, a crash or too much memory costs that case only: the next case gets a fresh sandbox
        (after ``max_crashes`` in one exercise, its other cases are not run)

Grading never raises for a bad submission: every failure becomes a failed test with a message, and
:class:`SubmissionResult` is always returned (``error`` set when the notebook could not be graded at all).
A class's batch of them is :mod:`mha_course.grading.classroom.batch`'s.

This module is the orchestration; one notebook's run of its cases is :mod:`.notebook_run`'s, the
sandboxes, the socket and the watchdog :mod:`.process`'s, the result types
:mod:`mha_course.grading.verdicts`'.

More in ``docs/design/grader.md`` (mha_course.grading.engine.pipeline).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..safe_text import clean_result
from ..static import similarity
from ..static.scan import ScanReport, scan
from ..verdicts import CASES_SEE, MAX_FLAGS, ON_TAMPER, Limits, ReviewFlag, Status, SubmissionResult, TestResult
from . import notebook, registry
from .notebook_run import Job, NotebookRun, result_row
from .process import Isolator

__all__ = ["Isolator", "Limits", "SubmissionResult", "TestResult", "grade_notebook", "new_seed", "walls_seen"]


def _static_verdicts(report: ScanReport, assignment: Any) -> tuple[list[ReviewFlag], dict[str, str], list[str]]:
    """(flags for review, exercise key -> why it scores 0, notes) from the scan's report.

    A tampering finding never costs points here: it becomes a :class:`ReviewFlag` with its evidence, and
    the run's policy (``on_tamper``) decides what an open flag does to the score. A forbidden name in an
    exercise's target is a teaching verdict (the tripwire gives it too): that exercise scores 0.
    """
    notes = list(report.syntax_errors)
    for f in report.imports:
        notes.append(
            f"{f.where()}: imports {f.name}, which is not available in the grader (it holds the course's "
            "reference answers); write that part yourself"
        )
    flags = [ReviewFlag(f.name, f.cell, f.line, f.source, f.likely) for f in report.tampering]
    flags.sort(key=lambda f: (not f.likely_tampering, f.cell, f.line))  # what only an attack does, first
    blocked = {}
    for key, findings in report.forbidden.items():
        exercise = next(e for e in assignment.exercises if e.key == key)
        listed = ", ".join(sorted({f.name for f in findings}))
        where = findings[0].where()
        blocked[key] = (
            f"this exercise asks you to write {exercise.target} yourself; it uses {listed} ({where}), "
            "which is not allowed here"
        )
    return flags, blocked, notes


def walls_seen(isolator: Isolator, limits: Limits) -> dict:
    """What the submission ran behind and what its cases saw (both named in every output)."""
    return {**isolator.walls.as_dict(), "cases_see": CASES_SEE[limits.strict_definitions]}


def new_seed() -> int:
    """A fresh salt for the second run of every case (unpredictable by a submission)."""
    import secrets

    return secrets.randbits(31)


#: CPython 3.11 keeps one AST recursion counter per interpreter: when two threads build AST objects
#: at once, one of them can fail with this SystemError. The grader's own parses hold scan.AST_LOCK,
#: but a library may parse unseen (traceback formatting does in 3.11), so such a failure, which says
#: nothing about the submission, is graded again once.
AST_RACE = "AST constructor recursion depth mismatch"


def grade_notebook(
    path: str | Path,
    limits: Limits | None = None,
    isolator: Isolator | None = None,
    seed: int | None = -1,
    unsafe_no_isolation: bool = False,
    grade_as: str | None = None,
    on_tamper: str = "review",
    meta: notebook.AssignmentMeta | None = None,
) -> SubmissionResult:
    """Grade one submission notebook; never raises for a bad submission.

    Args:
        path: the .ipynb file (any name: the assignment comes from its metadata).
        limits: time and memory limits (defaults: :class:`Limits`).
        isolator: a shared :class:`Isolator` (one is made and closed here if omitted).
        seed: the salt of the fresh inputs every case is run on again; -1 (default) draws
            one (:func:`new_seed`), None skips the second run.
        unsafe_no_isolation: with no ``isolator``, run submissions as plain processes where no tier holds.
        grade_as: the assignment key to grade a notebook *without* assignment metadata as (a
            notebook whose metadata names an assignment is always graded as that one).
        on_tamper: what the static scan's tampering findings do: ``"review"`` (default) flags the
            submission for review with the evidence and keeps the tests' score; ``"zero"`` flags it
            and scores it 0 until the flag is resolved (an override row ``review``).
        meta: the notebook's metadata when it was read already (a class's row carries it from
            :mod:`mha_course.grading.classroom.collect`); None: read it here.

    Raises:
        :class:`~mha_course.grading.walls.tier.IsolationError`: no tier holds here and ``unsafe_no_isolation`` is False.
        ValueError: ``on_tamper`` is neither "review" nor "zero".
    """
    check_policy(on_tamper)
    limits = limits or Limits()
    own = isolator is None
    isolator = isolator or Isolator(unsafe_no_isolation)
    start = time.monotonic()
    seed = new_seed() if seed == -1 else seed
    try:
        for attempt in range(2):
            result = SubmissionResult(
                path=str(path), seed=seed, input_seed=seed, isolation=walls_seen(isolator, limits), on_tamper=on_tamper
            )
            try:
                _grade_into(result, Path(path), limits, isolator, grade_as, meta)
            except Exception as exc:  # the grader's own failure: report it, never crash the batch
                if attempt == 0 and isinstance(exc, SystemError) and AST_RACE in str(exc):
                    continue  # CPython's race, not the submission: grade it once more from the start
                result.error = f"the grader failed on this notebook ({type(exc).__name__}: {exc})"
            break
    finally:
        if own:
            isolator.close()
    result.execution_time = time.monotonic() - start
    clean_result(result)
    return result


def check_policy(on_tamper: str) -> None:
    """Raise ValueError unless ``on_tamper`` is one of :data:`~mha_course.grading.verdicts.ON_TAMPER`."""
    if on_tamper not in ON_TAMPER:
        raise ValueError(f"on_tamper must be one of {', '.join(ON_TAMPER)}; got {on_tamper!r}")


MAX_NOTEBOOK_BYTES = notebook.MAX_FILE_BYTES  # a file larger than this is not read at all; outputs are dropped
MAX_CODE_BYTES = 512 * 2**10  # all code cells together (course notebooks hold about 20 KiB): bounds the scan


def _grade_into(
    result: SubmissionResult,
    path: Path,
    limits: Limits,
    isolator: Isolator,
    grade_as: str | None = None,
    meta: notebook.AssignmentMeta | None = None,
) -> None:
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(
                f"{path.name} is {size / 2**20:.1f} MiB; the grader reads notebooks of at most "
                f"{MAX_NOTEBOOK_BYTES // 2**20} MiB (clear the outputs and resubmit)"
            )
        nb = notebook.load(path)  # a regular file only; saved outputs dropped (only the code is graded)
        meta = meta or notebook.metadata(nb)  # read once: a class's row brings it
        if meta is None and grade_as:
            assignment = registry.get_assignment(grade_as)
            meta = notebook.AssignmentMeta(assignment.key, assignment.version)
        else:
            assignment = registry.assignment_for(meta)
    except (ValueError, LookupError, KeyError, OSError) as exc:
        result.error = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
        return
    assert meta is not None  # registry.assignment_for raised LookupError (caught above) on a notebook without it
    result.assignment, result.title, result.version = assignment.key, assignment.title, meta.version
    result.max_points = float(assignment.max_points)
    if meta.version != assignment.version:
        result.notes.append(
            f"this notebook is version {meta.version} of {assignment.key}; the grader has version "
            f"{assignment.version} (graded with the grader's tests)"
        )
    grading = NotebookRun(path, nb, assignment, limits, isolator, result.input_seed)
    jobs = [Job(e, i, c) for e in assignment.exercises for i, c in enumerate(e.cases)]
    code_bytes = sum(len(source.encode("utf-8", "replace")) for _, source in grading.cells)
    if code_bytes > MAX_CODE_BYTES:
        too_big = (
            f"0 points: the notebook's code is {code_bytes / 2**10:.0f} KiB; the grader accepts at most "
            f"{MAX_CODE_BYTES // 2**10} KiB of code (the exercises need a few KiB)"
        )
        result.tests = [result_row(e, c, 0, Status.NOT_RUN, too_big) for e, _, c in jobs]
        result.notes.append(too_big)
        return
    result.copied = similarity.find_copies(grading.cells, [e.target for e in assignment.exercises])
    flags, blocked, notes = _static_verdicts(scan(grading.cells, assignment), assignment)
    result.notes.extend(notes)
    result.flags, result.flag_count = flags[:MAX_FLAGS], len(flags)
    result.tests = grading.run(jobs, blocked)
    result.notes.extend(grading.notes)
    for index, error in sorted(grading.cell_errors.items())[:10]:
        result.notes.append(f"cell {index + 1} raised {error}")
