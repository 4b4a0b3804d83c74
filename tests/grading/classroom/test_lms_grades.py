"""Grades an instructor can trust: reproducible regrades, overrides that mean what they say, the platform's own
scale, rosters that match whatever they hold, Unicode names kept, and the guide's examples that run as written.

Class runs use the fake assignment (grading_fake.py, 6 points: fake_add 4, fake_double 2); the guide's examples
run on two copies of the real a04 solution.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import unicodedata
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.classroom.collect import collect
from mha_course.grading.classroom.picks import read_picks
from mha_course.grading.classroom.policy import LatePolicy, Override, apply_overrides, parse_points, read_overrides
from mha_course.grading.classroom.results import results_file_name
from mha_course.grading.classroom.roster import read_roster
from mha_course.grading.classroom.seeds import choose_seed, class_key, record_seed, student_seed
from mha_course.grading.engine import registry
from mha_course.grading.verdicts import SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

ROOT = Path(__file__).resolve().parents[3]
BAD_ADD = "def add_arrays(a, b):\n    return a - b\n"
NAMES = {"zz_fake": "zz_fake.ipynb"}


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


def _result(scores: dict[str, tuple[float, float]], **fields) -> SubmissionResult:
    """A graded result whose exercises scored ``key -> (points got, points possible)``."""
    tests = [
        Verdict(k, k, "case", most, got, "passed" if got == most else "failed", "", False)
        for k, (got, most) in scores.items()
    ]
    return SubmissionResult(
        path="x.ipynb", assignment="a04_masks", tests=tests, student_id="Participant 4567", **fields
    )


def _write(text: str, path: Path) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- overrides, late policy, the platform's scale ------------------------------------------------------------


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("20", ("set", 20.0)),
        ("set 20", ("set", 20.0)),
        ("cap 20", ("cap", 20.0)),
        ("max: 20", ("cap", 20.0)),
        ("+2", ("add", 2.0)),
        ("-3.5", ("add", -3.5)),
        ("waive", ("waive", None)),
        ("Excused", ("waive", None)),
    ],
)
def test_override_cells_say_what_they_do(cell, expected):
    assert parse_points(cell) == expected


def test_override_cells_that_do_not_parse_name_the_row(tmp_path):
    with pytest.raises(ValueError, match="line 3: points must be"):
        read_overrides(_write("student,exercise,points,reason\na,*,cap 3,x\nb,*,lots,y\n", tmp_path / "o.csv"))
    with pytest.raises(ValueError, match="'late' takes 'waive' only"):
        read_overrides(_write("student,exercise,points,reason\na,late,5,x\n", tmp_path / "o.csv"))
    assert (
        read_overrides(_write("student,exercise,points,reason,action\na,*,20,x,cap\n", tmp_path / "o.csv"))[0].action
        == "cap"
    )


def test_cap_keeps_a_lower_score_and_set_sets_it():
    capped = _result({"a": (6, 10), "b": (6, 16)})
    apply_overrides([capped], [Override("Participant 4567", "*", "cap", 20.0, "late: capped at 20")])
    assert capped.raw_score == 12 and capped.score == 12  # the guide's 12 stays 12 under a cap of 20
    high = _result({"a": (10, 10), "b": (15, 16)})
    apply_overrides([high], [Override("Participant 4567", "*", "cap", 20.0, "")])
    assert high.score == 20 and high.adjustment_log == ["total: cap 20"]
    sets = _result({"a": (6, 10), "b": (6, 16)})
    apply_overrides([sets], [Override("Participant 4567", "*", "set", 20.0, "")])
    assert sets.score == 20


def test_add_and_exercise_cap_compose_in_order():
    r = _result({"a": (8, 10), "b": (6, 16)})
    apply_overrides(
        [r], [Override("Participant 4567", "*", "add", 2.0, "bonus"), Override("Participant 4567", "a", "cap", 5.0, "")]
    )
    assert r.exercise_scores() == {"a": 5.0, "b": 6.0} and r.score == 13  # exercise first, then the total
    assert r.adjustment_log == ["a: cap 5", "total: add +2 (bonus)"]


def test_a_waived_exercise_rescales_to_the_platforms_maximum():
    r = _result({"masked_sdpa": (0, 14), "causal_mask": (12, 12)}, lms_max=26.0)
    apply_overrides([r], [Override("Participant 4567", "masked_sdpa", "waive", None, "medical certificate")])
    assert (r.score, r.max_score) == (12, 12)
    assert r.lms_score == pytest.approx(26.0)  # 12/12 is full marks on Moodle's 26, never a raw 12


def test_an_override_finds_the_student_by_any_roster_name():
    r = _result({"a": (3, 10)})
    apply_overrides([r], [Override("alice@example.org", "*", "add", 1.0, "")], lambda _: {"alice@example.org"})
    assert r.score == 4


def test_late_penalty_per_day_flat_and_from_the_marker():
    due = "2026-11-20T23:59:00+00:00"
    policy = LatePolicy.parse("10%/day", due)
    after = policy.due.timestamp() + 86400 + 60  # a day and a minute late: two days started
    assert policy.days_late(after, False) == 2 and policy.days_late(policy.due.timestamp() - 5, False) == 0
    r = _result({"a": (10, 10), "b": (10, 16)})
    policy.apply(r, after, False)  # of the maximum (26), as Canvas and Moodle: 20% of 26
    assert (r.late_days, r.late_penalty, r.raw_score, r.score) == (2, 5.2, 20, 14.8)
    assert r.adjustment_log == ["late 2 day(s), 10%/day of the maximum points: -5.2"]
    assert r.late_note == "handed in 2 day(s) late: late penalty -5.2 points (10%/day of the maximum points)"
    of_points = _result({"a": (10, 10), "b": (10, 16)})
    LatePolicy.parse("10%/day", due, of="points").apply(of_points, after, False)
    assert (of_points.late_penalty, of_points.score) == (4.0, 16)
    assert of_points.adjustment_log == ["late 2 day(s), 10%/day of the points scored: -4"]
    low = _result({"a": (1, 10)})
    LatePolicy.parse("50%").apply(low, None, True)  # half of the maximum, but never below 0
    assert (low.late_penalty, low.score) == (1, 0)
    flat = _result({"a": (10, 10)})
    LatePolicy.parse("25%").apply(flat, None, True)  # Canvas's _LATE_ marker, no due date: one day
    assert (flat.late_days, flat.score) == (1, 7.5)
    excused = _result({"a": (10, 10)})
    apply_overrides([excused], [Override("Participant 4567", "late", "waive", None, "travel")])
    LatePolicy.parse("50%").apply(excused, None, True)
    assert excused.score == 10 and "penalty waived" in excused.adjustment_log[-1]
    for bad in ("10", "10%/week", "150%"):
        with pytest.raises(ValueError, match="--late-penalty"):
            LatePolicy.parse(bad)
    with pytest.raises(ValueError, match="--due"):
        LatePolicy.parse("10%", "next friday")


# --- rosters and names ------------------------------------------------------------------------------------


def test_roster_matches_usernames_emails_ids_and_names(tmp_path):
    roster = read_roster(
        _write(
            "Username,Email,Full name\nalice,alice.m@uni.edu,Alice Martin\nbob42,bob@uni.edu,Bob Li\n"
            "jnunez,jose@uni.edu,José Núñez\n",
            tmp_path / "hub.csv",
        )
    )
    assert roster.find("alice").name == "Alice Martin"  # JupyterHub: the folder is the username
    assert roster.find("bob42").name == "Bob Li"  # digits in a username are not an id
    assert roster.find("alice.m").username == "alice"  # the email's local part
    assert roster.find("núñezjosé_77").username == "jnunez"  # Canvas's lastfirst of a Unicode name
    assert roster.find("José Núñez_5_assignsubmission_file_").username == "jnunez"  # Moodle's folder
    assert roster.find(unicodedata.normalize("NFD", "jnunez")).username == "jnunez"
    assert roster.find("carol") is None


def test_roster_carries_the_platforms_maximum(tmp_path):
    canvas = read_roster(
        _write(
            'Student,ID,SIS User ID,Section,a04 Masks (123)\n    Points Possible,,,,26\n"Núñez, José",77,s1,A,\n',
            tmp_path / "canvas.csv",
        )
    )
    assert canvas.max_for("a04 Masks (123)") == 26 and [s.name for s in canvas.students] == ["Núñez, José"]
    moodle = read_roster(
        _write("Identifier,Full name,Grade,Maximum Grade\nParticipant 1,A B,,26.00\n", tmp_path / "m.csv")
    )
    assert moodle.max_for("Grade") == 26


def test_canvas_unicode_names_stay_one_student_and_keep_their_letters(fake, tmp_path):
    flat = tmp_path / "canvas"
    flat.mkdir()
    write_submission(flat / "núñezjosé_77_1_zz_fake.ipynb", GOOD_ADD)
    write_submission(flat / unicodedata.normalize("NFD", "núñezjosé_LATE_77_2_zz_fake-1.ipynb"), BAD_ADD)
    write_submission(flat / "lefèvreanaïs_88_3_zz_fake.ipynb", GOOD_ADD)
    rows = collect([flat], "zz_fake", notebook_names=NAMES)
    assert sorted(r.student for r in rows) == ["lefèvreanaïs_88", "núñezjosé_77"]
    jose = next(r for r in rows if r.student == "núñezjosé_77")
    assert "also submitted" in " ".join(jose.notes) and not jose.late_marked  # the one named zz_fake.ipynb
    name = results_file_name(SubmissionResult(path="p", key="núñezjosé_77_1_zz_fake.ipynb"))
    assert name.startswith("núñezjosé_77_1_zz_fake.ipynb-")


def test_instructor_folders_are_skipped_and_picks_choose_the_notebook(fake, tmp_path):
    root = tmp_path / "collected"
    for user in ("alice", "bob", "jupyter-admin"):
        (root / user).mkdir(parents=True)
    write_submission(root / "alice" / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    write_submission(root / "alice" / "draft.ipynb", BAD_ADD)
    write_submission(root / "bob" / "zz_fake.ipynb", GOOD_ADD)
    write_submission(root / "jupyter-admin" / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    for name in ("zz_fake.ipynb", "draft.ipynb"):  # one time (as a copy gives): a second may pass between the writes
        os.utime(root / "alice" / name, (1e9, 1e9))
    skipped: list[str] = []
    rows = collect([root], "zz_fake", notebook_names=NAMES, skipped=skipped)
    assert [r.student for r in rows] == ["alice", "bob"] and skipped == ["jupyter-admin"]
    assert rows[0].key == "alice/zz_fake.ipynb"
    picks = read_picks(["alice=draft.ipynb", str(_write("student,file\nbob,missing.ipynb\n", tmp_path / "p.csv"))])
    rows = collect([root], "zz_fake", notebook_names=NAMES, pick=picks.get)
    assert rows[0].key == "alice/draft.ipynb" and "you picked draft.ipynb" in " ".join(rows[0].notes)
    assert "missing.ipynb" in rows[1].problem and "not among its files" in rows[1].problem
    with pytest.raises(ValueError, match="STUDENT=FILE"):
        read_picks(["alice"])


# --- seeds -------------------------------------------------------------------------------------------


def test_student_seeds_differ_between_students_and_repeat_for_one(tmp_path):
    assert student_seed(5, "alice") == student_seed(5, "alice") != student_seed(5, "bob")
    assert student_seed(5, "alice") != student_seed(6, "alice")
    assert student_seed(5, "José") == student_seed(5, unicodedata.normalize("NFD", "José"))
    path, key = tmp_path / "grading-seed.json", class_key([str(tmp_path)], "a04_masks")
    assert choose_seed(path, key, None, False, lambda: 11) == (11, "new")
    record_seed(path, key, 11, lambda p, text: p.write_text(text))
    assert choose_seed(path, key, None, False, lambda: 12)[0] == 11
    assert choose_seed(path, key, None, True, lambda: 12) == (12, "new")
    assert choose_seed(path, key, 3, False, lambda: 12) == (3, "given with --seed")
    assert choose_seed(path, class_key([str(tmp_path)], "a11_x"), None, False, lambda: 13)[0] == 13
    path.write_text("{not json")
    with pytest.raises(ValueError, match="--new-seed"):
        choose_seed(path, key, None, False, lambda: 1)
    assert choose_seed(path, key, None, True, lambda: 14) == (14, "new")
    record_seed(path, key, 14, lambda p, text: p.write_text(text))  # --new-seed replaces a broken file
    assert choose_seed(path, key, None, False, lambda: 15)[0] == 14


# --- class runs --------------------------------------------------------------------------------------------


def _run(args: list[str]) -> int:
    from mha_course.grading.grade import main

    return main([str(a) for a in args] + ["--quiet", "--case-timeout", "5"])


def _csv(path: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(path.open(encoding="utf-8"))}


def _verdicts(folder: Path) -> dict[str, list]:
    return {
        p.name: [(t["name"], t["status"], t["score"]) for t in json.loads(p.read_text())["tests"]]
        for p in sorted(folder.glob("*.results.json"))
    }


@pytest.fixture(scope="module")
def hub_class(fake, tmp_path_factory):
    """A JupyterHub collection (a folder per username, the instructor's own among them) and its username roster."""
    base = tmp_path_factory.mktemp("hub")
    root = base / "collected"
    for user, cells in {"alice": (GOOD_ADD, GOOD_DOUBLE), "bob42": (BAD_ADD, GOOD_DOUBLE), "josé": (GOOD_ADD,)}.items():
        (root / user).mkdir(parents=True)
        write_submission(root / user / "zz_fake.ipynb", *cells)
    (root / "jupyter-admin").mkdir()
    write_submission(root / "jupyter-admin" / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    _write(
        "username,name,email\nalice,Alice Martin,am@uni.edu\nbob42,Bob Li,bl@uni.edu\njosé,José Núñez,jn@uni.edu\n",
        base / "roster.csv",
    )
    return base


@pytest.mark.slow  # grades a class twice in sandboxes (about 23 s)
def test_a_regrade_of_the_same_folder_reproduces_every_score_and_verdict(hub_class):
    require_sandbox()
    out = hub_class / "out"
    args = [
        hub_class / "collected",
        "--assignment",
        "zz_fake",
        "--roster",
        hub_class / "roster.csv",
        "--csv",
        out / "grades.csv",
        "--results-dir",
        out / "results",
        "--lms-max",
        "26",
    ]
    assert _run(args) == 0
    first, first_verdicts = _csv(out / "grades.csv"), _verdicts(out / "results")
    recorded = json.loads((out / "grading-seed.json").read_text())["seeds"]
    assert list(recorded) == [class_key([str(hub_class / "collected")], "zz_fake")]
    seed = next(iter(recorded.values()))["seed"]
    assert sorted(first) == ["alice", "bob42", "josé"]  # the instructor's folder is no student
    assert all(row["name"] and "not in the roster" not in row["notes"] for row in first.values())
    assert {row["seed"] for row in first.values()} == {str(seed)}
    assert len({row["input_seed"] for row in first.values()}) == 3  # each student their own inputs
    assert (
        first["alice"]["final"] == "6" and first["alice"]["lms_grade"] == "26" and first["josé"]["lms_grade"] == "17.33"
    )
    assert _run(args) == 0  # the regrade: same command, same folder
    again = _csv(out / "grades.csv")
    assert again == first and _verdicts(out / "results") == first_verdicts
    assert _run(args + ["--new-seed"]) == 0
    fresh = _csv(out / "grades.csv")
    assert fresh["alice"]["seed"] != str(seed) and fresh["alice"]["input_seed"] != first["alice"]["input_seed"]
    assert next(iter(json.loads((out / "grading-seed.json").read_text())["seeds"].values()))["seed"] == int(
        fresh["alice"]["seed"]
    )


@pytest.mark.slow  # grades a class in sandboxes (about 6 s)
def test_canvas_class_with_overrides_late_penalty_and_points_possible(fake, tmp_path):
    require_sandbox()
    flat = tmp_path / "canvas"
    flat.mkdir()
    write_submission(flat / "núñezjosé_LATE_77_1_zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    write_submission(flat / "lefèvreanaïs_88_2_zz_fake.ipynb", GOOD_ADD)
    write_submission(flat / "martinalice_99_3_zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    roster = _write(
        "Student,ID,SIS User ID,SIS Login ID,Section,zz fake (9)\n    Points Possible,,,,,26\n"
        '"Núñez, José",77,s77,jnunez,A,\n"Lefèvre, Anaïs",88,s88,alefevre,A,\n"Martin, Alice",99,s99,amartin,A,\n',
        tmp_path / "canvas.csv",
    )
    overrides = _write(
        'student,exercise,points,reason\n"Lefèvre, Anaïs",fake_double,waive,joined late\n'
        "amartin,*,cap 5,academic integrity: capped at 5\n",
        tmp_path / "overrides.csv",
    )
    out = tmp_path / "out"
    assert (
        _run(
            [
                flat,
                "--assignment",
                "zz_fake",
                "--roster",
                roster,
                "--overrides",
                overrides,
                "--late-penalty",
                "10%/day",
                "--grade-column",
                "zz fake (9)",
                "--csv",
                out / "grades.csv",
                "--grades-out",
                out / "canvas_import.csv",
                "--feedback-dir",
                out / "feedback",
            ]
        )
        == 0
    )
    rows = {r["name"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    jose, anais, alice = rows["Núñez, José"], rows["Lefèvre, Anaïs"], rows["Martin, Alice"]
    assert (jose["raw"], jose["late_days"], jose["final"], jose["lms_grade"]) == ("6", "1", "5.4", "23.4")
    assert (anais["raw"], anais["final"], anais["max_score"], anais["lms_grade"]) == ("4", "4", "4", "26")
    assert anais["fake_double"] == "waived" and "fake_double: waive (joined late)" in anais["adjustments"]
    assert (alice["raw"], alice["final"], alice["lms_grade"]) == ("6", "5", "21.67")
    exported = {
        r["SIS User ID"]: r["zz fake (9)"] for r in csv.DictReader((out / "canvas_import.csv").open(encoding="utf-8"))
    }
    assert exported == {"s77": "23.4", "s88": "26", "s99": "21.67", "": "26"}  # Points Possible kept as it came
    names = sorted(p.name for p in (out / "feedback").glob("*.md"))
    assert any(n.startswith("núñezjosé_LATE_77") for n in names) and any(n.startswith("lefèvreanaïs_88") for n in names)


# --- the guide's examples, as written -----------------------------------------------------------------------

GUIDE = ROOT / "docs" / "INSTRUCTORS.md"


def _guide_examples() -> tuple[list[list[str]], dict[str, str]]:
    """The commands of the guide's blocks marked as examples, and the files its marked blocks hold."""
    text = GUIDE.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(
        r"<!-- example: run by tests/grading/(?:classroom/)?test_lms_grades.py -->\n```bash\n(.*?)```", text, re.S
    ):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                words = shlex.split(line, comments=True)
                assert words[:3] == ["python", "-m", "mha_course.grade"], line
                commands.append(words[3:])
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, re.S))
    return commands, files


@pytest.mark.slow  # runs the guide's two grade commands in sandboxes (about 23 s)
def test_the_guides_regrade_examples_run_as_written(tmp_path, monkeypatch):
    require_sandbox()
    commands, files = _guide_examples()
    assert len(commands) == 2 and "overrides.csv" in files
    for name, text in files.items():
        _write(text, tmp_path / name)
    for folder in ("Bob Li_2345_assignsubmission_file_", "Dan Wu_4567_assignsubmission_file_"):
        (tmp_path / "submissions" / folder).mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / "a04_masks.ipynb", tmp_path / "submissions" / folder)  # files: now
    # Moodle's worksheet says when each was handed in (the guide's --due is 2026-11-20T23:59Z)
    _write(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Last modified (submission)\n"
        'Participant 2345,Bob Li,bob@uni.edu,Submitted,,26.00,"Friday, 20 November 2026, 10:59 PM"\n'
        'Participant 4567,Dan Wu,dan@uni.edu,Submitted,,26.00,"Saturday, 21 November 2026, 12:59 AM"\n',
        tmp_path / "roster.csv",
    )
    monkeypatch.chdir(tmp_path)
    assert _run(commands[0]) == 0
    first = _csv(tmp_path / "grades.csv")
    assert {row["final"] for row in first.values()} == {"26"}
    assert _run(commands[1]) == 0
    rows = {r["name"]: r for r in _csv(tmp_path / "grades.csv").values()}
    bob, dan = rows["Bob Li"], rows["Dan Wu"]
    assert (bob["masked_sdpa"], bob["final"], bob["max_score"], bob["lms_grade"]) == ("waived", "12", "12", "26")
    # capped at 20, then 10% of the maximum (26) for a day
    assert (dan["raw"], dan["late_days"], dan["final"]) == ("26", "1", "17.4")
    assert (
        dan["adjustments"] == "total: cap 20 (late: capped at 20); late 1 day(s), 10%/day of the maximum points: -2.6"
    )
    assert bob["seed"] == first[bob["student"]]["seed"]  # the regrade drew the recorded seed
    moodle = {r["Identifier"]: r["Grade"] for r in csv.DictReader((tmp_path / "moodle_grades.csv").open())}
    assert moodle == {"Participant 2345": "26", "Participant 4567": "17.4"}


@pytest.mark.slow  # the batch starts the broker process, even with the grading stubbed
def test_each_students_fresh_inputs_come_from_the_class_seed_and_their_identity(monkeypatch, tmp_path):
    from mha_course.grading.classroom import batch
    from mha_course.grading.classroom.collect import Submission
    from mha_course.grading.classroom.results import gradescope
    from mha_course.grading.engine import pipeline as grader

    salts = {}

    def grade_into(result, path, limits, isolator, grade_as=None, meta=None):
        salts[Path(path).name] = result.input_seed
        result.tests.append(Verdict("a", "a", "case", 1, 1, "passed", "", False))

    monkeypatch.setattr(grader, "_grade_into", grade_into)
    rows = [
        Submission(key="alice/a.ipynb", student="alice", path=tmp_path / "a.ipynb", student_id="s1"),
        Submission(key="bob/b.ipynb", student="bob", path=tmp_path / "b.ipynb"),
    ]
    results = batch.grade_many(rows, seed=7, progress=False, workers=1, unsafe_no_isolation=True)
    assert salts == {"a.ipynb": student_seed(7, "s1"), "b.ipynb": student_seed(7, "bob")}  # roster id, else folder
    assert [r.seed for r in results] == [7, 7] and [r.input_seed for r in results] == list(salts.values())
    shown = gradescope(results[0])
    assert (
        f"with salted({salts['a.ipynb']})" in shown["output"] and shown["extra_data"]["input_seed"] == salts["a.ipynb"]
    )


def test_a_pick_may_name_the_student_as_the_roster_does(tmp_path):
    from mha_course.grading.classroom.intake import picker

    roster = read_roster(_write("username,email,name\nalice,am@uni.edu,Alice Martin\n", tmp_path / "r.csv"))
    pick = picker(read_picks(["am@uni.edu=draft.ipynb", "bob=final.ipynb"]), roster)
    assert (pick("alice"), pick("bob"), pick("carol")) == ("draft.ipynb", "final.ipynb", None)
    assert picker({}, roster) is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--late-penalty", "ten"], "--late-penalty"),
        (["--late-penalty", "10%/day", "--due", "friday"], "--due"),
        (["--lms-max", "0"], "--lms-max"),
        (["--due", "2026-11-20T23:59"], "--late-penalty"),
        (["--pick", "nobody"], "STUDENT=FILE"),
    ],
)
def test_a_policy_that_does_not_parse_is_a_usage_error_before_grading(fake, tmp_path, capsys, extra, message):
    from mha_course.grading.grade import main

    (tmp_path / "alice").mkdir()
    write_submission(tmp_path / "alice" / "zz_fake.ipynb", GOOD_ADD)
    assert main([str(tmp_path), "--assignment", "zz_fake", *extra]) == 2
    assert message in capsys.readouterr().err
