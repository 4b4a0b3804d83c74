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
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import hints, isolation, notebook, registry, similarity, wire
from .collect import Submission
from .guard import explain
from .scan import ScanReport, scan
from .scoring import judge


@dataclass(frozen=True)
class Limits:
    """Time and memory limits for one submission."""

    case_timeout: float = 10.0        # seconds per case (a case's own timeout_s wins)
    cell_timeout: float = 60.0        # seconds per notebook cell
    notebook_timeout: float = 180.0   # seconds for all cells together
    memory_mb: int = 2048             # extra memory the submission may allocate
    submission_timeout: float = 600.0  # seconds for everything of one submission (all its sandboxes)
    batch_timeout: float | None = None  # seconds for a whole grade_many run; later submissions are not graded
    max_crashes: int = 2              # crashes/timeouts in one exercise before its other cases are skipped


@dataclass(frozen=True)
class TestResult:
    """One case's verdict, as reported to the learner."""

    exercise: str
    exercise_title: str
    case: str
    points: float
    score: float
    status: str          # passed | failed | not attempted | timeout | crashed | memory | forbidden | not run
    output: str
    hidden: bool

    @property
    def name(self) -> str:
        return f"{self.exercise}: {self.case}"


@dataclass
class SubmissionResult:
    """Everything the grader found for one notebook."""

    path: str
    assignment: str | None = None
    seed: int | None = None      # the salt of the fresh inputs (``--seed`` reproduces a grading run)
    title: str = ""
    version: int | None = None
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    execution_time: float = 0.0
    max_points: float = 0.0
    isolation: dict = field(default_factory=dict)   # what walls the submission ran behind (Walls.as_dict)
    # Who and where (a class run; see collect.py): the path relative to the folder graded, the student.
    key: str = ""
    student: str = ""
    student_id: str = ""
    student_name: str = ""
    copied: list[str] = field(default_factory=list)  # graded functions equal to the library's reference
    # The instructor's overrides: exercise key (or "*", the whole submission) -> points, None = waived.
    adjustments: dict[str, float | None] = field(default_factory=dict)

    def raw_exercise_scores(self) -> dict[str, tuple[float, float]]:
        """Exercise key -> (score, max) as graded, before overrides."""
        scores: dict[str, tuple[float, float]] = {}
        for t in self.tests:
            got, most = scores.get(t.exercise, (0.0, 0.0))
            scores[t.exercise] = (got + t.score, most + t.points)
        return scores

    def exercise_scores(self) -> dict[str, float]:
        """Exercise key -> points, overrides applied (a waived exercise is left out)."""
        scores = {}
        for key, (got, _) in self.raw_exercise_scores().items():
            if key in self.adjustments:
                if self.adjustments[key] is None:
                    continue
                got = self.adjustments[key]
            scores[key] = got
        return scores

    @property
    def score(self) -> float:
        if "*" in self.adjustments:
            return self.adjustments["*"] or 0.0
        return sum(self.exercise_scores().values())

    @property
    def max_score(self) -> float:
        if "*" in self.adjustments and self.adjustments["*"] is None:
            return 0.0
        waived = sum(most for key, (_, most) in self.raw_exercise_scores().items()
                     if key in self.adjustments and self.adjustments[key] is None)
        return max(self.max_points, sum(t.points for t in self.tests)) - waived


# --- the sandboxes and one submission process ---------------------------------------------------

class Isolator:
    """Starts the sandboxes of one grading run (thread-safe): the walls are chosen once, a view built per assignment.

    Raises :class:`~.isolation.IsolationError` when bubblewrap cannot run here, unless
    ``unsafe_no_isolation`` (then submissions run as plain child processes, and every result says so).
    """

    def __init__(self, unsafe_no_isolation: bool = False) -> None:
        why = isolation.probe()
        if why is not None and not unsafe_no_isolation:
            raise isolation.IsolationError(
                f"refusing to grade: {why}. Submissions are untrusted code; grade only inside bubblewrap's "
                "sandbox, or pass --unsafe-no-isolation to run them as plain processes on this machine (only "
                "for code you trust)")
        self._lock = threading.Lock()
        self._views: dict[str, Path] = {}
        self._root = Path(tempfile.mkdtemp(prefix="mhag-views-"))
        if why is None:
            cgroup = isolation.cgroup_available()
            self.use_cgroup = cgroup is not None
            res = isolation.Resources()
            processes = f"{res.processes} tasks ({cgroup})" if cgroup else (
                f"{res.processes} more tasks (RLIMIT_NPROC)" if os.getuid() != 0 else "not limited (no writable cgroup)")
            self.walls = isolation.Walls("bubblewrap", isolation.bwrap_version(), {
                "memory": f"--memory-mb + {isolation.RUNTIME_MB} MiB for the runtime ({cgroup or 'RLIMIT_AS and the grader watch'})",
                "processes": processes, "scratch": f"{res.scratch_mb} MiB tmpfs", "file size": f"{res.file_mb} MiB",
                "CPU": f"{res.cpu_seconds} s", "network": "none"})
        else:
            self.use_cgroup = False
            self.walls = isolation.Walls("none", why)

    def view(self, assignment: Any) -> Path | None:
        if not self.walls.isolated:
            return None
        with self._lock:
            view = self._views.get(assignment.key)
            if view is None:
                root = Path(tempfile.mkdtemp(prefix=f"{assignment.key}-", dir=self._root))
                try:
                    view = isolation.build_view(root, sorted(_call_modules(assignment)), tuple(assignment.provided))
                except BaseException:
                    shutil.rmtree(root, ignore_errors=True)
                    raise
                self._views[assignment.key] = view
            return view

    def start(self, assignment: Any, fd: int, limits: Limits) -> isolation.Sandbox:
        res = isolation.Resources(memory_mb=limits.memory_mb)
        return isolation.Sandbox(self.view(assignment), fd, res, cgroup=self.use_cgroup)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)


def _call_name(case: Any) -> str:
    """``"module:function"`` of a case's call function, checked to resolve back to the same object."""
    call = case.call
    name = f"{call.__module__}:{call.__name__}"
    module = sys.modules.get(call.__module__)
    if getattr(module, call.__name__, None) is not call:
        raise RuntimeError(f"the call function of case {case.name!r} ({name}) is not a module-level function")
    return name


def _call_modules(assignment: Any) -> set[str]:
    return {c.call.__module__ for e in assignment.exercises for c in e.cases}


class _Died(Exception):
    """The submission process ended (or was ended); ``reason`` says why in the learner's terms."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason, self.kind = reason, kind


RUNTIME_ALLOWANCE_MB = 1024  # torch, numpy and the interpreter itself, before the learner allocates anything


class _Session:
    """One submission process in its own sandbox: start, talk, watch (time and memory), kill it whole."""

    def __init__(self, isolator: Isolator, assignment: Any, limits: Limits) -> None:
        self.limits = limits
        self.sandbox: isolation.Sandbox | None = None
        self.deadline = float("inf")
        self.limit_text = ""
        self.killed_for: tuple[str, str] | None = None
        self._stop = threading.Event()
        self.sock, child = socket.socketpair()
        try:
            self.sandbox = isolator.start(assignment, child.fileno(), limits)
        except BaseException:
            self.sock.close()
            raise
        finally:
            child.close()
        self._watch = threading.Thread(target=self._watchdog, daemon=True)
        self._watch.start()

    def _watchdog(self) -> None:
        import psutil

        limit = (self.limits.memory_mb + RUNTIME_ALLOWANCE_MB) * 2**20
        while not self._stop.wait(0.1):
            if time.monotonic() > self.deadline:
                self.killed_for = (f"timed out after {self.limit_text}", "timeout")
                self.kill()
                return
            rss = 0
            for pid in self.sandbox.tasks():
                with contextlib.suppress(psutil.Error):
                    rss += psutil.Process(pid).memory_info().rss
            if self.limits.memory_mb > 0 and rss > limit:
                self.killed_for = (f"used more than {self.limits.memory_mb} MiB of memory", "memory")
                self.kill()
                return

    def set_deadline(self, seconds: float, text: str) -> None:
        self.deadline, self.limit_text = time.monotonic() + seconds, text

    def send(self, message: dict, blob: bytes = b"") -> None:
        try:
            wire.send(self.sock, message, blob)
        except OSError:
            raise self._died() from None

    def recv(self) -> tuple[dict, bytes]:
        try:
            return wire.recv(self.sock)
        except (EOFError, OSError, ValueError, UnicodeDecodeError) as exc:
            raise self._died(exc) from None

    def _died(self, exc: BaseException | None = None) -> _Died:
        self.kill()
        if self.killed_for:
            return _Died(*self.killed_for)
        if isinstance(exc, ValueError):
            return _Died(f"sent back something that is not plain data ({exc})", "crashed")
        return _Died("crashed: the process ended (os._exit, a fatal error, or it was killed)", "crashed")

    def startup_error(self) -> str:
        return self.sandbox.startup_error() if self.sandbox is not None else ""

    def kill(self) -> None:
        if self.sandbox is not None:
            self.sandbox.kill()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread

    def close(self) -> None:
        """Kill the whole sandbox and wait until nothing of it is left."""
        self._stop.set()
        self.kill()
        if self.sandbox is not None:
            self.sandbox.close()
        with contextlib.suppress(OSError):
            self.sock.close()


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

    def start(self) -> _Session | None:
        """A session whose notebook has run ("ready"), skipping cells that kill or hang it."""
        deadline = min(time.monotonic() + self.limits.notebook_timeout, self.deadline)
        assignment = self.assignment
        while True:
            session = _Session(self.isolator, assignment, self.limits)
            config = {"cells": self.cells, "skip": sorted(self.skip), "memory_mb": self.limits.memory_mb,
                      "provided": list(assignment.provided),
                      "extra_modules": sorted(m for m in _call_modules(assignment)
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
                        raise _Died("sent an unexpected message", "crashed")
            except _Died as died:
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

    def _case(self, session: _Session, exercise: Any, index: int, case: Any) -> TestResult:
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

    def _run(self, session: _Session, exercise: Any, index: int, case: Any, inputs: dict,
             packed: tuple[dict, bytes]) -> TestResult:
        structure, blob = packed
        timeout = case.timeout_s or self.limits.case_timeout
        try:
            session.set_deadline(timeout, f"{timeout:g} s")
            session.send({"event": "case", "call": _call_name(case), "target": exercise.target,
                          "forbidden": list(exercise.forbidden), "inputs": structure}, blob)
            reply, out = session.recv()
            session.set_deadline(float("inf"), "")
        except _Died as died:
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
