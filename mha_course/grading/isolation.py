"""The operating-system walls around one submission: bubblewrap namespaces, a private view, limits.

Python cannot sandbox Python (a submission can always reach the interpreter's internals), so the
security boundary of the grader is the kernel. Every submission process starts inside its own
``bwrap`` (bubblewrap) sandbox::

    namespaces   mount, PID, IPC, network, UTS, user (and cgroup where the kernel allows)
    identity     uid/gid 65534 (nobody) inside, no capabilities, no new privileges, new session
    filesystem   read-only: /usr, /lib*, /bin, the Python installation and environment;
                 the package mha_course replaced by a *view* (:func:`build_view`): the submission
                 runtime, the assignment's call functions and its provided building blocks only.
                 solutions/, the exercise modules (hidden tests), the references, the grader,
                 other submissions and the results folder are not mounted at all.
                 writable: two private size-limited tmpfs (/scratch, /tmp), gone with the sandbox.
    network      none (an empty network namespace: not even loopback is shared with the host)
    limits       memory, processes and CPU time through a cgroup where one is writable (root),
                 else rlimits; file size, open files, core dumps through rlimits; wall time by
                 the grader's watchdog.
    lifetime     ``--die-with-parent`` and a PID namespace: killing the sandbox (:meth:`Sandbox.kill`)
                 kills every process the submission started, detached or not.

Where bubblewrap cannot run (not installed, macOS, or an unprivileged container that refuses user
namespaces) :func:`probe` says why and the grader refuses to grade unless the instructor passes
``--unsafe-no-isolation`` (then each submission is a plain child process with rlimits only, and
:class:`Walls` says so in every result).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The view and the limits are modules of their own; their names are part of this module's API too.
from .limits import RUNTIME_MB, Resources, _Cgroup, _count_own_tasks, _rlimits, cgroup_available  # noqa: F401
from .view import PACKAGE_DIR, RUNTIME_FILES, IsolationError, build_view, view_modules  # noqa: F401

SCRATCH = "/scratch"  # the submission's writable tmpfs
VIEW_EXTRA = "/run/grader"  # extra modules (an assignment registered from elsewhere)
NOBODY = 65534

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
    "it needs unprivileged user namespaces, or root)"
)


@dataclass(frozen=True)
class Walls:
    """What isolated the submissions of a grading run (reported in the output and in results.json)."""

    kind: str  # "bubblewrap" | "none"
    detail: str = ""  # bubblewrap's version, or why there is none
    limits: dict[str, str] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        return self.kind == "bubblewrap"

    def summary(self) -> str:
        if not self.isolated:
            return (
                f"NO ISOLATION ({self.detail}): submissions ran as plain processes that could read and change "
                "this machine's files; use only for code you trust"
            )
        limits = ", ".join(f"{k} {v}" for k, v in self.limits.items())
        return (
            f"{self.detail}: own mount, PID, IPC and network namespaces, uid {NOBODY}, no capabilities, "
            f"read-only view of the runtime only; limits: {limits}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "limits": dict(self.limits), "summary": self.summary()}


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
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc})"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"it exited with status {proc.returncode}"])[-1]
        return (
            f"bwrap refused to build a sandbox ({why}); inside a container, allow user namespaces "
            "(e.g. docker run --security-opt seccomp=unconfined, or run the grader on the host)"
        )
    return None


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
    ]


# --- one sandbox ----------------------------------------------------------------------------------------

_counter = iter(range(1, 1 << 62))
_counter_lock = threading.Lock()


class Sandbox:
    """One submission process inside its own bubblewrap sandbox (or, unsafe, a plain child process).

    ``fd`` is the submission's end of a socket pair; the runtime (:mod:`.sandbox`) serves on it.
    """

    def __init__(self, view: Path | None, fd: int, res: Resources, cgroup: bool) -> None:
        with _counter_lock:
            name = f"{os.getpid()}-{next(_counter)}"
        self.cgroup = _Cgroup.create(name, res) if cgroup else None
        self.stderr = tempfile.TemporaryFile()
        python = [sys.executable, "-B", "-m", "mha_course.grading.sandbox", str(fd)]
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
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
                MPLCONFIGDIR=f"{SCRATCH}/.matplotlib",
                PYTHONPATH=f"{VIEW_EXTRA}/extra{os.pathsep}{PACKAGE_DIR.parent}",
            )
            command = [
                bwrap_path() or "bwrap",
                *_namespace_args(),
                *_mounts(view, res),
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
                MPLCONFIGDIR=os.path.join(scratch, ".matplotlib"),
                MHA_COURSE_SCRATCH=scratch,
                PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            )
            command = python
        limits = _rlimits(res)
        group = self.cgroup

        def prepare() -> None:  # runs in the child between fork and exec: system calls only
            if group is not None:
                group.enter()
            for which, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(which, (value, value))

        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            pass_fds=(fd,),
            env=env,
            preexec_fn=prepare,
            start_new_session=True,
            cwd="/" if view is not None else self.scratch,
        )
        self.pid = self.proc.pid
        self._closed = False

    def startup_error(self) -> str:
        """The last lines bwrap or Python printed before the runtime took over (why a start failed)."""
        with contextlib.suppress(OSError):
            self.stderr.seek(0)
            text = self.stderr.read(20000).decode("utf-8", "replace").strip()
            return " | ".join(text.splitlines()[-3:])
        return ""

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
        self.stderr.close()
        if getattr(self, "scratch", None):
            shutil.rmtree(self.scratch, ignore_errors=True)


def _mounts(view: Path, res: Resources) -> list[str]:
    """bwrap arguments: the read-only system and Python, the view over mha_course, /scratch, /proc, /dev."""
    # The writable places first: a bind below them (a checkout under /tmp) then lands inside the tmpfs.
    size = str(res.scratch_mb * 2**20)
    args: list[str] = [
        "--perms",
        "1777",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        size,
        "--tmpfs",
        SCRATCH,
    ]
    seen: set[str] = set()

    def ro(path: str | Path) -> None:
        p = str(path)
        if p in seen or not os.path.exists(p):
            return
        seen.add(p)
        args.extend(["--ro-bind", p, p])

    for system in (
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/alternatives",
    ):
        if os.path.islink(system):
            args.extend(["--symlink", os.readlink(system), system])
            seen.add(system)
        else:
            ro(system)
    for prefix in {sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}:
        if not any(prefix == s or prefix.startswith(s + "/") for s in seen):
            ro(prefix)
    # Package folders reached through a .pth file (a venv that reuses another's packages): only
    # folders named site-packages/dist-packages, never a source tree that sys.path may also hold.
    for entry in sys.path:
        if os.path.basename(entry) in ("site-packages", "dist-packages") and not any(
            entry == s or entry.startswith(s + "/") for s in seen
        ):
            ro(entry)
    # the view replaces the real package wherever it lives (the repo, or site-packages)
    args.extend(["--ro-bind", str(view / "mha_course"), str(PACKAGE_DIR)])
    args.extend(["--ro-bind", str(view), VIEW_EXTRA])
    cache = _matplotlib_cache()
    if cache:
        args.extend(["--ro-bind", cache, f"{VIEW_EXTRA}-mplcache"])
    args.extend(["--proc", "/proc", "--dev", "/dev"])
    return args


def _matplotlib_cache() -> str | None:
    """The grader's matplotlib cache folder (its font list), copied in by the runtime: no 2 s font scan each start."""
    try:
        import matplotlib

        path = matplotlib.get_cachedir()
        return path if path and any(Path(path).glob("fontlist-*.json")) else None
    except Exception:
        return None
