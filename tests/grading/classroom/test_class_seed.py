"""The class's seed follows the class, not its folder's path, and one student (or one exercise) is regraded and merged.

As an instructor meets it: a Moodle download (a folder per student, the grading worksheet as roster) graded
with every output; the same class copied elsewhere grades byte-identically; a student's notebook replaced
and regraded alone with ``--only`` changes that student's row only, and every output equals a full regrade.
Class runs use the fake assignment (grading_fake.py, 6 points: fake_add 4, fake_double 2).
"""

from __future__ import annotations

import csv
import json
import shutil
import unicodedata
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.classroom import kept
from mha_course.grading.classroom.collect import Submission
from mha_course.grading.classroom.roster import read_roster
from mha_course.grading.classroom.seeds import choose_seed, class_identity, class_key, path_key, record_seed
from mha_course.grading.engine import registry
from mha_course.grading.verdicts import ReviewFlag, Status, SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

BAD_ADD = "def add_arrays(a, b):\n    return a - b\n"
BAD_DOUBLE = "def double(x):\n    return x\n"
WORKSHEET = (
    "Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
    "Participant 1234,Alice Martin,am@uni.edu,Submitted,,26.00\n"
    "Participant 2345,Bob Li,bl@uni.edu,Submitted,,26.00\n"
    "Participant 3456,José Núñez,jn@uni.edu,Submitted,,26.00\n"
    "Participant 4567,Dan Wu,dw@uni.edu,No submission,,26.00\n"
)
BOB = "Bob Li_2345_assignsubmission_file_"


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _moodle_class(base: Path) -> Path:
    """A Moodle folder download: one folder per student, the notebook inside; the worksheet beside it."""
    folder = base / "moodle-a99"
    for student, cells in {
        "Alice Martin_1234_assignsubmission_file_": (GOOD_ADD, GOOD_DOUBLE),
        BOB: (BAD_ADD, BAD_DOUBLE),
        "José Núñez_3456_assignsubmission_file_": (GOOD_ADD,),
    }.items():
        (folder / student).mkdir(parents=True)
        write_submission(folder / student / "zz_fake.ipynb", *cells)
    _write(base / "worksheet.csv", WORKSHEET)
    return folder


def _grade(folder: Path, out: Path, *extra: str) -> int:
    from mha_course.grading.grade import main

    args = [folder, "--assignment", "zz_fake", "--roster", folder.parent / "worksheet.csv"]
    args += ["--csv", out / "grades.csv", "--report", out / "report.html", "--feedback-dir", out / "feedback"]
    args += ["--grades-out", out / "moodle_grades.csv", "--summary", out / "summary.txt"]
    args += ["--results-dir", out / "results", "--quiet", "--case-timeout", "5", *extra]
    return main([str(a) for a in args])


def _outputs(out: Path) -> dict[str, bytes | dict]:
    """Every output file's bytes (results.json without its timing: the time a run took is no grade)."""
    files: dict[str, bytes | dict] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != kept.RESULTS_FILE):
        if path.name.endswith(".results.json"):
            data = json.loads(path.read_text(encoding="utf-8"))
            data.pop("execution_time", None)
            files[str(path.relative_to(out))] = data
        else:
            files[str(path.relative_to(out))] = path.read_bytes()
    return files


def _rows(out: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}


# --- the class's identity --------------------------------------------------------------------------------------


def test_the_class_is_its_folders_name_or_its_id_never_its_path(tmp_path):
    here, there = tmp_path / "a" / "moodle-a99", tmp_path / "b" / "c" / "moodle-a99"
    assert class_key([str(here)], "a04_masks") == class_key([str(there)], "a04_masks") == "a04_masks @ moodle-a99"
    assert class_identity([str(here)])[1].startswith("the class folder's name")
    assert class_key([str(here)], "a04_masks") != class_key([str(here)], "a05_x")
    assert class_key([str(here / "sub" / "..")], None) == "* @ moodle-a99"
    assert class_key([str(here)], "a04_masks", " ml101-fall26 ") == "a04_masks @ ml101-fall26"
    assert class_identity([str(here)], "ml101")[1] == "--class-id"
    nfd = unicodedata.normalize("NFD", "Núñez-a99")
    assert class_key([str(tmp_path / nfd)], "a") == class_key([str(tmp_path / "Núñez-a99")], "a")
    for bad in ("", "  ", "two\nlines"):
        with pytest.raises(ValueError, match="--class-id"):
            class_identity([str(here)], bad)


def test_a_seed_recorded_under_the_folders_path_is_kept_and_moves_to_the_class_key(tmp_path):
    folder, seeds = tmp_path / "moodle-a99", tmp_path / "grading-seed.json"
    old, new = path_key([str(folder)], "a04_masks"), class_key([str(folder)], "a04_masks")
    assert str(folder.resolve()) in old and str(tmp_path) not in new
    seeds.write_text(json.dumps({"seeds": {old: {"seed": 77, "first_drawn": "2026-11-01T00:00:00+00:00"}}}))
    seed, how = choose_seed(seeds, new, None, False, lambda: 1, old)
    assert seed == 77 and "under the class folder's path" in how
    record_seed(seeds, new, 77, lambda p, text: p.write_text(text), old)
    assert json.loads(seeds.read_text())["seeds"] == {new: {"seed": 77, "first_drawn": "2026-11-01T00:00:00+00:00"}}
    assert choose_seed(seeds, new, None, False, lambda: 1, old) == (77, f"recorded in {seeds}")


# --- kept results --------------------------------------------------------------------------------------------


def test_a_kept_result_comes_back_equal():
    result = SubmissionResult(
        path="/x/a.ipynb",
        assignment="zz_fake",
        seed=5,
        input_seed=6,
        tests=[Verdict("fake_add", "Add", "case 1", 4.0, 0.1 + 0.2, Status.FAILED, "ø", True)],
        notes=["n"],
        execution_time=1.234567,
        isolation={"kind": "A", "walls": ["net"]},
        key="alice/a.ipynb",
        flags=[ReviewFlag("os.write", 2, 3, "os.write(1, b'')", False)],
        flag_count=1,
    )
    back = kept.from_dict(json.loads(json.dumps(kept.as_dict(result))))
    assert back == result and isinstance(back.tests[0].status, Status)
    with pytest.raises(ValueError, match="not a kept result"):
        kept.from_dict({**kept.as_dict(result), "secret": 1})


def test_only_names_a_student_by_folder_id_name_or_email(tmp_path):
    roster = read_roster(_write(tmp_path / "worksheet.csv", WORKSHEET))
    rows = [
        Submission(key=f"{BOB}/zz_fake.ipynb", student=BOB, student_id="Participant 2345", student_name="Bob Li"),
        Submission(key="Ann_1_assignsubmission_file_/zz_fake.ipynb", student="Ann_1_assignsubmission_file_"),
    ]
    for name in (BOB, "Participant 2345", "Bob Li", "bl@uni.edu", f"{BOB}/zz_fake.ipynb"):
        assert kept.select(rows, [name], roster) == rows[:1], name
    assert kept.select(rows, ["Bob Li", "Ann_1_assignsubmission_file_"], roster) == rows
    with pytest.raises(ValueError, match="'Carol'"):
        kept.select(rows, ["Carol"], roster)


# --- class runs ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_same_class_copied_elsewhere_grades_byte_identically(fake, tmp_path):
    require_sandbox()
    base = tmp_path / "term"
    folder = _moodle_class(base)
    assert _grade(folder, base / "out") == 0
    first = _outputs(base / "out")
    assert {"report.html", "report.md", "moodle_grades.csv", "summary.txt", "grading-seed.json"} <= set(first)
    copy = tmp_path / "elsewhere" / "copied-term"
    shutil.copytree(base, copy)  # the class and its outputs, as a move to another machine or folder
    assert _grade(copy / "moodle-a99", copy / "out") == 0
    assert _outputs(copy / "out") == first
    # A new download of the class into a fresh folder of the same name, graded into the same outputs.
    again = tmp_path / "downloads" / "moodle-a99"
    shutil.copytree(folder, again)
    shutil.copy(base / "worksheet.csv", again.parent / "worksheet.csv")
    assert _grade(again, base / "out") == 0
    assert _outputs(base / "out") == first
    assert list(json.loads((base / "out" / "grading-seed.json").read_text())["seeds"]) == ["zz_fake @ moodle-a99"]


@pytest.mark.slow
def test_one_student_regraded_changes_their_row_only_and_equals_a_full_regrade(fake, tmp_path, capsys):
    require_sandbox()
    folder = _moodle_class(tmp_path)
    out = tmp_path / "out"
    assert _grade(folder, out, "--only", "Bob Li") == 2  # nothing kept yet: a full grade comes first
    assert "grade the whole class" in capsys.readouterr().err
    assert _grade(folder, out) == 0
    before, rows_before = _outputs(out), _rows(out)
    assert rows_before[BOB]["final"] == "0"
    assert "for class 'moodle-a99' (the class folder's name" in capsys.readouterr().out

    # Bob's notebook is replaced (a resubmission after an extension); only Bob is regraded, with one exercise.
    write_submission(folder / BOB / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    assert _grade(folder, out, "--only", "Participant 2345", "--exercise", "fake_add") == 0
    one = _rows(out)
    assert (one[BOB]["fake_add"], one[BOB]["fake_double"], one[BOB]["final"]) == ("4", "0", "4")
    assert {k: v for k, v in one.items() if k != BOB} == {k: v for k, v in rows_before.items() if k != BOB}

    assert _grade(folder, out, "--only", "Bob Li") == 0
    assert "regraded " + BOB in capsys.readouterr().out
    after, rows_after = _outputs(out), _rows(out)
    assert rows_after[BOB]["final"] == "6" and rows_after[BOB]["input_seed"] == rows_before[BOB]["input_seed"]
    assert {k: v for k, v in rows_after.items() if k != BOB} == {k: v for k, v in rows_before.items() if k != BOB}
    changed = {name for name in before if before[name] != after.get(name)}
    bob_files = {name for name in changed if "Bob" in name}
    class_wide = {name for name in changed - bob_files if name.startswith("report")}  # the report and histogram
    assert bob_files and changed - bob_files - class_wide <= {"grades.csv", "moodle_grades.csv", "summary.txt"}

    full = tmp_path / "full"  # the reference: the whole class graded again with the class's seed
    full.mkdir()
    shutil.copy(out / "grading-seed.json", full / "grading-seed.json")
    assert _grade(folder, full) == 0
    assert _outputs(full) == after

    assert _grade(folder, out, "--only", "Carol") == 2
    assert "no student 'Carol'" in capsys.readouterr().err
    assert _grade(folder, out, "--only", "Bob Li", "--exercise", "nope") == 2
    assert _grade(folder, out, "--only", "Bob Li", "--new-seed") == 2
    assert _grade(folder, out, "--only", "Bob Li", "--case-timeout", "6") == 2  # not the class's settings
    assert "other settings (case_timeout 5.0 now 6.0)" in capsys.readouterr().err
    (folder / "Zoe Ho_9_assignsubmission_file_").mkdir()  # a student new to the folder
    write_submission(folder / "Zoe Ho_9_assignsubmission_file_" / "zz_fake.ipynb", GOOD_ADD)
    assert _grade(folder, out, "--only", "Bob Li") == 2
    assert "no kept result for Zoe Ho_9" in capsys.readouterr().err
    assert _outputs(out) == after  # a refused regrade writes nothing


@pytest.mark.slow
def test_a_class_id_names_the_seed_whatever_the_folder_is_called(fake, tmp_path, capsys):
    require_sandbox()
    folder = _moodle_class(tmp_path)
    assert _grade(folder, tmp_path / "out", "--class-id", "ml101-fall26") == 0
    assert "for class 'ml101-fall26' (--class-id)" in capsys.readouterr().out
    renamed = folder.rename(tmp_path / "download (2)")
    assert _grade(renamed, tmp_path / "out", "--class-id", "ml101-fall26", "--only", "Bob Li") == 0
    seeds = json.loads((tmp_path / "out" / "grading-seed.json").read_text())["seeds"]
    assert list(seeds) == ["zz_fake @ ml101-fall26"]
