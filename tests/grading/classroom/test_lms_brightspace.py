"""TRIAL ONLY: the Brightspace-like platform (lms/brightspace.py), registered by its word in lms.PLATFORMS.

A class folder as its download names files (``SUBMISSION-ATTEMPT - who - Nov 20, 2026 1000 PM - name``) is
grouped by student, timed by the name, matched to its grades export and written back on its column's scale.
"""

from __future__ import annotations

import argparse
import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, write_submission

from mha_course.grading.classroom import lms
from mha_course.grading.classroom.collect import collect, one_per_student
from mha_course.grading.classroom.intake import identify
from mha_course.grading.classroom.lms import brightspace
from mha_course.grading.classroom.outputs import write_grades
from mha_course.grading.classroom.record import apply_policy
from mha_course.grading.classroom.roster import read_roster
from mha_course.grading.classroom.submitted_at import stamp
from mha_course.grading.engine import registry
from mha_course.grading.verdicts import SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

COLUMN = "zz_fake Points Grade <Numeric MaxPoints:12>"
NAMES = {"zz_fake": "zz_fake.ipynb"}


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _class(root: Path) -> Path:
    """alice: one attempt; bob: two, the later one at 9:05 AM (a three-digit clock time)."""
    folder = root / "class"
    folder.mkdir()
    write_submission(folder / "101-201 - alice - Nov 20, 2026 1000 PM - zz_fake.ipynb", GOOD_ADD)
    write_submission(folder / "102-202 - bob - Nov 21, 2026 905 AM - zz_fake.ipynb", GOOD_ADD)
    write_submission(folder / "102-203 - bob - Nov 19, 2026 1130 AM - zz_fake.ipynb", GOOD_ADD)
    return folder


def _grades_export(root: Path) -> Path:
    path = root / "grades.csv"
    path.write_text(
        f"OrgDefinedId,Username,Last Name,First Name,Email,{COLUMN},End-of-Line Indicator\n"
        "S-1,#alice,Martin,Alice,alice@school.example,,#\nS-2,#bob,Dupont,Bob,bob@school.example,,#\n",
        encoding="utf-8",
    )
    return path


def _graded(row, got: float) -> SubmissionResult:
    tests = [Verdict("fake_add", "fake_add", "case", 6.0, got, "passed" if got == 6 else "failed", "", False)]
    return SubmissionResult(
        path=str(row.path),
        assignment="zz_fake",
        tests=tests,
        key=row.key,
        student=row.student,
        student_id=row.student_id,
    )


def test_it_is_registered_and_reads_its_own_names_only():
    assert lms.formats()[-1] is brightspace.FORMAT
    found = lms.flat_name("101-201 - alice - Nov 20, 2026 1000 PM - a02.ipynb")
    assert found is not None and (found.student, found.original) == ("alice", "a02.ipynb")
    assert found.submitted_at == datetime(2026, 11, 20, 22, tzinfo=UTC).timestamp()
    assert brightspace.flat_name("martinalice_1234_5678_a02.ipynb") is None  # Canvas's
    assert brightspace.flat_name("Alice Martin_1234_assignsubmission_file_a02.ipynb") is None  # Moodle's


def test_a_brightspace_class_is_collected_and_its_grades_exported(fake, tmp_path):
    folder = _class(tmp_path)
    rows = collect([folder], "zz_fake", notebook_names=NAMES)
    assert sorted(r.student for r in rows) == ["alice", "bob"]
    bob = next(r for r in rows if r.student == "bob")
    assert "Nov 21" in bob.key and any("also submitted" in n for n in bob.notes)
    roster = read_roster(_grades_export(tmp_path))
    assert [s.student_id for s in roster.students] == ["S-1", "S-2"]  # OrgDefinedId
    assert identify(rows, roster) == []  # "alice" is alice@school.example's login ("#alice" is not)
    assert stamp(rows, [folder], roster) == []
    assert bob.submitted_at == datetime(2026, 11, 21, 9, 5, tzinfo=UTC).timestamp()
    rows = one_per_student(rows, NAMES)
    results = [_graded(row, got) for row, got in zip(rows, (6.0, 4.5), strict=True)]
    args = argparse.Namespace(
        grade_column=COLUMN, assignment="zz_fake", late_penalty=None, lms_max=None, grades_out=tmp_path / "out.csv"
    )
    apply_policy(args, results, rows, [], roster)
    assert {r.lms_max for r in results} == {12.0}
    write_grades(args, results, roster)
    exported = list(csv.DictReader((tmp_path / "out.csv").open(encoding="utf-8")))
    assert {r["OrgDefinedId"]: r[COLUMN] for r in exported} == {"S-1": "12", "S-2": "9"}
    assert {r["End-of-Line Indicator"] for r in exported} == {"#"}  # written back as it came
