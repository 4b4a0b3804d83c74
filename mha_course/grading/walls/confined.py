"""Tiers B, ``landlock``, and C, ``uid``: the walls root may still build where namespaces are refused (a default Docker container).

Docker's default seccomp profile refuses ``unshare``/``clone`` with namespace flags to a process
without CAP_SYS_ADMIN, so bubblewrap (tier A, :mod:`mha_course.grading.walls.bubblewrap`) cannot start inside it. Root there
still has CAP_SETUID/SETGID/CHOWN, Landlock and seccomp, and this module builds the sandbox from
them. The grader forks; the child, as root, before it executes the runtime
(``python -m mha_course.grading.inside.runner FD``)::

    session      setsid (its own process group), a cgroup where one is writable
    limits       rlimits: AS, NPROC (exact: the uid is the sandbox's alone), NOFILE, FSIZE, CPU, CORE 0
    no_new_privs prctl(PR_SET_NO_NEW_PRIVS): no setuid program gives anything back
    Landlock     read-only: the system's libraries, the interpreter, third-party packages, the view
                 (tier B)     (:func:`.view.build_view`, first on the path); every child of a site-packages
                              except a real mha_course; read-write: its own scratch folder only.
                              ABI >= 4: TCP bind/connect denied; ABI >= 6: signals and abstract unix
                              sockets scoped to the sandbox
    seccomp      :func:`.seccomp_filter.tier_b_filter` (no sockets but an AF_UNIX pair, no ptrace,
                 namespaces, mounts, BPF, perf, keyrings, io_uring, fallocate, extended attributes)
    identity     setgroups([]), setresgid, setresuid to a uid and gid used by no one else
    scratch      a fresh folder, mode 0700, owned by that uid

then ``exec``. At the end every process of that uid is killed. Tier C is the same without
Landlock: only the uid and file permissions keep the submission from other files ("reduced").
No mount without CAP_SYS_ADMIN, so no size-limited tmpfs: RLIMIT_FSIZE holds each file to the
scratch's limit, seccomp refuses fallocate, and the grader's watch (:mod:`mha_course.grading.engine.process`)
adds up the folder's blocks twice a second, killing past tier A's tmpfs size or :data:`SCRATCH_ENTRIES`
entries (a watch: what is written in the half second before the kill stays until the folder is
removed). No PID namespace: /proc shows every process's ``cmdline`` to the sandbox (never another
uid's ``environ``), so the grader keeps none of its arguments there (:mod:`mha_course.grading.hidden_argv`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..inside.messages import MPL_CONFIG, SCRATCH_ENV
from . import landlock, seccomp_filter
from .resources import RUNTIME_MB, Resources, _Cgroup
from .tier import OpenTier, Tier, Walls, limits_text
from .view import PACKAGE_DIR, SYSTEM_PATHS

UID_BASE = 1_500_000_000  # far above any uid an image's /etc/passwd holds
UID_SPAN = 100_000 * 1000  # tier B's uids are UID_BASE + (grader pid % 100000) * 1000 + a counter (tier A's lie above)
SYSTEM_READ = SYSTEM_PATHS  # the same system as bubblewrap's tier mounts
PSEUDO_READ = ("/proc", "/sys/devices/system", "/dev/zero", "/dev/urandom", "/dev/random")

_counter = itertools.count(1)
_lock = threading.Lock()


def new_uid() -> int:
    """A uid (also the gid) no process uses now: the sandbox's own, so NPROC and kill-by-uid are exact."""
    with _lock:
        while True:
            uid = UID_BASE + (os.getpid() * 1000 + next(_counter) % 1000) % UID_SPAN
            if not uid_pids(uid):
                return uid


def uid_pids(uid: int) -> list[int]:
    """Pids of every live process whose real uid is ``uid`` (from /proc/PID/status: a process cannot hide there).

    Zombies are left out: they hold no memory and die with their parent's wait (the grader's, for the
    sandbox's first process), and a kill loop that waited for them would spin until its rounds ran out.
    """
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                            break
                        if line.startswith(b"Uid:"):
                            if int(line.split()[1]) == uid:
                                found.append(int(entry))
                            break
    return found


def kill_uid(uid: int, rounds: int = 200) -> None:
    """SIGKILL every process of ``uid`` until none is left.

    Each round first forks a helper that becomes ``uid`` and calls kill(-1, SIGKILL): the kernel signals
    every process of that uid under its task-list lock, during which none can fork, so a fork bomb
    cannot outrun it, as it could a loop over /proc. Then whatever /proc still shows (a process of
    that uid with a different saved uid, say) is killed one by one.
    """
    if uid < UID_BASE:
        raise ValueError(f"kill_uid kills a sandbox's uid (>= {UID_BASE}), got {uid}")
    for _ in range(rounds):
        helper = os.fork()
        if helper == 0:  # system calls only, then _exit: the grader's threads are not in this copy
            try:
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)  # Linux spares the caller itself
            finally:
                os._exit(0)
        os.waitpid(helper, 0)
        pids = uid_pids(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def unreachable(path: str | Path) -> str | None:
    """The first folder on ``path``'s way that other users cannot enter (mode without o+x), else None."""
    p = Path(os.path.realpath(path))
    for folder in [*reversed(p.parents), p] if p.is_dir() else reversed(p.parents):
        with contextlib.suppress(OSError):
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return str(folder)
    return None


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def python_roots() -> list[str]:
    """The interpreter's installation, its environment and every site-packages on sys.path."""
    roots = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    roots += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    return list(dict.fromkeys(os.path.realpath(r) for r in roots if os.path.isdir(r)))


def read_rules(view: Path) -> list[tuple[str, int]]:
    """(path, Landlock rights) a submission may read: system, Python, packages, the view. Never the real package.

    A root that holds the real package (a site-packages with mha_course installed, or a prefix above
    it) is granted child by child, skipping the way down to the package; a site-packages itself
    stays listable (imports list it), which shows the real package's file names, not their contents.
    """
    secret = PACKAGE_DIR.resolve()
    project = secret.parent
    hidden = [secret] if project.name in ("site-packages", "dist-packages") else [secret, project]
    rules: list[tuple[str, int]] = []

    def grant(root: Path, rights: int) -> None:
        # Landlock follows links when a rule is added: a venv's lib64 -> lib would grant the package's folder
        root = Path(os.path.realpath(root))
        if _within(root, secret):
            return
        if not any(root in h.parents for h in hidden):
            rules.append((str(root), rights))
            return
        if root.name in ("site-packages", "dist-packages") or str(root) in sys.path:
            rules.append((str(root), landlock.READ_DIR))
        for child in sorted(root.iterdir()):
            grant(child, rights)

    for path in SYSTEM_READ:
        if os.path.exists(path):
            grant(Path(os.path.realpath(path)), landlock.READ_EXEC)
    for path in python_roots():
        grant(Path(path), landlock.READ_EXEC)
    for path in PSEUDO_READ:
        if os.path.exists(path):
            rules.append((path, landlock.READ))
    rules.append(("/dev/null", landlock.READ_FILE | landlock.WRITE_FILE))
    rules.append((str(view), landlock.READ))
    return list(dict.fromkeys(rules))


def _matplotlib_fonts() -> list[Path]:
    with contextlib.suppress(Exception):
        import matplotlib

        return sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    return []


SCRATCH_ENTRIES = 4096  # files and folders a scratch may hold; bounds the watch's walk, too


def scratch_usage(root: Path, max_entries: int = SCRATCH_ENTRIES) -> tuple[int, int]:
    """``(bytes on disk, entries)`` under ``root``; links are not followed, counting stops past ``max_entries``.

    Bytes are allocated blocks (``st_blocks``), so a sparse file counts what it really holds.
    """
    used, entries, folders = 0, 0, [str(root)]
    while folders and entries <= max_entries:
        try:
            with os.scandir(folders.pop()) as listing:
                for entry in listing:
                    entries += 1
                    if entries > max_entries:
                        break
                    with contextlib.suppress(OSError):  # removed while we looked
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
        except OSError:
            continue
    return used, entries


class ConfinedSandbox:
    """One submission process in tier B (Landlock) or C (uid only); the interface of :class:`~mha_course.grading.walls.tier.Sandbox`.

    ``base`` is the grader's folder for scratch folders (mode 0711, root's); ``abi`` the Landlock ABI
    version (0: tier C).
    """

    def __init__(self, view: Path, fd: int, res: Resources, base: Path, abi: int, cgroup: bool = False) -> None:
        self.uid = new_uid()
        self.scratch = Path(tempfile.mkdtemp(prefix="sandbox-", dir=base))
        self.scratch_mb = res.scratch_mb
        self.stderr = tempfile.TemporaryFile()
        self.cgroup = _Cgroup.create(f"b-{self.uid}", res) if cgroup else None
        self._closed = False
        self._calls = 0
        mpl = self.scratch / MPL_CONFIG
        mpl.mkdir()
        for font_list in _matplotlib_fonts():  # the grader's font list: no 2 s font scan in each sandbox
            shutil.copyfile(font_list, mpl / font_list.name)
        for path in (self.scratch, mpl, *mpl.iterdir()):
            os.chown(path, self.uid, self.uid)
        self.scratch.chmod(0o700)
        ruleset = None
        if abi:
            ruleset = landlock.Ruleset(abi)
            for rule_path, rights in read_rules(view):
                ruleset.allow(rule_path, rights)
            ruleset.allow(self.scratch, landlock.READ | landlock.WRITE)
        self.ruleset = ruleset
        scratch = str(self.scratch)
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "TRITON_INTERPRET": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONHASHSEED": "0",
            "MHA_COURSE_RUN_TAG": os.environ.get("MHA_COURSE_RUN_TAG", ""),
            "HOME": scratch,
            "TMPDIR": scratch,
            "MPLCONFIGDIR": str(mpl),
            SCRATCH_ENV: scratch,
            # the view first: it shadows a real mha_course in site-packages (which Landlock denies anyway)
            "PYTHONPATH": f"{view / 'extra'}{os.pathsep}{view}",
        }
        prepare = _child_setup(self.uid, res, ruleset, seccomp_filter.tier_b_filter(), self.cgroup)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-B", "-m", "mha_course.grading.inside.runner", str(fd)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.stderr,
                pass_fds=(fd,),
                env=env,
                preexec_fn=prepare,
                start_new_session=True,
                cwd=scratch,
            )
        except BaseException:
            self.close()
            raise
        finally:
            if ruleset is not None:
                ruleset.close()
        self.pid = self.proc.pid

    def startup_error(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0)
            text = self.stderr.read(20000).decode("utf-8", "replace").strip()
            return " | ".join(text.splitlines()[-3:])
        return ""

    def tasks(self) -> list[int]:
        """Pids of every process of this sandbox (its uid's), for the memory watch (called 10 times a second).

        Most calls only stat /proc/PID (3 ms here, against 14 ms for reading every status file); every
        tenth reads the status files too, which also finds a process that made itself non-dumpable
        (its /proc folder then belongs to root).
        """
        self._calls += 1
        if self._calls % 10 == 1:
            return uid_pids(self.uid)
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{entry}").st_uid == self.uid:
                        found.append(int(entry))
        return found

    def scratch_overuse(self) -> str | None:
        """Why the scratch is over its limits (the watch then kills the sandbox), or None."""
        used, entries = scratch_usage(self.scratch, SCRATCH_ENTRIES)
        if entries > SCRATCH_ENTRIES:
            return f"made more than {SCRATCH_ENTRIES} files and folders in its scratch folder"
        if used > self.scratch_mb * 2**20:
            return f"wrote more than {self.scratch_mb} MiB of files to its scratch folder"
        return None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        kill_uid(self.uid)
        if self.cgroup is not None:
            self.cgroup.kill()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if hasattr(self, "proc"):
            self.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.cgroup is not None:
            self.cgroup.close()
        self.stderr.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def rlimits(res: Resources) -> list[tuple[int, int]]:
    """The rlimits of a tier B or C sandbox, (resource, soft = hard limit).

    RLIMIT_FSIZE is the smaller of the file and the scratch limits: no one file passes the scratch's
    limit, whatever the watch sees (with fallocate refused by seccomp, a file takes blocks only as
    its bytes are written, and writing past the limit fails with EFBIG).
    """
    return [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, min(res.file_mb, res.scratch_mb) * 2**20),
        (resource.RLIMIT_NOFILE, res.open_files),
        (resource.RLIMIT_CPU, res.cpu_seconds),
        (resource.RLIMIT_NPROC, res.processes),
        (resource.RLIMIT_AS, (res.memory_mb + RUNTIME_MB) * 2**20),
    ]


def _child_setup(uid: int, res: Resources, ruleset, seccomp, cgroup):
    """The function the forked child runs before exec: system calls on what the grader prepared, nothing else.

    A failing step is written to stderr (the grader reports it as the start-up error) and the child
    exits 126 without executing anything.
    """
    limits = rlimits(res)

    def prepare() -> None:
        step = "cgroup"
        try:
            if cgroup is not None:
                cgroup.enter()
            step = "rlimits"
            for which, value in limits:
                resource.setrlimit(which, (value, value))
            step = "no_new_privs"
            seccomp_filter.set_no_new_privs()
            if ruleset is not None:
                step = "Landlock"
                ruleset.restrict_self()
            step = "seccomp"
            seccomp.install()
            step = "dropping to the sandbox's uid"
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        except BaseException as exc:
            os.write(2, f"sandbox set-up failed at {step}: {exc}\n".encode())
            os._exit(126)

    return prepare


# --- which tier holds here --------------------------------------------------------------------------

_PROBE = """
import os, sys
assert os.getuid() == {uid} and os.getgid() == {uid} and os.getgroups() == [], "not the sandbox's uid"
assert open("/proc/self/status").read().count("NoNewPrivs:\\t1") == 1, "no_new_privs is off"
if {landlock}:
    try:
        open({secret!r}, "rb")
    except PermissionError:
        pass
    else:
        sys.exit("Landlock let the sandbox read the real package")
"""


def probe(abi: int) -> str | None:
    """None if a tier B (``abi`` >= 1) or C (``abi`` == 0) sandbox starts here, else one sentence saying why not.

    Runs the real set-up (uid, limits, no_new_privs, Landlock, seccomp) on a tiny Python program that
    checks it is confined.
    """
    if not sys.platform.startswith("linux"):
        return f"it needs Linux (this is {sys.platform})"
    if not seccomp_filter.supported():
        return "its seccomp filter is written for x86_64 only"
    if os.geteuid() != 0:
        return "it needs root, to run each submission under a uid of its own"
    for path in (sys.executable, *python_roots()):
        folder = unreachable(path)
        if folder is not None:
            return f"the sandbox's uid cannot reach the Python installation ({path}): {folder} is closed to other users"
    base = Path(tempfile.mkdtemp(prefix="mhag-probe-"))
    view = base / "view"
    view.mkdir()
    base.chmod(0o711)
    try:
        folder = unreachable(view)
        if folder is not None:
            return f"the sandbox's uid cannot reach the grader's temporary folder: {folder} is closed to other users"
        uid = new_uid()
        ruleset = None
        try:
            if abi:
                ruleset = landlock.Ruleset(abi)
                for path, rights in read_rules(view):
                    ruleset.allow(path, rights)
            code = _PROBE.format(uid=uid, landlock=bool(abi), secret=str(PACKAGE_DIR / "__init__.py"))
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", code],
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                preexec_fn=_child_setup(uid, Resources(), ruleset, seccomp_filter.tier_b_filter(), None),
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"its set-up failed ({exc})"
        finally:
            if ruleset is not None:
                ruleset.close()
            kill_uid(uid)
        if done.returncode != 0:
            return (done.stderr.strip().splitlines() or [f"its check exited with status {done.returncode}"])[-1]
        return None
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- the tiers: B with Landlock, C without -----------------------------------------------------------


@dataclass(frozen=True)
class Confined(Tier):
    """Tier B (``with_landlock``) or C (without Landlock: the uid and file permissions alone keep files from it)."""

    with_landlock: bool = True

    def why_not(self) -> str | None:
        abi = landlock.abi_version() if self.with_landlock else 0
        if self.with_landlock and not abi:
            return "Landlock is not available on this kernel (it needs Linux >= 5.13 with Landlock enabled)"
        return probe(abi)

    def open(self, root: Path, cgroup: str | None, refused: dict[str, str]) -> OpenTier:
        abi = landlock.abi_version() if self.with_landlock else 0
        base = root / "scratch"  # each sandbox's scratch folder is made in it, owned by the sandbox's uid
        base.mkdir(mode=0o711)

        def start(view: Path | None, fd: int, res: Resources) -> ConfinedSandbox:
            if view is None:  # these tiers always have walls, so the grader built a view
                raise RuntimeError(f"{self.title} has no view of the package to confine the submission to")
            return ConfinedSandbox(view, fd, res, base, abi, cgroup is not None)

        return OpenTier(self.walls(abi, cgroup, refused), start)

    def walls(self, abi: int, cgroup: str | None, refused: dict[str, str]) -> Walls:
        """The walls as every output reports them, for Landlock ABI ``abi`` (0: none)."""
        res = Resources()
        network = "no sockets but a socket pair to the grader (seccomp)"
        if self.with_landlock and abi >= 4:
            network += "; TCP bind and connect denied (Landlock)"
        limits = {
            "memory": f"--memory-mb + {RUNTIME_MB} MiB (RLIMIT_AS and the grader watch)",
            "processes": f"{res.processes} tasks (RLIMIT_NPROC of the sandbox's own uid)",
            "scratch": (
                f"a private 0700 folder: {res.scratch_mb} MiB watched twice a second (no fallocate; each file "
                f"at most {min(res.file_mb, res.scratch_mb)} MiB, RLIMIT_FSIZE)"
            ),
            "file size": f"{min(res.file_mb, res.scratch_mb)} MiB",
            "CPU": f"{res.cpu_seconds} s",
            "network": network,
        }
        if self.with_landlock:
            detail = f"Landlock ABI {abi}"
            walls = "seccomp, Landlock: read-only view of the runtime, writes only to its scratch folder"
        else:
            detail = "no Landlock on this kernel: uid and file permissions only"
            walls = "seccomp; any file every user may read stays readable to the submission"
        head = f"tier {self.label}" + ("" if self.with_landlock else ", REDUCED")
        sentence = f"{head} ({detail}): own uid, no capabilities, no_new_privs, {walls}; limits: {limits_text(limits)}"
        return Walls(self.name, detail, limits, self.label, dict(refused), sentence)


LANDLOCK = Confined(name="landlock", label="B", strength=20, mechanism="Landlock, seccomp, own uid")
UID = Confined(name="uid", label="C", strength=10, mechanism="own uid only", with_landlock=False)
