"""The grader: grade submission notebooks, each in its own sandboxed process.

For one submission (:func:`grade_notebook`)::

    read the notebook, identify the assignment from its metadata (never from its file name)
    static scan (:mod:`.scan`): tampering -> 0 with the findings; forbidden name in a target -> that exercise 0
    start a submission process (forked from the zygote) and send it the code cells
        a cell that kills or hangs the process is skipped on the next start (and reported)
    for each case, in the grader's process:
        inputs = case.make_inputs()                   -> sent as JSON + .npy
        the child runs case.call(target, inputs)      <- plain arrays back (no pickle)
        a forbidden call seen by the tripwire         -> 0 with the explanation
        hint = scoring.judge(case, got, inputs)       # the reference runs here, never in the child
        passed? run it again on fresh inputs of the same kind (hints.salted(seed)): answers
        memorised for the published inputs, or the installed package's hidden ones, fail there
        a hang (wall-clock limit), a crash or too much memory costs that case only: the next case
        gets a fresh process (after ``max_crashes`` in one exercise, its remaining cases are not run)

:func:`grade_many` grades a list of notebooks with a pool of worker threads (each drives one
submission process at a time) and a progress bar. Grading never raises for a bad submission:
every failure becomes a failed test with a message, and :class:`SubmissionResult` is always
returned (``error`` set when the notebook could not be graded at all).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import hints, notebook, registry, wire
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

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return max(self.max_points, sum(t.points for t in self.tests))

    def exercise_scores(self) -> dict[str, float]:
        scores: dict[str, float] = {}
        for t in self.tests:
            scores[t.exercise] = scores.get(t.exercise, 0.0) + t.score
        return scores


# --- the zygote and one submission process -----------------------------------------------------

class Zygote:
    """The fork server (:mod:`.zygote`): started on first use, restarted if it dies; thread-safe."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONDONTWRITEBYTECODE="1")
        self._proc = subprocess.Popen([sys.executable, "-m", "mha_course.grading.zygote"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      env=env, start_new_session=True, text=True, bufsize=1)
        line = self._proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError("the grader's zygote process failed to start (try: python -m mha_course.grading.zygote)")

    def spawn(self, connect: str) -> int:
        """Fork a submission process that connects to the Unix socket ``connect``; returns its pid."""
        with self._lock:
            for attempt in range(2):
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                try:
                    self._proc.stdin.write(json.dumps({"connect": connect}) + "\n")
                    self._proc.stdin.flush()
                    reply = json.loads(self._proc.stdout.readline())
                    return int(reply["pid"])
                except (OSError, ValueError, KeyError, TypeError):
                    self.close()
                    if attempt:
                        raise
        raise RuntimeError("unreachable")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=15)  # it kills what is left of the submissions first (zygote._kill_all)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Died(Exception):
    """The submission process ended (or was ended); ``reason`` says why in the learner's terms."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason, self.kind = reason, kind


class _Session:
    """One submission process: start, talk, watch (time and memory), kill."""

    def __init__(self, zygote: Zygote, limits: Limits, workdir: str) -> None:
        self.limits = limits
        self.workdir = workdir
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.deadline = float("inf")
        self.limit_text = ""
        self.killed_for: tuple[str, str] | None = None
        self._stop = threading.Event()
        path = os.path.join(workdir, "grader.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(60)
            self.pid = zygote.spawn(path)
            self.sock, _ = listener.accept()
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.sock.settimeout(None)
        self._watch = threading.Thread(target=self._watchdog, daemon=True)
        self._watch.start()

    def _watchdog(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            proc = None
        limit = self.limits.memory_mb * 2**20
        baseline = None
        while not self._stop.wait(0.1):
            if time.monotonic() > self.deadline:  # checked even when the process is gone: a
                self.killed_for = (f"timed out after {self.limit_text}", "timeout")  # descendant may
                self.kill()                                                          # hold the socket
                return
            try:
                rss = proc.memory_info().rss if proc is not None else None
            except psutil.Error:
                rss = proc = None
            if rss is None:
                continue
            baseline = rss if baseline is None else min(baseline, rss)
            if limit > 0 and rss - baseline > limit:
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

    def kill(self) -> None:
        if self.pid is not None:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(self.pid, signal.SIGKILL)
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
            with contextlib.suppress(OSError):
                self.sock.close()

    def close(self) -> None:
        self._stop.set()
        self.kill()


# --- grading one notebook --------------------------------------------------------------------------

def _sys_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isdir(p)]


class _Grading:
    """The state of grading one submission (cells to skip, crashes so far, results)."""

    def __init__(self, path: Path, nb: Any, assignment: Any, limits: Limits, zygote: Zygote,
                 seed: int | None = None) -> None:
        self.path, self.nb, self.assignment, self.limits, self.zygote = path, nb, assignment, limits, zygote
        self.seed = seed
        self.cells = notebook.code_cells(nb)
        self.skip: set[int] = set()
        self.crashes: dict[str, int] = {}   # exercise key -> crashes and timeouts so far
        self.notes: list[str] = []
        self.cell_errors: dict[int, str] = {}

    def start(self, workdir: str) -> _Session | None:
        """A session whose notebook has run ("ready"), skipping cells that kill or hang it."""
        deadline = time.monotonic() + self.limits.notebook_timeout
        while True:
            session = _Session(self.zygote, self.limits, workdir)
            config = {"module": registry.module_name(self.assignment.key), "sys_path": _sys_path(),
                      "cells": self.cells, "skip": sorted(self.skip), "memory_mb": self.limits.memory_mb,
                      "workdir": workdir}
            current = None
            try:
                session.set_deadline(max(1.0, deadline - time.monotonic()), "the notebook time limit")
                session.send(config)
                while True:
                    message, _ = session.recv()
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
                session.close()
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
        workdir = tempfile.mkdtemp(prefix="mhag-")
        try:
            while pending:
                for job in [j for j in pending if self.crashes.get(j[0].key, 0) >= self.limits.max_crashes]:
                    pending.remove(job)
                    results[(job[0].key, job[1])] = _row(job[0], job[2], 0, "not run", (
                        f"not run: {job[0].target} crashed or timed out in {self.crashes[job[0].key]} earlier cases"))
                if not pending:
                    break
                session = self.start(workdir)
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
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
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
            session.send({"event": "case", "exercise": exercise.key, "case": index, "inputs": structure}, blob)
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
            return _row(exercise, case, 0, "failed", str(reply.get("error", "failed"))[:500])
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


def grade_notebook(path: str | Path, limits: Limits | None = None, zygote: Zygote | None = None,
                   seed: int | None = -1) -> SubmissionResult:
    """Grade one submission notebook; never raises for a bad submission.

    Args:
        path: the .ipynb file (any name: the assignment comes from its metadata).
        limits: time and memory limits (defaults: :class:`Limits`).
        zygote: a shared :class:`Zygote` (one is started and stopped here if omitted).
        seed: the salt of the fresh inputs every passing case is run on again; -1 (default) draws
            one (:func:`new_seed`), None skips the second run.
    """
    limits = limits or Limits()
    own_zygote = zygote is None
    zygote = zygote or Zygote()
    start = time.monotonic()
    result = SubmissionResult(path=str(path), seed=new_seed() if seed == -1 else seed)
    try:
        _grade_into(result, Path(path), limits, zygote)
    except Exception as exc:  # the grader's own failure: report it, never crash the batch
        result.error = f"the grader failed on this notebook ({type(exc).__name__}: {exc})"
    finally:
        if own_zygote:
            zygote.close()
    result.execution_time = time.monotonic() - start
    return result


def _grade_into(result: SubmissionResult, path: Path, limits: Limits, zygote: Zygote) -> None:
    try:
        nb = notebook.load(path)
        assignment = registry.identify(nb)
    except (ValueError, LookupError) as exc:
        result.error = str(exc)
        return
    meta = notebook.metadata(nb)
    result.assignment, result.title, result.version = assignment.key, assignment.title, meta.version
    result.max_points = float(assignment.max_points)
    if meta.version != assignment.version:
        result.notes.append(f"this notebook is version {meta.version} of {assignment.key}; the grader has version "
                            f"{assignment.version} (graded with the grader's tests)")
    grading = _Grading(path, nb, assignment, limits, zygote, result.seed)
    jobs = [(e, i, c) for e in assignment.exercises for i, c in enumerate(e.cases)]
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


def grade_many(paths: Iterable[str | Path], limits: Limits | None = None, workers: int = 2,
               progress: bool = True, seed: int | None = -1) -> list[SubmissionResult]:
    """Grade many notebooks with ``workers`` threads (each drives one submission process) and a progress bar.

    ``seed`` as in :func:`grade_notebook`; one seed is drawn for the whole batch.
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    paths = list(paths)
    seed = new_seed() if seed == -1 else seed
    zygote = Zygote()
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
                tqdm(total=len(paths), desc="grading", unit="nb", disable=not progress) as bar:
            def one(p):
                r = grade_notebook(p, limits, zygote, seed)
                bar.update(1)
                return r

            return list(pool.map(one, paths))
    finally:
        zygote.close()
