"""The grader: grade submission notebooks, each in its own operating-system sandbox.

For one submission (:func:`grade_notebook`)::

    read the notebook, identify the assignment from its metadata (never from its file name)
    static scan (:mod:`.scan`): tampering -> 0 with the findings; forbidden name in a target -> that exercise 0
    start a submission process in a fresh bubblewrap sandbox (:mod:`.isolation`) and send it the cells
        a cell that kills or hangs the process is skipped on the next start (and reported)
    for each case, in the grader's process:
        inputs = case.make_inputs()                   -> sent as JSON + .npy
        the child runs case.call(target, inputs)      <- plain arrays back (no pickle)
        a forbidden call seen by the tripwire         -> 0 with the explanation
        hint = scoring.judge(case, got, inputs)       # the reference runs here, never in the child
        passed? run it again on fresh inputs of the same kind (hints.salted(seed)): answers
        memorised for the published inputs, or the installed package's hidden ones, fail there
        a hang (wall-clock limit), a crash or too much memory costs that case only: the whole sandbox
        is killed and the next case gets a fresh one (after ``max_crashes`` in one exercise, its
        remaining cases are not run); ``submission_timeout`` bounds all of one submission

The submission sees none of the grader: not this process, not the exercise modules (hidden
tests and references), not ``solutions/``, not other submissions or the results folder. Only
plain data crosses the socket, every comparison runs here, and results are written (by
:mod:`mha_course.grade`) only after every sandbox of the submission is dead.

:func:`grade_many` grades a list of notebooks with a pool of worker threads (each drives one
submission process at a time) and a progress bar. Grading never raises for a bad submission:
every failure becomes a failed test with a message, and :class:`SubmissionResult` is always
returned (``error`` set when the notebook could not be graded at all).

This module is the orchestration; the sandboxes, the socket and the watchdog are :mod:`.process`'s,
the result types :mod:`.verdicts`' (re-exported here).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import hints, notebook, registry, similarity, wire
from .collect import Submission
from .guard import explain
from .process import Died, Isolator, SubmissionProcess, call_modules, call_name
from .scan import ScanReport, scan
from .scoring import judge
from .verdicts import Limits, SubmissionResult, TestResult

__all__ = ["Isolator", "Limits", "SubmissionResult", "TestResult", "grade_many", "grade_notebook", "new_seed"]


# --- grading one notebook --------------------------------------------------------------------------

class _Grading:
    """The state of grading one submission (cells to skip, crashes so far, results)."""

    def __init__(self, path: Path, nb: Any, assignment: Any, limits: Limits, isolator: Isolator,
                 seed: int | None = None) -> None:
        self.path, self.nb, self.assignment, self.limits, self.isolator = path, nb, assignment, limits, isolator
        self.seed = seed
        self.cells = notebook.code_cells(nb)
        self.skip: set[int] = set()
        self.crashes: dict[str, int] = {}   # exercise key -> crashes and timeouts so far
        self.notes: list[str] = []
        self.cell_errors: dict[int, str] = {}
        self.deadline = time.monotonic() + limits.submission_timeout

    def start(self) -> SubmissionProcess | None:
        """A session whose notebook has run ("ready"), skipping cells that kill or hang it."""
        deadline = min(time.monotonic() + self.limits.notebook_timeout, self.deadline)
        assignment = self.assignment
        while True:
            session = SubmissionProcess(self.isolator, assignment, self.limits)
            config = {"cells": self.cells, "skip": sorted(self.skip), "memory_mb": self.limits.memory_mb,
                      "provided": list(assignment.provided),
                      "extra_modules": sorted(m for m in call_modules(assignment)
                                              if not m.startswith("mha_course.grading.calls.")),
                      "forbidden": sorted({n for e in assignment.exercises for n in e.forbidden})}
            current = None
            started = False
            try:
                session.set_deadline(max(1.0, deadline - time.monotonic()), "the notebook time limit")
                session.send(config)
                while True:
                    message, _ = session.recv()
                    started = True
                    event = message.get("event")
                    if event == "cell":
                        current = int(message["index"])
                        left = deadline - time.monotonic()
                        session.set_deadline(max(0.5, min(self.limits.cell_timeout, left)),
                                             f"{min(self.limits.cell_timeout, max(left, 0)):.0f} s")
                    elif event == "cell_done":
                        if message.get("error"):
                            self.cell_errors[int(message["index"])] = str(message["error"])[:300]
                        current = None
                    elif event == "ready":
                        return session
                    else:
                        raise Died("sent an unexpected message", "crashed")
            except Died as died:
                startup = session.startup_error() if not started else ""
                session.close()
                if not started and died.kind == "crashed":
                    self.notes.append("the grader could not start the sandbox for this notebook"
                                      + (f" ({startup})" if startup else ""))
                    return None
                if current is None or current in self.skip or time.monotonic() > deadline:
                    self.notes.append(f"your notebook could not be run to the end ({died.reason}); "
                                      "the remaining tests were not run")
                    return None
                self.skip.add(current)
                self.notes.append(f"cell {current + 1} {died.reason}; it was skipped and the notebook re-run "
                                  "without it")

    def run(self, jobs: list[tuple[Any, int, Any]], blocked: dict[str, str]) -> list[TestResult]:
        results: dict[tuple[str, int], TestResult] = {}
        pending = [j for j in jobs if j[0].key not in blocked]
        for exercise, i, case in jobs:
            if exercise.key in blocked:
                results[(exercise.key, i)] = _row(exercise, case, 0, "forbidden", blocked[exercise.key])
        while pending:
            for job in [j for j in pending if self.crashes.get(j[0].key, 0) >= self.limits.max_crashes]:
                pending.remove(job)
                results[(job[0].key, job[1])] = _row(job[0], job[2], 0, "not run", (
                    f"not run: {job[0].target} crashed or timed out in {self.crashes[job[0].key]} earlier cases"))
            if not pending:
                break
            if time.monotonic() > self.deadline:
                for exercise, i, case in pending:
                    results[(exercise.key, i)] = _row(exercise, case, 0, "not run", (
                        f"not run: the submission used up its {self.limits.submission_timeout:g} s"))
                break
            session = self.start()
            if session is None:
                for exercise, i, case in pending:
                    results[(exercise.key, i)] = _row(exercise, case, 0, "not run",
                                                      "not run: the notebook could not be run")
                break
            try:
                while pending:
                    exercise, i, case = pending.pop(0)
                    if self.crashes.get(exercise.key, 0) >= self.limits.max_crashes:
                        results[(exercise.key, i)] = _row(exercise, case, 0, "not run", (
                            f"not run: {exercise.target} crashed or timed out in "
                            f"{self.crashes[exercise.key]} earlier cases"))
                        continue
                    row = self._case(session, exercise, i, case)
                    results[(exercise.key, i)] = row
                    if row.status in ("timeout", "crashed", "memory"):
                        self.crashes[exercise.key] = self.crashes.get(exercise.key, 0) + 1
                        break  # a fresh process for the next case
            finally:
                session.close()
        return [results[(e.key, i)] for e, i, _ in jobs]

    def _case(self, session: SubmissionProcess, exercise: Any, index: int, case: Any) -> TestResult:
        """Run a case on its published inputs; if it passes and a seed is set, again on fresh ones."""
        try:
            inputs = case.make_inputs()
            packed = wire.pack(inputs)
        except Exception as exc:
            return _row(exercise, case, 0, "failed", f"internal grader error while making inputs: {exc}")
        row = self._run(session, exercise, index, case, inputs, packed)
        if row.status != "passed" or self.seed is None:
            return row
        try:
            with hints.salted(self.seed):
                fresh = case.make_inputs()
            fresh_packed = wire.pack(fresh)
        except Exception as exc:
            return _row(exercise, case, 0, "failed", f"internal grader error while making inputs: {exc}")
        if fresh_packed == packed:
            return row  # a case with fixed inputs
        again = self._run(session, exercise, index, case, fresh, fresh_packed)
        if again.status == "failed":
            return _row(exercise, case, 0, "failed", (
                "passes with the published inputs but not with fresh random inputs of the same kind (the "
                "grader draws new numbers, so answers that depend on the exact published values fail): "
                + again.output)[:1000])
        return again

    def _run(self, session: SubmissionProcess, exercise: Any, index: int, case: Any, inputs: dict,
             packed: tuple[dict, bytes]) -> TestResult:
        structure, blob = packed
        timeout = case.timeout_s or self.limits.case_timeout
        try:
            session.set_deadline(timeout, f"{timeout:g} s")
            session.send({"event": "case", "call": call_name(case), "target": exercise.target,
                          "forbidden": list(exercise.forbidden), "inputs": structure}, blob)
            reply, out = session.recv()
            session.set_deadline(float("inf"), "")
        except Died as died:
            return _row(exercise, case, 0, died.kind, died.reason)
        forbidden = [str(n) for n in reply.get("forbidden") or []]
        ops = [str(o) for o in reply.get("ops") or []]
        if forbidden or ops:
            return _row(exercise, case, 0, "forbidden", explain(forbidden, ops))
        if not reply.get("ok"):
            kind = reply.get("kind")
            if kind == "not_implemented":
                return _row(exercise, case, 0, "not attempted", "not attempted yet (NotImplementedError)")
            return _row(exercise, case, 0, "failed", hints.with_exception_hint(str(reply.get("error", "failed"))[:500],
                                                                               inputs)[:900])
        try:
            got = wire.unpack(reply["structure"], out)
        except (ValueError, KeyError, TypeError) as exc:
            return _row(exercise, case, 0, "failed", f"the output could not be read back: {exc}")
        hint = judge(case, got, inputs)
        if hint is None:
            return _row(exercise, case, case.points, "passed", "passed")
        return _row(exercise, case, 0, "failed", str(hint)[:1000])


def _row(exercise: Any, case: Any, score: float, status: str, output: str) -> TestResult:
    return TestResult(exercise.key, exercise.title, case.name, float(case.points), float(score), status, output,
                      bool(case.hidden))


def _static_verdicts(report: ScanReport, assignment: Any) -> tuple[str | None, dict[str, str], list[str]]:
    notes = list(report.syntax_errors)
    for f in report.imports:
        notes.append(f"{f.where()}: imports {f.name}, which is not available in the grader (it holds the course's "
                     "reference answers); write that part yourself")
    tamper = None
    if report.tampering:
        listed = "; ".join(f"{f.name} ({f.where()})" for f in report.tampering[:5])
        tamper = (f"0 points: this notebook reaches into the grader or the interpreter ({listed}). None of this is "
                  "needed for the exercises; remove it and resubmit, or ask your instructor to review")
    blocked = {}
    for key, findings in report.forbidden.items():
        exercise = next(e for e in assignment.exercises if e.key == key)
        listed = ", ".join(sorted({f.name for f in findings}))
        where = findings[0].where()
        blocked[key] = (f"this exercise asks you to write {exercise.target} yourself; it uses {listed} ({where}), "
                        "which is not allowed here")
    return tamper, blocked, notes


def new_seed() -> int:
    """A fresh salt for the second run of every case (unpredictable by a submission)."""
    import secrets

    return secrets.randbits(31)


def grade_notebook(path: str | Path, limits: Limits | None = None, isolator: Isolator | None = None,
                   seed: int | None = -1, unsafe_no_isolation: bool = False,
                   grade_as: str | None = None) -> SubmissionResult:
    """Grade one submission notebook; never raises for a bad submission.

    Args:
        path: the .ipynb file (any name: the assignment comes from its metadata).
        limits: time and memory limits (defaults: :class:`Limits`).
        isolator: a shared :class:`Isolator` (one is made and closed here if omitted).
        seed: the salt of the fresh inputs every passing case is run on again; -1 (default) draws
            one (:func:`new_seed`), None skips the second run.
        unsafe_no_isolation: with no ``isolator``, run submissions without bubblewrap's sandbox.
        grade_as: the assignment key to grade a notebook *without* assignment metadata as (a
            notebook whose metadata names an assignment is always graded as that one).

    Raises:
        isolation.IsolationError: bubblewrap cannot run here and ``unsafe_no_isolation`` is False.
    """
    limits = limits or Limits()
    own = isolator is None
    isolator = isolator or Isolator(unsafe_no_isolation)
    start = time.monotonic()
    result = SubmissionResult(path=str(path), seed=new_seed() if seed == -1 else seed,
                              isolation=isolator.walls.as_dict())
    try:
        _grade_into(result, Path(path), limits, isolator, grade_as)
    except Exception as exc:  # the grader's own failure: report it, never crash the batch
        result.error = f"the grader failed on this notebook ({type(exc).__name__}: {exc})"
    finally:
        if own:
            isolator.close()
    result.execution_time = time.monotonic() - start
    return result


MAX_NOTEBOOK_BYTES = 16 * 2**20   # a notebook file larger than this is not read at all
MAX_CODE_BYTES = 512 * 2**10      # all code cells together (course notebooks hold about 20 KiB): bounds the scan


def _grade_into(result: SubmissionResult, path: Path, limits: Limits, isolator: Isolator,
                grade_as: str | None = None) -> None:
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"{path.name} is {size / 2**20:.1f} MiB; the grader reads notebooks of at most "
                             f"{MAX_NOTEBOOK_BYTES // 2**20} MiB (clear the outputs and resubmit)")
        nb = notebook.load(path)
        meta = notebook.metadata(nb)
        if meta is None and grade_as:
            assignment = registry.get_assignment(grade_as)
            meta = notebook.AssignmentMeta(assignment.key, assignment.version)
        else:
            assignment = registry.identify(nb)
    except (ValueError, LookupError, KeyError, OSError) as exc:
        result.error = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
        return
    result.assignment, result.title, result.version = assignment.key, assignment.title, meta.version
    result.max_points = float(assignment.max_points)
    if meta.version != assignment.version:
        result.notes.append(f"this notebook is version {meta.version} of {assignment.key}; the grader has version "
                            f"{assignment.version} (graded with the grader's tests)")
    grading = _Grading(path, nb, assignment, limits, isolator, result.seed)
    jobs = [(e, i, c) for e in assignment.exercises for i, c in enumerate(e.cases)]
    code_bytes = sum(len(source.encode("utf-8", "replace")) for _, source in grading.cells)
    if code_bytes > MAX_CODE_BYTES:
        too_big = (f"0 points: the notebook's code is {code_bytes / 2**10:.0f} KiB; the grader accepts at most "
                   f"{MAX_CODE_BYTES // 2**10} KiB of code (the exercises need a few KiB)")
        result.tests = [_row(e, c, 0, "not run", too_big) for e, _, c in jobs]
        result.notes.append(too_big)
        return
    result.copied = similarity.find_copies(grading.cells, [e.target for e in assignment.exercises])
    tamper, blocked, notes = _static_verdicts(scan(grading.cells, assignment), assignment)
    result.notes.extend(notes)
    if tamper:
        result.tests = [_row(e, c, 0, "forbidden", tamper) for e, _, c in jobs]
        result.notes.append(tamper)
        return
    result.tests = grading.run(jobs, blocked)
    result.notes.extend(grading.notes)
    for index, error in sorted(grading.cell_errors.items())[:10]:
        result.notes.append(f"cell {index + 1} raised {error}")


def grade_many(paths: Iterable[str | Path | Submission], limits: Limits | None = None, workers: int = 2,
               progress: bool = True, seed: int | None = -1, unsafe_no_isolation: bool = False,
               isolator: Isolator | None = None) -> list[SubmissionResult]:
    """Grade many notebooks with ``workers`` threads (each drives one sandbox at a time) and a progress bar.

    ``paths`` holds notebook paths or :class:`~.collect.Submission` rows (whose student, key and
    notes are copied into the result; a row with a ``problem`` is reported, not graded).

    ``seed`` as in :func:`grade_notebook`; one seed is drawn for the whole batch. Raises
    :class:`~.isolation.IsolationError` before grading anything when bubblewrap cannot run here and
    ``unsafe_no_isolation`` is False.
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    paths = list(paths)
    limits = limits or Limits()
    seed = new_seed() if seed == -1 else seed
    deadline = time.monotonic() + limits.batch_timeout if limits.batch_timeout else float("inf")
    own = isolator is None
    isolator = isolator or Isolator(unsafe_no_isolation)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
                tqdm(total=len(paths), desc="grading", unit="nb", disable=not progress) as bar:
            def one(item):
                sub = item if isinstance(item, Submission) else None
                path = (sub.path or sub.key) if sub else item
                if sub is not None and sub.problem:
                    r = SubmissionResult(path=str(path), seed=seed, isolation=isolator.walls.as_dict(),
                                         assignment=sub.assignment, error=sub.problem)
                    with contextlib.suppress(KeyError):  # the row still shows what it was out of
                        r.max_points = float(registry.get_assignment(sub.assignment or "").max_points)
                elif time.monotonic() > deadline:
                    r = SubmissionResult(path=str(path), seed=seed, isolation=isolator.walls.as_dict(), error=(
                        f"not graded: the batch's time limit ({limits.batch_timeout:g} s) ran out first"))
                else:
                    r = grade_notebook(path, limits, isolator, seed, grade_as=sub.grade_as if sub else None)
                if sub is not None:
                    r.key, r.student = sub.key, sub.student
                    r.student_id, r.student_name = sub.student_id, sub.student_name
                    r.notes[:0] = sub.notes
                    if r.assignment is None:
                        r.assignment = sub.assignment
                bar.update(1)
                return r

            return list(pool.map(one, paths))
    finally:
        if own:
            isolator.close()
