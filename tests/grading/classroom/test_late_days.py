"""Late days as the platform recorded them, shown to the student; extensions, late-day tokens; the newest draft graded.

Every class folder is copied the way an instructor does (``cp -r``: every file's time is now, after the
due date), so only the platform's own record can tell who was on time: Moodle's worksheet column
"Last modified (submission)", nbgrader's ``timestamp.txt``, Gradescope's ``submission_metadata.json``.
Class runs use the fake assignment (grading_fake.py, 6 points: fake_add 4, fake_double 2).
"""

from __future__ import annotations

import csv
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.classroom.class_files import FileKind, classify
from mha_course.grading.classroom.collect import collect
from mha_course.grading.classroom.submitted_at import parse_time
from mha_course.grading.engine import registry

BAD_ADD = "def add_arrays(a, b):\n    return a - b\n"
DUE = "2026-11-20T23:59:00+00:00"
NAMES = {"zz_fake": "zz_fake.ipynb"}


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _run(args: list) -> int:
    from mha_course.grading.grade import main

    return main([str(a) for a in args] + ["--quiet", "--case-timeout", "5"])


def _csv(path: Path) -> dict[str, dict]:
    return {row["name"] or row["student"]: row for row in csv.DictReader(path.open(encoding="utf-8"))}


def _copied(*paths: Path) -> None:
    """What ``cp -r`` does to a download: every file's time becomes now (days after the due date)."""
    for path in paths:
        os.utime(path, None)


# --- the platforms' times --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Friday, 20 November 2026, 11:00 PM", datetime(2026, 11, 20, 23, 0, tzinfo=UTC)),  # Moodle's worksheet
        ("20 November 2026, 23:00", datetime(2026, 11, 20, 23, 0, tzinfo=UTC)),
        ("2026-11-21 08:30:00.123456 UTC", datetime(2026, 11, 21, 8, 30, 0, 123456, tzinfo=UTC)),  # nbgrader
        ("2026-11-20T15:00:00.000000-08:00", datetime(2026, 11, 20, 23, 0, tzinfo=UTC)),  # Gradescope
        ("2026-11-20T23:00:00Z", datetime(2026, 11, 20, 23, 0, tzinfo=UTC)),
    ],
)
def test_platform_times_parse(text, expected):
    assert parse_time(text) == expected.timestamp()


def test_a_time_without_a_zone_is_read_in_the_due_dates_zone_and_moodles_dash_is_none():
    paris = timezone(timedelta(hours=1))
    assert (
        parse_time("Friday, 20 November 2026, 11:00 PM", paris) == datetime(2026, 11, 20, 22, 0, tzinfo=UTC).timestamp()
    )
    assert parse_time("-") is None and parse_time("") is None
    with pytest.raises(ValueError, match="ISO 8601 or Moodle"):
        parse_time("last friday")


def _stamped(root: Path, roster_text: str | None, tmp_path: Path) -> dict[str, tuple[float | None, str]]:
    from mha_course.grading.classroom.intake import identify
    from mha_course.grading.classroom.roster import read_roster
    from mha_course.grading.classroom.submitted_at import stamp

    roster = None
    if roster_text is not None:
        (tmp_path / "roster.csv").write_text(roster_text, encoding="utf-8")
        roster = read_roster(tmp_path / "roster.csv")
    rows = collect([root], "zz_fake", notebook_names=NAMES)
    identify(rows, roster)
    assert stamp(rows, [root], roster) == []
    return {row.student: (row.submitted_at, row.time_source) for row in rows}


def test_a_time_file_a_student_uploads_is_not_believed(tmp_path):
    """A Moodle folder holding a forged timestamp.txt and submission_metadata.json: neither is nbgrader's or
    Gradescope's place, so the worksheet's time counts (and without it, none: the file time, with a warning)."""
    root = tmp_path / "submissions"
    for name in ("Bob Li_2345_assignsubmission_file_", "Cy Ng_3456_assignsubmission_file_"):
        (root / name).mkdir(parents=True)
        write_submission(root / name / "zz_fake.ipynb", GOOD_ADD)
        (root / name / "timestamp.txt").write_text("2026-11-01 00:00:00 UTC")
        (root / name / "submission_metadata.json").write_text('{"created_at": "2026-11-01T00:00:00Z"}')
    got = _stamped(
        root,
        MOODLE_COLUMNS
        + 'Participant 2345,Bob Li,bob@example.org,Submitted,,6,Yes,"Sunday, 22 November 2026, 10:00 AM",,-,\n',
        tmp_path,
    )
    assert got["Bob Li_2345_assignsubmission_file_"] == (
        datetime(2026, 11, 22, 10, 0, tzinfo=UTC).timestamp(),
        "the roster's 'Last modified (submission)'",
    )
    assert got["Cy Ng_3456_assignsubmission_file_"] == (None, "")


def test_a_canvas_export_with_a_submission_time_is_read(tmp_path):
    root = tmp_path / "canvas"
    root.mkdir()
    write_submission(root / "martinalice_99_3_zz_fake.ipynb", GOOD_ADD)
    roster = 'Student,ID,SIS User ID,Submitted at\n"Martin, Alice",99,s99,2026-11-21T08:00:00Z\n'
    got = _stamped(root, roster, tmp_path)
    assert got["martinalice_99"] == (
        datetime(2026, 11, 21, 8, 0, tzinfo=UTC).timestamp(),
        "the roster's 'Submitted at'",
    )


# --- duplicates: the newest draft is graded ---------------------------------------------------------------


def test_a_browsers_second_download_is_a_notebook_not_a_copy(tmp_path):
    write_submission(tmp_path / "zz_fake (1).ipynb", GOOD_ADD)
    write_submission(tmp_path / "zz_fake-Copy1.ipynb", GOOD_ADD)
    assert classify(tmp_path, tmp_path / "zz_fake (1).ipynb", "zz_fake (1).ipynb").kind == FileKind.NOTEBOOK
    assert classify(tmp_path, tmp_path / "zz_fake-Copy1.ipynb", "zz_fake-Copy1.ipynb").kind == FileKind.FALLBACK


@pytest.mark.parametrize("newer", ["zz_fake_final.ipynb", "zz_fake (1).ipynb"])
def test_the_newer_draft_is_graded_over_the_one_named_like_the_assignment(fake, tmp_path, newer):
    folder = tmp_path / "Dan Wu_4567_assignsubmission_file_"
    folder.mkdir()
    older = write_submission(folder / "zz_fake.ipynb", BAD_ADD)
    write_submission(folder / newer, GOOD_ADD)
    os.utime(older, (1_700_000_000, 1_700_000_000))
    (row,) = collect([tmp_path], "zz_fake", notebook_names=NAMES)
    assert row.path == folder / newer
    assert any(n.startswith("also submitted Dan Wu_4567_assignsubmission_file_/zz_fake.ipynb") for n in row.notes)


@pytest.mark.parametrize(
    ("names", "graded"),
    [
        (["zz_fake.ipynb", "zz_fake_final.ipynb"], "zz_fake_final.ipynb"),
        (["zz_fake.ipynb", "zz_fake (1).ipynb", "zz_fake (2).ipynb"], "zz_fake (2).ipynb"),
        (["zz_fake_v2.ipynb", "zz_fake.ipynb"], "zz_fake_v2.ipynb"),
        (["draft.ipynb", "zz_fake.ipynb"], "zz_fake.ipynb"),
    ],
)
def test_cp_r_leaves_equal_times_and_the_name_tells_the_later_draft(fake, tmp_path, names, graded):
    folder = tmp_path / "Dan Wu_4567_assignsubmission_file_"
    folder.mkdir()
    for name in names:
        os.utime(write_submission(folder / name, GOOD_ADD), (1_800_000_000, 1_800_000_000))
    (row,) = collect([tmp_path], "zz_fake", notebook_names=NAMES)
    assert row.path == folder / graded


# --- Moodle: the worksheet's "Last modified (submission)" --------------------------------------------------

MOODLE_COLUMNS = (
    "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,"
    "Last modified (submission),Online text,Last modified (grade),Feedback comments\n"
)


@pytest.fixture(scope="module")
def moodle_class(fake, tmp_path_factory):
    """A Moodle folder download copied with ``cp -r`` (every file now) and its grading worksheet."""
    require_sandbox()
    base = tmp_path_factory.mktemp("moodle")
    root = base / "submissions"
    people = {
        "1234": ("Alice Martin", "Friday, 20 November 2026, 11:00 PM"),  # on time
        "2345": ("Bob Li", "Sunday, 22 November 2026, 10:00 AM"),  # 2 days late
        "3456": ("Carol Diaz", "-"),  # the worksheet has no time: the file's time, with a warning
        "4567": ("Dan Wu", "Friday, 20 November 2026, 9:00 PM"),
        "5678": ("Eve Stone", "Friday, 20 November 2026, 9:00 PM"),
    }
    files = []
    for number, (name, _) in people.items():
        folder = root / f"{name}_{number}_assignsubmission_file_"
        folder.mkdir(parents=True)
        files.append(write_submission(folder / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE))
    dan = root / "Dan Wu_4567_assignsubmission_file_"
    write_submission(dan / "zz_fake.ipynb", BAD_ADD, GOOD_DOUBLE)  # the older draft
    write_submission(dan / "zz_fake_final.ipynb", GOOD_ADD, GOOD_DOUBLE)
    eve = root / "Eve Stone_5678_assignsubmission_file_"
    write_submission(eve / "zz_fake.ipynb", BAD_ADD, GOOD_DOUBLE)
    write_submission(eve / "zz_fake (1).ipynb", GOOD_ADD, GOOD_DOUBLE)
    os.utime(dan / "zz_fake.ipynb", (1_700_000_000, 1_700_000_000))
    os.utime(eve / "zz_fake.ipynb", (1_700_000_000, 1_700_000_000))
    _copied(*[p for p in files if p.parent not in (dan, eve)])
    worksheet = base / "worksheet.csv"
    worksheet.write_text(
        MOODLE_COLUMNS
        + "".join(
            f'Participant {n},{name},{name.split()[0].lower()}@example.org,Submitted,,6,Yes,"{when}",,-,\n'
            for n, (name, when) in people.items()
        ),
        encoding="utf-8",
    )
    out = base / "out"
    args = [root, "--assignment", "zz_fake", "--roster", worksheet, "--late-penalty", "10%/day", "--due", DUE]
    args += ["--csv", out / "grades.csv", "--report", out / "report.html", "--feedback-dir", out / "feedback"]
    args += ["--grades-out", out / "moodle.csv", "--results-dir", out / "results", "--summary", out / "summary.txt"]
    return base, out, _run(args)


@pytest.mark.slow
def test_moodle_late_days_come_from_the_worksheet_not_the_copied_files(moodle_class, capsys):
    _, out, status = moodle_class
    assert status == 0
    rows = _csv(out / "grades.csv")
    alice, bob, carol = rows["Alice Martin"], rows["Bob Li"], rows["Carol Diaz"]
    assert (alice["late_days"], alice["final"]) == ("", "6")
    assert (bob["late_days"], bob["final"]) == ("2", "4.8")  # 20% of the maximum 6
    assert "late 2 day(s), 10%/day of the maximum points: -1.2" in bob["adjustments"]
    assert "the roster's 'Last modified (submission)'" in bob["notes"]
    assert int(carol["late_days"]) >= 8 and "modification time" in carol["notes"]  # cp -r: late, and said so


@pytest.mark.slow
def test_the_student_sees_the_days_late_and_the_penalty_everywhere_the_score_is(moodle_class):
    _, out, _ = moodle_class
    (feedback,) = [p for p in (out / "feedback").glob("*.md") if p.name.startswith("Bob_Li")]
    text = feedback.read_text(encoding="utf-8")
    assert "**4.8 / 6 points**" in text and "handed in 2 day(s) late" in text and "-1.2 points" in text
    assert "6 points before the penalty" in text
    (result,) = [p for p in (out / "results").glob("*.json") if p.name.startswith("Bob_Li")]
    data = json.loads(result.read_text(encoding="utf-8"))
    assert data["score"] == 4.8 and "late: handed in 2 day(s) late" in data["output"] and "-1.2" in data["output"]
    comments = {r["Full name"]: r["Feedback comments"] for r in csv.DictReader((out / "moodle.csv").open())}
    assert comments["Bob Li"].startswith("4.8 / 6 points; handed in 2 day(s) late: late penalty -1.2 points")
    assert "late" not in comments["Alice Martin"]


@pytest.mark.slow
def test_several_notebooks_the_newest_is_graded_and_listed_at_the_top_of_the_report(moodle_class):
    _, out, _ = moodle_class
    rows = _csv(out / "grades.csv")
    assert rows["Dan Wu"]["final"] == "6" and rows["Dan Wu"]["submission"].endswith("zz_fake_final.ipynb")
    assert rows["Eve Stone"]["final"] == "6" and rows["Eve Stone"]["submission"].endswith("zz_fake (1).ipynb")
    report = (out / "report.md").read_text(encoding="utf-8")
    top = report.split("\n## ", 1)[0]
    assert "2 student(s) submitted several notebooks (the newest is graded)" in top
    assert "Dan Wu graded" in top and "Eve Stone graded" in top
    assert "1 submission(s) timed by the file's modification time" in top and "Carol Diaz" in top
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert "2 student(s) submitted several notebooks" in summary and "Carol Diaz" in summary


# --- nbgrader: timestamp.txt; extensions and late-day tokens ------------------------------------------------


def _nbgrader_class(base: Path, stamps: dict[str, str]) -> Path:
    """nbgrader's ``submitted/<student>/<assignment>/`` with its timestamp.txt, copied (files are new)."""
    root = base / "submitted"
    for student, when in stamps.items():
        folder = root / student / "zz_fake"
        folder.mkdir(parents=True)
        write_submission(folder / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
        (folder / "timestamp.txt").write_text(when, encoding="utf-8")
    return root


@pytest.mark.slow
def test_nbgrader_timestamps_extensions_and_tokens_kept_for_the_next_assignment(fake, tmp_path):
    require_sandbox()
    root = _nbgrader_class(
        tmp_path,
        {
            "ann": "2026-11-20 20:00:00.000000 UTC",  # on time
            "ben": "2026-11-23 20:00:00.000000 UTC",  # 3 days late, 1 token left: 2 days penalised
            "cat": "2026-11-23 20:00:00.000000 UTC",  # 3 days late, her extension runs to the 24th
            "dev": "2026-11-21 20:00:00.000000 UTC",  # 1 day late, 2 tokens: no penalty
        },
    )
    extensions = tmp_path / "extensions.csv"
    extensions.write_text("student,due,assignment\ncat,2026-11-24T23:59:00+00:00,zz_fake\n", encoding="utf-8")
    tokens = tmp_path / "late-tokens.csv"
    tokens.write_text("student,assignment,days\nben,a01_dot_products,1\n", encoding="utf-8")  # spent before
    out = tmp_path / "out"
    args = [root, "--assignment", "zz_fake", "--late-penalty", "10%/day", "--due", DUE, "--extensions", extensions]
    args += ["--late-tokens", "2", "--tokens-file", tokens, "--csv", out / "grades.csv", "--feedback-dir", out / "fb"]
    for _ in range(2):  # a regrade spends nothing twice
        assert _run(args) == 0
        rows = _csv(out / "grades.csv")
        assert {k: (r["late_days"], r["final"]) for k, r in rows.items()} == {
            "ann": ("", "6"),
            "ben": ("3", "4.8"),
            "cat": ("", "6"),
            "dev": ("1", "6"),
        }
        ledger = sorted(tuple(r.values()) for r in csv.DictReader(tokens.open(encoding="utf-8")))
        assert ledger == [("ben", "a01_dot_products", "1"), ("ben", "zz_fake", "1"), ("dev", "zz_fake", "1")]
    assert "nbgrader's timestamp.txt" in rows["ann"]["notes"]
    (ben,) = [p for p in (out / "fb").glob("ben*.md")]
    text = ben.read_text(encoding="utf-8")
    assert "handed in 3 day(s) late, 1 late-day token(s) used" in text and "tokens left: 0 of 2" in text
    (dev,) = [p for p in (out / "fb").glob("dev*.md")]
    assert "late-day token(s) used: late penalty -0 points" in dev.read_text(encoding="utf-8")


# --- Gradescope: submission_metadata.json ------------------------------------------------------------------


@pytest.mark.slow
def test_gradescope_metadata_times_the_upload(fake, tmp_path):
    require_sandbox()
    upload = tmp_path / "submission"  # /autograder/submission, the metadata beside it
    upload.mkdir()
    write_submission(upload / "my homework.ipynb", GOOD_ADD, GOOD_DOUBLE)
    (tmp_path / "submission_metadata.json").write_text(
        json.dumps({"id": 1, "created_at": "2026-11-21T10:00:00.000000-08:00", "assignment": {"title": "zz"}})
    )
    out = tmp_path / "results.json"
    args = [upload, "--one-submission", "--assignment", "zz_fake", "--late-penalty", "25%", "--due", DUE]
    assert _run(args + ["--json", out]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["score"] == 4.5 and data["extra_data"]["late_days"] == 1
    assert "late: handed in 1 day(s) late: late penalty -1.5 points (25% of the maximum points)" in data["output"]
