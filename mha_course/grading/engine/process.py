"""The process layer of the grader: sandboxes, the socket to a submission's process, and its watchdog.

:class:`Isolator` chooses the walls once per grading run (the strongest tier of :mod:`mha_course.grading.walls.tiers`
that holds; or none when told ``--unsafe-no-isolation``) and builds one read-only view of the package per assignment;
:class:`SubmissionProcess` is one submission process in one sandbox, with a watchdog thread that kills the
whole sandbox at a deadline and a socket that carries JSON headers and ``.npy`` blobs (:mod:`mha_course.grading.inside.wire`).
The orchestration (which cells, which cases, what to do after a crash) is :mod:`mha_course.grading.engine.pipeline`'s.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..inside import wire
from ..verdicts import Limits, Status
from ..walls import resources, tiers
from ..walls.tier import Sandbox
from ..walls.view import build_view


class Isolator:
    """Starts the sandboxes of one grading run (thread-safe): the walls are chosen once, a view built per assignment.

    The walls are the strongest registered tier that holds here (:mod:`mha_course.grading.walls.tiers`:
    bubblewrap, Landlock + seccomp + own uid, own uid only). Raises
    :class:`~mha_course.grading.walls.tier.IsolationError` when that tier is weaker than the one whose
    letter ``min_isolation`` is, unless ``unsafe_no_isolation`` (then plain child processes; every result
    says so). Raises ValueError for a letter no tier has.
    """

    def __init__(self, unsafe_no_isolation: bool = False, min_isolation: str = tiers.DEFAULT_MIN_ISOLATION) -> None:
        self.tier, refused = tiers.choose(min_isolation, unsafe_no_isolation)
        self._lock = threading.Lock()
        self._views: dict[str, Path] = {}
        self._root = Path(tempfile.mkdtemp(prefix="mhag-views-"))
        self._root.chmod(0o711)  # each sandbox's own uid enters it to reach its view (and its scratch folder)
        cgroup = resources.cgroup_available() if self.tier is not None else None
        self.use_cgroup = cgroup is not None
        try:
            opened = tiers.open_walls(self.tier, self._root, cgroup, refused)
        except BaseException:
            self.close()
            raise
        self.walls, self._start = opened.walls, opened.start

    def view(self, assignment: Any) -> Path | None:
        if not self.walls.isolated:
            return None
        with self._lock:
            view = self._views.get(assignment.key)
            if view is None:
                root = Path(tempfile.mkdtemp(prefix=f"{assignment.key}-", dir=self._root))
                try:
                    view = build_view(root, sorted(call_modules(assignment)), tuple(assignment.provided))
                except BaseException:
                    shutil.rmtree(root, ignore_errors=True)
                    raise
                self._views[assignment.key] = view
            return view

    def start(self, assignment: Any, fd: int, limits: Limits) -> Sandbox:
        return self._start(self.view(assignment), fd, resources.Resources(memory_mb=limits.memory_mb))

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)


def call_name(case: Any) -> str:
    """``"module:function"`` of a case's call function, checked to resolve back to the same object."""
    call = case.call
    name = f"{call.__module__}:{call.__name__}"
    module = sys.modules.get(call.__module__)
    if getattr(module, call.__name__, None) is not call:
        raise RuntimeError(f"the call function of case {case.name!r} ({name}) is not a module-level function")
    return name


def call_modules(assignment: Any) -> set[str]:
    return {c.call.__module__ for e in assignment.exercises for c in e.cases}


class Died(Exception):
    """The submission process ended (or was ended); ``reason`` says why in the learner's terms."""

    def __init__(self, reason: str, kind: Status) -> None:
        super().__init__(reason)
        self.reason, self.kind = reason, kind


def proportional_size(pids: list[int]) -> int:
    """The bytes ``pids`` hold together: each page shared by n of them counted 1/n (Linux's Pss).

    A case process is forked from the notebook's, so both hold the notebook's pages: their resident sizes
    added would count those twice. Where smaps_rollup cannot be read (tier B: root without
    CAP_SYS_PTRACE reads no other uid's), the resident sizes are added and the one pair of a process and
    its parent that overlap most is counted once: the child beyond its parent only. That undercounts by
    at most one process's size, which RLIMIT_AS bounds.
    """
    import psutil

    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith(b"Pss:"))
        except (OSError, StopIteration, ValueError, IndexError):
            break
    else:
        return total
    rss, parent = {}, {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            rss[pid], parent[pid] = process.memory_info().rss, process.ppid()
    shared = max((min(size, rss[parent[pid]]) for pid, size in rss.items() if parent[pid] in rss), default=0)
    return sum(rss.values()) - shared


RUNTIME_ALLOWANCE_MB = 1024  # torch, numpy and the interpreter itself, before the learner allocates anything


class SubmissionProcess:
    """One submission process in its own sandbox: start, talk, watch (time and memory), kill it whole."""

    def __init__(self, isolator: Isolator, assignment: Any, limits: Limits) -> None:
        self.limits = limits
        self.sandbox: Sandbox | None = None
        self.deadline = float("inf")
        self.limit_text = ""
        self.killed_for: tuple[str, Status] | None = None
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
        # a scratch that is no size-limited tmpfs (tier B) is measured from outside, every fifth tick;
        # files in the scratch are memory in tier A (a tmpfs), so the verdict is the same
        scratch_overuse = getattr(self.sandbox, "scratch_overuse", None)
        ticks = 0
        while not self._stop.wait(0.1):
            ticks += 1
            if time.monotonic() > self.deadline:
                self.killed_for = (f"timed out after {self.limit_text}", Status.TIMEOUT)
                self.kill()
                return
            why = scratch_overuse() if scratch_overuse is not None and ticks % 5 == 0 else None
            if why:
                self.killed_for = (str(why), Status.MEMORY)
                self.kill()
                return
            pids = list(self.sandbox.tasks()) if self.sandbox is not None else []
            rss = 0
            for pid in pids:
                with contextlib.suppress(psutil.Error):
                    rss += psutil.Process(pid).memory_info().rss
            if self.limits.memory_mb > 0 and rss > limit and proportional_size(pids) > limit:
                self.killed_for = (f"used more than {self.limits.memory_mb} MiB of memory", Status.MEMORY)
                self.kill()
                return

    def set_deadline(self, seconds: float, text: str) -> None:
        self.deadline, self.limit_text = time.monotonic() + seconds, text

    def send(self, message: Mapping[str, Any], blob: bytes = b"") -> None:
        try:
            wire.send(self.sock, message, blob)
        except OSError:
            raise self._died() from None

    def recv(self) -> tuple[dict, bytes]:
        try:
            return wire.recv(self.sock)
        except (EOFError, OSError, ValueError, UnicodeDecodeError) as exc:
            raise self._died(exc) from None

    def _died(self, exc: BaseException | None = None) -> Died:
        self.kill()
        if self.killed_for:
            return Died(*self.killed_for)
        if isinstance(exc, ValueError):
            return Died(f"sent back something that is not plain data ({exc})", Status.CRASHED)
        return Died("crashed: the process ended (os._exit, a fatal error, or it was killed)", Status.CRASHED)

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
