"""Tier A, ``bubblewrap``: the operating-system walls around one submission: namespaces, a private view, limits.

Python cannot sandbox Python (a submission can always reach the interpreter's internals), so the
security boundary of the grader is the kernel. Every submission process starts inside its own
``bwrap`` (bubblewrap) sandbox::

    namespaces   mount, PID, IPC, network, UTS, user (and cgroup where the kernel allows)
    identity     uid/gid 65534 (nobody) inside, no capabilities, no new privileges, new session; a
                 grader run as root starts each sandbox as a host uid of its own (:func:`sandbox_uid`),
                 so host file permissions hold inside and RLIMIT_NPROC counts that sandbox alone
    processes    no bwrap init: the runtime's broker (:mod:`mha_course.grading.inside.broker`) is pid 1
    filesystem   read-only: /usr, /lib*, /bin, the Python installation and environment;
                 the package mha_course replaced by a *view* (:func:`build_view`): the submission
                 runtime, the assignment's call functions and its provided building blocks only.
                 solutions/, the exercise modules (hidden tests), the references, the grader,
                 other submissions and the results folder are not mounted at all, and any other
                 copy of mha_course in what is mounted (a second install, .pth, finders) is covered.
                 writable: two private size-limited tmpfs (/scratch, /tmp), gone with the sandbox;
                 /, /run and /dev (its shm folder) are read-only. bwrap's stderr is a pipe the grader
                 reads up to a cap, never a host file.
    network      none (an empty network namespace: not even loopback is shared with the host)
    limits       memory, processes and CPU time through a cgroup where one is writable (root),
                 else rlimits; file size, open files, core dumps through rlimits; wall time by
                 the grader's watchdog.
    lifetime     ``--die-with-parent`` and a PID namespace: killing the sandbox (:meth:`BubblewrapSandbox.kill`)
                 kills every process the submission started, detached or not.

The tier is :data:`BUBBLEWRAP`; :func:`no_walls` starts plain processes (``--unsafe-no-isolation``).
More in ``docs/design/grader.md`` (mha_course.grading.walls.bubblewrap).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..inside.messages import MPL_CONFIG, SCRATCH_ENV
from . import bwrap_refusal
from .resources import RUNTIME_MB, Resources, _Cgroup, _rlimits
from .tier import NO_WALLS, OpenTier, Tier, Walls, limits_text
from .view import (
    PACKAGE_DIR,
    SCRATCH,
    VIEW_EXTRA,
    bind_privately,
    libc_handle,
    mount_args,
    stand_ins,
)

NOBODY = 65534

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
    "it needs unprivileged user namespaces, or root)"
)


class WallKind(StrEnum):
    """The kinds of walls this module builds, as every output writes them (other tiers write their own names)."""

    BUBBLEWRAP = "bubblewrap"  # tier A
    NONE = NO_WALLS  # plain processes (--unsafe-no-isolation)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def probe() -> str | None:
    """None if bubblewrap can build a sandbox here, else one sentence saying why not."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap runs on Linux only (this is {sys.platform})"
    bwrap = bwrap_path()
    if bwrap is None:
        return f"bwrap was not found on PATH: {INSTALL_HINT}"
    try:
        proc = subprocess.run(
            [
                bwrap,
                *_namespace_args(),
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--",
                "/bin/sh",
                "-c",
                'test "$(id -u)" = 65534',
            ],
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=_drop_to(sandbox_uid()) if os.getuid() == 0 else None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc})"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"it exited with status {proc.returncode}"])[-1]
        return (
            f"bwrap refused to build a sandbox ({why}); inside a container, allow user namespaces "
            "(e.g. docker run --security-opt seccomp=unconfined, or run the grader on the host)"
            + (
                " for unprivileged users (the grader, run as root, starts each sandbox as its own uid)"
                if os.getuid() == 0
                else ""
            )
        )
    return None


# As root the grader starts each sandbox as a uid of its own (bubblewrap then builds an unprivileged user
# namespace): run as root, uid 65534 inside would be root outside, and read root's 0600 files in the
# mounts. A uid per sandbox also makes RLIMIT_NPROC count that sandbox's tasks alone.
SANDBOX_UID_BASE = 1_900_000_000
_uids = iter(range(1 << 62))


def sandbox_uid() -> int:
    """A host uid (and gid) no account uses, different for each sandbox this grader starts."""
    with _counter_lock:
        n = next(_uids)
    return SANDBOX_UID_BASE + (os.getpid() % 100_000) * 1000 + n % 1000


def own_uid_possible(scratch_view: Path) -> str | None:
    """As root: None if each sandbox can run as a uid of its own, else why not (one sentence)."""
    mounts, staged = stand_ins(mount_args(scratch_view, Resources()), scratch_view / "stage")
    if not staged:
        return None
    try:
        subprocess.run(["/bin/true"], check=True, timeout=30, preexec_fn=lambda: bind_privately(staged))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{staged[0][0]} is not readable by other users and could not be bound for the sandbox's uid ({exc})"
    return None


def _drop_to(uid: int) -> Any:
    def drop() -> None:  # between fork and exec: system calls only
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return drop


def bwrap_version() -> str:
    try:
        out = subprocess.run([bwrap_path() or "bwrap", "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "bubblewrap"
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"


def _namespace_args() -> list[str]:
    return [
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",  # no bwrap init inside: the runtime's broker is pid 1 and holds the grader's socket alone
    ]


# --- one sandbox ----------------------------------------------------------------------------------------

_counter = iter(range(1, 1 << 62))
_counter_lock = threading.Lock()


class BubblewrapSandbox:
    """One submission process inside its own bubblewrap sandbox (or, unsafe, a plain child process).

    ``fd`` is the submission's end of a socket pair; the runtime (:mod:`mha_course.grading.inside.runner`) serves on it.
    """

    def __init__(self, view: Path | None, fd: int, res: Resources, cgroup: bool, own_uid: bool = False) -> None:
        with _counter_lock:
            name = f"{os.getpid()}-{next(_counter)}"
        self.cgroup = _Cgroup.create(name, res) if cgroup else None
        self.uid = sandbox_uid() if view is not None and own_uid else None
        # bwrap's stderr: a pipe the grader reads up to a cap, then closes (a host file would be
        # writable from inside through /proc/1/fd/2, without bound)
        self._stderr_r, stderr_w = os.pipe()
        self._stderr = bytearray()
        self._stderr_done = threading.Event()
        python = [sys.executable, "-B", "-m", "mha_course.grading.inside.runner", str(fd)]
        staged: list[tuple[str, str]] = []  # mounts bound for the sandbox's own uid (see view.stand_ins)
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",  # no BLAS thread pool: a case runs only while the notebook runs one thread
            "MPLBACKEND": "Agg",
            "TRITON_INTERPRET": "1",  # the sandbox's /dev holds no GPU: set before any cell imports triton
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONHASHSEED": "0",
            # a label the grader's own tests use to find any process a submission left behind
            "MHA_COURSE_RUN_TAG": os.environ.get("MHA_COURSE_RUN_TAG", ""),
        }
        if view is not None:
            # the package's parent too, for a course imported from a source folder rather than installed:
            # inside the sandbox that folder holds nothing but the view mounted over the package
            env.update(
                HOME=SCRATCH,
                TMPDIR=SCRATCH,
                MPLCONFIGDIR=f"{SCRATCH}/{MPL_CONFIG}",
                PYTHONPATH=f"{VIEW_EXTRA}/extra{os.pathsep}{PACKAGE_DIR.parent}",
            )
            mounts = mount_args(view, res)
            if self.uid is not None:
                mounts, staged = stand_ins(mounts, view / "stage")
            command = [
                bwrap_path() or "bwrap",
                *_namespace_args(),
                *mounts,
                "--chdir",
                SCRATCH,
                "--",
                *python,
            ]
        else:
            scratch = tempfile.mkdtemp(prefix="mhag-unsafe-")
            self.scratch = scratch
            env.update(
                HOME=scratch,
                TMPDIR=scratch,
                MPLCONFIGDIR=os.path.join(scratch, MPL_CONFIG),
                **{SCRATCH_ENV: scratch},
                PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            )
            command = python
        libc = libc_handle() if staged else None
        limits = _rlimits(res, own_uid=self.uid is not None)
        group = self.cgroup
        drop = _drop_to(self.uid) if self.uid is not None else None

        def prepare() -> None:  # runs in the child between fork and exec: system calls only
            if group is not None:
                group.enter()
            for which, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(which, (value, value))
            if staged:
                bind_privately(staged, libc)
            if drop is not None:
                drop()

        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr_w,
                pass_fds=(fd,),
                env=env,
                preexec_fn=prepare,
                start_new_session=True,
                cwd="/" if view is not None else self.scratch,
            )
        except BaseException:
            os.close(self._stderr_r)
            raise
        finally:
            os.close(stderr_w)
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.pid = self.proc.pid
        self._closed = False

    STDERR_CAP = 64 * 1024

    def _read_stderr(self) -> None:
        """Keep the first :data:`STDERR_CAP` bytes, then close the pipe (a writer inside gets EPIPE)."""
        try:
            while len(self._stderr) < self.STDERR_CAP:
                chunk = os.read(self._stderr_r, 65536)
                if not chunk:
                    break
                self._stderr += chunk[: self.STDERR_CAP - len(self._stderr)]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self._stderr_r)
            self._stderr_done.set()

    def startup_error(self) -> str:
        """The last lines bwrap or Python printed before the runtime took over (why a start failed)."""
        self._stderr_done.wait(2)
        text = bytes(self._stderr[:20000]).decode("utf-8", "replace").strip()
        return " | ".join(text.splitlines()[-3:])

    def tasks(self) -> list[int]:
        """Host pids of every process of this sandbox (for the memory watch)."""
        if self.cgroup is not None:
            return self.cgroup.pids()
        import psutil

        try:
            root = psutil.Process(self.pid)
            return [self.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.Error:
            return []

    def kill(self) -> None:
        """Kill everything in the sandbox: bwrap, PID 1 of its namespace (and so all below), the cgroup."""
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.proc.kill()
        if self.cgroup is not None:
            self.cgroup.kill()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.cgroup is not None:
            self.cgroup.close()
        if getattr(self, "scratch", None):
            shutil.rmtree(self.scratch, ignore_errors=True)


# --- the tier: bubblewrap, and plain processes when told to grade without walls --------------------------


class Bubblewrap(Tier):
    """Tier A: each submission in its own bubblewrap namespaces (see the module's docstring)."""

    def why_not(self) -> str | None:
        why = probe()
        return None if why is None else bwrap_refusal.explain(why, installed=bwrap_path() is not None)

    def open(self, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
        own_uid, uid_note = False, ""
        if os.getuid() == 0:  # as root, bubblewrap runs each sandbox as a host uid of its own
            no_uid = own_uid_possible(root)
            own_uid = no_uid is None
            uid_note = (
                "a host uid of its own per sandbox"
                if no_uid is None
                else f"root on the host, since {no_uid}: make the Python installation readable by all"
            )

        def start(view: Path | None, fd: int, res: Resources) -> BubblewrapSandbox:
            return BubblewrapSandbox(view, fd, res, cgroup=cgroup is not None, own_uid=own_uid)

        return OpenTier(self.walls(bwrap_version(), cgroup, refused, own_uid, uid_note), start)

    def walls(
        self, version: str, cgroup: str | None, refused: dict[str, str], own_uid: bool = False, uid_note: str = ""
    ) -> Walls:
        """The walls as every output reports them (``own_uid``, ``uid_note``: the grader runs as root)."""
        res = Resources()
        if cgroup:
            processes = f"{res.processes} tasks ({cgroup})"
        elif os.getuid() != 0:
            processes = f"{res.processes} more tasks (RLIMIT_NPROC)"
        elif own_uid:
            processes = f"{res.processes} tasks (RLIMIT_NPROC of the sandbox's own uid)"
        else:
            processes = "not limited (no writable cgroup)"
        limits = {
            "memory": f"--memory-mb + {RUNTIME_MB} MiB for the runtime ({cgroup or 'RLIMIT_AS and the grader watch'})",
            "processes": processes,
            "scratch": f"{res.scratch_mb} MiB tmpfs",
            "file size": f"{res.file_mb} MiB",
            "CPU": f"{res.cpu_seconds} s",
            "network": "none",
        }
        uid = f"uid {NOBODY}" + (f" ({uid_note})" if uid_note else "")
        sentence = (
            f"{version}: own mount, PID, IPC and network namespaces, {uid}, no capabilities, read-only view of the "
            f"runtime only; limits: {limits_text(limits)} (tier {self.label})"
        )
        return Walls(self.name, version, limits, self.label, dict(refused), sentence)


BUBBLEWRAP = Bubblewrap(name=WallKind.BUBBLEWRAP, label="A", strength=30, mechanism="bubblewrap")


def no_walls(refused: dict[str, str]) -> OpenTier:
    """Plain child processes, as ``--unsafe-no-isolation`` asks where no tier holds; every output says so."""
    detail = "; ".join(f"tier {label}: {why}" for label, why in refused.items())
    sentence = (
        f"NO ISOLATION ({detail}): submissions ran as plain processes that could read and change this machine's "
        "files; use only for code you trust"
    )

    def start(view: Path | None, fd: int, res: Resources) -> BubblewrapSandbox:
        return BubblewrapSandbox(None, fd, res, cgroup=False)

    return OpenTier(Walls(WallKind.NONE, detail, refused=dict(refused), sentence=sentence), start)
