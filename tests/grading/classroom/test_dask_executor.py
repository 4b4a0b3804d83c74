"""Grading a class on a Dask cluster (``grade --dask``): the same outputs as on one machine, and refusals that say why.

The slow test grades one small class twice, here and on a Dask ``LocalCluster`` of 2 worker processes,
and compares every output byte for byte. The others need no cluster: a stub stands in for Dask's client.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from grading_fake import require_sandbox

from mha_course.grading.classroom import dask_executor, executors
from mha_course.grading.classroom.batch import Batch
from mha_course.grading.classroom.dask_executor import ClusterError, DaskExecutor, course_digest, parse_address
from mha_course.grading.grade import main
from mha_course.grading.verdicts import Limits

ROOT = Path(__file__).resolve().parents[3]
ASSIGNMENT = "a01_dot_products"  # the cheapest to grade: three NumPy functions
ROSTER = (
    "Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
    "Participant 11,Ada Full,ada@example.org,Submitted,,17\n"
    "Participant 12,Ben Stub,ben@example.org,Submitted,,17\n"
    "Participant 13,Zoë Wrong,zoe@example.org,Submitted,,17\n"
    "Participant 14,Dev None,dev@example.org,Submitted,,17\n"
)


def test_addresses_are_a_schedulers_or_local_workers():
    assert parse_address("tcp://10.0.0.5:8786") == ("tcp://10.0.0.5:8786", None)
    assert parse_address("tls://sched.example.org:8786") == ("tls://sched.example.org:8786", None)
    assert parse_address("local:2") == ("", 2)
    for bad in ("local:", "local:0", "local:two", "local:-1", "scheduler"):
        with pytest.raises(ValueError, match="local:N|scheduler address"):
            parse_address(bad)
    with pytest.raises(TypeError, match="str; got int"):
        parse_address(8786)  # type: ignore[arg-type]


def test_a_bad_address_stops_the_run_before_grading(tmp_path, capsys):
    (tmp_path / "cls" / "ada").mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / f"{ASSIGNMENT}.ipynb", tmp_path / "cls" / "ada")
    out = tmp_path / "out"
    args = [str(tmp_path / "cls"), "--assignment", ASSIGNMENT, "--csv", str(out / "g.csv"), "--quiet"]
    assert main([*args, "--unsafe-no-isolation", "--dask", "nowhere"]) == 2
    assert "scheduler address" in capsys.readouterr().err and not out.exists()


def test_without_dask_the_batch_runs_on_threads_in_order():
    with dask_executor.executor_for(None, 3) as executor:
        assert isinstance(executor, executors.ThreadExecutor) and executor.workers == 3
        done = []
        got = executor.map(lambda item, batch, iso: (item, batch, iso), range(7), "b", "iso", lambda: done.append(1))
    assert got == [(i, "b", "iso") for i in range(7)] and len(done) == 7
    with pytest.raises(TypeError, match="int; got str"):
        executors.ThreadExecutor("2")  # type: ignore[arg-type]


class _Client:
    """Dask's client as :meth:`DaskExecutor.check_workers` sees it: ``run`` answers for every worker."""

    def __init__(self, facts: dict) -> None:
        self.facts = facts

    def run(self, fn, *args):
        return self.facts


def _executor(facts: dict) -> DaskExecutor:
    executor = DaskExecutor.__new__(DaskExecutor)
    executor.client, executor.cluster, executor.address = _Client(facts), None, "tcp://sched:8786"
    return executor


def test_workers_with_another_course_or_no_sandbox_stop_the_run():
    import mha_course

    batch = Batch(Limits(), seed=1)
    same = {"version": mha_course.__version__, "digest": course_digest(), "walls": "bubblewrap (tier A)"}
    assert _executor({"tcp://w1:1": same}).check_workers(batch) == ["tcp://w1:1: bubblewrap (tier A)"]
    older = {**same, "digest": "0" * 64}
    with pytest.raises(ClusterError, match="tcp://w2:1 holds course .* install the same course") as found:
        _executor({"tcp://w1:1": same, "tcp://w2:1": older}).check_workers(batch)
    assert not found.value.isolation
    walled_off = {"version": same["version"], "digest": same["digest"], "error": "IsolationError: no bwrap"}
    with pytest.raises(ClusterError, match="tcp://w3:1 cannot grade: IsolationError") as found:
        _executor({"tcp://w3:1": walled_off}).check_workers(batch)
    assert found.value.isolation
    with pytest.raises(ClusterError, match="no workers"):
        _executor({}).check_workers(batch)


def test_the_course_digest_changes_with_the_code(tmp_path, monkeypatch):
    first = course_digest()
    assert first == course_digest() and len(first) == 64
    package = tmp_path / "mha_course"
    shutil.copytree(ROOT / "mha_course", package, ignore=shutil.ignore_patterns("*.pt", "__pycache__"))
    fake_module = package / "grading" / "classroom" / "dask_executor.py"
    monkeypatch.setattr(dask_executor, "__file__", str(fake_module))
    course_digest.cache_clear()
    try:
        assert course_digest() == first
        (package / "grading" / "engine" / "pipeline.py").write_text("# another grader\n")
        course_digest.cache_clear()
        assert course_digest() != first
    finally:
        course_digest.cache_clear()


def _class(root: Path) -> Path:
    """Four students as Moodle downloads them: full marks, the stubs, one wrong function, no notebook."""
    solution = ROOT / "solutions" / f"{ASSIGNMENT}.ipynb"
    folders = {
        name: root / f"{name}_{n}_assignsubmission_file_"
        for n, name in enumerate(("Ada Full", "Ben Stub", "Zoë Wrong", "Dev None"), start=11)
    }
    for folder in folders.values():
        folder.mkdir(parents=True)
    shutil.copy(solution, folders["Ada Full"] / solution.name)
    shutil.copy(ROOT / "exercises" / solution.name, folders["Ben Stub"] / solution.name)
    nb = nbformat.read(solution, as_version=4)
    (cell,) = [c for c in nb.cells if "return float(np.sum(a * b))" in c.source]
    cell.source = cell.source.replace("a * b", "a + b")
    nbformat.write(nb, folders["Zoë Wrong"] / solution.name)
    (folders["Dev None"] / "notes.txt").write_text("I could not finish\n")
    return root


def _outputs(out: Path) -> dict[str, bytes]:
    """Every file written under ``out``, as bytes, but what differs between any two runs on one machine.

    Left out: the seed's record (it holds the time the seed was first drawn), the kept results beside it
    (each submission's seconds are in them) and, in Gradescope's results.json, ``execution_time`` (the
    seconds the submission took; the rest of the file is compared).
    """
    files = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name in ("grading-seed.json", "grading-results.json"):
            continue
        data = path.read_bytes()
        if path.name.endswith("results.json"):
            result = json.loads(data)
            assert isinstance(result.pop("execution_time"), float)
            data = json.dumps(result, sort_keys=True).encode()
        files[path.relative_to(out).as_posix()] = data
    return files


@pytest.mark.slow
def test_a_class_graded_on_two_dask_workers_gives_byte_identical_outputs(tmp_path):
    require_sandbox()
    submissions = _class(tmp_path / "class")
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")

    def grade(out: Path, *extra: str) -> dict[str, bytes]:
        args = [str(submissions), "--assignment", ASSIGNMENT, "--roster", str(roster), "--seed", "4242", "--quiet"]
        args += ["--csv", str(out / "grades.csv"), "--report", str(out / "report.html")]
        args += ["--feedback-dir", str(out / "feedback"), "--grades-out", str(out / "moodle.csv")]
        args += ["--results-dir", str(out / "results"), "--summary", str(out / "summary.txt")]
        assert main([*args, *extra]) == 0
        return _outputs(out)

    here = grade(tmp_path / "here", "--workers", "2")
    on_dask = grade(tmp_path / "dask", "--dask", "local:2")
    assert sorted(here) == sorted(on_dask)
    assert {"grades.csv", "report.html", "report.md", "moodle.csv", "summary.txt"} <= set(here)
    assert len([n for n in here if n.startswith("feedback/")]) == 4 and any(n.startswith("results/") for n in here)
    assert [name for name in here if here[name] != on_dask[name]] == []
    grades = here["grades.csv"].decode("utf-8")
    assert ",17,17," in grades and "no notebook" in grades  # the class really was graded: full marks and a missing one


class _Walls:
    def as_dict(self) -> dict:
        return {"kind": "stub"}


class _Isolator:
    walls = _Walls()


def test_a_row_the_grader_fails_on_keeps_its_student_and_notes_once(monkeypatch):
    from mha_course.grading.classroom import batch as pipeline
    from mha_course.grading.classroom.collect import Submission

    def broken(*args):
        raise RuntimeError("the grader's own bug")

    monkeypatch.setattr(pipeline, "_grade_one", broken)
    row = Submission("ada/a01.ipynb", "ada", Path("/class/ada/a01.ipynb"), ASSIGNMENT, notes=["also submitted x"])
    batch = Batch(Limits(), seed=3, on_tamper="zero")
    for result in (
        pipeline.grade_item(row, batch, _Isolator()),  # type: ignore[arg-type]
        pipeline.failed_item(
            row, batch, _Isolator(), "the grader failed on this submission (RuntimeError: the grader's own bug)"
        ),  # type: ignore[arg-type]
    ):
        assert result.error == "the grader failed on this submission (RuntimeError: the grader's own bug)"
        assert (result.student, result.key, result.seed, result.on_tamper) == ("ada", "ada/a01.ipynb", 3, "zero")
        assert result.notes == ["also submitted x"] and result.assignment == ASSIGNMENT


def _dies_on_bob(item, batch, isolator):
    """A grade_item stand-in whose worker process dies on one row (as one killed by the kernel would)."""
    import os

    from mha_course.grading.verdicts import SubmissionResult

    if "bob" in str(item):
        os._exit(3)
    return SubmissionResult(path=str(item), seed=batch.seed)


@pytest.mark.slow
def test_a_worker_that_dies_costs_its_row_only():
    import dask

    batch = Batch(Limits(), seed=5, unsafe_no_isolation=True)
    # no retry, and a worker holds only the task it runs (a death takes no queued row with it)
    config = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-saturation": 1.0}
    with dask.config.set(config), DaskExecutor("local:1") as executor:
        done = []
        results = executor.map(
            _dies_on_bob, ["ada.ipynb", "bob.ipynb", "cy.ipynb"], batch, _Isolator(), lambda: done.append(1)
        )  # type: ignore[arg-type]
    assert [r.path for r in results] == ["ada.ipynb", "bob.ipynb", "cy.ipynb"] and len(done) == 3
    assert results[0].error is None and results[2].error is None
    assert (
        results[1].error
        == "the grader's worker failed on this submission (KilledWorker); it was not graded: grade it again"
    )
    assert results[1].seed == 5 and results[1].isolation["kind"] == "stub"  # the walls: the grader's


def test_grade_many_takes_workers_or_an_executor_not_both():
    from mha_course.grading.classroom.batch import grade_many
    from mha_course.grading.classroom.executors import ThreadExecutor

    with pytest.raises(ValueError, match="workers or an executor, not both"):
        grade_many([], workers=3, executor=ThreadExecutor(1), progress=False, unsafe_no_isolation=True)
