"""Resource limits of one sandbox: a cgroup (v1 or v2) where one is writable, rlimits always.

Memory, processes and CPU time go through a per-sandbox cgroup when the grader may create one (as
root); otherwise RLIMIT_NPROC bounds processes (a grader run as root starts each sandbox as a uid of
its own, so RLIMIT_NPROC holds there too) and the grader's watch bounds memory. File size,
open files and core dumps are rlimits in every case. :class:`Resources` holds the numbers.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Resources:
    """Per-sandbox limits (the grader's :class:`~mha_course.grading.engine.pipeline.Limits` turned into numbers)."""

    memory_mb: int = 2048  # the submission's own allocations, on top of the runtime (torch: ~0.5 GiB)
    processes: int = 64  # tasks (processes and threads) in the sandbox
    cpu_seconds: int = 900  # CPU time of the whole sandbox (the wall-clock watchdog usually acts first)
    scratch_mb: int = 64  # the private tmpfs
    file_mb: int = 64  # the largest file it may write
    open_files: int = 256


RUNTIME_MB = 1536  # torch, numpy and the Triton interpreter loaded, before any learner code


class _Cgroup:
    """A per-sandbox cgroup with pids and memory limits (v2 unified, or v1 pids+memory hierarchies)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.procs_fds = [os.open(d / "cgroup.procs", os.O_WRONLY) for d in dirs]

    @classmethod
    def create(cls, name: str, res: Resources) -> _Cgroup | None:
        memory = (res.memory_mb + RUNTIME_MB) * 2**20
        v2 = Path("/sys/fs/cgroup")
        try:
            if (v2 / "cgroup.controllers").is_file():
                parent = v2 / "mha_course_grader"
                parent.mkdir(exist_ok=True)
                (parent / "cgroup.subtree_control").write_text("+pids +memory")
                group = parent / name
                group.mkdir()
                (group / "pids.max").write_text(str(res.processes))
                (group / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
                return cls([group])
            pids, mem = v2 / "pids", v2 / "memory"
            if (pids / "cgroup.procs").is_file() and (mem / "cgroup.procs").is_file():
                made = []
                for root in (pids, mem):
                    group = root / "mha_course_grader" / name
                    group.mkdir(parents=True)
                    made.append(group)
                (made[0] / "pids.max").write_text(str(res.processes))
                (made[1] / "memory.limit_in_bytes").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (made[1] / "memory.memsw.limit_in_bytes").write_text(str(memory))
                return cls(made)
        except OSError:
            return None
        return None

    def enter(self) -> None:
        """In the forked child before exec: move this process (and so all it starts) into the cgroup."""
        for fd in self.procs_fds:
            os.write(fd, b"0")

    def pids(self) -> list[int]:
        found: list[int] = []
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.extend(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def kill(self) -> None:
        kill_file = self.dirs[0] / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def close(self) -> None:
        for fd in self.procs_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.kill()
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def cgroup_available() -> str | None:
    """ "cgroup v2" / "cgroup v1" when a per-sandbox cgroup can be made here, else None."""
    group = _Cgroup.create(f"probe-{os.getpid()}", Resources())
    if group is None:
        return None
    kind = "cgroup v2" if (Path("/sys/fs/cgroup") / "cgroup.controllers").is_file() else "cgroup v1"
    group.close()
    return kind


def _rlimits(res: Resources, own_uid: bool = False) -> list[tuple[int, int]]:
    """The rlimits of a sandbox; ``own_uid``: it runs as a uid of its own (the grader is root), whose tasks are its own."""
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, res.file_mb * 2**20),
        (resource.RLIMIT_NOFILE, res.open_files),
        (resource.RLIMIT_CPU, res.cpu_seconds),
    ]
    if own_uid:
        limits.append((resource.RLIMIT_NPROC, res.processes))
    elif os.getuid() != 0:  # root's processes are exempt from RLIMIT_NPROC; a cgroup limits them instead
        current = _count_own_tasks()
        limits.append((resource.RLIMIT_NPROC, current + res.processes))
    return limits


def _count_own_tasks() -> int:
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count
