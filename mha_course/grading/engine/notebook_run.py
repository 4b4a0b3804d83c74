"""One submission's run: its notebook in a sandboxed process, its cases one by one.

:class:`NotebookRun` starts the submission process (skipping cells that kill or hang it), runs each
case there (every visible case before any hidden one) and judges the answer here, runs every case
again on fresh inputs, and keeps the
crashes so far (a sandbox that dies costs that case only; after ``max_crashes`` an exercise's
remaining cases are not run). :mod:`.grader` decides what to run; :mod:`.process` owns the process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..inside import wire
from ..inside.guard import explain
from ..learner import error_hints
from ..static.scan import AST_LOCK
from . import case_inputs, notebook
from .process import Died, Isolator, SubmissionProcess, call_modules, call_name
from .scoring import judge
from .verdicts import Limits, TestResult


class NotebookRun:
    """The state of grading one submission (cells to skip, crashes so far, results)."""

    def __init__(
        self, path: Path, nb: Any, assignment: Any, limits: Limits, isolator: Isolator, seed: int | None = None
    ) -> None:
        self.path, self.nb, self.assignment, self.limits, self.isolator = path, nb, assignment, limits, isolator
        self.seed = seed
        self.cells = notebook.code_cells(nb)
        self.skip: set[int] = set()
        self.crashes: dict[str, int] = {}  # exercise key -> crashes and timeouts so far
        self.notes: list[str] = []
        self.cell_errors: dict[int, str] = {}
        self.deadline = time.monotonic() + limits.submission_timeout

    def start(self) -> SubmissionProcess | None:
        """A submission process whose notebook has run ("ready"), skipping cells that kill or hang it."""
        deadline = min(time.monotonic() + self.limits.notebook_timeout, self.deadline)
        assignment = self.assignment
        while True:
            child = SubmissionProcess(self.isolator, assignment, self.limits)
            config = {
                "cells": self.cells,
                "skip": sorted(self.skip),
                "memory_mb": self.limits.memory_mb,
                "provided": list(assignment.provided),
                "extra_modules": sorted(
                    m for m in call_modules(assignment) if not m.startswith("mha_course.grading.calls.")
                ),
                "forbidden": sorted({n for e in assignment.exercises for n in e.forbidden}),
            }
            current = None
            started = False
            try:
                child.set_deadline(max(1.0, deadline - time.monotonic()), "the notebook time limit")
                child.send(config)
                while True:
                    message, _ = child.recv()
                    started = True
                    event = message.get("event")
                    if event == "cell":
                        current = int(message["index"])
                        left = deadline - time.monotonic()
                        child.set_deadline(
                            max(0.5, min(self.limits.cell_timeout, left)),
                            f"{min(self.limits.cell_timeout, max(left, 0)):.0f} s",
                        )
                    elif event == "cell_done":
                        if message.get("error"):
                            self.cell_errors[int(message["index"])] = str(message["error"])[:300]
                        current = None
                    elif event == "ready":
                        return child
                    else:
                        raise Died("sent an unexpected message", "crashed")
            except Died as died:
                startup = child.startup_error() if not started else ""
                child.close()
                if not started and died.kind == "crashed":
                    self.notes.append(
                        "the grader could not start the sandbox for this notebook"
                        + (f" ({startup})" if startup else "")
                    )
                    return None
                if current is None or current in self.skip or time.monotonic() > deadline:
                    self.notes.append(
                        f"your notebook could not be run to the end ({died.reason}); the remaining tests were not run"
                    )
                    return None
                self.skip.add(current)
                self.notes.append(
                    f"cell {current + 1} {died.reason}; it was skipped and the notebook re-run without it"
                )

    def run(self, jobs: list[tuple[Any, int, Any]], blocked: dict[str, str]) -> list[TestResult]:
        results: dict[tuple[str, int], TestResult] = {}
        # every visible case (and its fresh-input run) before any hidden one: what a visible case's
        # output shows (an error message the notebook wrote) cannot depend on how hidden cases went
        pending = sorted((j for j in jobs if j[0].key not in blocked), key=lambda j: bool(j[2].hidden))
        for exercise, i, case in jobs:
            if exercise.key in blocked:
                results[(exercise.key, i)] = result_row(exercise, case, 0, "forbidden", blocked[exercise.key])
        while pending:
            for job in [j for j in pending if self.crashes.get(j[0].key, 0) >= self.limits.max_crashes]:
                pending.remove(job)
                results[(job[0].key, job[1])] = result_row(
                    job[0],
                    job[2],
                    0,
                    "not run",
                    (f"not run: {job[0].target} crashed or timed out in {self.crashes[job[0].key]} earlier cases"),
                )
            if not pending:
                break
            if time.monotonic() > self.deadline:
                for exercise, i, case in pending:
                    results[(exercise.key, i)] = result_row(
                        exercise,
                        case,
                        0,
                        "not run",
                        (f"not run: the submission used up its {self.limits.submission_timeout:g} s"),
                    )
                break
            child = self.start()
            if child is None:
                for exercise, i, case in pending:
                    results[(exercise.key, i)] = result_row(
                        exercise, case, 0, "not run", "not run: the notebook could not be run"
                    )
                break
            try:
                while pending:
                    exercise, i, case = pending.pop(0)
                    if self.crashes.get(exercise.key, 0) >= self.limits.max_crashes:
                        results[(exercise.key, i)] = result_row(
                            exercise,
                            case,
                            0,
                            "not run",
                            (
                                f"not run: {exercise.target} crashed or timed out in "
                                f"{self.crashes[exercise.key]} earlier cases"
                            ),
                        )
                        continue
                    row = self._case(child, exercise, i, case)
                    results[(exercise.key, i)] = row
                    if row.status in ("timeout", "crashed", "memory"):
                        self.crashes[exercise.key] = self.crashes.get(exercise.key, 0) + 1
                        break  # a fresh process for the next case
            finally:
                child.close()
        return [results[(e.key, i)] for e, i, _ in jobs]

    def _case(self, child: SubmissionProcess, exercise: Any, index: int, case: Any) -> TestResult:
        """Run a case on its published inputs and, when a seed is set, again on fresh ones.

        The second run happens whatever the first gave (short of a dead process), so the calls a
        notebook sees never tell it which cases passed.
        """
        try:
            inputs = case.make_inputs()
            packed = wire.pack(inputs)
        except Exception as exc:
            return result_row(exercise, case, 0, "failed", f"internal grader error while making inputs: {exc}")
        row = self._run(child, exercise, index, case, inputs, packed)
        if self.seed is None or row.status in ("timeout", "crashed", "memory"):
            return row
        try:
            with case_inputs.salted(self.seed):
                fresh = case.make_inputs()
            fresh_packed = wire.pack(fresh)
        except Exception as exc:
            return result_row(exercise, case, 0, "failed", f"internal grader error while making inputs: {exc}")
        if fresh_packed == packed:
            return row  # a case with fixed inputs
        again = self._run(child, exercise, index, case, fresh, fresh_packed)
        if row.status != "passed" or again.status in ("timeout", "crashed", "memory"):
            return row if again.status not in ("timeout", "crashed", "memory") else again
        if again.status == "failed":
            return result_row(
                exercise,
                case,
                0,
                "failed",
                (
                    "passes with the published inputs but not with fresh random inputs of the same kind (the "
                    "grader draws new numbers, so answers that depend on the exact published values fail): "
                    + again.output
                )[:1000],
            )
        return again

    def _run(
        self, child: SubmissionProcess, exercise: Any, index: int, case: Any, inputs: dict, packed: tuple[dict, bytes]
    ) -> TestResult:
        structure, blob = packed
        timeout = case.timeout_s or self.limits.case_timeout
        try:
            child.set_deadline(timeout, f"{timeout:g} s")
            child.send(
                {
                    "event": "case",
                    "call": call_name(case),
                    "target": exercise.target,
                    "forbidden": list(exercise.forbidden),
                    "inputs": structure,
                },
                blob,
            )
            reply, out = child.recv()
            child.set_deadline(float("inf"), "")
        except Died as died:
            return result_row(exercise, case, 0, died.kind, died.reason)
        forbidden = [str(n) for n in reply.get("forbidden") or []]
        ops = [str(o) for o in reply.get("ops") or []]
        if forbidden or ops:
            return result_row(exercise, case, 0, "forbidden", explain(forbidden, ops))
        if not reply.get("ok"):
            kind = reply.get("kind")
            if kind == "background":  # the broker's sentence (.broker): something of the notebook still ran
                return result_row(exercise, case, 0, "failed", str(reply.get("error", ""))[:600])
            if kind == "not_implemented":
                return result_row(exercise, case, 0, "not attempted", "not attempted yet (NotImplementedError)")
            return result_row(
                exercise,
                case,
                0,
                "failed",
                error_hints.with_exception_hint(str(reply.get("error", "failed"))[:500], inputs)[:900],
            )
        try:
            with AST_LOCK:  # np.load reads each .npy header with ast.literal_eval
                got = wire.unpack(reply["structure"], out)
        except (ValueError, KeyError, TypeError) as exc:
            return result_row(exercise, case, 0, "failed", f"the output could not be read back: {exc}")
        hint = judge(case, got, inputs)
        if hint is None:
            return result_row(exercise, case, case.points, "passed", "passed")
        return result_row(exercise, case, 0, "failed", str(hint)[:1000])


def result_row(exercise: Any, case: Any, score: float, status: str, output: str) -> TestResult:
    """One row of the results: ``case`` of ``exercise`` with its ``score`` out of the case's points."""
    return TestResult(
        exercise.key, exercise.title, case.name, float(case.points), float(score), status, output, bool(case.hidden)
    )
