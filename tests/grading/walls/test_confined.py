"""Tier B (Landlock + seccomp + own uid) and the Docker reproduction it is tested in.

The first tests check the parts on this machine: the Landlock ruleset, the seccomp program, the
rules that hide the real package, the refusal's wording. The rest run the grader as root under
:mod:`mha_course.grading.walls.container_repro` (moby's seccomp profile, Docker's 14 capabilities, masked
/proc), where bubblewrap fails as it does on Gradescope, and grade one batch there: honest
submissions, the a02 solution and blank exercise, and attacks (escape, theft, tamper, hang, fork
bomb, memory hog, leak, network, a hunt for the class's seed and roster) that reach past every
Python-level defence (the static scan is off, the attacks' shell raises no audit event). The batch
runs in a subprocess, so an attack that got through fails these tests instead of taking pytest down.
Last, red-team files run again there in a child pytest.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, write_submission
from sandbox_batch import GRADER, SHELL, WRONG_ADD, grade_batch, new_batch, outputs, require_repro, write_batch

from mha_course.grading import gradescope
from mha_course.grading.walls import bwrap_refusal, confined, container_repro, landlock, seccomp_filter, tiers
from mha_course.grading.walls.resources import Resources

ROOT = Path(__file__).resolve().parents[3]
REDTEAM = Path(__file__).resolve().parents[1] / "redteam"
MARKER = f"mha-tierb-{os.getpid()}"
SECRET = f"grader-secret-{os.getpid()}"
PYTHON_CHILD = [sys.executable, "-I", "-S", "-c"]


def _run_confined(code: str, ruleset=None, seccomp=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a child that set no_new_privs and then the ruleset and/or filter (still root)."""

    def prepare():
        seccomp_filter.set_no_new_privs()
        if ruleset is not None:
            ruleset.restrict_self()
        if seccomp is not None:
            seccomp.install()

    return subprocess.run(
        PYTHON_CHILD + [code], preexec_fn=prepare, capture_output=True, text=True, timeout=60, cwd="/"
    )


def _need_landlock() -> int:
    abi = landlock.abi_version()
    if not abi or not seccomp_filter.supported():
        pytest.skip("needs Landlock and x86_64")
    return abi


@pytest.mark.slow
def test_landlock_grants_only_what_the_rules_name(tmp_path):
    abi = _need_landlock()
    allowed, denied = tmp_path / "allowed", tmp_path / "denied"
    allowed.mkdir()
    denied.mkdir()
    (allowed / "a.txt").write_text("yes")
    (denied / "b.txt").write_text("no")
    ruleset = landlock.Ruleset(abi)
    for path in confined.python_roots() + ["/usr", "/lib", "/lib64", "/etc/ld.so.cache"]:
        if os.path.exists(path):
            ruleset.allow(path, landlock.READ_EXEC)
    ruleset.allow(allowed, landlock.READ | landlock.WRITE)
    code = (
        "import os\nout = []\n"
        f"out.append(open({str(allowed / 'a.txt')!r}).read())\n"
        f"open({str(allowed / 'new.txt')!r}, 'w').write('x'); out.append('wrote')\n"
        f"for p in ({str(denied / 'b.txt')!r}, '/etc/hostname'):\n"
        "    try:\n        open(p).read(); out.append('read ' + p)\n"
        "    except PermissionError:\n        out.append('denied')\n"
        f"try:\n    open({str(denied / 'c.txt')!r}, 'w')\nexcept PermissionError:\n    out.append('denied')\n"
        "print(' '.join(out))"
    )
    try:
        done = _run_confined(code, ruleset=ruleset)
    finally:
        ruleset.close()
    assert done.stdout.split() == ["yes", "wrote", "denied", "denied", "denied"], done.stderr


def test_landlock_refuses_a_bad_abi():
    with pytest.raises(ValueError, match="ABI version"):
        landlock.Ruleset(0)


# The start of the child programs below: ``err(call)`` is "ok" or the errno's name of the OSError it raised.
ERRNO_PRELUDE = """libc = ctypes.CDLL(None, use_errno=True)
out = []
def err(call):
    try:
        call(); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
"""


@pytest.mark.slow
def test_the_seccomp_filter_refuses_sockets_namespaces_and_ptrace_but_not_threads():
    if not seccomp_filter.supported():
        pytest.skip("the filter is written for x86_64")
    code = f"""
import ctypes, errno, os, socket, threading
{ERRNO_PRELUDE}def raw(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
out.append(err(lambda: socket.socket(socket.AF_INET)))
out.append(err(lambda: socket.socket(socket.AF_UNIX)))
out.append(err(lambda: socket.socketpair(socket.AF_UNIX)))
out.append(err(lambda: socket.socketpair(socket.AF_INET)))
out.append(raw(272, 0x10000000))                # unshare(CLONE_NEWUSER)
out.append(raw(56, 0x10000000 | 17, 0, 0, 0, 0))  # clone(CLONE_NEWUSER | SIGCHLD)
out.append(raw(435, 0, 0))                     # clone3
out.append(raw(101, 16, os.getppid(), 0, 0))   # ptrace(PTRACE_ATTACH, parent)
out.append(raw(165, 0, 0, 0, 0, 0))            # mount
t = threading.Thread(target=out.append, args=("thread",)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(3)
out.append(str(os.waitpid(pid, 0)[1] >> 8))
print(" ".join(out))
"""
    done = _run_confined(code, seccomp=seccomp_filter.tier_b_filter())
    assert done.stdout.split() == [
        "EPERM",
        "EPERM",
        "ok",
        "EPERM",
        "EPERM",
        "EPERM",
        "ENOSYS",
        "EPERM",
        "EPERM",
        "thread",
        "3",
    ], done.stderr


def test_no_file_may_grow_past_the_scratch_limit():
    """RLIMIT_FSIZE is the smaller of the file and scratch limits: one file never holds more than the scratch may."""
    limits = dict(confined.rlimits(Resources(scratch_mb=8, file_mb=64)))
    assert limits[resource.RLIMIT_FSIZE] == 8 * 2**20
    assert dict(confined.rlimits(Resources()))[resource.RLIMIT_FSIZE] == Resources().scratch_mb * 2**20


@pytest.mark.slow
def test_the_filter_and_the_rlimits_refuse_preallocation_and_a_file_past_the_limit(tmp_path):
    """fallocate reserves blocks at once, between two looks of the scratch watch (with FALLOC_FL_KEEP_SIZE
    past RLIMIT_FSIZE too: measured on ext4, 640 MiB under a 64 MiB RLIMIT_FSIZE); seccomp refuses it and
    RLIMIT_FSIZE stops a file at the scratch's limit; a small file is written as ever."""
    if not seccomp_filter.supported():
        pytest.skip("the filter is written for x86_64")
    limit = Resources().scratch_mb * 2**20
    code = f"""
import ctypes, errno, os
{ERRNO_PRELUDE}def raw(result):
    return "ok" if result == 0 else errno.errorcode[ctypes.get_errno()]
fd = os.open("pre", os.O_RDWR | os.O_CREAT, 0o600)
out.append(err(lambda: os.posix_fallocate(fd, 0, 10 * {limit})))
out.append(raw(libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(10 * {limit}))))  # FALLOC_FL_KEEP_SIZE
out.append(str(os.fstat(fd).st_blocks))
out.append(raw(libc.setxattr(b"pre", b"user.fill", b"x" * 60000, ctypes.c_size_t(60000), 0)))
out.append(err(lambda: os.truncate(fd, 10 * {limit})))
def big():
    with open("big", "wb") as f:
        for _ in range(65):
            f.write(bytes(2**20))
out.append(err(big))
out.append(str(os.path.getsize("big") == {limit}))
with open("small.txt", "w") as f:
    f.write("fine")
out.append(open("small.txt").read())
print(" ".join(out))
"""

    def prepare():
        for which, value in confined.rlimits(Resources()):
            if which == resource.RLIMIT_FSIZE:
                resource.setrlimit(which, (value, value))
        seccomp_filter.set_no_new_privs()
        seccomp_filter.tier_b_filter().install()

    done = subprocess.run(
        PYTHON_CHILD + [code], preexec_fn=prepare, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.stdout.split() == ["EPERM", "EPERM", "0", "ENOTSUP", "EFBIG", "EFBIG", "True", "fine"], done.stderr


def test_a_program_too_long_for_the_kernel_is_refused():
    with pytest.raises(ValueError, match="4096"):
        seccomp_filter.Filter({nr: errno.EPERM for nr in range(3000)})


def test_the_real_package_in_site_packages_is_left_out(tmp_path, monkeypatch):
    """A site-packages that holds mha_course: listable, every other child readable, the package not granted."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    for name in ("mha_course", "numpy", "torch"):
        (site / name).mkdir(parents=True)
    (site / "six.py").write_text("")
    view = tmp_path / "view"
    view.mkdir()
    monkeypatch.setattr(confined, "PACKAGE_DIR", site / "mha_course")
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    rules = dict(confined.read_rules(view))
    assert rules[str(site)] == landlock.READ_DIR
    assert all(rules[str(site / n)] == landlock.READ_EXEC for n in ("numpy", "torch", "six.py"))
    assert not [p for p in rules if p.startswith(str(site / "mha_course"))]
    assert str(tmp_path / "venv") not in rules and rules[str(view)] == landlock.READ


def test_a_link_to_the_packages_folder_grants_nothing(tmp_path, monkeypatch):
    """A venv's ``lib64 -> lib``: Landlock follows the link when the rule is added, so granting lib64 whole
    would grant the real package (found on a non-editable install, as Gradescope's setup.sh makes)."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for name in ("mha_course", "numpy"):
        (site / name).mkdir(parents=True)
    (site / "mha_course" / "__init__.py").write_text("")
    (venv / "lib64").symlink_to("lib")
    (venv / "bin").mkdir()
    view = tmp_path / "view"
    view.mkdir()
    monkeypatch.setattr(confined, "PACKAGE_DIR", site / "mha_course")
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    monkeypatch.setattr(sys, "prefix", str(venv))
    secret = (site / "mha_course" / "__init__.py").resolve()
    for path, rights in confined.read_rules(view):
        target = Path(os.path.realpath(path))
        if target == secret or target in secret.parents:
            assert rights & ~landlock.READ_DIR == 0, f"{path} ({target}) grants {rights:#b} over the real package"
    assert str(venv / "lib64") not in dict(confined.read_rules(view))


def test_the_cause_names_dockers_seccomp_profile_and_never_advises_unconfined(monkeypatch):
    monkeypatch.setattr(bwrap_refusal, "_status", lambda: {"Seccomp": "2", "CapEff": "00000000a80425fb"})
    monkeypatch.setattr(bwrap_refusal, "_read", lambda path: "" if "mountinfo" in path else None)
    cause = bwrap_refusal.namespace_cause("No permissions to create new namespace")
    assert cause.startswith("user namespaces refused by seccomp (Docker's default profile")
    said = "bwrap refused to build a sandbox (bwrap: Creating new namespace failed); allow --security-opt seccomp=unconfined"
    assert bwrap_refusal.bwrap_cause(said) == "bwrap: Creating new namespace failed"
    text = tiers.refusal("C", "B", {"A": cause, "B": "Landlock is not available on this kernel"})
    assert "unconfined" not in text and "--min-isolation C" in text and "Docker's default profile" in text


@pytest.mark.slow
def test_the_strongest_tier_that_holds_is_used_and_named():
    from mha_course.grading.engine.process import Isolator
    from mha_course.grading.walls import bubblewrap as isolation

    with pytest.raises(ValueError, match="min_isolation"):
        Isolator(min_isolation="D")
    if isolation.probe() is not None:
        pytest.skip("bubblewrap cannot run here")
    isolator = Isolator()
    try:
        assert isolator.walls.tier == "A" and isolator.walls.as_dict()["tier"] == "A"
        assert isolator.walls.summary().startswith("bubblewrap") and isolator.walls.summary().endswith("(tier A)")
    finally:
        isolator.close()


# --- under the Docker reproduction -------------------------------------------------------------------


@pytest.mark.slow
def test_the_reproduction_refuses_bubblewrap_as_docker_does():
    require_repro()
    script = (
        "grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status; "
        "bwrap --unshare-user --unshare-pid --ro-bind / / --proc /proc --dev /dev true; echo bwrap=$?"
    )
    done = subprocess.run(container_repro.command(["sh", "-c", script]), capture_output=True, text=True, timeout=120)
    status = dict(line.split(":\t") for line in done.stdout.splitlines() if ":\t" in line)
    assert status["CapEff"] == status["CapBnd"] == "00000000a80425fb"  # docker run's capability set
    assert status["Seccomp"] == "2" and "bwrap=1" in done.stdout
    assert "No permissions to create new namespace" in done.stderr or "Operation not permitted" in done.stderr
    # seccomp=unconfined is not enough: a fresh /proc cannot be mounted beside the masked paths (moby#36597)
    unconfined = container_repro.command(["sh", "-c", script], seccomp=False)
    done = subprocess.run(unconfined, capture_output=True, text=True, timeout=120)
    assert "Can't mount proc" in done.stderr and "bwrap=1" in done.stdout


@pytest.mark.slow
def test_below_the_minimum_the_grader_refuses_with_the_real_cause(tmp_path):
    require_repro()
    sub = write_submission(tmp_path / "s.ipynb", GOOD_ADD, GOOD_DOUBLE)
    out = tmp_path / "r.json"
    argv = [sys.executable, "-c", GRADER, str(sub), "--json", str(out), "--quiet", "--min-isolation", "A"]
    done = subprocess.run(container_repro.command(argv), capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert gradescope.validate_results(data) == []
    assert "user namespaces refused by seccomp (Docker's default profile" in data["output"]
    assert "--min-isolation B" in data["output"] and "unconfined" not in data["output"]
    assert data["output"].rstrip().endswith("(only for code you trust)")


def _probe_cell(paths: dict) -> str:
    """A cell whose ``_report()`` tries every escape, theft and tamper the kernel must refuse, and says what
    each got (called by the function under test: a case process runs only the notebook's definitions)."""
    body = f"""
import errno, os
HOME = os.environ["HOME"]
REPORT = []
def attempt(name, action):
    try:
        action()
        REPORT.append(name + "=ok")
    except OSError as e:
        REPORT.append(name + "=" + errno.errorcode.get(e.errno, str(e.errno)))
attempt("shadow", lambda: open("/etc/shadow").read())
attempt("etc", lambda: open("/etc/mhag-escape", "w").write("x"))
attempt("tmp", lambda: open("/tmp/mhag-escape-{os.getpid()}", "w").write("x"))
attempt("library", lambda: open({paths["library"]!r}, "a").write("#"))
attempt("solution", lambda: open({paths["solution"]!r}).read())
attempt("solutions", lambda: os.listdir({paths["solutions"]!r}))
attempt("reference", lambda: open({paths["reference"]!r}).read())
attempt("results", lambda: open({paths["results"]!r}, "w").write("{{}}"))
attempt("scratches", lambda: os.listdir(os.path.dirname(HOME)))
# up the parents while they are the sandbox's own (its uid): a case process, the settled notebook process it
# was forked from, the broker (not dumpable); the grader is the broker's parent (another uid)
def parent(pid):
    return int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
def uid(pid):
    try:
        return next(line.split()[1] for line in open("/proc/%d/status" % pid) if line.startswith("Uid:"))
    except OSError:
        return None
BROKER = os.getppid()
while parent(BROKER) > 1 and uid(parent(BROKER)) == uid(os.getpid()):
    BROKER = parent(BROKER)
GRADER = parent(BROKER)
attempt("environ", lambda: open("/proc/%d/environ" % GRADER).read())
attempt("broker_environ", lambda: open("/proc/%d/environ" % BROKER).read())
REPORT.append("kill=%d" % (sh("kill -0 %d" % GRADER) >> 8))
REPORT.append("tcp=%d" % (sh("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{paths["port"]}'") >> 8))
REPORT.append("leak=%d" % sum({SECRET!r} in v for v in os.environ.values()))
REPORT = " ".join(REPORT)
"""
    return (
        SHELL
        + "\ndef _report():\n"
        + "".join("    " + line + "\n" for line in body.strip().splitlines())
        + "    return REPORT\n"
    )


PREALLOCATE = (
    SHELL
    + """
import errno, os
def _preallocate():
    home, out = os.environ["HOME"], []
    fd = os.open(home + "/reserved", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, 640 * 2**20)
        out.append("posix=ok")
    except OSError as e:
        out.append("posix=" + errno.errorcode[e.errno])
    os.close(fd)
    # util-linux's fallocate(1): FALLOC_FL_KEEP_SIZE, blocks past the file's end (ctypes is closed to a case)
    out.append("keep_size=%d" % (sh("fallocate --keep-size --length 640MiB $HOME/reserved 2>/dev/null") >> 8))
    out.append("blocks=%d" % os.stat(home + "/reserved").st_blocks)
    with open(home + "/small.txt", "w") as f:
        f.write("fine")
    out.append("small=" + open(home + "/small.txt").read())
    return " ".join(out)
"""
)


def _attacks(paths: dict) -> dict[str, tuple[list[str], float]]:
    """name -> (code cells, the most it may score of 6)."""
    results = paths["results"]
    return {
        "a_honest": ([GOOD_ADD, GOOD_DOUBLE], 6),
        # the classmate keeps its answer in its scratch while the thief (started beside it) looks for it
        "b_classmate": (["import os, time\nopen(os.environ['HOME'] + '/answer.txt', 'w').write('a + b')\ntime.sleep(8)", GOOD_ADD, GOOD_DOUBLE], 6),
        "c_thief": (
            [
                "import os, time\nFOUND, SEEN = None, []\nend = time.time() + 6\nwhile FOUND is None and time.time() < end:\n"
                "    for pid in os.listdir('/proc'):\n"
                "        for via in ('cwd', 'root/' + os.path.dirname(os.environ['HOME']).lstrip('/')):\n"
                "            try:\n                FOUND = open(f'/proc/{pid}/{via}/answer.txt').read()\n"
                "            except OSError as e:\n                SEEN.append(type(e).__name__)\n"
                "    time.sleep(0.2)",
                "def add_arrays(a, b):\n    if FOUND is None:\n        raise ValueError('nothing found')\n    return eval(FOUND)\n",
                GOOD_DOUBLE,
            ],
            2,
        ),
        "probe": ([_probe_cell(paths), "def add_arrays(a, b):\n    raise ValueError(_report())\n", GOOD_DOUBLE], 2),
        "shell_works": ([SHELL, "import os\ndef add_arrays(a, b):\n    sh('echo 1 > $HOME/canary')\n    return a + b * int(open(os.environ['HOME'] + '/canary').read())\n", GOOD_DOUBLE], 6),
        "forge_results_after_exit": (
            [
                SHELL + f"sh('setsid sh -c \"for i in $(seq 30); do echo {{}} > {results}; sleep 0.2; done\" &', wait=False)",
                WRONG_ADD,
                GOOD_DOUBLE,
            ],
            2,
        ),
        "detached_sleeper": ([SHELL + f"sh('setsid sh -c \"exec -a {MARKER} sleep 120\" < /dev/null > /dev/null 2>&1 &')", GOOD_ADD, GOOD_DOUBLE], 6),
        "fork_bomb": ([SHELL + "sh('b() { b | b & }; b', wait=False)\nimport time\ntime.sleep(3)", WRONG_ADD, GOOD_DOUBLE], 2),
        # last: a cell that never returns ends the notebook there (the cells after it are not run)
        "hang": ([GOOD_ADD, GOOD_DOUBLE, "while True:\n    pass"], 6),
        "memory_hog": (["import numpy as np\nHOG = []\nfor _ in range(64):\n    HOG.append(np.ones(2**27))", GOOD_ADD, GOOD_DOUBLE], 6),
        # fallocate reserves 10x the scratch at once, between two looks of the watch (refused by seccomp)
        "preallocate": ([PREALLOCATE, "def add_arrays(a, b):\n    raise ValueError(_preallocate())\n", GOOD_DOUBLE], 2),
        # no size-limited tmpfs in tier B: ten 50 MiB files (each under RLIMIT_FSIZE) until the grader's watch kills it
        "disk_filler": ([SHELL + "sh('for i in 0 1 2 3 4 5 6 7 8 9; do dd if=/dev/zero of=$HOME/fill$i bs=1M count=50 status=none; done; sleep 5')", GOOD_ADD, GOOD_DOUBLE], 6),
    }  # fmt: skip


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """ONE batch for every test under the reproduction below: the attacks, the a02 solution and blank
    exercise, and the secrets' hunter, graded with a class seed, a roster and overrides on the command line."""
    require_repro()
    root = tmp_path_factory.mktemp("tierb")
    folder, out = new_batch(root)
    listener = socket.create_server(("127.0.0.1", 0))  # a service on this machine the sandbox must not reach
    paths = {
        "library": str(ROOT / "mha_course" / "core" / "attention.py"),
        "reference": str(ROOT / "mha_course" / "core" / "softmax.py"),
        "solution": str(ROOT / "solutions" / "a02_softmax.ipynb"),
        "solutions": str(ROOT / "solutions"),
        "results": str(out / "results.json"),
        "port": listener.getsockname()[1],
    }
    attacks = _attacks(paths)
    copies = {"z_a02_solution": ROOT / "solutions" / "a02_softmax.ipynb"}
    copies["z_a02_exercise"] = ROOT / "exercises" / "a02_softmax.ipynb"
    hunter, secret_args, needles = _secrets(root, out, [*attacks, *copies, HUNTER_NAME])
    attacks[HUNTER_NAME] = hunter
    write_batch(folder, attacks, copies)
    library = Path(paths["library"]).read_bytes()
    # the case timeout is the hunt's (it reads every file it reaches in one case); no other case here waits
    args = ["--quiet", "--workers", "2", "--cell-timeout", "10", "--case-timeout", "150", "--memory-mb", "1024"]
    try:
        graded = grade_batch(
            root,
            attacks,
            args + secret_args,
            MARKER,
            wrap=container_repro.command,
            env=dict(os.environ, MHA_TIERB_SECRET=SECRET),
            more_leftovers=_processes_of_its_sandboxes,
            timeout=840,
        )
    finally:
        listener.close()
    return {**graded, "library": library == Path(paths["library"]).read_bytes(), "needles": needles}


def _processes_of_its_sandboxes(grader_pid: int) -> list[int]:
    """Live processes with a uid the grader ``grader_pid`` gives its sandboxes: ``confined.new_uid`` draws them
    from UID_BASE + (its pid % 100000) * 1000 + 0..999. Another grader's sandboxes (a tier A test beside this
    one, with uids above; another tier B run on the machine, with its own thousand) are not this batch's."""
    first = confined.UID_BASE + (grader_pid * 1000) % confined.UID_SPAN
    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if first <= _uid(pid) < first + 1000]


def _uid(pid: int) -> int:
    """The real uid of a live process ``pid``; -1 for one that is gone or a zombie.

    A zombie has exited: it runs nothing and holds no memory, only its pid until its parent (init,
    once the grader's sandbox is gone) reaps it, as ``confined.uid_pids`` counts processes too.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        if fields["State"].split()[0] in ("Z", "X"):
            return -1
        return int(fields["Uid"].split()[0])
    except (OSError, KeyError, IndexError, ValueError):
        return -1


@pytest.mark.slow
def test_the_batch_runs_in_tier_b_to_the_end(batch):
    assert batch["proc"].returncode == 0, batch["proc"].stderr[-3000:]
    assert set(batch["each"]) == set(batch["attacks"]) | {"z_a02_solution", "z_a02_exercise"}
    assert HUNTER_NAME in batch["each"]
    for data in batch["each"].values():
        assert data["extra_data"]["isolation"]["tier"] == "B" and data["extra_data"]["isolation"]["kind"] == "landlock"
        assert "tier B" in data["output"]


@pytest.mark.slow
def test_the_a02_solution_gets_full_marks_and_the_blank_exercise_none(batch):
    solution, blank = batch["each"]["z_a02_solution"], batch["each"]["z_a02_exercise"]
    assert solution["score"] == solution["extra_data"]["max_score"] > 0, outputs(solution)[:2000]
    assert blank["score"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["a_honest", "b_classmate", "shell_works", "detached_sleeper", "hang", "memory_hog", "disk_filler"]
)
def test_honest_answers_score_in_full_whatever_else_the_notebook_does(batch, name):
    data = batch["each"][name]
    assert data["score"] == batch["attacks"][name][1], json.dumps(data, indent=1)[:3000]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["c_thief", "probe", "forge_results_after_exit", "fork_bomb"])
def test_no_attack_gains_a_point(batch, name):
    data = batch["each"][name]
    assert data["score"] <= batch["attacks"][name][1], json.dumps(data, indent=1)[:3000]


@pytest.mark.slow
def test_every_escape_theft_tamper_leak_and_connection_is_refused_by_the_kernel(batch):
    report = dict(
        item.split("=") for item in outputs(batch["each"]["probe"]).split("ValueError: ")[1].split(" (cell")[0].split()
    )
    for name in (
        "shadow",
        "etc",
        "tmp",
        "library",
        "solution",
        "solutions",
        "reference",
        "results",
        "scratches",
        "environ",
        "broker_environ",
    ):
        assert report[name] in ("EACCES", "EPERM", "ENOENT", "EROFS"), (name, report)
    assert report["kill"] != "0" and report["tcp"] != "0" and report["leak"] == "0", report
    assert batch["library"], "the real package was changed"


@pytest.mark.slow
def test_preallocation_is_refused_and_a_small_file_still_written(batch):
    """posix_fallocate and fallocate(FALLOC_FL_KEEP_SIZE) of 10x the scratch limit fail (seccomp); before,
    the second reserved 640 MiB at once and the watch killed the sandbox only afterwards."""
    data = batch["each"]["preallocate"]
    text = outputs(data)
    assert "ValueError: " in text, json.dumps(data, indent=1)[:3000]
    report = dict(item.split("=") for item in text.split("ValueError: ")[1].split(" (cell")[0].split())
    assert report == {"posix": "EPERM", "keep_size": "1", "blocks": "0", "small": "fine"}, report


@pytest.mark.slow
def test_resource_attacks_are_stopped_and_explained(batch):
    assert "timed out" in batch["each"]["hang"]["output"] + outputs(batch["each"]["hang"])
    hog = " ".join(batch["each"]["memory_hog"]["output"].splitlines())
    assert "MemoryError" in hog or "memory" in hog
    filler = " ".join((batch["each"]["disk_filler"]["output"] + outputs(batch["each"]["disk_filler"])).splitlines())
    assert "MiB of files to its scratch folder" in filler, filler[:2000]


@pytest.mark.slow
def test_results_are_the_graders_and_no_process_is_left(batch):
    assert batch["written"] and batch["final"] == batch["written"]
    assert batch["left"] == []


def _count_rounds(monkeypatch) -> list[int]:
    """The rounds of the next ``kill_uid`` calls: one ``uid_pids`` reading each (a list that grows)."""
    rounds: list[int] = []
    real = confined.uid_pids

    def counted(uid):
        rounds.append(uid)
        return real(uid)

    monkeypatch.setattr(confined, "uid_pids", counted)
    return rounds


@pytest.mark.slow
def test_uid_pids_sees_a_process_of_that_uid(monkeypatch):
    """The leftover check above can fail: it finds a process of a sandbox uid."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process under another uid")
    uid = confined.new_uid()
    proc = subprocess.Popen(["sleep", "30"], user=uid, group=uid, extra_groups=[])
    try:
        assert confined.uid_pids(uid) == [proc.pid]  # Popen returns after the exec: the process is there
        assert proc.pid in _processes_of_its_sandboxes(os.getpid())  # the batch's leftover check finds it too
        rounds = _count_rounds(monkeypatch)
        start = time.monotonic()
        confined.kill_uid(uid)  # returns once only the unreaped zombie is left (it once spun 4 s on it)
        # counted in rounds, which a busy machine does not stretch: a spin on the zombie takes 200
        assert len(rounds) <= 3 and time.monotonic() - start < 30, len(rounds)
        assert confined.uid_pids(uid) == []
        assert proc.wait(timeout=5) == -9
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(ValueError, match="sandbox's uid"):
        confined.kill_uid(0)


@pytest.mark.slow
def test_kill_uid_stops_a_fork_bomb_at_once(monkeypatch):
    """A uid that keeps forking up to its NPROC is gone, all of it, within a kill_uid call."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process under another uid")
    uid = confined.new_uid()

    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))

    bomb = subprocess.Popen(
        ["sh", "-c", "while :; do sleep 30 & done"],
        user=uid,
        group=uid,
        extra_groups=[],
        preexec_fn=limit,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(confined.uid_pids(uid)) <= 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(confined.uid_pids(uid)) > 10  # the bomb is running
        rounds = _count_rounds(monkeypatch)
        start = time.monotonic()
        confined.kill_uid(uid)
        assert confined.uid_pids(uid) == []
        assert len(rounds) <= 3 and time.monotonic() - start < 30, len(rounds)  # rounds: as above
    finally:
        confined.kill_uid(uid)
        bomb.wait(timeout=10)


ROUND5_SAMPLE = (
    "test_the_shortcut_alone_is_caught_by_the_tripwire",
    "test_an_attack_on_the_settled_state_gains_nothing_unflagged[os.register_at_fork runs in each case process]",
    "test_an_attack_on_the_settled_state_gains_nothing_unflagged[numpy.save replaced: the reply rewritten after the target returns]",
    "test_a_file_one_case_writes_never_reaches_the_next",
    "test_a_case_that_leaves_a_thread_running_is_not_graded",
    "test_honest_idioms_keep_full_marks_and_no_likely_tampering_flag[a helper module written with open().write and imported]",
)


#: Tests of those files NOT run again in tier B (node id prefixes): each grades, in a run identical but for the
#: check, an attack its twin (named beside it) grades in tier B, and checks what the grader computes outside the
#: sandbox from the notebook's text (the static scan's flags and verdicts) or what holds with no walls at all,
#: the same in every tier: their tier A run proves it. Every attack of the three files still meets tier B's walls.
TIER_FREE = (
    # the scan flags the forger's frame walk; twin: test_no_learner_code_runs_while_definitions_load[same name]
    "test_run_code_while_definitions_load.py::test_a_forger_run_by_the_cells_is_flagged_by_default[",
    # the scan flags the module's frame walk; twin: test_a_module_a_cell_wrote_is_not_imported_by_a_case
    "test_run_code_while_definitions_load.py::test_a_module_a_cell_wrote_and_imported_is_flagged_by_default",
    # the scan's einsum verdict and descriptor flag; twin: test_a_target_that_forges_its_reply_answers_only_its_own_case
    "test_run_code_while_definitions_load.py::test_with_the_scan_a_self_forging_target_is_flagged",
    # no sandbox at all (unsafe_no_isolation); twin: test_a_thread_a_case_leaves_is_refused_and_one_a_cell_left_is_gone
    "test_take_over_the_channel.py::test_without_isolation_a_lingering_thread_is_refused_too",
)


@pytest.mark.slow
def test_the_reply_channel_red_team_holds_in_tier_b_too():
    """tests/grading/redteam/test_take_over_the_channel.py (channel takeover, autograd in a pool thread, the re-run oracle, a
    second installed copy, writable places, the honest idioms) and tests/grading/redteam/test_run_code_while_definitions_load.py (learner
    code while a case process loads the definitions, and their default-mode twins) and a sample of
    tests/grading/redteam/test_run_code_around_the_call.py (the settled notebook state: a fork hook, a case-to-case file, a thread
    a case leaves, the tripwire's control) run again inside the Docker reproduction, where bubblewrap is
    refused and the grader falls back to tier B: one child pytest under one start of the reproduction, less
    the :data:`TIER_FREE` tests (whose attacks their twins grade there)."""
    require_repro()
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *(f"--deselect={REDTEAM.relative_to(ROOT) / prefix}" for prefix in TIER_FREE),
        str(REDTEAM / "test_take_over_the_channel.py"),
        str(REDTEAM / "test_run_code_while_definitions_load.py"),
        *(str(REDTEAM / "test_run_code_around_the_call.py") + "::" + test for test in ROUND5_SAMPLE),
    ]
    env = dict(os.environ, MHA_COURSE_EXPECT_TIER="B")
    done = subprocess.run(container_repro.command(argv), capture_output=True, text=True, env=env, timeout=840, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]


# --- the class's secrets: no command line, environment or readable file holds them -----------------------

HUNTER = """
import errno, os, stat, sys
NEEDLES = {needles!r}
EXACT = {exact!r}
STARTS = {starts!r}
PROC_SKIP = ("mem", "pagemap", "clear_refs", "kcore", "kmsg", "task")


def _unhex(text):
    return bytes.fromhex(text)[::-1]  # written reversed, in hex: the notebook itself never holds a secret


def _read(path, found, where):
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    for needle in map(_unhex, NEEDLES):
        if needle in data or needle in os.fsencode(path):
            found.append(where.replace(" ", "_"))
    return len(data)


def _hunt():
    cache = os.path.join(os.environ["HOME"], "hunt.txt")
    if os.path.exists(cache):  # each case is a process of its own: hunt once
        return open(cache).read()
    found, counts = [], {{"cmdline": 0, "environ": 0, "proc_files": 0, "files": 0}}
    broker = os.getppid()
    grader = int(open("/proc/%d/stat" % broker).read().rsplit(")", 1)[1].split()[1])
    grader_said = {{}}
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            names = os.listdir("/proc/" + pid)
        except OSError:
            continue
        for name in names:
            path = "/proc/%s/%s" % (pid, name)
            if name in PROC_SKIP or not os.path.isfile(path):
                continue
            got = _read(path, found, path)
            if isinstance(got, int):
                counts["proc_files"] += 1
                if name in ("cmdline", "environ"):
                    counts[name] += 1
            if int(pid) == grader and name in ("cmdline", "environ"):
                grader_said[name] = got
    seen = set()
    starts = ["/", *STARTS, *sys.path, os.path.dirname(os.environ["HOME"])]
    for start in starts:
        for top, dirs, files in os.walk(start):
            try:
                st = os.stat(top)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen or top.startswith(("/proc", "/sys", "/dev")):
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            for name in files:
                path = os.path.join(top, name)
                try:
                    if not stat.S_ISREG(os.lstat(path).st_mode):
                        continue
                except OSError:
                    continue
                if isinstance(_read(path, found, path), int):
                    counts["files"] += 1
    exact = ",".join(str(_read(_unhex(p).decode(), found, "exact")) for p in EXACT)
    report = " ".join(
        ["found=" + ("|".join(found) or "none")]
        + ["%s=%s" % item for item in sorted(counts.items())]
        + ["grader_cmdline=%s" % grader_said.get("cmdline"), "grader_environ=%s" % grader_said.get("environ")]
        + ["exact=" + exact]
    )
    with open(cache, "w") as f:
        f.write(report)
    return report
"""


def _hex(text: str) -> str:
    return text.encode()[::-1].hex()


HUNTER_NAME = "zz_hunter"  # graded last, beside the a02 notebooks: the timed attacks are done by then


def _secrets(root: Path, out: Path, students: list[str]) -> tuple[tuple[list[str], float], list[str], list[str]]:
    """The class's secrets for the batch under ``root``: a seed, a roster and overrides given on the grader's
    command line, as an instructor types them, and a seed file a run before this one left in ``out``.

    Returns the hunter (cells, most points: a submission that hunts for them in every process's cmdline and
    environ and in every file it can reach), the grader's arguments, and the needles it hunts.
    """
    token = os.urandom(6).hex()
    seed = str(1_000_000_000 + int.from_bytes(os.urandom(4), "big") % 1_000_000_000)  # 10 digits, < 2**31
    roster, overrides = root / f"roster-{token}.csv", root / f"overrides-{token}.csv"
    roster.write_text("id,name\n" + "".join(f"{name},{name}\n" for name in students))
    overrides.write_text("student,exercise,points,reason\nnobody,*,+1,none\n")
    seed_file = out / "grading-seed.json"  # a run before this one recorded the seed
    seed_file.write_text(json.dumps({"seeds": {"earlier": {"seed": int(seed), "first_drawn": "2026-01-01"}}}))
    needles = [seed, f"roster-{token}", f"overrides-{token}"]
    cell = HUNTER.format(
        needles=[_hex(n) for n in needles],
        exact=[_hex(str(p)) for p in (roster, overrides, seed_file)],
        starts=["/usr", "/etc", "/tmp", "/var", "/root", "/home", "/work", "/opt", "/srv", "/run", str(root)],
    )
    assert not [n for n in needles if n in cell], "the hunter's notebook must not hold what it hunts"
    hunter = ([cell, "def add_arrays(a, b):\n    raise ValueError(_hunt())\n", GOOD_DOUBLE], 2)
    args = ["--seed", seed, "--roster", str(roster), "--overrides", str(overrides)]
    return hunter, args, needles


@pytest.mark.slow
def test_no_process_or_file_the_sandbox_reaches_holds_the_seed_or_the_roster(batch):
    """The grader's arguments leave its command line before any sandbox starts, and a root process's
    environment is closed to the sandbox's uid: the hunt reads the grader's cmdline (so it would find
    them there, as it did before) and finds nothing anywhere."""
    assert batch["proc"].returncode == 0, batch["proc"].stderr[-3000:]
    assert batch["each"]["a_honest"]["score"] == 6, json.dumps(batch["each"]["a_honest"], indent=1)[:3000]
    text = outputs(batch["each"][HUNTER_NAME])
    assert "ValueError: " in text, json.dumps(batch["each"][HUNTER_NAME], indent=1)[:3000]
    said = text.split("ValueError: ")[1].split(" (cell")[0]
    report = dict(item.split("=", 1) for item in said.split() if "=" in item)
    assert report["found"] == "none", said
    assert int(report["grader_cmdline"]) > 0, report  # the hunt reached the grader's command line
    assert report["grader_environ"] in ("EACCES", "EPERM"), report  # never its environment
    assert int(report["cmdline"]) >= 3 and int(report["files"]) > 1000, report
    assert set(report["exact"].split(",")) <= {"EACCES", "EPERM", "ENOENT"}, report
