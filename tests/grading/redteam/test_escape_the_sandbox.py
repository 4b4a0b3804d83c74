"""Red team against the operating-system walls: attacks that get past every Python-level defence.

Each hostile submission below first gets a shell without raising an audit event
(``_posixsubprocess.fork_exec``, the call ``subprocess`` makes after its audit event), so what is
tested is the sandbox itself, not the audit hook, the tripwire or the static scan (switched off
here, as a student who found a way round it would have it). One batch grades them all beside
honest classmates, in a subprocess (a successful attack on the grader must fail this test, not
take pytest down). Every test asserts what the issue of a real grading run needs: the honest get
full marks, the hostile get nothing they did not earn, the batch finishes with its CSV, no file
outside the submissions' scratch folders changes, and no process of a submission is left.

Where the cases came from: the red team against the OS walls (test_grader_isolation.py before the
tests mirrored the package).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, tagged_processes, write_submission
from sandbox_batch import SHELL, WRONG_ADD, grade_batch, new_batch, write_batch

from mha_course.grading.walls import bubblewrap as isolation

ROOT = Path(__file__).resolve().parents[3]
MARKER = f"mha-redteam-{os.getpid()}"


def _attacks(paths: dict[str, str]) -> dict[str, tuple[list[str], float]]:
    """name -> (code cells, the most it may score of 6). ``paths`` names the files an attacker wants."""
    repo, folder, out, secret = paths["repo"], paths["folder"], paths["out"], paths["secret"]
    return {
        "honest": ([GOOD_ADD, GOOD_DOUBLE], 6),
        # the attacks' shell works inside the sandbox (else every attack below would prove nothing)
        "shell_works": (
            [
                SHELL,
                "def add_arrays(a, b):\n    sh('echo 1 > /scratch/canary; echo 1 > /tmp/canary2')\n"
                "    return a + b * int(open('/scratch/canary').read())"
                " * int(open('/tmp/canary2').read())\n",
                GOOD_DOUBLE,
            ],
            6,
        ),
        # escape: change the library, a classmate's notebook, the results; the grader's process
        "rewrite_library": (
            [
                SHELL + f"sh('echo \"def add_arrays(a, b): return a + b\" >> {repo}/mha_course/core/attention.py')",
                WRONG_ADD,
                GOOD_DOUBLE,
            ],
            2,
        ),
        "rewrite_classmate": (
            [SHELL + f"sh('for f in {folder}/*.ipynb; do echo garbage > $f; done')", WRONG_ADD, GOOD_DOUBLE],
            2,
        ),
        "forge_results_after_exit": (
            [
                SHELL + f"sh('setsid sh -c \"exec -a {MARKER} sh -c \\'for i in 1 2 3 4 5 6 7 8 9 10 11 "
                f"12 13 14 15 16 17 18 19 20; do echo \\\\{{\\\\}} > {out}/results.json; sleep 0.2; "
                f"done\\'\" &', wait=False)",
                WRONG_ADD,
                GOOD_DOUBLE,
            ],
            2,
        ),
        "detached_sleeper": (
            [
                SHELL + f"sh('setsid sh -c \"exec -a {MARKER} sleep 120\" < /dev/null > /dev/null 2>&1 &')",
                GOOD_ADD,
                GOOD_DOUBLE,
            ],
            6,
        ),
        "kill_everything": ([SHELL + "sh('kill -9 -1; kill -9 1; pkill -9 -f mha_course')", GOOD_ADD, GOOD_DOUBLE], 6),
        "fork_bomb": (
            [SHELL + "sh('b() { b | b & }; b', wait=False)\nimport time\ntime.sleep(3)", WRONG_ADD, GOOD_DOUBLE],
            2,
        ),
        # stolen answers: a file outside the view, the solutions, a classmate's notebook
        "read_a_secret_file": (
            [
                "import pathlib",
                f"def add_arrays(a, b):\n    return eval(pathlib.Path({secret!r}).read_text())\n",
                GOOD_DOUBLE,
            ],
            2,
        ),
        "find_solutions_on_disk": (
            [
                SHELL,
                f"def add_arrays(a, b):\n    sh('ls {repo}/solutions {folder} > /scratch/found 2>&1')\n"
                "    raise ValueError(open('/scratch/found').read())\n",
                GOOD_DOUBLE,
            ],
            2,
        ),
        # what of the grader is there to read: the runtime, never the hidden tests or the references
        "list_the_grader": (
            [
                "import os, mha_course.grading as g",
                "def add_arrays(a, b):\n    here = os.path.dirname(g.__file__)\n"
                "    folders = (here, os.path.join(here, 'inside'), os.path.join(here, 'learner'),"
                " os.path.dirname(here), os.path.join(os.path.dirname(here), 'core'))\n"
                "    listing = [n for d in folders if os.path.isdir(d) for n in sorted(os.listdir(d))]\n"
                "    raise ValueError(' '.join(listing))\n",
                GOOD_DOUBLE,
            ],
            2,
        ),
        # resources
        "memory_hog": (
            [
                "import numpy as np\nHOG = []\nfor _ in range(64):\n    HOG.append(np.ones(2**27))",
                GOOD_ADD,
                GOOD_DOUBLE,
            ],
            6,
        ),
        "disk_filler": (
            [
                SHELL + "sh('dd if=/dev/zero of=/scratch/fill bs=1M count=500; dd if=/dev/zero of=/tmp/fill "
                "bs=1M count=500')",
                GOOD_ADD,
                GOOD_DOUBLE,
            ],
            6,
        ),
        "network": (
            [
                SHELL + f"STATUS = sh('bash -c \"exec 3<>/dev/tcp/127.0.0.1/{paths['port']}\"')",
                "def add_arrays(a, b):\n    return a + b + STATUS\n",
                GOOD_DOUBLE,
            ],
            4,
        ),
        "honest_classmate": ([GOOD_ADD, GOOD_DOUBLE], 6),
    }


def _tree_digest(*roots: Path) -> dict[str, str]:
    digest = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".pytest_cache" not in path.parts:
                digest[str(path)] = hashlib.sha1(path.read_bytes()).hexdigest()
    return digest


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("isolation")
    folder, out = new_batch(root)
    secret = root / "secret.txt"
    secret.write_text("a + b")
    listener = socket.create_server(("127.0.0.1", 0))  # a host service the sandbox must not reach
    paths = {
        "repo": str(ROOT),
        "folder": str(folder),
        "out": str(out),
        "secret": str(secret),
        "port": listener.getsockname()[1],
    }
    attacks = _attacks(paths)
    write_batch(folder, attacks)
    watched = (ROOT / "mha_course", ROOT / "solutions", ROOT / "exercises", folder)
    before = _tree_digest(*watched)
    args = ["--csv", str(out / "grades.csv"), "--quiet", "--workers", "2", "--case-timeout", "10"]
    args += ["--cell-timeout", "20", "--memory-mb", "1024"]
    try:
        graded = grade_batch(root, attacks, args, MARKER)
    finally:
        listener.close()
    return {**graded, "before": before, "after": _tree_digest(*watched), "csv": out / "grades.csv"}


@pytest.mark.slow
def test_the_batch_finishes_with_every_result(batch):
    assert batch["proc"].returncode == 0, batch["proc"].stderr[-3000:]
    assert set(batch["each"]) == set(batch["attacks"])
    with open(batch["csv"], newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(batch["attacks"])


@pytest.mark.parametrize(
    "name", ["honest", "honest_classmate", "detached_sleeper", "kill_everything", "memory_hog", "disk_filler"]
)
@pytest.mark.slow
def test_honest_answers_score_in_full_whatever_else_the_notebook_does(batch, name):
    data = batch["each"][name]
    assert data["score"] == batch["attacks"][name][1], json.dumps(data, indent=1)[:3000]


@pytest.mark.parametrize(
    "name",
    [
        "rewrite_library",
        "rewrite_classmate",
        "forge_results_after_exit",
        "fork_bomb",
        "read_a_secret_file",
        "find_solutions_on_disk",
        "network",
    ],
)
@pytest.mark.slow
def test_no_attack_gains_a_point(batch, name):
    data = batch["each"][name]
    assert data["score"] <= batch["attacks"][name][1], json.dumps(data, indent=1)[:3000]


@pytest.mark.slow
def test_nothing_outside_the_scratch_folders_changed(batch):
    changed = {p for p in set(batch["before"]) | set(batch["after"]) if batch["before"].get(p) != batch["after"].get(p)}
    assert changed == set()


@pytest.mark.slow
def test_results_are_the_graders_and_stay_so(batch):
    assert batch["written"] and batch["final"] == batch["written"]
    merged = json.loads(batch["final"])
    assert merged["score"] == sum(d["score"] for d in batch["each"].values())
    assert merged["extra_data"]["isolation"]["kind"] == "bubblewrap"


@pytest.mark.slow
def test_no_process_of_a_submission_is_left(batch):
    assert batch["left"] == []


@pytest.mark.slow
def test_what_the_sandbox_sees_is_not_the_disk(batch):
    """The listing a submission made of solutions/ and the submissions folder: neither exists in its view."""
    output = " ".join(t["output"] for t in batch["each"]["find_solutions_on_disk"]["tests"])
    assert "No such file or directory" in output and "a02_softmax" not in output and "honest" not in output


@pytest.mark.slow
def test_the_attack_shell_runs_inside_the_sandbox(batch):
    assert batch["each"]["shell_works"]["score"] == 6, json.dumps(batch["each"]["shell_works"], indent=1)[:2000]


@pytest.mark.slow
def test_the_view_holds_the_runtime_only(batch):
    output = " ".join(t["output"] for t in batch["each"]["list_the_grader"]["tests"])
    assert "runner.py" in output and "broker.py" in output and "calls" in output  # the runtime is there ...
    grader_files = ("exercises", "hints.py", "pipeline.py", "scan.py", "softmax.py", "attention.py", "solutions")
    for hidden in (*grader_files, "engine", "walls", "static", "classroom", "authoring"):
        assert hidden not in output, (hidden, output)  # ... the grader, the tests and the answers are not


@pytest.mark.slow
def test_memory_hog_is_stopped_and_explained(batch):
    notes = " ".join(batch["each"]["memory_hog"]["output"].splitlines())
    assert "MemoryError" in notes or "memory" in notes


@pytest.mark.slow
def test_isolation_is_reported(batch):
    assert "isolation" in batch["each"]["honest"]["extra_data"]
    assert batch["each"]["honest"]["extra_data"]["isolation"]["summary"].startswith("bubblewrap")


@pytest.mark.slow
def test_refuses_without_isolation_unless_told(tmp_path, monkeypatch):
    """Where bubblewrap is missing the grader refuses (exit 3) and says why; --unsafe-no-isolation grades."""
    from mha_course.grading import grade

    sub = write_submission(tmp_path / "s.ipynb", GOOD_ADD, GOOD_DOUBLE)
    monkeypatch.setattr(isolation, "bwrap_path", lambda: None)
    from mha_course.grading.engine import registry

    with registry.registered("grading_fake"):
        assert grade.main([str(sub), "--json", str(tmp_path / "r.json"), "--quiet", "--min-isolation", "A"]) == 3
        assert "could not isolate" in json.loads((tmp_path / "r.json").read_text())["output"]
        argv = [
            str(sub),
            "--json",
            str(tmp_path / "r2.json"),
            "--quiet",
            "--unsafe-no-isolation",
            "--min-isolation",
            "A",
        ]
        assert grade.main(argv) == 0
    data = json.loads((tmp_path / "r2.json").read_text())
    assert data["score"] == 6 and data["extra_data"]["isolation"]["kind"] == "none"
    assert "NO ISOLATION" in data["output"]


@pytest.mark.slow
def test_a_huge_notebook_costs_only_its_own_grade(tmp_path):
    """A 5 MiB cell (the scan would take seconds and gigabytes) is refused before anything parses it; 17 MiB
    more that is not code (saved plots, padding) changes nothing: the limit is on code."""
    from mha_course.grading.classroom.batch import grade_many
    from mha_course.grading.engine import registry

    huge = write_submission(tmp_path / "huge.ipynb", "x = [" + "1," * (5 * 2**19) + "]", GOOD_ADD, GOOD_DOUBLE)
    heavy = tmp_path / "heavy.ipynb"
    heavy.write_text(
        huge.read_text().replace('"outputs": []', '"outputs": [], "padding": "' + "x" * 17 * 2**20 + '"', 1)
    )
    start = time.monotonic()
    with registry.registered("grading_fake"):
        huge_result, heavy_result = grade_many([huge, heavy], unsafe_no_isolation=True, progress=False)
    assert time.monotonic() - start < 30
    assert huge_result.score == 0 and all("KiB of code" in t.output for t in huge_result.tests)
    assert heavy_result.score == 0 and all("KiB of code" in t.output for t in heavy_result.tests)


@pytest.mark.slow
def test_the_batch_time_limit_reports_what_it_did_not_grade(tmp_path):
    from mha_course.grading.classroom.batch import grade_many
    from mha_course.grading.engine import registry
    from mha_course.grading.verdicts import Limits

    subs = [write_submission(tmp_path / f"s{i}.ipynb", GOOD_ADD, GOOD_DOUBLE) for i in range(3)]
    with registry.registered("grading_fake"):
        results = grade_many(subs, Limits(batch_timeout=1e-9), unsafe_no_isolation=True, progress=False, workers=1)
    assert [r.error for r in results] == ["not graded: the batch's time limit (1e-09 s) ran out first"] * 3


@pytest.mark.slow
def test_the_leftover_finder_finds_a_tagged_process():
    """The check behind test_no_process_of_a_submission_is_left can fail: it sees a tagged process."""
    proc = subprocess.Popen(["sleep", "30"], env=dict(os.environ, MHA_COURSE_RUN_TAG=MARKER + "-probe"))
    try:
        time.sleep(0.2)
        assert tagged_processes(MARKER + "-probe") == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
