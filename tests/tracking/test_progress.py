"""The learner's progress: checks record themselves, the file stays readable, the listing adds it up.

Recording must never raise into a notebook or a graded run: a corrupt file, an unwritable folder, the
grader's process and an unidentifiable chapter each leave the check's verdict and message as they were.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mha_course
from mha_course.grading.learner import progress as listing
from mha_course.grading.learner import selfcheck
from mha_course.predict import check_choice, check_exercise, check_prediction
from mha_course.tracking import record, store, where

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    """A fresh progress file for the test; no front end names a notebook."""
    path = tmp_path / "data" / "progress.json"
    monkeypatch.setenv(store.ENV, str(path))
    for name in ("JPY_SESSION_NAME", where.NOTEBOOK_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(record, "_warned", [])
    return path


def _chapter(path: Path, chapter: str) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["chapters"][chapter]["checks"]


def test_checks_record_their_verdicts_under_the_notebook_the_front_end_names(progress_file, monkeypatch, capsys):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/course/notebooks/12_flash_attention_idea.ipynb")
    check_prediction("my_m", None, [0.0, 10.0, 20.0])
    check_prediction("my_l", [1.0, 2.0], [1.0, 2.0])
    check_choice("pick", "b", "0" * 16)
    check_exercise("my_f", lambda x: x, lambda x: x, [(np.ones(2),)])
    checks = _chapter(progress_file, "12")
    assert {n: c["verdict"] for n, c in checks.items()} == {
        "my_m": "not yet",
        "my_l": "right",
        "pick": "wrong",
        "my_f": "right",
    }
    data = json.loads(progress_file.read_text(encoding="utf-8"))
    assert data["format"] == store.FORMAT and data["chapters"]["12"]["notebook"].endswith(
        "12_flash_attention_idea.ipynb"
    )
    assert capsys.readouterr().err == ""  # nothing but the checks' own messages


def test_a_rerun_replaces_the_verdict(progress_file, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "15_attention_across_devices.ipynb")
    check_prediction("merged_lse", 1.0, 2.0)
    assert _chapter(progress_file, "15")["merged_lse"]["verdict"] == "wrong"
    check_prediction("merged_lse", 2.0, 2.0)
    assert _chapter(progress_file, "15")["merged_lse"]["verdict"] == "right"
    assert len(_chapter(progress_file, "15")) == 1


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("jupyterlab", "03"),
        ("vscode", "05"),
        ("explicit", "07"),
        ("by name", "12"),  # my_m is checked in chapter 12 only
        ("nothing", None),
    ],
)
def test_the_chapter_comes_from_the_front_end_else_the_fallbacks(progress_file, monkeypatch, how, expected):
    namespace = {}
    if how == "jupyterlab":
        monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/03_scaled_dot_product_attention-Copy1.ipynb")
    elif how == "vscode":
        namespace["__vsc_ipynb_file__"] = "c:\\course\\notebooks\\05_self_attention_and_heads.ipynb"
    elif how == "explicit":
        monkeypatch.setenv(where.NOTEBOOK_ENV, "07_what_the_heads_learned.ipynb")
    monkeypatch.setattr(where, "_user_namespace", lambda: namespace)
    name = "my_m" if how == "by name" else "some_name_no_chapter_checks"
    assert where.current_chapter(name)[0] == expected
    record.record_check(name, record.RIGHT)
    chapters = json.loads(progress_file.read_text())["chapters"] if progress_file.exists() else {}
    assert list(chapters) == ([expected] if expected else [])


def test_a_name_two_chapters_check_identifies_neither(tmp_path):
    for chapter in ("01_a", "02_b"):
        cell = {
            "cell_type": "code",
            "source": ["check_prediction('shared', shared, 1)\n", "check_choice('own_", chapter[:2], "', x, d)"],
        }
        (tmp_path / f"{chapter}.ipynb").write_text(json.dumps({"cells": [cell]}))
    assert where.current_chapter("shared", tmp_path)[0] is None
    assert where.current_chapter("own_02", tmp_path)[0] == "02"
    assert where.chapter_of_path("Untitled.ipynb") is None and where.chapter_of_path(None) is None


def test_the_file_lives_where_documented(monkeypatch, tmp_path):
    monkeypatch.setenv(store.ENV, "~/elsewhere/p.json")
    assert store.progress_file() == Path.home() / "elsewhere" / "p.json"
    monkeypatch.setenv(store.ENV, "OFF")
    assert store.progress_file() is None
    monkeypatch.delenv(store.ENV)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert store.progress_file() == tmp_path / "mha_course" / "progress.json"


def test_off_records_nothing(progress_file, monkeypatch):
    monkeypatch.setenv(store.ENV, "off")
    monkeypatch.setenv("JPY_SESSION_NAME", "12_x.ipynb")
    assert check_prediction("my_m", 1, 1)
    assert not record.record_check("my_m", record.RIGHT) and not progress_file.exists()


def test_a_corrupt_file_never_raises_into_the_notebook_and_is_left_as_it_was(progress_file, monkeypatch, capsys):
    monkeypatch.setenv("JPY_SESSION_NAME", "12_x.ipynb")
    progress_file.parent.mkdir(parents=True)
    progress_file.write_text("{not json", encoding="utf-8")
    assert check_prediction("my_m", 1, 1) and not check_prediction("my_l", 2, 1)  # verdicts as always
    captured = capsys.readouterr()
    assert "my_m: right" in captured.out and captured.err.count("progress not saved") == 1  # once per kernel
    assert "--reset" in captured.err and progress_file.read_text() == "{not json"
    shown = listing.progress()
    assert "not valid JSON" in shown.problem and "not valid JSON" in str(shown)  # named, not raised
    mha_course.progress(reset="all")  # starts afresh
    assert json.loads(progress_file.read_text()) == store.empty()


@pytest.mark.parametrize("content", ["[1, 2]", '{"chapters": []}', "\udcff"])
def test_a_file_holding_something_else_is_refused_by_name(progress_file, content):
    progress_file.parent.mkdir(parents=True)
    progress_file.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(store.ProgressFileError, match=str(progress_file)):
        store.load(progress_file)
    assert not record.record_selfcheck("a02_softmax", "softmax", 1, 2, 3)


def test_an_unwritable_place_never_raises_into_the_notebook(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(store.ENV, str(blocker / "progress.json"))  # its folder is a file: even root cannot
    monkeypatch.setenv("JPY_SESSION_NAME", "12_x.ipynb")
    monkeypatch.setattr(record, "_warned", [])
    assert check_prediction("my_m", 1, 1)
    assert "progress not saved" in capsys.readouterr().err
    assert "cannot read the progress file" in listing.progress().problem  # named in the listing, not raised


def test_inside_the_grader_nothing_is_recorded(progress_file, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "12_x.ipynb")
    monkeypatch.setattr(selfcheck, "GRADING", True)
    assert check_prediction("my_m", 1, 1)
    assert not record.record_check("my_m", record.RIGHT)
    assert not record.record_selfcheck("a02_softmax", "softmax", 1, 2, 3)
    assert not progress_file.exists()


def test_the_self_check_records_its_score_and_the_hidden_points(progress_file, monkeypatch):
    def softmax_np(x, axis=-1):  # without the all -inf row's convention: one public case fails
        with np.errstate(all="ignore"):
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)

    result = selfcheck.check("softmax_np", softmax_np, show=False)
    assert 0 < result.score < result.max_score
    entry = json.loads(progress_file.read_text())["assignments"]["a02_softmax"]["softmax_np"]
    assert (entry["score"], entry["checked"], entry["hidden"]) == (result.score, result.max_score, result.hidden_points)
    assert result.hidden_points > 0 and f"{result.hidden_points:g} more points by hidden tests" in str(result)
    selfcheck.check("softmax_np", softmax_np, include_hidden=True, show=False)  # the solutions' own run: not recorded
    assert json.loads(progress_file.read_text())["assignments"]["a02_softmax"]["softmax_np"] == entry
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/00_start_here.ipynb")  # chapter 00's demonstration
    assert not record.record_selfcheck("a02_softmax", "softmax_np", 0, 10, 4)
    monkeypatch.setenv("JPY_SESSION_NAME", "exercises/a02_softmax.ipynb")
    assert record.record_selfcheck("a02_softmax", "softmax_np", 0, 10, 4)


def test_the_listing_counts_each_chapters_checks_and_each_assignments_points(progress_file, tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    cells = [
        {"cell_type": "markdown", "source": "# 12 — The idea"},
        {
            "cell_type": "code",
            "source": "check_prediction('a', a, 1)\ncheck_choice('b', b, d)\ncheck_exercise('c', c, r, [])",
        },
    ]
    (folder / "12_idea.ipynb").write_text(json.dumps({"cells": cells}))
    (folder / "06_none.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# 06 · None"}]}))
    data = store.empty()
    data["chapters"]["12"] = {
        "checks": {n: {"verdict": v} for n, v in (("a", "right"), ("b", "wrong"), ("c", "not yet"), ("gone", "right"))}
    }
    rows = {row.chapter: row for row in listing.chapter_rows(data, folder)}
    assert len(rows) == 18
    assert (rows["12"].title, rows["12"].checks, rows["12"].answered, rows["12"].right) == ("The idea", 3, 2, 1)
    assert rows["12"].text() == "2 of 3 answered, 1 right" and rows["06"].text() == "no checks in this chapter"
    assert rows["05"].checks is None and rows["05"].text() == "not started"  # no notebook at hand

    data["assignments"]["a02_softmax"] = {"softmax_np": {"score": 9, "checked": 10, "hidden": 4}}
    row = {r.assignment: r for r in listing.assignment_rows(data)}["a02_softmax"]
    assert (row.score, row.checked, row.hidden, row.unchecked) == (9, 21, 8, ["softmax"])
    assert row.text() == "9 of the 21 points checked here (29 points when graded); not checked yet: softmax"


def test_reset_forgets_a_chapter_an_assignment_or_everything(progress_file, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "02_softmax.ipynb")
    check_prediction("my_prediction", 1, 1)
    monkeypatch.setenv("JPY_SESSION_NAME", "a02_softmax.ipynb")
    record.record_selfcheck("a02_softmax", "softmax", 1, 2, 3)
    assert record.reset("2") == ["02"]
    with pytest.raises(ValueError, match="nothing recorded for '02'"):
        record.reset("02")
    assert record.reset("a02") == ["a02_softmax"]
    assert json.loads(progress_file.read_text()) == store.empty()


def test_progress_is_callable_from_the_package_even_after_the_command_module_is_imported(progress_file):
    assert isinstance(mha_course.progress(), listing.Progress)
    command = importlib.import_module("mha_course.progress")  # would bind the package's name to the module
    assert mha_course.progress is listing.progress and command.main is listing.main
    assert isinstance(mha_course.progress(), listing.Progress)
    assert "progress" in mha_course.__all__


def test_the_command_lists_prints_the_path_and_resets(progress_file, capsys):
    assert listing.main(["--where"]) == 0 and capsys.readouterr().out.strip() == str(progress_file)
    record.record_selfcheck("a02_softmax", "softmax", 5, 11, 4)
    assert listing.main([]) == 0
    out = capsys.readouterr().out
    assert "a02_softmax" in out and "5 of the 21 points checked here" in out and "Chapters" in out
    assert listing.main(["--json"]) == 0 and json.loads(capsys.readouterr().out)["assignments"]
    assert listing.main(["--reset", "a99"]) == 2 and "nothing recorded" in capsys.readouterr().err
    assert listing.main(["--reset"]) == 0 and json.loads(progress_file.read_text()) == store.empty()


@pytest.mark.slow
def test_the_command_runs_as_documented(progress_file):
    done = subprocess.run(
        [sys.executable, "-m", "mha_course.progress"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Your progress" in done.stdout and str(progress_file) in done.stdout


def test_a_graded_notebook_that_lists_its_progress_is_neither_noted_nor_broken():
    """In the grader's sandbox ``mha_course.progress`` is a no-op (the view's package), and the scan lets it be."""
    from mha_course.grading.engine import registry
    from mha_course.grading.static import scan
    from mha_course.grading.walls import view

    namespace: dict = {}
    exec(view._PACKAGE_INIT.format(provided=(), exports={}), namespace)
    assert namespace["__getattr__"]("progress")() is None and namespace["__getattr__"]("progress")(reset="all") is None
    with pytest.raises(AttributeError, match="not available while grading"):
        namespace["__getattr__"]("tiled_attention")
    for source in ("import mha_course\nmha_course.progress()", "from mha_course import progress\nprogress()"):
        report = scan.scan([(0, source)], registry.get_assignment("a03_attention"))
        assert not report.imports and not report.tampering, source
    report = scan.scan([(0, "from mha_course import tiled_attention")], registry.get_assignment("a03_attention"))
    assert report.imports  # the allowance is for progress only
