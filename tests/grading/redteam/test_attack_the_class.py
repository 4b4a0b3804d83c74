"""Red-team regressions on a whole class: what one submission holds never costs the others their
outputs, the class folder earns no undeserved points, the instructor's outputs are not a channel
for injection, and the lectures' own idioms score full marks.

The class runs go through ``python -m mha_course.grading.grade`` in a subprocess over one folder holding
every case at once (as an instructor would run it); the rest are quick checks of the pieces
(collection, the scan, similarity, the text filters).

Where the cases came from: the class review (test_redteam_class.py before the tests mirrored the
package), and the third review's folder named like a classmate (test_redteam_round3.py); the class review's cases
against the scan alone are in test_fool_the_scan.py.
"""

from __future__ import annotations

import base64
import copy
import csv
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grading_fake import require_sandbox
from test_fool_the_scan import WRAPPED_REFERENCE

from mha_course.grading.classroom import feedback
from mha_course.grading.classroom.class_files import peek_metadata
from mha_course.grading.classroom.collect import collect, one_per_student
from mha_course.grading.engine import registry
from mha_course.grading.safe_text import clean, clean_result, code_span, csv_cell, markdown
from mha_course.grading.verdicts import SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

ROOT = Path(__file__).resolve().parents[3]
A02 = json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())
A01 = json.loads((ROOT / "solutions" / "a01_dot_products.ipynb").read_text())
FULL = float(registry.get_assignment("a02_softmax").max_points)
FORMULA = ("=", "+", "-", "@", "\t", "\r")
ESCAPES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal would act on (newline and tab aside)
NAMES = {"a02_softmax": "a02_softmax.ipynb", "a01_dot_products": "a01_dot_products.ipynb"}


def _code(source: str, outputs: list | None = None) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": outputs or [], "execution_count": None}


def _notebook(base: dict = A02, extra: str | None = None, define: dict[str, str] | None = None, **meta) -> dict:
    """A copy of a solution notebook with a cell appended and/or the cell defining a function replaced."""
    nb = copy.deepcopy(base)
    for name, source in (define or {}).items():
        cell = next(
            c
            for c in nb["cells"]
            if c["cell_type"] == "code" and re.search(rf"^def {name}\b", "".join(c["source"]), re.M)
        )
        cell["source"] = source
    if extra is not None:
        nb["cells"].append(_code(extra))
    nb["metadata"]["mha_course"].update(meta)
    return nb


def _write(path: Path | bytes, nb: dict | str) -> Path:
    text = nb if isinstance(nb, str) else json.dumps(nb)
    path = Path(os.fsdecode(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _grade(args: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.grading.grade", *map(str, args)],
        capture_output=True,
        timeout=840,  # under pytest's own --timeout=900, so this one reports first
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


# --- the class ----------------------------------------------------------------------------------------

SURROGATE_TARGET = 'def softmax_np(x, axis=-1):\n    raise ValueError("\\ud800")\n'
ESCAPE_MESSAGE = (
    'raise ValueError("\\x1bc\\x1b]52;c;aGFja2Vk\\x07\\r  [PASS] 15/15  softmax: all fine\\n'
    '  [PASS] 14/14  softmax_np: all fine <img src=x onerror=alert(1)>")'
)
REACH_RUNTIME = (
    "import mha_course\n\nclass Reach:\n    def grader(self):\n        return getattr(self, 'grad' + 'ing')\n\n"
    "    def frames(self):\n        return getattr(self, '_get' + 'frame')\n\n"
    "try:\n    Reach.grader(mha_course).wire.pack = lambda *a, **k: b''\nexcept Exception:\n    pass\n"
)
BIG_PLOT = base64.b64encode(os.urandom(13 * 2**20)).decode("ascii")  # 17.3 MiB as base64


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    """One class folder holding every red-team case beside honest students, graded with every output on."""
    require_sandbox()
    base = tmp_path_factory.mktemp("redteam_class")
    root = base / "class"
    _write(root / "honest" / "a02_softmax.ipynb", _notebook())
    # one student destroys the class's grades
    _write(root / "surrogate_cell" / "a02_softmax.ipynb", _notebook(extra='raise ValueError("\\ud800")'))
    _write(root / "surrogate_target" / "a02_softmax.ipynb", _notebook(define={"softmax_np": SURROGATE_TARGET}))
    _write(os.fsencode(root) + b"/Ren\xe9 Roux_77_assignsubmission_file_/a02_softmax.ipynb", _notebook())
    deep = json.dumps(_notebook())
    _write(root / "deep" / "a02_softmax.ipynb", deep[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _write(root / "big_code" / "a02_softmax.ipynb", _notebook(extra="flag = " + "not " * 140_000 + "True\n"))
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "a02_softmax.ipynb")
    # undeserved points
    (root / "thief").mkdir()
    (root / "thief" / "a02_softmax.ipynb").symlink_to(root / "honest" / "a02_softmax.ipynb")
    (root / "folder_thief").symlink_to(root / "honest", target_is_directory=True)
    first = _write(root / "Paul Roe_1234_assignsubmission_file_a02_softmax.ipynb", _notebook())
    second = _write(root / "Paul Roe_1234_assignsubmission_file_v2.ipynb", _notebook())
    os.utime(first, (time.time() - 3600, time.time() - 3600))  # v2 is newer: graded, though not the assignment's name
    os.utime(second, (time.time(), time.time()))
    _write(root / "wrapper" / "a02_softmax.ipynb", _notebook(define={"softmax": WRAPPED_REFERENCE}))
    # injection into the instructor's outputs
    _write(root / "@SUM(1+1)" / "=1+2.ipynb", _notebook())
    _write(root / "\x1bc\x1b]52;c;aGk=\x07 [PASS]" / "a02_softmax.ipynb", _notebook(extra=ESCAPE_MESSAGE))
    _write(root / "<img src=x onerror=alert(1)>" / "a02_softmax.ipynb", _notebook(extra=ESCAPE_MESSAGE))
    # the lectures' idioms
    _write(
        root / "idiom_timeit" / "a02_softmax.ipynb",
        _notebook(
            extra="import timeit\nbest = min(timeit.repeat(lambda: softmax_np(np.ones((4, 8))), number=3, repeat=3))"
        ),
    )
    _write(
        root / "idiom_inspect" / "a02_softmax.ipynb",
        _notebook(extra="import inspect, json\nprint(inspect.getsource(json.dumps).splitlines()[0])\n"),
    )
    _write(root / "idiom_gc" / "a02_softmax.ipynb", _notebook(extra="import gc\ngc.collect()\n"))
    plots = _notebook()
    plots["cells"][-1]["outputs"] = [
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": BIG_PLOT, "text/plain": "<Figure>"}}
    ]
    _write(root / "idiom_plots" / "a02_softmax.ipynb", plots)
    # the attacks on the runtime
    _write(root / "reach_runtime" / "a02_softmax.ipynb", _notebook(extra=REACH_RUNTIME))
    roster = base / "roster.csv"
    roster.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
        "Participant 1234,Paul Roe,paul@example.org,Submitted,,29\n"
        "Participant 77,René Roux,rene@example.org,Submitted,,29\n"
    )
    out = base / "out"
    proc = _grade(
        [
            root,
            "--assignment",
            "a02_softmax",
            "--roster",
            roster,
            "--csv",
            out / "grades.csv",
            "--report",
            out / "report.html",
            "--feedback-dir",
            out / "feedback",
            "--results-dir",
            out / "results",
            "--grades-out",
            out / "moodle.csv",
            "--seed",
            "11",
        ],
        base,
    )
    rows = {}
    if (out / "grades.csv").exists():
        rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    return proc, out, rows


def _row(rows: dict, start: str) -> dict:
    (row,) = [r for name, r in rows.items() if name.startswith(start)]
    return row


@pytest.mark.slow
def test_class_run_ends_with_every_output(hostile_class):
    proc, out, rows = hostile_class
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    for path in ("grades.csv", "report.html", "report.md", "moodle.csv"):
        assert (out / path).is_file(), path
    assert len(list((out / "feedback").iterdir())) == len(rows) == len(list((out / "results").iterdir()))
    assert rows["honest"]["total"] == f"{FULL:g}"
    for text in [p.read_text(encoding="utf-8") for p in out.rglob("*") if p.suffix in (".md", ".csv", ".json")]:
        assert not re.search("[\ud800-\udfff]", text)


@pytest.mark.slow
def test_hostile_texts_and_files_become_rows(hostile_class):
    _, out, rows = hostile_class
    assert rows["surrogate_cell"]["total"] == f"{FULL:g}" and "\\ud800" in rows["surrogate_cell"]["notes"]
    assert float(rows["surrogate_target"]["total"]) < FULL
    rene = _row(rows, "Ren\\xe9 Roux_77")  # the byte that is not UTF-8, shown escaped; identity kept
    assert rene["total"] == f"{FULL:g}" and rene["student_id"] == "Participant 77"
    assert "not a readable notebook" in rows["deep"]["status"]
    assert rows["big_code"]["total"] == "0" and "KiB of code" in rows["big_code"]["notes"]
    assert "not a regular file" in rows["fifo"]["status"]


@pytest.mark.slow
def test_class_folder_earns_no_undeserved_points(hostile_class):
    _, out, rows = hostile_class
    thief = rows["thief"]
    assert thief["total"] == "0" and "honest/a02_softmax.ipynb, another student's file" in thief["status"]
    assert rows["folder_thief"]["total"] == "0" and "links are not followed" in rows["folder_thief"]["status"]
    paul = [r for r in rows.values() if r["student_id"] == "Participant 1234"]
    assert len(paul) == 1 and paul[0]["submission"].endswith("_v2.ipynb")
    assert "also submitted Paul Roe_1234_assignsubmission_file_a02_softmax.ipynb" in paul[0]["notes"]
    moodle = {r["Identifier"]: r for r in csv.DictReader((out / "moodle.csv").open(encoding="utf-8"))}
    assert moodle["Participant 1234"]["Grade"] == f"{FULL:g}" == moodle["Participant 1234"]["Maximum Grade"]
    assert (
        "_ref (used by softmax) is identical to mha_course.core.softmax.softmax" in rows["wrapper"]["copied_reference"]
    )


@pytest.mark.slow
def test_outputs_carry_no_formula_escape_or_markup(hostile_class):
    proc, out, rows = hostile_class
    for name in ("grades.csv", "moodle.csv"):
        for row in csv.reader((out / name).open(encoding="utf-8")):
            assert not [cell for cell in row if cell.startswith(FORMULA) and not re.fullmatch(r"-?[\d.]+", cell)]
    assert "'@SUM(1+1)" in rows and rows["'@SUM(1+1)"]["submission"] == "'@SUM(1+1)/=1+2.ipynb"
    stdout = proc.stdout.decode("utf-8")
    assert not ESCAPES.search(stdout) and not re.search(r"^\s*\[PASS\]", stdout, re.M)
    assert "\\x1bc\\x1b]52;c;aGk=\\x07 [PASS]/a02_softmax.ipynb: 29 / 29" in stdout
    markdowns = [out / "report.md", *(out / "feedback").iterdir()]
    for path in markdowns:
        text = path.read_text(encoding="utf-8")
        outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)  # a code span shows HTML as text
        assert "<img" not in outside_code and not ESCAPES.search(text), path.name
    (mine,) = (out / "feedback").glob("img_src*")
    assert "&lt;img src=x onerror=alert(1)&gt;" in mine.read_text(encoding="utf-8")  # the exception's message


@pytest.mark.slow
def test_lecture_idioms_score_full_marks_and_runtime_reach_is_flagged(hostile_class):
    _, _, rows = hostile_class
    for name in ("idiom_timeit", "idiom_inspect", "idiom_gc", "idiom_plots"):
        assert rows[name]["total"] == f"{FULL:g}", (name, rows[name]["status"], rows[name]["notes"])
    reach = rows["reach_runtime"]
    # a scan finding no longer zeroes a notebook (--on-tamper review): the solution's cells keep what the
    # tests gave, and the reach into the runtime flags it for review with the evidence
    assert reach["total"] == f"{FULL:g}" and reach["review"].startswith("to review (likely tampering)"), reach
    assert "getattr(..., '_getframe')" in reach["review"], reach["review"]


@pytest.mark.slow
def test_one_grade_per_student_and_assignment_without_assignment(tmp_path):
    """Without --assignment an a01 and an a02 notebook of one student are two grades, never one sum."""
    require_sandbox()
    root = tmp_path / "class"
    _write(root / "Ann Lee_55_assignsubmission_file_" / "a02_softmax.ipynb", _notebook())
    _write(root / "Ann Lee_55_assignsubmission_file_" / "a01_dot_products.ipynb", copy.deepcopy(A01))
    _write(root / "Bo Chan_66_assignsubmission_file_" / "=HYPERLINK(1).ipynb", _notebook(assignment="=HYPERLINK(1)"))
    roster = tmp_path / "roster.csv"
    roster.write_text("Identifier,Full name,Grade\nParticipant 55,Ann Lee,\nParticipant 66,Bo Chan,\n")
    proc = _grade(
        [root, "--roster", roster, "--grades-out", tmp_path / "grades.csv", "--csv", tmp_path / "all.csv", "--quiet"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    (ann, bo) = csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8"))
    a01 = float(registry.get_assignment("a01_dot_products").max_points)
    assert ann["Grade"] == "" and ann["a02_softmax"] == f"{FULL:g}" and ann["a01_dot_products"] == f"{a01:g}"
    assert bo["a02_softmax"] == bo["a01_dot_products"] == ""
    for row in csv.reader((tmp_path / "all.csv").open(encoding="utf-8")):
        assert not [cell for cell in row if cell.startswith(FORMULA) and not re.fullmatch(r"-?[\d.]+", cell)]


@pytest.mark.slow  # runs the grade command in a sandbox (about 19 s)
def test_single_notebook_mode_prints_no_terminal_escapes(tmp_path):
    require_sandbox()
    path = _write(tmp_path / "\x1b]52;c;aGk=\x07\rx.ipynb", _notebook(extra=ESCAPE_MESSAGE))
    proc = _grade([path], tmp_path)
    stdout = proc.stdout.decode("utf-8")
    assert proc.returncode == 0 and "29 / 29" in stdout, stdout + proc.stderr.decode(errors="replace")
    assert not ESCAPES.search(stdout) and not re.search(
        r"^\s*\[PASS\] 1[45]/1[45]  softmax(_np)?: all fine", stdout, re.M
    )
    assert "\\x1b]52;c;aGk=\\x07" in stdout


# --- the pieces -----------------------------------------------------------------------------------------


def test_collection_never_blocks_on_a_fifo_nor_fails_on_deep_json(tmp_path):
    (tmp_path / "ann").mkdir()
    os.mkfifo(tmp_path / "ann" / "a02_softmax.ipynb")
    deep = _write(tmp_path / "ann" / "deep.ipynb", "[" * 100_000 + "]" * 100_000)
    found = []
    worker = threading.Thread(target=lambda: found.append(collect([tmp_path], "a02_softmax")), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "collect() blocked on a FIFO"
    (row,) = found[0]
    assert "not a regular file" in row.problem and "deep.ipynb (not a readable notebook" in row.problem
    assert peek_metadata(deep) == (None, "not a readable notebook (RecursionError)")


def test_links_are_never_followed(tmp_path):
    _write(tmp_path / "ann" / "a02_softmax.ipynb", _notebook())
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "a02_softmax.ipynb").symlink_to(tmp_path / "ann" / "a02_softmax.ipynb")
    (tmp_path / "cy").mkdir()
    (tmp_path / "cy" / "mine.ipynb").symlink_to("../cy/other.ipynb")
    _write(tmp_path / "cy" / "other.ipynb", "{}")
    (tmp_path / "dee").symlink_to(tmp_path / "ann")
    rows = {r.student: r for r in collect([tmp_path], "a02_softmax")}
    assert rows["ann"].path is not None
    assert (
        rows["bob"].path is None
        and "bob/a02_softmax.ipynb (a link to ann/a02_softmax.ipynb, another student's" in rows["bob"].problem
    )
    assert rows["cy"].path is None and "a link to cy/other.ipynb; links are not followed" in rows["cy"].problem
    assert rows["dee"].path is None and "links are not followed" in rows["dee"].problem


def test_moodle_flat_download_is_one_student_with_one_notebook(tmp_path):
    older = _write(tmp_path / "Paul Roe_1234_assignsubmission_file_notes.ipynb", _notebook())
    newer = _write(tmp_path / "Paul Roe_1234_assignsubmission_file_v2.ipynb", _notebook())
    os.utime(older, (1, 1))
    rows = collect([tmp_path], "a02_softmax", notebook_names=NAMES)
    assert len(rows) == 1 and rows[0].path == newer and rows[0].student == "Paul Roe_1234_assignsubmission_file_"
    assert "graded Paul Roe_1234_assignsubmission_file_v2.ipynb, the newest" in rows[0].notes[0]
    # two students' keys that the roster says are one participant: one row
    _write(tmp_path / "other" / "a02_softmax.ipynb", _notebook())
    rows = collect([tmp_path], "a02_softmax", notebook_names=NAMES)
    for row in rows:
        row.student_id = "Participant 1234"
    (kept,) = one_per_student(rows, NAMES)
    assert kept.key == "other/a02_softmax.ipynb" and "the newest" in kept.notes[-1]  # written last
    # the time the platform recorded wins over the files' times (a copy gives every file a new one)
    rows = collect([tmp_path], "a02_softmax", notebook_names=NAMES)
    for row in rows:
        row.student_id = "Participant 1234"
        row.submitted_at = 2.0 if row.key == newer.name else 1.0
    (kept,) = one_per_student(rows, NAMES)
    assert kept.key == newer.name


def test_text_filters():
    assert clean("Ren\udce9 \ud800\x1b]52;c;x\x07\r\n\u202e") == "Ren\\xe9 \\ud800\\x1b]52;c;x\\x07\\r\\n\\u202e"
    assert [csv_cell(v) for v in ("=1+2", "@SUM(1)", "+x", "-x", "\tx", "-1.5", "29", "ok")] == [
        "'=1+2",
        "'@SUM(1)",
        "'+x",
        "'-x",
        "'\tx",
        "-1.5",
        "29",
        "ok",
    ]
    assert markdown("<img src=x onerror=alert(1)> [a](b) `c`") == (
        "&lt;img src=x onerror=alert(1)&gt; \\[a\\](b) \\`c\\`"
    )
    assert code_span("a `b` c") == "`` a `b` c ``" and code_span("<img>") == "`<img>`"


def test_results_and_feedback_of_hostile_text_encode():
    tests = [Verdict("softmax", "Softmax", "rows", 1.0, 0.0, "failed", "ValueError: \ud800 <b>x</b>\r[PASS]", False)]
    result = SubmissionResult(path="Ren\udce9/a.ipynb", assignment="a02_softmax", tests=tests, key="Ren\udce9/a.ipynb")
    clean_result(result)
    text = feedback.feedback_markdown(result)
    text.encode("utf-8")
    assert r"\\ud800 &lt;b&gt;x&lt;/b&gt;\\r\[PASS\]" in text  # the Markdown of \ud800 <b>x</b>\r[PASS]
    assert "`Ren\\xe9/a.ipynb`" in text


@pytest.mark.slow  # grade_notebook starts the broker process, even without walls
def test_a_file_over_the_read_limit_is_refused_unread(tmp_path, monkeypatch):
    from mha_course.grading.engine import pipeline as grader

    path = _write(tmp_path / "a02_softmax.ipynb", _notebook())
    monkeypatch.setattr(grader, "MAX_NOTEBOOK_BYTES", 1000)
    result = grader.grade_notebook(path, unsafe_no_isolation=True)
    assert result.error and "the grader reads notebooks of at most" in result.error and not result.tests


def test_folders_thousands_of_levels_deep_are_a_note(memory_tmp_path):
    tmp_path = memory_tmp_path  # the class folder; 1500 folders cost 5 s on a busy disk, nothing in memory
    here, levels = tmp_path / "deep_student", 1500
    here.mkdir()
    cwd = os.getcwd()
    os.chdir(here)  # relative steps: an absolute path this deep is longer than PATH_MAX
    made = 0
    try:
        for _ in range(levels):
            os.mkdir("a")
            os.chdir("a")
            made += 1
        _write(tmp_path / "ann" / "a02_softmax.ipynb", _notebook())
        rows = {r.student: r for r in collect([tmp_path], "a02_softmax")}
        assert rows["ann"].path is not None
        assert "folders nested deeper than 32 levels" in rows["deep_student"].problem
    finally:
        for _ in range(made):  # removed here, bottom up: a recursive rmtree would overflow on it
            os.chdir("..")
            os.rmdir("a")
        os.chdir(cwd)


def test_a_hard_link_to_a_classmates_notebook_is_noted_on_both_rows(tmp_path):
    original = _write(tmp_path / "ann" / "a02_softmax.ipynb", _notebook())
    (tmp_path / "bob").mkdir()
    os.link(original, tmp_path / "bob" / "a02_softmax.ipynb")
    rows = {r.student: r for r in collect([tmp_path], "a02_softmax")}
    assert "is the same file as bob/a02_softmax.ipynb (a hard link)" in " ".join(rows["ann"].notes)
    assert "is the same file as ann/a02_softmax.ipynb (a hard link)" in " ".join(rows["bob"].notes)


# --- a folder named like a classmate (third review) ----------------------------------------------------


@pytest.mark.parametrize("other", ["ALICE", "ａｌｉｃｅ", "Alice Martin", "alice "])
def test_a_folder_named_like_a_classmate_does_not_replace_their_notebook(tmp_path, other):
    """``alice/`` (the username) and a newer ``ALICE/`` both match alice's roster row: alice's own is graded."""
    import os

    from mha_course.grading.classroom import intake
    from mha_course.grading.classroom.collect import collect, one_per_student
    from mha_course.grading.classroom.roster import read_roster

    for folder, source in (("alice", "solutions"), (other, "exercises")):
        (tmp_path / "class" / folder).mkdir(parents=True)
        (tmp_path / "class" / folder / "a02_softmax.ipynb").write_bytes(
            (ROOT / source / "a02_softmax.ipynb").read_bytes()
        )
    os.utime(tmp_path / "class" / "alice" / "a02_softmax.ipynb", (1e9, 1e9))  # the classmate's is newer
    (tmp_path / "roster.csv").write_text("id,name,username\nalice,Alice Martin,alice\nbob,Bob Stone,bob\n")
    rows = collect([tmp_path / "class"], "a02_softmax")
    intake.identify(rows, read_roster(tmp_path / "roster.csv"))
    graded = [r for r in one_per_student(rows) if r.student_id == "alice"]
    assert [r.key for r in graded] == ["alice/a02_softmax.ipynb"], [(r.key, r.notes) for r in graded]
