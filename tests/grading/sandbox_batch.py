"""One hostile batch graded by the real grader in a subprocess: the set-up the OS-wall tests share.

tests/grading/redteam/test_escape_the_sandbox.py (tier A, bubblewrap) and tests/grading/walls/test_confined.py (tier B, under
the Docker reproduction) each grade ONE folder of attacks beside honest classmates and assert many
things of that one run. What they share lives here: the shell no audit hook sees, the grader with its
static scan switched off, and :func:`grade_batch` (write the notebooks, grade them in a subprocess so a
successful attack fails a test instead of taking pytest down, wait for a forger that outlived its
sandbox, find and kill what was left, read each result back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from grading_fake import tagged_processes, write_submission

from mha_course.grading.walls import container_repro, landlock, seccomp_filter

TESTS = Path(__file__).resolve().parent

# A shell that no audit hook sees: what a submission runs once it is past every Python-level check.
SHELL = """
import os, _posixsubprocess

def sh(command, wait=True):
    r, w = os.pipe()
    pid = _posixsubprocess.fork_exec([b"/bin/sh", b"-c", command.encode()], [b"/bin/sh"], True, (), None, None,
                                     -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.read(r, 100)
    os.close(r)
    if wait:
        return os.waitpid(pid, 0)[1]
    return pid
"""

WRONG_ADD = "def add_arrays(a, b):\n    return a * 0\n"

# The grader's command line with the static scan off: the walls are under test, not the scan. main() reads the
# command line itself, so it moves the arguments off it, as the real command does (grading.hidden_argv).
GRADER = (
    f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom mha_course.grading.engine import pipeline as grader, registry\n"
    "from mha_course.grading.static.scan import ScanReport\n"
    "grader.scan = lambda cells, assignment: ScanReport()\n"
    "registry.register('grading_fake')\nfrom mha_course.grading.grade import main\nsys.exit(main())"
)

# How long a forger that outlived its sandbox gets to rewrite the results before they are read again.
FORGER_WAIT_S = 1.5


def new_batch(root: Path) -> tuple[Path, Path]:
    """The submissions folder and the output folder of a batch under ``root`` (made here)."""
    folder, out = root / "subs", root / "out"
    folder.mkdir()
    out.mkdir()
    return folder, out


def write_batch(
    folder: Path, attacks: dict[str, tuple[list[str], float]], copies: dict[str, Path] | None = None
) -> None:
    """One notebook per attack (name -> (code cells, most points)) and a copy of each file in ``copies`` (name -> file)."""
    for name, (cells, _) in attacks.items():
        write_submission(folder / f"{name}.ipynb", *cells)
    for name, source in (copies or {}).items():
        (folder / f"{name}.ipynb").write_bytes(source.read_bytes())


def grade_batch(
    root: Path,
    attacks: dict[str, tuple[list[str], float]],
    grader_args: list[str],
    marker: str,
    *,
    wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
    env: dict[str, str] | None = None,
    more_leftovers: Callable[[int], list[int]] = lambda grader_pid: [],
    timeout: float = 600,
) -> dict:
    """Grade the folder :func:`new_batch` made under ``root`` (written by :func:`write_batch`) once.

    Results go to ``out/results.json`` and ``out/each/<name>.json``. ``grader_args`` follow the folder
    on the grader's command line; ``wrap`` turns the command into the one to run (e.g. inside the Docker
    reproduction; it must exec the command, so that the pid started is the grader's). Processes tagged with
    ``marker`` (MHA_COURSE_RUN_TAG) or listed by ``more_leftovers(grader's pid)`` after the run are killed and
    returned in ``"left"`` as (pid, description). Returns the completed
    process, the wall time, the results written at exit and after the forger's wait, and each
    submission's result keyed by notebook stem.
    """
    folder, out = root / "subs", root / "out"
    if not folder.is_dir() or not out.is_dir():
        raise ValueError(
            f"root must hold the subs/ and out/ of new_batch, got {sorted(p.name for p in root.iterdir())}"
        )
    results = out / "results.json"
    argv = [sys.executable, "-c", GRADER, str(folder), "--results-dir", str(out / "each"), "--json", str(results)]
    start = time.monotonic()
    with subprocess.Popen(
        wrap(argv + grader_args),
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env or os.environ, MHA_COURSE_RUN_TAG=marker),
    ) as grader:
        try:
            stdout, stderr = grader.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            grader.kill()
            raise
    proc = subprocess.CompletedProcess(grader.args, grader.returncode, stdout, stderr)
    wall = time.monotonic() - start
    written = results.read_text() if results.exists() else ""
    time.sleep(FORGER_WAIT_S)
    left = tagged_processes(marker) + more_leftovers(grader.pid)
    left = [(pid, describe(pid)) for pid in left]
    for pid, _ in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in (out / "each").glob("*.json"))
    }
    return {
        "proc": proc,
        "wall": wall,
        "attacks": attacks,
        "each": each,
        "left": left,
        "written": written,
        "final": results.read_text() if results.exists() else "",
    }


def describe(pid: int) -> str:
    """A process left behind, for the failure message: its state, uid, parent and command line."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        keep = [line for line in status if line.startswith(("State:", "Uid:", "PPid:"))]
        return " ".join(keep) + " " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError as exc:
        return str(exc)


def outputs(data: dict) -> str:
    """Every test output of one submission's result, joined."""
    return " ".join(t["output"] for t in data["tests"])


# The Docker reproduction (tier B as on Gradescope): the tier B tests and the honest corpus sample use it.
_REPRO: dict[str, str | None] = {}


def require_repro() -> None:
    """Skip where the reproduction cannot start (not root, no mount namespaces) or tier B cannot hold (no Landlock)."""
    if "why" not in _REPRO:
        why = None
        if os.geteuid() != 0 or not seccomp_filter.supported():
            why = "needs root on x86_64 Linux"
        elif not landlock.abi_version():
            why = "needs Landlock"
        else:
            done = subprocess.run(container_repro.command(["true"]), capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                why = done.stderr.strip()[-300:]
        _REPRO["why"] = why
    if _REPRO["why"]:
        pytest.skip(f"the Docker reproduction cannot run here: {_REPRO['why']}")
