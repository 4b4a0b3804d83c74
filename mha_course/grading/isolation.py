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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]   # mha_course/
SCRATCH = "/scratch"                                 # the submission's writable tmpfs
VIEW_EXTRA = "/run/grader"                           # extra modules (an assignment registered from elsewhere)
NOBODY = 65534

# Files of mha_course/grading/ that run inside the sandbox (everything else there is the grader's).
RUNTIME_FILES = ("wire.py", "guard.py", "convert.py", "sandbox.py")

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
                "it needs unprivileged user namespaces, or root)")


class IsolationError(RuntimeError):
    """Bubblewrap is missing or refuses to run here; the message says why and what to do."""


@dataclass(frozen=True)
class Walls:
    """What isolated the submissions of a grading run (reported in the output and in results.json)."""

    kind: str                                   # "bubblewrap" | "none"
    detail: str = ""                            # bubblewrap's version, or why there is none
    limits: dict[str, str] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        return self.kind == "bubblewrap"

    def summary(self) -> str:
        if not self.isolated:
            return (f"NO ISOLATION ({self.detail}): submissions ran as plain processes that could read and change "
                    "this machine's files; use only for code you trust")
        limits = ", ".join(f"{k} {v}" for k, v in self.limits.items())
        return (f"{self.detail}: own mount, PID, IPC and network namespaces, uid {NOBODY}, no capabilities, "
                f"read-only view of the runtime only; limits: {limits}")

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
        proc = subprocess.run([bwrap, *_namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                               "--", "/bin/sh", "-c", "test \"$(id -u)\" = 65534"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc})"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"it exited with status {proc.returncode}"])[-1]
        return (f"bwrap refused to build a sandbox ({why}); inside a container, allow user namespaces "
                "(e.g. docker run --security-opt seccomp=unconfined, or run the grader on the host)")
    return None


def bwrap_version() -> str:
    try:
        out = subprocess.run([bwrap_path() or "bwrap", "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "bubblewrap"
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"


def _namespace_args() -> list[str]:
    return ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL",
            "--die-with-parent", "--new-session"]


# --- the view: what of mha_course the submission can see ---------------------------------------------

_PACKAGE_INIT = '''"""mha_course as a submission sees it while being graded: `check` and the provided building blocks."""

import importlib

PROVIDED = {provided!r}
EXPORTS = {exports!r}  # public names of the provided modules, as the real package exports them


for _name, _module in EXPORTS.items():  # bound now, as the real package does (after the submodule's import)
    globals()[_name] = getattr(importlib.import_module("mha_course." + _module), _name)


def __getattr__(name):
    if name == "check":
        from .grading.selfcheck import check
        return check
    raise AttributeError(
        f"mha_course.{{name}} is not available while grading: it holds the course's reference answers, and this "
        "assignment asks you to write the code yourself (only `check` and the building blocks this assignment "
        f"provides{{' (' + ', '.join(PROVIDED) + ')' if PROVIDED else ''}} can be imported from mha_course)")
'''

_SELFCHECK = '''"""The self-check while grading: a no-op (the grader runs the tests itself, outside this sandbox)."""

GRADING = True


def check(*args, **kwargs):
    return None
'''


def _module_file(name: str) -> Path:
    module = sys.modules.get(name)
    if module is None:
        import importlib

        module = importlib.import_module(name)
    origin = getattr(module, "__file__", None)
    if not origin:
        raise IsolationError(f"module {name} has no source file to put in the sandbox")
    return Path(origin).resolve()


def _local_imports(path: Path, package: str) -> set[str]:
    """mha_course modules a provided module imports (relative or absolute), for the view's closure."""
    import ast

    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
                found.add(mod)
                if not node.module:
                    found.update(f"{base}.{a.name}" for a in node.names)
            elif node.module and node.module.startswith("mha_course."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mha_course."))
    return {m for m in found if m.startswith("mha_course.") and (PACKAGE_DIR.parent / (m.replace(".", "/") + ".py")).is_file()}


def view_modules(call_modules: list[str], provided: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(mha_course modules in the view, extra top-level modules): call modules, provided ones and their imports."""
    inside: set[str] = set()
    done = {f"mha_course.grading.{f[:-3]}" for f in RUNTIME_FILES}  # copied by build_view itself
    extra = []
    todo = list(provided)
    for name in call_modules:
        if name.startswith("mha_course."):
            todo.append(name)
        else:
            extra.append(name)   # e.g. a test's own assignment module
    while todo:
        name = todo.pop()
        if name in inside or name in done:
            continue
        inside.add(name)
        package = name if _module_file(name).name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_local_imports(_module_file(name), package) - inside)
    return sorted(inside), sorted(extra)


def build_view(root: Path, call_modules: list[str], provided: tuple[str, ...]) -> Path:
    """Write the sandbox's copy of mha_course under ``root`` (``root/mha_course``, ``root/extra``); returns root."""
    inside, extra = view_modules(call_modules, provided)
    package = root / "mha_course"
    (package / "grading").mkdir(parents=True, exist_ok=True)
    (root / "extra").mkdir(exist_ok=True)
    import mha_course

    exports = {name: module for name, module in getattr(mha_course, "_EXPORTS", {}).items()
               if f"mha_course.{module}" in inside and module != "grading.selfcheck"}
    (package / "__init__.py").write_text(_PACKAGE_INIT.format(provided=tuple(provided), exports=exports))
    (package / "grading" / "__init__.py").write_text('"""The grader\'s submission runtime."""\n')
    (package / "grading" / "selfcheck.py").write_text(_SELFCHECK)
    for runtime in RUNTIME_FILES:
        shutil.copyfile(PACKAGE_DIR / "grading" / runtime, package / "grading" / runtime)
    (package / "grading" / "calls").mkdir(exist_ok=True)
    shutil.copyfile(PACKAGE_DIR / "grading" / "calls" / "__init__.py", package / "grading" / "calls" / "__init__.py")
    for name in inside:
        source = _module_file(name)
        target = package.parent / Path(*name.split(".")).with_suffix(".py")
        if source.name == "__init__.py":
            target = package.parent / Path(*name.split(".")) / "__init__.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        for parent in target.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
    for name in extra:
        shutil.copyfile(_module_file(name), root / "extra" / (name.replace(".", "/") + ".py"))
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    root.chmod(0o755)
    return root


# --- limits: a cgroup where one is writable, rlimits always ---------------------------------------------

@dataclass(frozen=True)
class Resources:
    """Per-sandbox limits (the grader's :class:`~.grader.Limits` turned into numbers)."""

    memory_mb: int = 2048        # the submission's own allocations, on top of the runtime (torch: ~0.5 GiB)
    processes: int = 64          # tasks (processes and threads) in the sandbox
    cpu_seconds: int = 900       # CPU time of the whole sandbox (the wall-clock watchdog usually acts first)
    scratch_mb: int = 64         # the private tmpfs
    file_mb: int = 64            # the largest file it may write
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
    """"cgroup v2" / "cgroup v1" when a per-sandbox cgroup can be made here, else None."""
    group = _Cgroup.create(f"probe-{os.getpid()}", Resources())
    if group is None:
        return None
    kind = "cgroup v2" if (Path("/sys/fs/cgroup") / "cgroup.controllers").is_file() else "cgroup v1"
    group.close()
    return kind


def _rlimits(res: Resources) -> list[tuple[int, int]]:
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, res.file_mb * 2**20),
              (resource.RLIMIT_NOFILE, res.open_files), (resource.RLIMIT_CPU, res.cpu_seconds)]
    if os.getuid() != 0:  # root's processes are exempt from RLIMIT_NPROC; a cgroup limits them instead
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
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "MPLBACKEND": "Agg", "TRITON_INTERPRET": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONNOUSERSITE": "1", "PYTHONHASHSEED": "0",
               # a label the grader's own tests use to find any process a submission left behind
               "MHA_COURSE_RUN_TAG": os.environ.get("MHA_COURSE_RUN_TAG", "")}
        if view is not None:
            # the package's parent too, for a course imported from a source folder rather than installed:
            # inside the sandbox that folder holds nothing but the view mounted over the package
            env.update(HOME=SCRATCH, TMPDIR=SCRATCH, MPLCONFIGDIR=f"{SCRATCH}/.matplotlib",
                       PYTHONPATH=f"{VIEW_EXTRA}/extra{os.pathsep}{PACKAGE_DIR.parent}")
            command = [bwrap_path() or "bwrap", *_namespace_args(), *_mounts(view, res), "--chdir", SCRATCH,
                       "--", *python]
        else:
            scratch = tempfile.mkdtemp(prefix="mhag-unsafe-")
            self.scratch = scratch
            env.update(HOME=scratch, TMPDIR=scratch, MPLCONFIGDIR=os.path.join(scratch, ".matplotlib"),
                       MHA_COURSE_SCRATCH=scratch, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            command = python
        limits = _rlimits(res)
        group = self.cgroup

        def prepare() -> None:  # runs in the child between fork and exec: system calls only
            if group is not None:
                group.enter()
            for which, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(which, (value, value))

        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, pass_fds=(fd,), env=env, preexec_fn=prepare,
                                     start_new_session=True, cwd="/" if view is not None else self.scratch)
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
    args: list[str] = ["--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                       "--perms", "1777", "--size", size, "--tmpfs", SCRATCH]
    seen: set[str] = set()

    def ro(path: str | Path) -> None:
        p = str(path)
        if p in seen or not os.path.exists(p):
            return
        seen.add(p)
        args.extend(["--ro-bind", p, p])

    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                   "/etc/localtime", "/etc/alternatives"):
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
        if os.path.basename(entry) in ("site-packages", "dist-packages") and \
                not any(entry == s or entry.startswith(s + "/") for s in seen):
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
