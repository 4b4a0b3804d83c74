"""Shared pytest set-up: a headless matplotlib backend for this process only, Triton's interpreter on CPU,
and the ``slow`` mark kept honest.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.

``make test-fast`` runs ``-m "not slow"``; a test belongs under ``slow`` when it starts a process (a
sandbox, a notebook kernel, a process group, a subprocess) or takes more than :data:`FAST_LIMIT_S`.
Every notebook cell nbval runs is marked here. A test that starts a process without the mark fails
in a run that deselects ``slow`` (so the fast run stays fast) and is listed after a full run; a test
over the limit is listed in both.
"""

import multiprocessing.process
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

# Without a GPU, Triton kernels run in Triton's interpreter; it must be chosen before Triton is
# first imported, so before any test module imports it: mha_course decides it in one place.
from mha_course.device import choose_triton_backend  # noqa: E402

choose_triton_backend()

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


def pytest_itemcollected(item):
    if item.path.suffix == ".ipynb":  # nbval's cells: each runs in a notebook kernel
        item.add_marker(pytest.mark.slow)


# tests/notebooks/test_interactive_replay.py runs a whole notebook in a kernel, every cell checked to run
# without error (what nbval --nbval-lax checks where no cell asks for more), then moves its sliders.
# Where that test is selected for a notebook, nbval's run of the same notebook is left out: it would
# execute the same cells a second time.
REPLAY_TEST = "test_every_slider_works_after_the_notebook_has_run"


@pytest.hookimpl(trylast=True)  # after -m and -k: only a replay that will run stands in for nbval
def pytest_collection_modifyitems(config, items):
    replayed = {
        item.callspec.params["path"].resolve()
        for item in items
        if getattr(item, "originalname", None) == REPLAY_TEST and hasattr(item, "callspec")
    }
    if not replayed:
        return
    # a notebook with an NBVAL_* cell comment (compare this output, expect this error) keeps its nbval run
    replayed = {path for path in replayed if "NBVAL_" not in path.read_text(encoding="utf-8")}
    twice = {item for item in items if item.path.suffix == ".ipynb" and item.path.resolve() in replayed}
    if twice:
        config.hook.pytest_deselected(items=list(twice))
        items[:] = [item for item in items if item not in twice]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _started.clear()  # what a test starts counts from its own set-up on (its fixtures included)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when in ("setup", "call") and _started and item.get_closest_marker("slow") is None:
        report.user_properties.append(("started_processes", sorted(set(_started))))
        if _fast_run(item.config) and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} started a process ({', '.join(sorted(set(_started)))}) but is not marked "
                "@pytest.mark.slow: mark it (make test-fast leaves out every test that starts a process)"
            )
        _started.clear()
    return report


_unmarked: dict[str, list[str]] = {}


def pytest_runtest_logreport(report):
    """Collect (on the controller too, under xdist) what a test not marked slow cost."""
    if report.when not in ("setup", "call") or "slow" in report.keywords:
        return
    notes = _unmarked.setdefault(report.nodeid, [])
    for name, value in report.user_properties:
        if name == "started_processes":
            notes.append("started " + ", ".join(value))
    if report.duration > FAST_LIMIT_S:
        notes.append(f"{report.when} took {report.duration:.1f} s")


def pytest_terminal_summary(terminalreporter):
    listed = {nodeid: notes for nodeid, notes in _unmarked.items() if notes}
    if not listed:
        return
    terminalreporter.section(f"not marked slow, yet started a process or took over {FAST_LIMIT_S:.0f} s")
    for nodeid, notes in sorted(listed.items()):
        terminalreporter.write_line(f"{nodeid}: {'; '.join(notes)}")
