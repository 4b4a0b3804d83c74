"""Tier B's scratch folder is measured from outside (no size-limited tmpfs without CAP_SYS_ADMIN).

The grader's watch (:class:`mha_course.grading.engine.process.SubmissionProcess`) asks the sandbox twice a second
how much its scratch holds; past the limit it kills the sandbox with a sentence. The walk must count
what is really on disk, never follow a link out of the folder, and stay cheap however many files a
submission makes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from mha_course.grading.engine import process
from mha_course.grading.verdicts import Limits
from mha_course.grading.walls import confined

MIB = 2**20


def test_usage_counts_blocks_on_disk_and_every_entry(tmp_path):
    (tmp_path / "a.bin").write_bytes(os.urandom(3 * MIB))
    (tmp_path / "deep" / "deeper").mkdir(parents=True)
    (tmp_path / "deep" / "deeper" / "b.bin").write_bytes(os.urandom(MIB))
    used, entries = confined.scratch_usage(tmp_path)
    assert 4 * MIB <= used < 4 * MIB + 256 * 1024
    assert entries == 4  # a.bin, deep, deeper, b.bin


def test_a_sparse_file_counts_what_it_holds_not_its_length(tmp_path):
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(10**12)  # 1 TB long, no block written
    used, entries = confined.scratch_usage(tmp_path)
    assert used < MIB and entries == 1


def test_preallocated_blocks_count_though_no_byte_was_written(tmp_path):
    """Blocks reserved by fallocate (seccomp refuses it in tier B; were it let through) are counted as used."""
    with open(tmp_path / "reserved", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 4 * MIB)
    used, entries = confined.scratch_usage(tmp_path)
    assert used >= 4 * MIB and entries == 1


def test_links_out_of_the_folder_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(2 * MIB))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "to_dir").symlink_to(outside)
    (scratch / "to_file").symlink_to(outside / "big.bin")
    (scratch / "loop").symlink_to(scratch)
    used, entries = confined.scratch_usage(scratch)
    assert used < MIB and entries == 3


def test_counting_stops_past_the_entry_limit(tmp_path):
    for i in range(60):
        (tmp_path / f"f{i}").touch()
    assert confined.scratch_usage(tmp_path, max_entries=10)[1] == 11
    assert confined.scratch_usage(tmp_path, max_entries=100)[1] == 60


class _Ticks(threading.Event):
    """The watch's stop event, recording the timeout of each of its ticks (``wait``)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


class _FakeSandbox:
    """The part of a tier B sandbox the watch uses, over a real folder; it counts the watch's scratch checks.

    The tests count in the watch's own ticks and checks, never in seconds: on a busy machine a thread that should
    wake every 0.1 s can sleep for seconds, and what the watch does at each check is the same.
    """

    def __init__(self, scratch: Path, scratch_mb: int) -> None:
        self.scratch, self.scratch_mb = scratch, scratch_mb
        self.killed = threading.Event()
        self.ticks = _Ticks()
        self.check_ticks: list[int] = []  # the tick of each scratch check
        self.killed_at_check: int | None = None

    def scratch_overuse(self) -> str | None:
        self.check_ticks.append(len(self.ticks.timeouts))
        return confined.ConfinedSandbox.scratch_overuse(self)

    def tasks(self) -> list[int]:
        return []

    def kill(self) -> None:
        self.killed_at_check = len(self.check_ticks)
        self.killed.set()

    def checks_after(self, checks: int) -> None:
        """Waits (a minute at most) until the watch has begun ``checks`` more scratch checks than now."""
        target, deadline = len(self.check_ticks) + checks, time.monotonic() + 60
        while len(self.check_ticks) < target and not self.killed.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)


def _watch(sandbox: _FakeSandbox) -> process.SubmissionProcess:
    """A SubmissionProcess with only its watchdog running, over ``sandbox``."""
    watched = process.SubmissionProcess.__new__(process.SubmissionProcess)
    watched.limits, watched.sandbox = Limits(memory_mb=0), sandbox
    watched.deadline, watched.limit_text, watched.killed_for = float("inf"), "", None
    watched._stop = sandbox.ticks
    watched.sock = None
    watched.kill = sandbox.kill
    threading.Thread(target=watched._watchdog, daemon=True).start()
    return watched


def _assert_twice_a_second(sandbox: _FakeSandbox) -> None:
    """The watch ticks every 0.1 s and checks the scratch at every fifth tick: twice a second."""
    assert set(sandbox.ticks.timeouts) == {0.1}, sandbox.ticks.timeouts
    ticks = sandbox.check_ticks
    assert ticks and ticks[0] == 5 and all(b - a == 5 for a, b in zip(ticks, ticks[1:], strict=False)), (
        ticks
    )  # none skipped


def test_the_watch_kills_a_sandbox_whose_scratch_outgrows_its_limit(tmp_path):
    sandbox = _FakeSandbox(tmp_path, scratch_mb=4)
    watched = _watch(sandbox)
    try:
        (tmp_path / "ok.bin").write_bytes(os.urandom(2 * MIB))
        sandbox.checks_after(2)  # the first check begun after the write saw the whole file, and has ended
        assert len(sandbox.check_ticks) >= 2 and not sandbox.killed.is_set(), "killed under the limit"
        (tmp_path / "too_much.bin").write_bytes(os.urandom(3 * MIB))
        begun = len(sandbox.check_ticks)  # checks begun while the file was written may have missed part of it
        assert sandbox.killed.wait(60), "not killed past the limit"
        assert sandbox.killed_at_check <= begun + 1, "not killed at the first check after the write"
        assert watched.killed_for == ("wrote more than 4 MiB of files to its scratch folder", "memory")
        _assert_twice_a_second(sandbox)
    finally:
        watched._stop.set()


def test_the_watch_kills_a_sandbox_that_makes_too_many_files(tmp_path, monkeypatch):
    monkeypatch.setattr(confined, "SCRATCH_ENTRIES", 50)
    sandbox = _FakeSandbox(tmp_path, scratch_mb=64)
    watched = _watch(sandbox)
    try:
        for i in range(80):
            (tmp_path / f"empty{i}").touch()
        begun = len(sandbox.check_ticks)
        assert sandbox.killed.wait(60)
        assert watched.killed_for == ("made more than 50 files and folders in its scratch folder", "memory")
        assert sandbox.killed_at_check <= begun + 1, "not killed at the first check after the files were made"
        _assert_twice_a_second(sandbox)
    finally:
        watched._stop.set()
