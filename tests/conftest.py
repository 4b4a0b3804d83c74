"""Shared pytest set-up: a headless matplotlib backend for this process only, Triton's interpreter on CPU,
one torch thread, a progress file of the run's own, and the ``slow`` mark kept honest.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.

``make test-fast`` runs ``-m "not slow"``; a test belongs under ``slow`` when it starts a process (a
sandbox, a notebook kernel, a process group, a subprocess) or takes more than :data:`FAST_LIMIT_S`.
Every notebook cell nbval runs is marked here. A test that starts a process without the mark fails
in a run that deselects ``slow`` (so the fast run stays fast) and is listed after a full run; a test
over the limit is listed in both, with its CPU seconds and the load average (a listing, not a failure:
a busy machine doubles wall-clock times; ``MHA_COURSE_FAST_LIMIT_S`` sets another limit).
"""

import atexit
import multiprocessing.process
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

# Without a GPU, Triton kernels run in Triton's interpreter; it must be chosen before Triton is
# first imported, so before any test module imports it: mha_course decides it in one place.
from mha_course.device import choose_triton_backend  # noqa: E402

choose_triton_backend()

# One intra-op thread in the test process. The tests' tensors are tiny, so torch's OpenMP threads only add
# barrier waits, and those spin against whatever else holds the cores: under `-n 2` (two workers, two
# threads each, two cores) or beside other work a 0.4 s test of 40 decoding steps took 9 to 28 s. Tests of
# the library's own thread pool set the count they need (tests/efficient/test_tiled.py). Child processes
# (notebook kernels, sandboxes) keep their own defaults. MHA_COURSE_TEST_THREADS=N asks for N.
torch.set_num_threads(int(os.environ.get("MHA_COURSE_TEST_THREADS", "1")))

# Every check records the learner's progress (mha_course.tracking.store): the checks these tests and their
# notebook kernels run (which inherit this environment) record into a file of this run, never into the
# progress file of whoever runs the tests.
if "MHA_COURSE_PROGRESS" not in os.environ:
    _progress_folder = tempfile.mkdtemp(prefix="mha-course-progress-")
    os.environ["MHA_COURSE_PROGRESS"] = str(Path(_progress_folder) / "progress.json")
    atexit.register(shutil.rmtree, _progress_folder, ignore_errors=True)

FAST_LIMIT_S = 2.0
# Audit events of a new process (subprocess, fork, exec, spawn). multiprocessing's spawn and forkserver
# start children through _posixsubprocess without an event: Process.start is wrapped below for them.
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "pty.spawn"}
)
_started: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event in PROCESS_EVENTS:
        _started.append(event)


sys.addaudithook(_audit)
_process_start = multiprocessing.process.BaseProcess.start


def _recorded_start(self):
    _started.append("multiprocessing.Process.start")
    return _process_start(self)


multiprocessing.process.BaseProcess.start = _recorded_start


def _fast_run(config) -> bool:
    return "not slow" in (config.getoption("markexpr", "") or "")


# Tests under tests/grading that started a process, or took over 8 s beside other work on 2 cores (about
# 2 s alone), in a `make test-fast` run, named by their function (a name survives the file's move to
# another folder): slow until their own files carry the mark. tests/repo/test_slow_mark.py checks that
# each name is one test function under tests/grading, so a renamed or deleted test fails there, not silently.
SLOW_ELSEWHERE = frozenset(
    {
        "test_cpythons_ast_race_is_retried_once_and_other_failures_reported",
        "test_a_regrade_of_the_same_folder_reproduces_every_score_and_verdict",
        "test_canvas_class_with_overrides_late_penalty_and_points_possible",
        "test_each_students_fresh_inputs_come_from_the_class_seed_and_their_identity",
        "test_the_guides_regrade_examples_run_as_written",
        "test_as_root_without_a_cgroup_tasks_are_still_limited",
        "test_without_isolation_a_lingering_thread_is_refused_too",
        "test_a_file_over_the_read_limit_is_refused_unread",
        "test_single_notebook_mode_prints_no_terminal_escapes",
        "test_own_code_and_provided_blocks_are_not_flagged",
    }
)


def pytest_itemcollected(item):  # only for items under tests/ (nbval's cells are marked below)
    if getattr(item, "originalname", None) in SLOW_ELSEWHERE and item.nodeid.startswith("tests/grading/"):
        item.add_marker(pytest.mark.slow)


# Tests that run a whole notebook in a kernel, every cell checked to run without error (what nbval
# --nbval-lax checks where no cell asks for more), and then do more: test_interactive_replay.py moves the
# sliders, test_answer_keys.py (which replays the sliders of the chapters it runs) feeds the answers cell
# to the checks. Where one of them is selected for a notebook, nbval's run of the same notebook is left
# out: it would execute the same cells a second time.
NOTEBOOK_RUNS = frozenset({"test_every_slider_works_after_the_notebook_has_run", "test_every_answer_key_is_right"})


@pytest.hookimpl(tryfirst=True)  # before -m: nbval's cells (under notebooks/, solutions/) are slow
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":  # each runs in a notebook kernel
            item.add_marker(pytest.mark.slow)


class _NbvalOnce:
    """Leaves out nbval's cells of a notebook that one of NOTEBOOK_RUNS runs; runs after -m and -k."""

    @pytest.hookimpl(trylast=True)  # only a run that will happen stands in for nbval
    def pytest_collection_modifyitems(self, config, items):
        replayed = {
            item.callspec.params["path"].resolve()
            for item in items
            if getattr(item, "originalname", None) in NOTEBOOK_RUNS and hasattr(item, "callspec")
        }
        # a notebook with an NBVAL_* cell comment (compare this output, expect this error) keeps its nbval run
        replayed = {path for path in replayed if "NBVAL_" not in path.read_text(encoding="utf-8")}
        twice = {item for item in items if item.path.suffix == ".ipynb" and item.path.resolve() in replayed}
        if twice:
            config.hook.pytest_deselected(items=list(twice))
            items[:] = [item for item in items if item not in twice]


def pytest_configure(config):
    config.pluginmanager.register(_NbvalOnce(), "course-nbval-once")


# The CPU seconds this process spent in a test's set-up and call, shown beside the wall-clock time of a
# test over the limit: on a busy machine the wall clock doubles, the CPU time much less.
_cpu_s: dict[str, float] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _started.clear()  # what a test starts counts from its own set-up on (its fixtures included)
    start = time.process_time()
    try:
        return (yield)
    finally:
        _cpu_s["setup"] = time.process_time() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    start = time.process_time()
    try:
        return (yield)
    finally:
        _cpu_s["call"] = time.process_time() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Notes on the report (they travel to the xdist controller) what an unmarked test started or cost."""
    report = yield
    if call.when not in ("setup", "call") or item.get_closest_marker("slow") is not None:
        _started.clear()
        return report
    if _started:
        report.user_properties.append(("started_processes", sorted(set(_started))))
        if _fast_run(item.config) and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} started a process ({', '.join(sorted(set(_started)))}) but is not marked "
                "@pytest.mark.slow: mark it (make test-fast leaves out every test that starts a process)"
            )
        _started.clear()
    if report.duration > fast_limit_s():
        cpu = _cpu_s.get(call.when)
        report.user_properties.append(("over_fast_limit", (round(report.duration, 2), cpu and round(cpu, 2))))
    return report


def fast_limit_s() -> float:
    """The seconds an unmarked test's set-up or call may take: FAST_LIMIT_S, or MHA_COURSE_FAST_LIMIT_S."""
    return float(os.environ.get("MHA_COURSE_FAST_LIMIT_S", FAST_LIMIT_S))


_unmarked: dict[str, list[str]] = {}


def pytest_runtest_logreport(report):
    """Collect (on the controller too, under xdist) what a test not marked slow started or cost.

    Only the notes made above count: ``report.keywords`` would also hold the name of every folder above
    the test, so a checkout in a folder named ``slow`` would hide every test."""
    for name, value in report.user_properties:
        if name == "started_processes":
            _unmarked.setdefault(report.nodeid, []).append("started " + ", ".join(value))
        elif name == "over_fast_limit":
            wall, cpu = value
            cpu_note = "" if cpu is None else f" (CPU {cpu:.1f} s)"
            _unmarked.setdefault(report.nodeid, []).append(f"{report.when} took {wall:.1f} s{cpu_note}")


def pytest_terminal_summary(terminalreporter):
    """Lists the unmarked tests over the limit: advice, not a failure, since a busy machine doubles times."""
    if not _unmarked:
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    terminalreporter.section(f"not marked slow, yet started a process or took over {fast_limit_s():g} s")
    for nodeid, notes in sorted(_unmarked.items()):
        terminalreporter.write_line(f"{nodeid}: {'; '.join(notes)}")
    terminalreporter.write_line(
        f"(load average {load} on {os.cpu_count()} cores at the end: on a busy machine times double; "
        "make such a test cheaper, or mark it slow with the reason)"
    )
