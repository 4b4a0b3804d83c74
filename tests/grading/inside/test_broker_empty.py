"""The broker empties the writable folders after the cells and after every case (broker.empty)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from mha_course.grading.inside.broker import empty


def test_everything_a_cell_left_goes_but_what_is_kept(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the submission's")
    folder = tmp_path / "scratch"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "f.npy").write_bytes(b"x" * 100)
    (folder / ".hidden").write_text("h")
    (folder / "link").symlink_to(outside)
    (folder / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    locked = folder / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "g").write_text("g")
    (locked / "inner").chmod(0)
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    (folder / ".matplotlib").mkdir()
    empty(str(folder), keep=(".matplotlib",))
    assert sorted(os.listdir(folder)) == [".matplotlib"]
    assert outside.read_text() == "not the submission's"  # links are removed, never followed


def test_a_tree_deeper_than_the_recursion_limit_goes_too(memory_tmp_path):
    """1500 levels: past Python's recursion limit (shutil.rmtree gave up there), inside PATH_MAX."""
    folder = memory_tmp_path / "scratch"
    folder.mkdir()
    home = os.getcwd()
    made = 0
    try:
        os.chdir(folder)  # made by relative steps: a path from the top would be walked again for every level
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
            made += 1
        Path("left_for_the_next_case").write_text("x")
        os.chdir(home)
        empty(str(folder))
        assert os.listdir(folder) == []
    finally:  # what a failed run leaves must not reach pytest's own (recursive) clean-up
        os.chdir(folder)
        depth = 0
        while depth < made and os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        with contextlib.suppress(OSError):
            os.unlink("left_for_the_next_case")
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("d")
        os.chdir(home)


def test_a_read_only_mount_inside_is_left_unvisited(tmp_path, monkeypatch):
    """A checkout under /tmp has its Python environment bound read-only into the sandbox's /tmp: the broker
    must not walk it after every case (nothing of the submission can be there)."""
    folder = tmp_path / "tmp"
    runtime = folder / "ci" / "checkout" / ".venv"
    (runtime / "lib").mkdir(parents=True)
    (runtime / "lib" / "torch.py").write_text("")
    (folder / "ci" / "left_by_a_cell").write_text("x")
    real_statvfs = os.statvfs
    visited = []

    class ReadOnly:
        f_flag = os.ST_RDONLY

    def statvfs(path):
        visited.append(os.path.abspath(path))
        return ReadOnly() if os.path.abspath(path) == str(folder / "ci" / "checkout") else real_statvfs(path)

    monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setattr(os, "listdir", _refusing(os.listdir, str(folder / "ci" / "checkout")))
    empty(str(folder))
    assert (runtime / "lib" / "torch.py").exists()
    assert not (folder / "ci" / "left_by_a_cell").exists()
    assert str(folder / "ci" / "checkout") in visited


def _refusing(listdir, forbidden):
    def guarded(path="."):
        assert not os.path.abspath(path).startswith(forbidden), f"walked into the read-only mount: {path}"
        return listdir(path)

    return guarded
