"""A workshop's grading day: a class as a platform downloads it, a roster, reports, feedback, exports, regrades.

Uses the fake assignment (grading_fake.py, beside this file) for the class, and real course notebooks where the
hints of real exercises matter (feedback) or a real install does (the Gradescope bundle's dry run).
"""

from __future__ import annotations

import ast
import base64
import csv
import html.parser
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading import verdicts
from mha_course.grading.classroom.collect import collect
from mha_course.grading.classroom.feedback import cause_of, feedback_markdown, root_causes
from mha_course.grading.classroom.roster import read_roster
from mha_course.grading.engine import registry
from mha_course.grading.engine.pipeline import grade_notebook
from mha_course.grading.static.similarity import find_copies
from mha_course.grading.verdicts import Limits, SubmissionResult

ROOT = Path(__file__).resolve().parents[3]
BAD_ADD = "def add_arrays(a, b):\n    return a - b\n"
MOODLE = "Moodle-style roster: Identifier,Full name,Email address,Status,Grade,Maximum Grade"


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _student(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def lms_class(tmp_path_factory):
    """An LMS download: folders per student, all holding zz_fake.ipynb, plus every kind of mess."""
    base = tmp_path_factory.mktemp("workshop")
    root = base / "submissions"
    alice = _student(root, "Alice Martin_1234_assignsubmission_file_")
    write_submission(alice / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    bob = _student(root, "Bob Li_2345_assignsubmission_file_")
    write_submission(bob / "zz_fake.ipynb", BAD_ADD, GOOD_DOUBLE)
    carol = _student(root, "Carol Diaz_3456_assignsubmission_file_")  # another assignment's notebook
    shutil.copy(ROOT / "exercises" / "a01_dot_products.ipynb", carol / "zz_fake.ipynb")
    dan = _student(root, "Dan Wu_4567_assignsubmission_file_")  # the real one plus a checkpoint and a copy
    write_submission(dan / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    (dan / ".ipynb_checkpoints").mkdir()
    write_submission(dan / ".ipynb_checkpoints" / "zz_fake-checkpoint.ipynb", BAD_ADD)
    write_submission(dan / "zz_fake-Copy1.ipynb", BAD_ADD)
    eve = _student(root, "Eve Stone_5678_assignsubmission_file_")
    (eve / "report.pdf").write_bytes(b"%PDF-1.4 not a notebook")
    fay = _student(root, "Fay Oduya_6789_assignsubmission_file_")
    (fay / "zz_fake.ipynb").symlink_to(base / "nowhere.ipynb")  # dangling
    gus = _student(root, "Gus Hale_7890_assignsubmission_file_")
    (gus / "answers.ipynb").mkdir()  # a folder named like a notebook
    write_submission(gus / "mine.ipynb", GOOD_ADD, GOOD_DOUBLE, metadata=False)
    (gus / "helper.py").write_text("x = 1\n")
    _student(root, "Hal Ng_8901_assignsubmission_file_")  # empty
    ivy = _student(root, "Ivy Park_9012_assignsubmission_file_")
    write_submission(base / "outside.ipynb", GOOD_ADD, GOOD_DOUBLE)
    (ivy / "zz_fake.ipynb").symlink_to(base / "outside.ipynb")  # must not be read: outside the class folder
    roster = base / "roster.csv"
    people = [
        ("1234", "Alice Martin"),
        ("2345", "Bob Li"),
        ("3456", "Carol Diaz"),
        ("4567", "Dan Wu"),
        ("5678", "Eve Stone"),
        ("6789", "Fay Oduya"),
        ("7890", "Gus Hale"),
        ("8901", "Hal Ng"),
        ("9012", "Ivy Park"),
        ("9999", "Jon Absent"),
    ]
    roster.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
        + "".join(f"Participant {i},{n},{n.split()[0].lower()}@example.org,Submitted,,6\n" for i, n in people)
    )
    return base


def _rows(path: Path) -> dict[str, dict]:
    return {row["name"]: row for row in csv.DictReader(path.open())}


@pytest.fixture(scope="module")
def graded_class(fake, lms_class):
    from mha_course.grading.grade import main

    require_sandbox()
    out = lms_class / "out"
    status = main(
        [
            str(lms_class / "submissions"),
            "--assignment",
            "zz_fake",
            "--roster",
            str(lms_class / "roster.csv"),
            "--csv",
            str(out / "grades.csv"),
            "--results-dir",
            str(out / "results"),
            "--report",
            str(out / "report.html"),
            "--feedback-dir",
            str(out / "feedback"),
            "--grades-out",
            str(out / "moodle.csv"),
            "--seed",
            "7",
            "--quiet",
            "--case-timeout",
            "5",
        ]
    )
    assert status == 0  # no abort, whatever the mess
    return out


@pytest.mark.slow
def test_one_row_per_student_and_nothing_overwritten(graded_class):
    rows = _rows(graded_class / "grades.csv")
    assert sorted(rows) == [
        "Alice Martin",
        "Bob Li",
        "Carol Diaz",
        "Dan Wu",
        "Eve Stone",
        "Fay Oduya",
        "Gus Hale",
        "Hal Ng",
        "Ivy Park",
    ]
    assert rows["Alice Martin"]["total"] == "6" and rows["Alice Martin"]["student_id"] == "Participant 1234"
    assert rows["Alice Martin"]["submission"] == "Alice Martin_1234_assignsubmission_file_/zz_fake.ipynb"
    assert float(rows["Bob Li"]["total"]) < 6  # the same file name as Alice's, graded on its own
    assert all(r["seed"] == "7" and r["assignment"] == "zz_fake" and r["isolation"] for r in rows.values())
    results = sorted((graded_class / "results").iterdir())
    assert len(results) == 9 and len({p.name for p in results}) == 9
    by_student = {json.loads(p.read_text())["extra_data"]["student_id"]: json.loads(p.read_text()) for p in results}
    assert by_student["Participant 2345"]["score"] < by_student["Participant 1234"]["score"] == 6


@pytest.mark.slow
def test_every_mess_gets_a_clear_row(graded_class):
    rows = _rows(graded_class / "grades.csv")
    assert "wrong assignment a01_dot_products, expected zz_fake" in rows["Carol Diaz"]["status"]
    assert rows["Dan Wu"]["total"] == "6" and "checkpoint or copy" in rows["Dan Wu"]["notes"]
    assert "report.pdf (not a notebook)" in rows["Eve Stone"]["status"]
    assert "broken link" in rows["Fay Oduya"]["status"]
    assert rows["Gus Hale"]["total"] == "6" and "no assignment metadata; graded as zz_fake" in rows["Gus Hale"]["notes"]
    assert (
        "answers.ipynb (a folder" in rows["Gus Hale"]["notes"]
        and "helper.py (not a notebook)" in rows["Gus Hale"]["notes"]
    )
    assert "empty folder" in rows["Hal Ng"]["status"]
    assert "outside the submissions folder" in rows["Ivy Park"]["status"] and rows["Ivy Park"]["total"] == "0"


@pytest.mark.slow
def test_grades_for_the_platform_keep_its_columns(graded_class):
    rows = list(csv.DictReader((graded_class / "moodle.csv").open()))
    assert list(rows[0]) == ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade"]
    grade = {r["Full name"]: r["Grade"] for r in rows}
    assert grade["Alice Martin"] == "6" and grade["Dan Wu"] == "6" and grade["Gus Hale"] == "6"
    assert grade["Jon Absent"] == "" and grade["Carol Diaz"] == ""  # nothing graded: left for the instructor


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.text, self.sections = [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        if tag == "section":
            self.sections += 1

    def handle_data(self, data):
        self.text.append(data)


@pytest.mark.slow
def test_report_shows_a_histogram_and_the_misconceptions(graded_class):
    import matplotlib.image

    page = _Page()
    page.feed((graded_class / "report.html").read_text())
    text = " ".join(page.text)
    assert page.sections == 1 and "zz_fake" in text and "Misconceptions" in text
    assert "values differ from a + b" in text and "Bob Li" in text
    assert "Jon Absent" in text and "Not graded" in text and "wrong assignment" in text
    (image,) = page.images
    assert image["src"].startswith("data:image/png;base64,")
    pixels = matplotlib.image.imread(__import__("io").BytesIO(base64.b64decode(image["src"].split(",", 1)[1])))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 300
    assert (pixels[..., :3].std(axis=-1) > 0.1).any()  # coloured bars, not a blank picture
    md = (graded_class / "report.md").read_text()
    assert "![score histogram of zz_fake](report-zz_fake.png)" in md and (graded_class / "report-zz_fake.png").is_file()


@pytest.mark.slow
def test_feedback_file_per_submission(graded_class):
    files = sorted((graded_class / "feedback").iterdir())
    assert len(files) == 9
    bob = next(p.read_text() for p in files if p.name.startswith("Bob_Li"))
    assert "Bob Li" in bob and "values differ from a + b" in bob and "cell 2 (`def add_arrays(a, b):`)" in bob
    assert bob.count("values differ from a + b") == 1  # one line per cause, not one per test


@pytest.mark.slow
def test_regrade_with_the_recorded_seed_and_overrides(fake, lms_class, graded_class):
    from mha_course.grading.grade import main

    first = _rows(graded_class / "grades.csv")
    overrides = lms_class / "overrides.csv"
    overrides.write_text(
        "student,exercise,points,reason\nParticipant 2345,fake_add,waive,illness\nParticipant 4567,*,5,late penalty\n"
    )
    out = lms_class / "regrade"
    assert (
        main(
            [
                str(lms_class / "submissions"),
                "--assignment",
                "zz_fake",
                "--roster",
                str(lms_class / "roster.csv"),
                "--overrides",
                str(overrides),
                "--csv",
                str(out / "grades.csv"),
                "--seed",
                first["Alice Martin"]["seed"],
                "--quiet",
                "--case-timeout",
                "5",
            ]
        )
        == 0
    )
    again = _rows(out / "grades.csv")
    assert again["Alice Martin"]["total"] == first["Alice Martin"]["total"]
    assert again["Bob Li"]["fake_add"] == "waived" and again["Bob Li"]["max_score"] == "2"
    assert again["Bob Li"]["total"] == first["Bob Li"]["fake_double"]
    assert again["Dan Wu"]["total"] == "5" and "late penalty" in again["Dan Wu"]["notes"]


def test_canvas_flat_download_and_roster_by_id(fake, tmp_path):
    flat = tmp_path / "canvas"
    flat.mkdir()
    write_submission(flat / "martinalice_1234_99_zz_fake.ipynb", GOOD_ADD)
    write_submission(flat / "martinalice_1234_100_zz_fake-1.ipynb", BAD_ADD)
    (flat / "libob_LATE_2345_101_notes.txt").write_text("late")
    roster = tmp_path / "canvas.csv"
    roster.write_text('Student,ID,SIS User ID,Section\n"Martin, Alice",1234,s1,A\n"Li, Bob",2345,s2,A\n')
    rows = collect([flat], "zz_fake", notebook_names={"zz_fake": "zz_fake.ipynb"})
    assert [r.student for r in rows] == ["libob_2345", "martinalice_1234"]
    alice = rows[1]
    assert alice.path and "also submitted" in " ".join(alice.notes)
    assert "no notebook" in rows[0].problem
    found = read_roster(roster)
    assert found.find("martinalice_1234").student_id == "1234" and found.find("libob_2345").name == "Li, Bob"


def test_one_submission_mode_takes_the_whole_upload_as_one_student(fake, tmp_path):
    write_submission(tmp_path / "homework (final).ipynb", GOOD_ADD)
    write_submission(tmp_path / "scratch.ipynb", BAD_ADD)
    (rows := collect([tmp_path], "zz_fake", one_submission=True))
    assert len(rows) == 1 and "also submitted" in " ".join(rows[0].notes)


def test_copied_reference_is_flagged_and_own_work_is_not():
    import importlib
    import inspect

    library = inspect.getsource(importlib.import_module("mha_course.core.softmax").softmax_np)
    renamed = re.sub(r"\bx\b", "scores", library)
    assert find_copies([(0, "import numpy as np\n" + renamed)], ["softmax_np"]) == [
        "softmax_np is identical to mha_course.core.softmax.softmax_np (names ignored)"
    ]
    reworded = re.sub(r"\bx\b", "scores", library.replace("must be", "should be"))
    assert find_copies([(0, reworded)], ["softmax_np"])[0].startswith("softmax_np is identical")
    tree = ast.parse(textwrap.dedent(library))
    tree.body[0].body.insert(1, ast.parse("x = x + 0").body[0])  # one line added
    (line,) = find_copies([(0, ast.unparse(tree))], ["softmax_np"])
    assert "nearly identical to mha_course.core.softmax.softmax_np (9" in line
    own = (
        "def softmax_np(x, axis=-1):\n    shifted = x - x.max(axis=axis, keepdims=True)\n"
        "    e = np.exp(shifted)\n    return e / e.sum(axis=axis, keepdims=True)\n"
    )
    assert find_copies([(0, own)], ["softmax_np"]) == []


def test_specific_hint_comes_before_the_generic_one():
    def test(case, output, exercise="softmax_np"):
        return verdicts.TestResult(exercise, "Softmax", case, 1, 0, "failed", output, False)

    result = SubmissionResult(
        path="s.ipynb",
        assignment="a02_softmax",
        title="Softmax",
        version=1,
        tests=[
            test(
                "random rows",
                "weights: values differ from the expected ones; worst at index (0, 1): got 0.1, expected 0.2",
            ),
            test(
                "large rows",
                "the global maximum was subtracted; subtract each row's own maximum (max(axis=..., keepdims=True))",
            ),
            test(
                "shifted rows",
                "the global maximum was subtracted; subtract each row's own maximum (max(axis=..., keepdims=True))",
            ),
        ],
    )
    causes = root_causes(result)
    assert [len(c.tests) for c in causes] == [2, 1] and "each row's own maximum" in causes[0].text
    text = feedback_markdown(result, [(3, "def softmax_np(x, axis=-1):\n    return x")], {"softmax_np": "softmax_np"})
    assert text.index("each row's own maximum") < text.index("values differ")
    assert "cell 4 (`def softmax_np(x, axis=-1):`)" in text
    assert cause_of("got 3 rows [1, 2, 3]; worst at index (1, 2)") == "got 3 rows […]"


@pytest.mark.slow
def test_real_global_max_softmax_is_told_to_use_each_rows_maximum(tmp_path):
    require_sandbox()
    nb = json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        cell["source"] = source.replace("row_max = np.max(x, axis=axis, keepdims=True)", "row_max = np.max(x)")
    path = tmp_path / "global_max.ipynb"
    path.write_text(json.dumps(nb))
    result = grade_notebook(path, Limits(case_timeout=10), seed=3)
    assert 0 < result.score < result.max_score
    causes = [c for c in root_causes(result) if c.exercise == "softmax_np"]
    assert causes and "each row's own maximum" in causes[0].example, [c.example for c in causes]


@pytest.mark.slow
def test_report_renders_in_a_headless_browser(graded_class, tmp_path):
    """Where Chromium is installed (not required by make test): the page renders with its blue histogram bars."""
    import subprocess

    import matplotlib.image

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium here; test_report_shows_a_histogram_and_the_misconceptions checks the HTML")
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1000,1400",
            (graded_class / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = matplotlib.image.imread(shot)[..., :3]
    blue = (pixels[..., 2] > 0.6) & (pixels[..., 0] < 0.45) & (pixels[..., 1] < 0.55)  # the bars' #4c72b0
    assert blue.sum() > 500, "no histogram bars on the rendered page"
