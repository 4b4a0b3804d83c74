"""Shared pytest set-up: a headless matplotlib backend for this process only, Triton's interpreter on CPU,
a progress file of the run's own, and the ``slow`` mark kept honest.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.

``make test-fast`` runs ``-m "not slow"``; a test belongs under ``slow`` when it starts a process (a
sandbox, a notebook kernel, a process group, a subprocess) or takes more than :data:`FAST_LIMIT_S`.
Every notebook cell nbval runs is marked here. A test that starts a process without the mark fails
in a run that deselects ``slow`` (so the fast run stays fast) and is listed after a full run; a test
over the limit is listed in both.
"""

import atexit
import multiprocessing.process
import os
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

# Without a GPU, Triton kernels run in Triton's interpreter; it must be chosen before Triton is
# first imported, so before any test module imports it: mha_course decides it in one place.
from mha_course.device import choose_triton_backend  # noqa: E402

choose_triton_backend()

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


# Tests in files this set-up does not own that started a process, or took over 8 s beside other work on
# 2 cores (about 2 s alone), in a `make test-fast` run: slow until their own files carry the mark (the
# list below then shrinks; a name here that no longer exists marks nothing).
SLOW_ELSEWHERE = frozenset(
    {
        "tests/models/test_interpret.py::test_ablate_switches_heads_off_and_restores_them",
        "tests/inference/test_sinks.py::test_reindexing_changes_only_the_offsets_to_the_sinks",
        "tests/inference/test_sinks.py::test_streaming_cache_decodes_like_the_masked_attention",
        "tests/inference/test_sinks.py::test_streaming_decode_with_text_positions_equals_the_model_under_the_streaming_mask",
        "tests/models/test_train.py::test_small_model_learns_grammar_past_threshold",
        "tests/models/test_train.py::test_training_is_seeded_and_history_is_recorded",
        "tests/models/test_vit.py::test_vit_shapes_and_a_short_training_run_learns",
        "tests/plots/test_viz.py::test_colorbars_are_labelled",
        "tests/timing/test_bench.py::test_backward_mode_times_gradients_and_credits_three_times_the_flops",
        "tests/kernels/test_causal_align.py::test_bottom_right_matches_the_mask_with_diagonal_S_minus_T[19-70-triton]",
        "tests/kernels/test_causal_align.py::test_bottom_right_matches_the_mask_with_diagonal_S_minus_T[33-33-triton]",
        "tests/kernels/test_causal_align.py::test_bottom_right_matches_the_mask_with_diagonal_S_minus_T[40-23-triton]",
        "tests/kernels/test_causal_align.py::test_bottom_right_matches_the_mask_with_diagonal_S_minus_T[5-37-triton]",
        "tests/kernels/test_causal_align.py::test_top_left_is_the_default_and_rows_without_keys_have_lse_minus_inf[triton]",
        "tests/kernels/test_layouts.py::test_every_launch_is_a_1d_grid_so_any_batch_times_heads_fits",
        "tests/efficient/test_tiled.py::test_any_blocks_any_shapes_agree_with_torch",
        "tests/efficient/test_tiled.py::test_any_score_magnitude_gives_exact_out_and_lse",
        "tests/efficient/test_tiled.py::test_gradcheck_through_the_tiled_backward",
        "tests/repo/test_structure.py::test_no_import_cycle",
    }
)


# Module fixtures of such files that start a process: every test taking one is slow (the first to run starts it).
SLOW_FIXTURES_ELSEWHERE = frozenset({"compiled_sm90"})


def pytest_itemcollected(item):  # only for items under tests/ (nbval's cells are marked below)
    if item.nodeid in SLOW_ELSEWHERE or item.nodeid.split("[")[0] in SLOW_ELSEWHERE:
        item.add_marker(pytest.mark.slow)
    elif SLOW_FIXTURES_ELSEWHERE & set(getattr(item, "fixturenames", ())):
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
