"""What the grader tells students and instructors says what happened: no first fix without a failure, no
"every test passed" over zeros, students counted once, excused students out of the statistics and written
as the platform writes them, the platform's own cells kept, and no comment cut mid-word."""

from __future__ import annotations

import csv
import io
import re

from mha_course.grading.classroom import outputs
from mha_course.grading.classroom.feedback import feedback_markdown, summary
from mha_course.grading.classroom.policy import Override, apply_overrides
from mha_course.grading.classroom.report import sections
from mha_course.grading.classroom.results import class_summary
from mha_course.grading.classroom.roster import read_roster, write_grade_columns
from mha_course.grading.engine.notebook_run import FRESH_INPUTS_FAILED
from mha_course.grading.safe_text import csv_cell, shorten
from mha_course.grading.verdicts import Status, SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict


def _test(case: str, status: Status = Status.PASSED, output: str = "", exercise: str = "shift") -> Verdict:
    return Verdict(exercise, "Shift", case, 2.0, 2.0 if status == Status.PASSED else 0.0, status, output, False)


def _result(student: str, tests: list[Verdict], **fields) -> SubmissionResult:
    return SubmissionResult(
        path=f"{student}.ipynb", assignment="a17_row_shift", title="A17", tests=tests, student=student,
        student_id=student, **fields,
    )  # fmt: skip


def test_a_cell_that_raised_without_failing_any_test_is_no_first_fix():
    clean_run = _result("ann", [_test("one"), _test("two")], notes=["cell 6 raised ValueError: a plot's axis"])
    text = feedback_markdown(clean_run)
    assert "Fix this first" not in text and "(0, 0 point(s))" not in text
    assert "cell 6 raised ValueError" in text  # still named, among the notes
    assert "first fix" not in summary(clean_run) and "all tests pass" in summary(clean_run)
    broken = _result(
        "bob", [_test("one", Status.FAILED, "NameError: name 'shift' is not defined")],
        notes=["cell 2 raised ModuleNotFoundError: No module named 'seaborn'"],
    )  # fmt: skip
    assert "## Fix this first" in feedback_markdown(broken)


def test_the_summary_never_says_every_test_passed_over_zeros():
    not_run = [_result(s, [_test("one", Status.NOT_RUN, "not run: the notebook stopped")]) for s in ("ann", "bob")]
    text = class_summary(not_run)
    assert "every graded test passed" not in text, text
    assert "2 submission(s) lost points" in text
    assert "every graded test passed in every submission" in class_summary([_result("cat", [_test("one")])])


def test_misconceptions_count_each_student_once_per_exercise():
    # one student's mistake reads differently from case to case; another student makes one of them
    ann = _result(
        "ann",
        [
            _test("one", Status.FAILED, "you subtracted each column's maximum"),
            _test("two", Status.FAILED, "the shifted scores: shape expected (2, 4) [T, S], got (4,)"),
            _test("three", Status.FAILED, "the shifted scores: values differ from the expected ones; worst at 0"),
        ],
    )
    bob = _result("bob", [_test("one", Status.FAILED, "you subtracted each column's maximum"), _test("two")])
    section = sections([ann, bob])[0]
    counted = [who for _, _, who in section.misconceptions]
    assert sum(len(w) for w in counted) == 2 and all(w.count("ann") <= 1 for w in counted), counted
    counts = [int(n) for n in re.findall(r"^\s+(\d+)\s+shift: ", class_summary([ann, bob]), re.M)]
    assert sum(counts) == 2, counts  # two students, two counted (it was four: one per hint variant)


def test_the_fresh_inputs_message_accuses_nobody():
    words = FRESH_INPUTS_FAILED.lower()
    assert "published example" in words and "in general" in words
    for accusing in ("hard", "memoris", "depend on the exact", "cheat"):
        assert accusing not in words


def _excused_class() -> list[SubmissionResult]:
    ann = _result("ann", [_test("one"), _test("two")])
    bob = _result("bob", [_test("one", Status.FAILED, "wrong"), _test("two", Status.FAILED, "wrong")])
    apply_overrides([bob], [Override("bob", "*", "waive", None, "medical certificate")])
    return [ann, bob]


def test_excused_students_are_left_out_of_the_mean_and_the_histogram():
    from mha_course.grading.classroom.report import markdown_report, score_counts

    results = _excused_class()
    section = sections(results)[0]
    assert section.scores == [4.0] and [r.student for r in section.excused] == ["bob"]
    assert sum(n for _, n in score_counts(section)) == 1
    text = class_summary(results)
    assert "1 graded, mean 4.0 / 4" in text and "1 excused (left out of the mean and the histogram)" in text
    assert "1 excused" in markdown_report(results)


def _grades_out(roster_text: str, tmp_path) -> list[list[str]]:
    path = tmp_path / "roster.csv"
    path.write_text(roster_text, encoding="utf-8")
    results = _excused_class()
    written: dict[str, str] = {}
    excused = {"Grade": set().union(*outputs.excused(results).values())}
    grades = {"Grade": dict(outputs.grades(results)["a17_row_shift"])}
    write_grade_columns("out.csv", read_roster(path), grades, lambda _, text: written.update(out=text), None, excused)
    return list(csv.reader(io.StringIO(written["out"])))


def test_canvas_gets_ex_for_an_excused_student_and_moodle_keeps_its_dash(tmp_path):
    canvas = _grades_out(
        "Student,ID,SIS User ID,Grade\n    Points Possible,,,4\nAnn,ann,s1,\nBob,bob,s2,\n", tmp_path
    )  # fmt: skip
    assert canvas[2][-1] == "4" and canvas[3][-1] == "EX", canvas
    moodle = _grades_out(
        "Identifier,Full name,Grade,Maximum Grade,Last modified (submission)\n"
        "ann,Ann,-,4,-\nbob,Bob,-,4,-\ncal,Cal,-,4,-\n",
        tmp_path,
    )
    assert [row[2] for row in moodle[1:]] == ["4", "-", "-"], moodle  # Moodle has no EX; its "-" stays
    assert [row[4] for row in moodle[1:]] == ["-", "-", "-"], moodle


def test_csv_guard_keeps_a_lone_dash_and_still_quotes_formulas():
    assert csv_cell("-") == "-"
    for formula in ("-1+2", "=SUM(A1:A3)", "-cmd|' /C calc'!A0", "+A1", "@SUM(1)"):
        assert csv_cell(formula) == "'" + formula
    assert csv_cell("-3.5") == "-3.5"


def test_comments_are_cut_at_a_word_boundary():
    long = "the shifted scores: " + " ".join(["subtract each row's own maximum"] * 12)
    cut = shorten(long, 160)
    assert len(cut) <= 160 and cut.endswith("…") and long.startswith(cut[:-1])
    assert long[len(cut) - 1] == " "  # the last word is whole
    line = summary(_result("ann", [_test("one", Status.FAILED, long)]))
    hint = line.split("shift: ", 1)[1]
    assert hint.endswith("…") and long.startswith(hint[:-1]) and long[len(hint) - 1] == " ", line
    assert shorten("short", 160) == "short"
