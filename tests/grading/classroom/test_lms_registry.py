"""A new learning platform is one module and one registration: a toy "Blackboard-like" format, registered here,
is collected, timed and exported through the registry alone (no other module of the grader knows it).

Its conventions (CONTRIBUTING.md, "Add an LMS format", shows the same module): a flat download named
``ASSIGNMENT_USERNAME_attempt_YYYY-MM-DD-HH-MM-SS_original name`` (the time of the attempt in the name), a
grade-centre export with ``Student ID``, ``Feedback to Learner`` and the maximum in the grade column's own
name (``zz_fake [Total Pts: 12 Score] |1234``).
"""

from __future__ import annotations

import argparse
import csv
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, require_sandbox, write_submission

from mha_course.grading.classroom import lms
from mha_course.grading.classroom.collect import collect, one_per_student
from mha_course.grading.classroom.intake import identify
from mha_course.grading.classroom.lms.format import FlatName, LmsFormat
from mha_course.grading.classroom.outputs import write_grades
from mha_course.grading.classroom.record import apply_policy
from mha_course.grading.classroom.roster import read_roster
from mha_course.grading.classroom.submitted_at import stamp
from mha_course.grading.engine import registry
from mha_course.grading.verdicts import SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

# --- the toy platform: what would be mha_course/grading/classroom/lms/blackboard.py ----------------------------

_FLAT = re.compile(r"^(?P<assignment>.+?)_(?P<who>[^_]+)_attempt_(?P<when>\d{4}(?:-\d{2}){5})_(?P<name>.+)$")
_TOTAL = re.compile(r"\[Total Pts: (?P<points>\d+(?:\.\d+)?)")


def flat_name(name: str) -> FlatName | None:
    match = _FLAT.match(name)
    if not match:
        return None
    when = datetime.strptime(match["when"], "%Y-%m-%d-%H-%M-%S").replace(tzinfo=UTC).timestamp()
    return FlatName(match["who"], match["name"], submitted_at=when)


def column_max(column: str) -> float | None:
    match = _TOTAL.search(column)
    return float(match["points"]) if match else None


FORMAT = LmsFormat(
    name="blackboard-like",
    flat_name=flat_name,
    id_columns=("student id",),
    comment_columns=("feedback to learner",),
    column_max=column_max,
)

# ----------------------------------------------------------------------------------------------------------------

COLUMN = "zz_fake [Total Pts: 12 Score] |1234"
NAMES = {"zz_fake": "zz_fake.ipynb"}


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _class(root: Path) -> Path:
    """alice: one attempt; bob: two, the later attempt saved first (its file is the older on disk)."""
    folder = root / "class"
    folder.mkdir()
    write_submission(folder / "zz_fake_alice_attempt_2026-11-20-10-00-00_zz_fake.ipynb", GOOD_ADD)
    write_submission(folder / "zz_fake_bob_attempt_2026-11-21-09-00-00_zz_fake.ipynb", GOOD_ADD)
    write_submission(folder / "zz_fake_bob_attempt_2026-11-19-09-00-00_zz_fake.ipynb", GOOD_ADD)
    return folder


def _roster(root: Path) -> Path:
    path = root / "gradecentre.csv"
    path.write_text(
        f"Last Name,First Name,Username,Student ID,{COLUMN},Feedback to Learner\n"
        "Martin,Alice,alice,S-1,,\nDupont,Bob,bob,S-2,,\n",
        encoding="utf-8",
    )
    return path


def _args(root: Path) -> argparse.Namespace:
    return argparse.Namespace(
        grade_column=COLUMN, assignment="zz_fake", late_penalty=None, lms_max=None, grades_out=root / "out.csv"
    )


def test_registering_the_toy_platform_is_all_it_takes(fake, tmp_path):
    folder = _class(tmp_path)
    with lms.registered_lms(FORMAT):
        assert lms.formats()[-1] is FORMAT
        rows = collect([folder], "zz_fake", notebook_names=NAMES)
        assert sorted(r.student for r in rows) == ["alice", "bob"]  # grouped by the name's username
        bob = next(r for r in rows if r.student == "bob")
        assert "2026-11-21" in bob.key  # the later attempt by the time in its name, not by the file's
        assert any("also submitted" in n and "2026-11-19" in n for n in bob.notes)
        roster = read_roster(_roster(tmp_path))
        assert [s.student_id for s in roster.students] == ["S-1", "S-2"]  # its id column, through the registry
        assert [s.name for s in roster.students] == ["Alice Martin", "Bob Dupont"]  # first and last name joined
        assert identify(rows, roster) == []
        assert stamp(rows, [folder], roster) == []
        assert bob.submitted_at == datetime(2026, 11, 21, 9, tzinfo=UTC).timestamp()
        assert bob.time_source == "the platform's file name"
        assert bob.meta is not None and bob.meta.assignment == "zz_fake"  # the metadata, read once, travels on
        rows = one_per_student(rows, NAMES)
        results = [_graded(row, got) for row, got in zip(rows, (6.0, 4.5), strict=True)]
        args = _args(tmp_path)
        apply_policy(args, results, rows, [], roster)
        assert {r.lms_max for r in results} == {12.0}  # the maximum its column's name carries
        write_grades(args, results, roster)
    exported = list(csv.DictReader((tmp_path / "out.csv").open(encoding="utf-8")))
    assert {r["Username"]: r[COLUMN] for r in exported} == {"alice": "12", "bob": "9"}
    assert all(r["Feedback to Learner"] for r in exported)  # its comment column
    assert "blackboard-like" not in {p.name for p in lms.formats()}  # gone after the block


def test_without_it_the_same_folder_is_not_understood(fake, tmp_path):
    rows = collect([_class(tmp_path)], "zz_fake", notebook_names=NAMES)
    assert len(rows) == 3  # each file a student of its own: no registered platform knows the names
    assert read_roster(_roster(tmp_path)).max_for(COLUMN) is None


def test_a_name_in_two_columns_is_joined_and_a_platform_may_name_its_own(tmp_path):
    """A roster without a full-name column: "First name" and "Last name" (Moodle's gradebook export), or a
    platform's own pair of columns (here a German-language export), make the name that folders are matched by."""
    plain = tmp_path / "plain.csv"  # as Moodle's course gradebook exports it: its ID number is empty unless filled in
    plain.write_text(
        "First name,Surname,ID number,Email address\nJosé,Núñez,,jn@uni.edu\nAlice,,,am@uni.edu\nAnna,van der Berg,,ab@uni.edu\n",
        encoding="utf-8",
    )
    students = read_roster(plain).students
    assert [s.student_id for s in students] == ["jn@uni.edu", "am@uni.edu", "ab@uni.edu"]  # the email is the id
    assert [s.name for s in students] == ["José Núñez", "Alice", "Anna van der Berg"]
    assert students[2].name_forms() == {"vanderberganna", "annavanderberg"}  # the parts as given, not re-split
    blank_ids = tmp_path / "blank_ids.csv"
    blank_ids.write_text("First name,Last name,ID\nAlice,Martin,\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no row has an id in the column 'ID'"):
        read_roster(blank_ids)  # every row dropped as a platform's extra row would name no student: said, not silent
    german = tmp_path / "german.csv"
    german.write_text("Vorname,Nachname,ID\nAlice,Martin,1\n", encoding="utf-8")
    assert [s.name for s in read_roster(german).students] == [""]  # no platform knows these columns
    own = LmsFormat(name="german-export", first_name_columns=("vorname",), last_name_columns=("nachname",))
    with lms.registered_lms(own):
        alice = read_roster(german).students[0]
    assert alice.name == "Alice Martin" and alice.name_forms() == {"martinalice", "alicemartin"}
    full = tmp_path / "full.csv"
    full.write_text(
        "Learner,First name,Last name,ID\nAlice B. Martin,Alice,Martin,1\n,Bob,Dupont,2\n", encoding="utf-8"
    )
    with lms.registered_lms(LmsFormat(name="learner-column", name_columns=("learner",))):
        names = [s.name for s in read_roster(full).students]
    assert names == ["Alice B. Martin", "Bob Dupont"]  # a full name wins over the parts; an empty one falls back


def test_a_platform_name_is_registered_once():
    with lms.registered_lms(FORMAT), pytest.raises(ValueError, match="registered already"):
        lms.register_lms(FORMAT)
    with pytest.raises(TypeError, match="LmsFormat"):
        lms.register_lms("blackboard")  # type: ignore[arg-type]


def test_the_shipped_platforms_are_registered_in_order():
    assert [p.name for p in lms.formats()] == list(lms.PLATFORMS)
    assert lms.student_of("martinalice_LATE_1234_5678_a02.ipynb") == "martinalice_1234"
    assert lms.flat_name("martinalice_LATE_1234_5678_a02.ipynb") == FlatName("martinalice_1234", "a02.ipynb", True)
    assert lms.original_name("Alice Martin_1234_assignsubmission_file_a02.ipynb") == "a02.ipynb"


@pytest.mark.slow
def test_the_command_grades_a_class_of_the_toy_platform(fake, tmp_path):
    """End to end: ``grade CLASS --roster ... --grades-out`` with the toy platform registered, behind the walls."""
    require_sandbox()
    from mha_course.grading import grade

    folder = _class(tmp_path)
    out = tmp_path / "out.csv"
    with lms.registered_lms(FORMAT):
        status = grade.main(
            [str(folder), "--assignment", "zz_fake", "--roster", str(_roster(tmp_path)), "--grades-out", str(out)]
            + ["--grade-column", COLUMN, "--csv", str(tmp_path / "g.csv"), "--quiet"]
        )
    assert status == 0
    exported = {r["Username"]: r[COLUMN] for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert exported == {"alice": "8", "bob": "8"}  # fake_add's 4 of 6 points, on the column's 12


def test_contributings_worked_example_is_a_working_module():
    """The module CONTRIBUTING.md shows ("Add an LMS format") imports as lms/blackboard.py would, and reads as the toy."""
    import importlib.util
    import sys

    text = (Path(__file__).resolve().parents[3] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("## Add an LMS format") :]
    source = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert source.startswith("# mha_course/grading/classroom/lms/blackboard.py")
    name = "mha_course.grading.classroom.lms.blackboard"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "mha_course.grading.classroom.lms"
    sys.modules[name] = module
    try:
        exec(compile(source, "CONTRIBUTING.md", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    shown = module.FORMAT
    file_name = "a02_alice_attempt_2026-11-20-23-59-00_a02.ipynb"
    assert shown.flat_name(file_name) == FORMAT.flat_name(file_name) is not None
    assert shown.column_max(COLUMN) == 12.0 and shown.id_columns == FORMAT.id_columns
    assert 'PLATFORMS = ("moodle", "canvas", "nbgrader", "gradescope", "blackboard")' in section
    assert lms.PLATFORMS[:4] == ("moodle", "canvas", "nbgrader", "gradescope")  # the example's line, less its word


def _graded(row, got: float) -> SubmissionResult:
    """A result of ``got`` out of 6 for the row (no sandbox: the export is what is tested here)."""
    tests = [Verdict("fake_add", "fake_add", "case", 6.0, got, "passed" if got == 6 else "failed", "", False)]
    return SubmissionResult(
        path=str(row.path),
        assignment="zz_fake",
        tests=tests,
        key=row.key,
        student=row.student,
        student_id=row.student_id,
    )
