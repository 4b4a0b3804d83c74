"""One submission's run: its notebook in a sandboxed process, its cases one by one.

:class:`NotebookRun` starts the submission process (skipping cells that kill or hang it), runs each
case there (every visible case before any hidden one) and judges the answer here, runs every case
again on fresh inputs, and keeps the
crashes so far (a sandbox that dies costs that case only; after ``max_crashes`` an exercise's
remaining cases are not run). :mod:`mha_course.grading.engine.pipeline` decides what to run; :mod:`.process` owns the process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple, cast

from ..inside import wire
from ..inside.guard import explain
from ..inside.messages import CaseReply, CaseRequest, Config, Event, ReplyKind
from ..spec import Case, Exercise
from ..static.scan import AST_LOCK
from ..verdicts import STOPPED, Limits, Status, TestResult
from . import error_hints, fresh_draws, notebook
from .process import Died, Isolator, SubmissionProcess, call_modules, call_name
from .scoring import judge

#: What a case that passed its published inputs and failed fresh ones tells the learner. Most such
#: failures are honest bugs that the published example happens not to show: the words accuse nobody.
FRESH_INPUTS_FAILED = (
    "passes with the published inputs but not with fresh random inputs of the same kind: the code is "
    "right on the published example, not yet in general (try other sizes and values); on the fresh inputs: "
)


class Job(NamedTuple):
    """One case to grade: ``case``, the ``case_index``-th of ``exercise``'s cases."""

    exercise: Exercise
    case_index: int  # the case's position in exercise.cases
    case: Case


def broker_config(
    assignment: Any, cells: list[tuple[int, str]], skip: set[int], memory_mb: int, strict: bool = False
) -> Config:
    """The first frame to a submission's broker: its cells, the cells to skip and what the cases need.

    ``strict``: each case loads the notebook's definitions only (an exam setting), instead of starting
    from the state the cells left.
    """
    calls = call_modules(assignment)
    return {
        "cells": cells,
        "skip": sorted(skip),
        "strict": strict,
        "memory_mb": memory_mb,
        "provided": list(assignment.provided),
        "extra_modules": sorted(m for m in calls if not m.startswith("mha_course.grading.calls.")),
        "call_modules": sorted(calls),  # imported once by the broker, not by every case process
        "forbidden": sorted({n for e in assignment.exercises for n in e.forbidden}),
    }


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
        self.left_threads = 0  # threads the cells left running (none of them runs in a case process)
        self.deadline = time.monotonic() + limits.submission_timeout

    def start(self) -> SubmissionProcess | None:
        """A submission process whose notebook has run ("ready"), skipping cells that kill or hang it."""
        deadline = min(time.monotonic() + self.limits.notebook_timeout, self.deadline)
        assignment = self.assignment
        while True:
            child = SubmissionProcess(self.isolator, assignment, self.limits)
            config = broker_config(
                assignment, self.cells, self.skip, self.limits.memory_mb, self.limits.strict_definitions
            )
            current = None
            started = False
            try:
                child.set_deadline(max(1.0, deadline - time.monotonic()), "the notebook time limit")
                child.send(config)
                while True:
                    message, _ = child.recv()
                    started = True
                    event = message.get("event")
                    if event == Event.CELL:
                        current = int(message["index"])
                        left = deadline - time.monotonic()
                        child.set_deadline(
                            max(0.5, min(self.limits.cell_timeout, left)),
                            f"{min(self.limits.cell_timeout, max(left, 0)):.0f} s",
                        )
                    elif event == Event.CELL_DONE:
                        if message.get("error"):
                            self.cell_errors[int(message["index"])] = str(message["error"])[:300]
                        current = None
                    elif event == Event.READY:
                        self.left_threads = int(message.get("threads") or 0)
                        return child
                    else:
                        raise Died("sent an unexpected message", Status.CRASHED)
            except Died as died:
                startup = child.startup_error() if not started else ""
                child.close()
                if not started and died.kind == Status.CRASHED:
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
                self.notes.append(self._skip_from(current, died))

    def _skip_from(self, current: int, died: Died) -> str:
        """Skip the cell that stopped the process; the note that says so.

        A cell that never returns ends the notebook there, as in Jupyter: the cells after it are not run
        and the tests see the notebook as it was before it. A cell that kills its process is skipped alone
        (in strict mode every such cell is skipped alone: the definitions after it still load).
        """
        later = [i for i, _ in self.cells if i > current and i not in self.skip]
        if died.kind == Status.TIMEOUT and not self.limits.strict_definitions and later:
            self.skip.update([current, *later])
            return (
                f"cell {current + 1} {died.reason}: it and the {len(later)} cell{'s' if len(later) > 1 else ''} "
                f"after it were not run (as in Jupyter, where the cells after one that never returns do not run); "
                f"the tests ran on the notebook as it was before cell {current + 1}"
            )
        self.skip.add(current)
        return f"cell {current + 1} {died.reason}; it was skipped and the notebook re-run without it"

    def run(self, jobs: list[Job], blocked: dict[str, str]) -> list[TestResult]:
        results: dict[tuple[str, int], TestResult] = {}
        # every visible case (and its fresh-input run) before any hidden one: what a visible case's
        # output shows (an error message the notebook wrote) cannot depend on how hidden cases went
        pending = sorted((j for j in jobs if j.exercise.key not in blocked), key=lambda j: bool(j.case.hidden))
        for exercise, i, case in jobs:
            if exercise.key in blocked:
                results[(exercise.key, i)] = result_row(exercise, case, 0, Status.FORBIDDEN, blocked[exercise.key])
        while pending:
            for job in [j for j in pending if self._crashed_out(j.exercise)]:
                pending.remove(job)
                results[(job.exercise.key, job.case_index)] = self._not_run_after_crashes(job)
            if not pending:
                break
            why = None
            child = None
            if time.monotonic() > self.deadline:
                why = f"not run: the submission used up its {self.limits.submission_timeout:g} s"
            else:
                child = self.start()
                why = "not run: the notebook could not be run" if child is None else None
            if child is None:
                for exercise, i, case in pending:
                    results[(exercise.key, i)] = result_row(exercise, case, 0, Status.NOT_RUN, str(why))
                break
            try:
                self._cases(child, pending, results)
            finally:
                child.close()
        return [results[(e.key, i)] for e, i, _ in jobs]

    def _crashed_out(self, exercise: Exercise) -> bool:
        return self.crashes.get(exercise.key, 0) >= self.limits.max_crashes

    def _not_run_after_crashes(self, job: Job) -> TestResult:
        exercise = job.exercise
        return result_row(
            exercise,
            job.case,
            0,
            Status.NOT_RUN,
            f"not run: {exercise.target} crashed or timed out in {self.crashes[exercise.key]} earlier cases",
        )

    def _cases(self, child: SubmissionProcess, pending: list[Job], results: dict[tuple[str, int], TestResult]) -> None:
        """Run pending cases in ``child`` until one stops the process (that case's crash is counted)."""
        while pending:
            job = pending.pop(0)
            exercise, i, case = job
            if self._crashed_out(exercise):
                results[(exercise.key, i)] = self._not_run_after_crashes(job)
                continue
            row = self._case(child, exercise, i, case)
            results[(exercise.key, i)] = row
            if row.status in STOPPED:
                self.crashes[exercise.key] = self.crashes.get(exercise.key, 0) + 1
                break  # a fresh process for the next case

    def _case(self, child: SubmissionProcess, exercise: Exercise, index: int, case: Case) -> TestResult:
        """Run a case on its published inputs and, when a seed is set, again on fresh ones.

        The second run happens whatever the first gave (short of a dead process), so the calls a
        notebook sees never tell it which cases passed.
        """
        try:
            inputs = case.make_inputs()
            packed = wire.pack(inputs)
        except Exception as exc:
            return result_row(exercise, case, 0, Status.FAILED, f"internal grader error while making inputs: {exc}")
        row = self._run(child, exercise, index, case, inputs, packed)
        if self.seed is None or row.status in STOPPED:
            return row
        try:
            fresh = fresh_draws.fresh_inputs(case, self.seed)  # a draw that judges plausible bugs as the published one
            fresh_packed = wire.pack(fresh)
        except Exception as exc:
            return result_row(exercise, case, 0, Status.FAILED, f"internal grader error while making inputs: {exc}")
        if fresh_packed == packed:
            return row  # a case with fixed inputs
        again = self._run(child, exercise, index, case, fresh, fresh_packed)
        if row.status != Status.PASSED or again.status in STOPPED:
            return row if again.status not in STOPPED else again
        if again.status == Status.FAILED:
            return result_row(
                exercise,
                case,
                0,
                Status.FAILED,
                (FRESH_INPUTS_FAILED + again.output)[:1000],
            )
        return again

    def _run(
        self,
        child: SubmissionProcess,
        exercise: Exercise,
        index: int,
        case: Case,
        inputs: dict,
        packed: tuple[dict, bytes],
    ) -> TestResult:
        structure, blob = packed
        timeout = case.timeout_s or self.limits.case_timeout
        request: CaseRequest = {
            "event": Event.CASE,
            "call": call_name(case),
            "target": exercise.target,
            "forbidden": list(exercise.forbidden),
            "inputs": structure,
        }
        try:
            child.set_deadline(timeout, f"{timeout:g} s")
            child.send(request, blob)
            message, out = child.recv()
            child.set_deadline(float("inf"), "")
        except Died as died:
            reason = died.reason
            if died.kind == Status.TIMEOUT and self.left_threads:
                reason += (
                    f" (your cells left {self.left_threads} thread{'s' if self.left_threads > 1 else ''} running, "
                    "e.g. a thread pool; a test starts from a copy of your notebook without them, so work handed "
                    "to such a pool never runs: create the pool inside your function)"
                )
            return result_row(exercise, case, 0, died.kind, reason)
        # the sandbox wrote it: every field is read as untrusted (a missing or odd one is a failure)
        reply = cast(CaseReply, message)
        forbidden = [str(n) for n in reply.get("forbidden") or []]
        ops = [str(o) for o in reply.get("ops") or []]
        if forbidden or ops:
            return result_row(exercise, case, 0, Status.FORBIDDEN, explain(forbidden, ops))
        if not reply.get("ok"):
            return self._refused(exercise, case, reply, inputs, self.cell_errors)
        try:
            with AST_LOCK:  # np.load reads each .npy header with ast.literal_eval
                got = wire.unpack(reply["structure"], out)
        except (ValueError, KeyError, TypeError) as exc:
            return result_row(exercise, case, 0, Status.FAILED, f"the output could not be read back: {exc}")
        hint = judge(case, got, inputs)
        if hint is None:
            return result_row(exercise, case, case.points, Status.PASSED, "passed")
        return result_row(exercise, case, 0, Status.FAILED, str(hint)[:1000])

    @staticmethod
    def _refused(
        exercise: Exercise, case: Case, reply: CaseReply, inputs: dict, cell_errors: dict[int, str]
    ) -> TestResult:
        """The row of a reply without an answer (``ok`` false), by its ``kind``.

        A target the notebook does not define names the cells that raised: a definition is most often
        missing because its cell, or one it needs, failed.
        """
        kind = reply.get("kind")
        if kind == ReplyKind.MISSING and cell_errors:
            failed = "; ".join(f"cell {i + 1} raised {e[:160]}" for i, e in sorted(cell_errors.items())[:3])
            return result_row(
                exercise,
                case,
                0,
                Status.FAILED,
                f"your notebook does not define {exercise.target!r} after its cells ran ({failed}): fix the "
                "error, run the notebook top to bottom (Restart and Run All), and check that the name is defined",
            )
        if kind == ReplyKind.BACKGROUND:  # the broker's sentence (.broker): something of the notebook still ran
            return result_row(exercise, case, 0, Status.FAILED, str(reply.get("error", ""))[:600])
        if kind == ReplyKind.NOT_IMPLEMENTED:
            return result_row(exercise, case, 0, Status.NOT_ATTEMPTED, "not attempted yet (NotImplementedError)")
        return result_row(
            exercise,
            case,
            0,
            Status.FAILED,
            error_hints.with_exception_hint(str(reply.get("error", "failed"))[:500], inputs)[:900],
        )


def result_row(exercise: Exercise, case: Case, score: float, status: Status, output: str) -> TestResult:
    """One row of the results: ``case`` of ``exercise`` with its ``score`` out of the case's points."""
    return TestResult(
        exercise.key, exercise.title, case.name, float(case.points), float(score), status, output, bool(case.hidden)
    )
