"""Written answers graded by hand, as an instructor meets them.

The instructor writes the rubric and the sheet for a06_debug_mha from a Moodle class folder, fills in
points for one student and leaves the other pending, and grades with ``--manual-grades``: one
gradebook holds the tests' points and the hand-given ones, and a missing grade reads "pending".
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from grading_fake import require_sandbox

from mha_course.grading import verdicts
from mha_course.grading.classroom import manual
from mha_course.grading.classroom.feedback import feedback_markdown, summary
from mha_course.grading.classroom.results import gradebook_rows, gradescope
from mha_course.grading.verdicts import Status, SubmissionResult

ROOT = Path(__file__).resolve().parents[3]
QUESTION = "a05-debug-mha-09"  # the bug log's grade_id in solutions/a06_debug_mha.ipynb
ANA = "Ana Ruiz_1111_assignsubmission_file_"
BEN = "Ben Cole_2222_assignsubmission_file_"


@pytest.fixture
def moodle_class(tmp_path):
    root = tmp_path / "submissions"
    for name in (ANA, BEN):
        (root / name).mkdir(parents=True)
        shutil.copy(ROOT / "exercises" / "a06_debug_mha.ipynb", root / name / "a06_debug_mha.ipynb")
    return root


def _result(student: str) -> SubmissionResult:
    test = verdicts.TestResult("mha", "The repaired module", "shapes", 4.0, 4.0, Status.PASSED, "", False)
    return SubmissionResult(
        path=f"/class/{student}/a06_debug_mha.ipynb",
        assignment="a06_debug_mha",
        tests=[test],
        max_points=4.0,
        student=student,
        key=f"{student}/a06_debug_mha.ipynb",
    )


def test_rubric_comes_from_the_solutions_free_response_cells():
    (a05,) = manual.assignment_questions("a06_debug_mha")
    assert a05.key == QUESTION and a05.points == manual.DEFAULT_POINTS
    assert "Bug log" in a05.prompt and "head split fuses time and features" in a05.answer
    assert "BEGIN SOLUTION" not in a05.answer + a05.prompt
    (a13,) = manual.assignment_questions("a13_triton_kernel")
    assert "padded" in a13.prompt and "NaN" in a13.answer
    assert manual.assignment_questions("a02_softmax") == []  # no written answer: nothing to grade by hand


def test_sheet_fill_merge_and_every_output(moodle_class, tmp_path):
    assert manual.main(["rubric", "a06_debug_mha", "--out", str(tmp_path / "out"), "--class", str(moodle_class)]) == 0
    rubric = (tmp_path / "out" / "a06_debug_mha-rubric.md").read_text()
    assert QUESTION in rubric and "Model answer" in rubric
    rows = list(csv.DictReader((tmp_path / "out" / "a06_debug_mha-manual.csv").open()))
    assert [(r["student"], r["question"], r["points"], r["max_points"]) for r in rows] == [
        (ANA, QUESTION, "", "5"),
        (BEN, QUESTION, "", "5"),
    ]
    rows[0]["points"], rows[0]["comment"] = "3.5", "bugs 1-3 found; the mask is missing"
    sheet = tmp_path / "manual.csv"
    with sheet.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    results = [_result(ANA), _result(BEN)]
    assert manual.merge(results, manual.read_manual(sheet)) == []
    ana, ben = results
    assert (ana.score, ana.max_score) == (7.5, 9.0)
    assert (ben.score, ben.max_score) == (4.0, 9.0)  # pending: counted in the maximum, nothing given yet
    columns, table = gradebook_rows(results)
    column = manual.PREFIX + QUESTION
    assert column in columns
    assert table[0][column] == "3.5" and table[1][column] == "pending"  # never 0
    assert table[0]["final"] == "7.5" and "pending" in table[1]["notes"]
    feedback_ana = feedback_markdown(ana)
    assert f"(`{column}`): 3.5 / 5" in feedback_ana and "the mask is missing" in feedback_ana
    feedback_ben = feedback_markdown(ben)
    assert f"(`{column}`): pending" in feedback_ben and "0 / 5" not in feedback_ben
    assert "written answers pending (1)" in summary(ben)  # the platform's comment column
    assert "written answers pending" not in summary(ana)
    assert "All tests pass" not in feedback_ben.split(column)[1]  # a hand-graded answer has no tests
    assert {t["name"]: t["score"] for t in gradescope(ana)["tests"]}[f"{column}: graded by hand"] == 3.5
    # a regrade merges afresh: no duplicate questions
    manual.merge(results, manual.read_manual(sheet))
    assert sum(t.exercise == column for t in ana.tests) == 1


def test_a_row_for_nobody_is_a_warning_and_bad_rows_are_refused(tmp_path):
    sheet = tmp_path / "manual.csv"
    sheet.write_text(f"student,question,points\nNo One,{QUESTION},2\n")
    warnings = manual.merge([_result(ANA)], manual.read_manual(sheet))
    assert warnings == [f"manual grade for No One ({QUESTION}) matches no graded submission"]
    for body, message in (
        (f"student,question,points\n{ANA},{QUESTION},lots\n", "must be a number"),
        (f"student,question,points,max_points\n{ANA},{QUESTION},6,5\n", "exceed"),
        (f"student,question,points\n{ANA},{QUESTION},-1\n", ">= 0"),
        ("student,points\nx,1\n", "columns student, question, points"),
    ):
        sheet.write_text(body)
        with pytest.raises(ValueError, match=message):
            manual.read_manual(sheet)


def test_sheet_cells_cannot_start_a_formula():
    text = manual.sheet("a06_debug_mha", manual.assignment_questions("a06_debug_mha"), ["=cmd|' /C calc'!A0"])
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert row["student"].startswith("'=")


@pytest.mark.slow
def test_grade_merges_the_sheet_into_the_class_outputs(moodle_class, tmp_path):
    """``grade --manual-grades`` on the Moodle folder: the CSV, the feedback and Moodle's worksheet hold both."""
    from mha_course.grading.grade import main

    require_sandbox()
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Feedback comments\n"
        "Participant 1111,Ana Ruiz,ana@example.org,Submitted,,10,\n"
        "Participant 2222,Ben Cole,ben@example.org,Submitted,,10,\n"
    )
    sheet = tmp_path / "manual.csv"
    sheet.write_text(f"student,question,points,max_points,comment\nAna Ruiz,{QUESTION},4,5,clear log\n")
    out = tmp_path / "out"
    status = main(
        [
            str(moodle_class),
            "--assignment",
            "a06_debug_mha",
            "--roster",
            str(roster),
            "--manual-grades",
            str(sheet),
            "--csv",
            str(out / "grades.csv"),
            "--feedback-dir",
            str(out / "feedback"),
            "--grades-out",
            str(out / "moodle.csv"),
            "--seed",
            "3",
            "--quiet",
        ]
    )
    assert status == 0
    rows = {r["name"]: r for r in csv.DictReader((out / "grades.csv").open())}
    column = manual.PREFIX + QUESTION
    assert rows["Ana Ruiz"][column] == "4" and rows["Ben Cole"][column] == "pending"
    assert float(rows["Ana Ruiz"]["final"]) == float(rows["Ben Cole"]["final"]) + 4  # same code, 4 points by hand
    feedback = {p.name: p.read_text() for p in (out / "feedback").iterdir()}
    assert any("clear log" in text for text in feedback.values())
    assert any(f"(`{column}`): pending" in text for text in feedback.values())
    moodle = (out / "moodle.csv").read_text()
    ben = next(line for line in moodle.splitlines() if line.startswith("Participant 2222"))
    assert "written answers pending (1)" in ben
