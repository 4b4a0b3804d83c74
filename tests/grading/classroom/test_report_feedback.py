"""The class report and the student's feedback: hints read whole, never hand over the fix, the first
cause comes first, an anonymised report, a per-student table, one histogram bar per possible score,
outputs written with the umask's mode, a one-line summary for a grades export's comment column."""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest

from mha_course.grading.classroom.feedback import cause_of, feedback_markdown, root_causes, summary
from mha_course.grading.classroom.report import html_report, markdown_report, score_counts, sections
from mha_course.grading.classroom.results import write_atomic
from mha_course.grading.classroom.roster import read_roster, write_grade_columns
from mha_course.grading.engine import case_inputs, registry
from mha_course.grading.verdicts import SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

ROOT = Path(__file__).resolve().parents[3]
HINT_FILES = sorted((ROOT / "mha_course" / "grading" / "exercises").glob("*.py")) + [
    ROOT / "mha_course" / "grading" / "learner" / "hints.py",
    ROOT / "mha_course" / "grading" / "engine" / "error_hints.py",
]

# --- masking: only what varies -------------------------------------------------------------------


@pytest.mark.parametrize(
    "hint, expected",
    [
        ("scores: multiply q k^T by 1/sqrt(D)", "scores: multiply q k^T by 1/sqrt(D)"),
        (
            "out: shape expected (2, 5, 7) [B, T, S], got (2, 7, 5) (the last two axes are swapped: transposed?)",
            "out: shape expected (…) [B, T, S], got (…) (the last two axes are swapped: transposed?)",
        ),
        (
            "weights: rows do not sum to 1 (row sums from 0.25 to 3.5)",
            "weights: rows do not sum to 1 (row sums from … to …)",
        ),
        (
            "softmax: the values sum to 1 along axis 0, not along axis -1",
            "softmax: the values sum to 1 along axis 0, not along axis -1",
        ),
        (
            "a size 3 met a size 5: here T = 3 queries and S = 5 keys",
            "a size … met a size …: here T = … queries and S = … keys",
        ),
    ],
)
def test_cause_masks_only_what_varies(hint, expected):
    assert cause_of(hint) == expected


def test_equal_mistakes_on_different_shapes_read_equal():
    a = "out: shape expected (2, 5, 7) [B, T, S], got (2, 7, 5) (the last two axes are swapped: transposed?)"
    b = "out: shape expected (1, 3, 4) [B, T, S], got (1, 4, 3) (the last two axes are swapped: transposed?)"
    assert cause_of(a) == cause_of(b)


# --- results to report on ------------------------------------------------------------------------


def _test(exercise: str, case: str, points: float, score: float, status: str, output: str) -> Verdict:
    return Verdict(exercise, exercise.title(), case, points, score, status, output, False)


def _result(who: str, sid: str, tests: list[Verdict], notes: list[str] = (), **kw) -> SubmissionResult:
    return SubmissionResult(
        path=f"/class/{who}_{sid}/a04_masks.ipynb",
        assignment="a04_masks",
        title="Masks",
        version=1,
        tests=tests,
        notes=list(notes),
        key=f"{who}_{sid}/a04_masks.ipynb",
        student=f"{who}_{sid}",
        student_id=sid,
        student_name=who.replace("_", " "),
        max_points=4.0,
        **kw,
    )


SCALE = "scores: multiply q k^T by 1/sqrt(D)"


@pytest.fixture
def klass() -> list[SubmissionResult]:
    ok = [_test("causal", f"case {i}", 1, 1, "passed", "passed") for i in range(4)]
    wrong = [_test("causal", "case 0", 1, 0, "failed", SCALE)] + ok[1:]
    lazy = [
        _test("causal", f"case {i}", 1, 0, "not attempted", "not attempted yet (NotImplementedError)") for i in range(4)
    ]
    slow = [_test("causal", "case 0", 1, 0, "timeout", "timed out after 10 s")] + ok[1:]
    seaborn = _result(
        "Una_Vale",
        "9001",
        [_test("causal", f"case {i}", 1, 0, "failed", "NameError: name 'np' is not defined") for i in range(4)],
        [
            "cell 1 raised ModuleNotFoundError: No module named 'seaborn'",
            "cell 3 raised NameError: name 'np' is not defined",
        ],
    )
    return [
        _result("Ada_Lovelace", "1001", ok),
        _result("Bob_Li", "1002", wrong, adjustments={"causal": 4.0}),
        _result("Cy_Young", "1003", wrong),
        _result("Dee_Dee", "1004", lazy),
        _result("Eve_Stone", "1005", slow),
        seaborn,
    ]


# --- report ---------------------------------------------------------------------------------------


def test_misconceptions_leave_out_not_attempted_and_timeouts(klass):
    (s,) = sections(klass)
    assert [(c, len(w)) for _, c, w in s.misconceptions] == [(SCALE, 2)]
    not_run = {c: w for _, c, w in s.not_run}
    assert not_run == {
        "not attempted yet (NotImplementedError)": ["Dee Dee"],
        "timed out after … s": ["Eve Stone"],
    } or (len(not_run) == 2 and all(len(w) == 1 for w in not_run.values()))
    text = markdown_report(klass)
    assert text.index("### Misconceptions") < text.index("### Not attempted or stopped by a limit")
    misconceptions = text.split("### Misconceptions")[1].split("###")[0]
    assert "not attempted" not in misconceptions and "timed out" not in misconceptions


def test_report_has_a_student_table_with_overrides(klass):
    klass[2].adjustment_log = ["late 2 days: -10%"]  # a field a policy may add: rendered when present
    for text in (markdown_report(klass), html_report(klass)):
        assert "Students" in text
        for name in ("Ada Lovelace", "Bob Li", "Dee Dee", "1005"):
            assert name in text
        assert "causal: 4" in text  # Bob's override
        assert "late 2 days: -10%" in text
    rows = [line for line in markdown_report(klass).splitlines() if line.startswith("| Bob Li")]
    assert rows and "4 / 4" in rows[0], rows


def test_histogram_one_bar_per_possible_score(klass):
    (s,) = sections(klass)
    counts = score_counts(s)
    assert [x for x, _ in counts] == [0, 1, 2, 3, 4]
    by_score = dict(counts)
    expected = {}
    for r in klass:
        expected[r.score] = expected.get(r.score, 0) + 1
    assert {k: v for k, v in by_score.items() if v} == expected
    half = [_result("H_H", "7", [_test("x", "a", 0.5, 0.5, "passed", "passed"), _test("x", "b", 1, 0, "failed", "no")])]
    half[0].max_points = 1.5
    assert [x for x, _ in score_counts(sections(half)[0])] == [0, 0.5, 1, 1.5]


def test_first_cause_comes_first_in_report_and_feedback(klass):
    seaborn = klass[-1]
    causes = root_causes(seaborn)
    assert causes[0].kind == "cell error" and "seaborn" in causes[0].text and len(causes[0].tests) == 4
    assert all("NameError" not in c.text for c in causes[1:])  # the consequences are not causes of their own
    feedback = feedback_markdown(seaborn)
    assert feedback.index("## Fix this first") < feedback.index("## Causal")
    assert "No module named 'seaborn'" in feedback.split("## Causal")[0]
    report = markdown_report(klass)
    first = report.split("### First causes")[1].split("###")[0]
    assert "seaborn" in first and "Una Vale" in first
    assert "NameError" not in report.split("### Misconceptions")[1].split("###")[0]


def test_anonymised_report_names_nobody(klass):
    for text in (markdown_report(klass, missing=["Zed Zane"], anonymise=True), html_report(klass, ["Zed Zane"], True)):
        for r in klass:
            for secret in (r.student_name, r.student_id, r.student, Path(r.path).parent.name, r.key):
                assert secret not in text, secret
        assert "Zed Zane" not in text
        assert "2 student(s)" in text  # the misconception is still counted
    assert "Zed Zane" in markdown_report(klass, missing=["Zed Zane"])


# --- feedback never hands over the fix ------------------------------------------------------------

#: Code that would fix the learner's line: indexing with None or slices, a call with arguments or
#: keywords, a library call. Case names ("T=3, S=5") are not hints and are left out.
CODE_LIKE = [
    re.compile(r"\[[^\]\s]*(?::|None)[^\]]*\]"),
    re.compile(r"\b[a-z_]\w*\([^()]*,[^()]*\)"),
    re.compile(r"\b[a-z_]+=(?:True|False|-?\d)"),
    re.compile(r"\b(?:np|torch|F|math|tl)\.\w+\("),
    re.compile(r"\b(?:np|torch|tl)\.\w+\.\w+"),  # tl.math.exp2
    re.compile(r"\(use [^)]*[<>]"),  # "(use s < L)"
]


def _hint_strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    # the case builders of a declarative table (``def softmax(name, points, ...)``): their first argument is a case's name
    builders = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.args.args and node.args.args[0].arg == "name"
    }
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skip.add(id(body[0].value))  # docstrings
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"Case", "Exercise", "Assignment", *builders}:
            skip.update(id(a) for a in node.args[:1])  # a case's name
            skip.update(id(k.value) for k in node.keywords if k.arg in {"name", "title", "key", "target"})
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in {"get", "startswith"}:
            skip.update(id(a) for a in node.args)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and " " in n.value
    ]


def test_the_detector_catches_handed_over_fixes():
    for snippet in (
        "add the head and query axes (mask[:, None, None, :])",
        "view(B, T, H, D).transpose(1, 2)",
        "divide by sum(axis=-1, keepdims=True)",
        "use np.sqrt(D)",
        "off by one (use s < L)",
        "exponentiated with exp: use tl.math.exp2",
    ):
        assert any(p.search(snippet) for p in CODE_LIKE), snippet


@pytest.mark.parametrize("path", HINT_FILES, ids=lambda p: p.name)
def test_no_hint_hands_over_code(path):
    found = [(line, s) for line, s in _hint_strings(path) if any(p.search(s) for p in CODE_LIKE)]
    # case names of the form "other sizes (B=3, T=7)" are names, not hints
    found = [(line, s) for line, s in found if not re.fullmatch(r".*\b[A-Z][a-z]?=\d.*", s)]
    assert not found, found


def _case_diagnoses(exercise_key: str, buggy, salts=(None, 1, 2, 3)):
    """(case name, hint) of every case of an exercise, for a buggy implementation ``buggy(inputs)``."""
    exercise = registry.find_exercise(exercise_key)
    out = []
    for salt in salts:
        with case_inputs.salted(salt) if salt is not None else contextlib.nullcontext():
            for case in exercise.cases:
                inputs = case.make_inputs()
                out.append((case.name, case.diagnose(buggy(inputs), case.reference(inputs), inputs)))
    return out


def _tril(inputs, offset):
    T = inputs["T"]
    S = T if inputs["S"] is None else inputs["S"]
    return np.tril(np.ones((T, S), dtype=bool), offset)


def test_off_by_one_causal_mask_is_called_off_by_one_even_for_one_query():
    for name, hint in _case_diagnoses("causal_mask", lambda i: _tril(i, -1)):
        if hint is not None:
            assert "off by one" in hint and "swapped" not in hint, (name, hint)


def test_causal_mask_that_sees_one_step_ahead():
    hints_seen = [h for _, h in _case_diagnoses("causal_mask", lambda i: _tril(i, 1)) if h]
    assert hints_seen and all("off by one" in h and "future" in h for h in hints_seen), hints_seen


def test_two_dimensional_padding_mask_is_told_where_to_look_not_the_line():
    def two_d(inputs):
        lengths, S = np.asarray(inputs["lengths"]), int(inputs["S"])
        return np.arange(S)[None, :] < lengths[:, None]

    seen = [h for _, h in _case_diagnoses("padding_mask", two_d) if h]
    assert seen and all("axes are missing" in h and "[:" not in h and "None" not in h for h in seen), seen


# --- outputs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_take_the_umask_mode(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "report.md", "x")
        write_atomic(tmp_path / "alice.feedback.md", b"y")
    finally:
        os.umask(old)
    for name in ("report.md", "alice.feedback.md"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode


def test_summary_for_a_comment_column(klass):
    assert summary(klass[0]).startswith("4 / 4 points")
    line = summary(klass[2])
    assert "3 / 4 points" in line and "1/sqrt(D)" in line
    first = summary(klass[-1])
    assert "seaborn" in first and first.index("seaborn") < len(first)
    assert "\n" not in first


# --- grades export: the platform's rows and columns, with a comment ------------------------------


def _written(path, roster, columns, comments=None) -> str:
    out = {}
    write_grade_columns(path, roster, columns, lambda p, text: out.setdefault("text", text), comments)
    return out["text"]


def test_canvas_export_keeps_its_points_possible_row(tmp_path):
    source = (
        "Student,ID,SIS User ID,SIS Login ID,Section,A04 Masks (123)\n"
        "    Points Possible,,,,,4.00\n"
        "Lovelace Ada,1001,ada,ada,S1,\n"
        "Li Bob,1002,bob,bob,S1,\n"
    )
    path = tmp_path / "canvas.csv"
    path.write_text(source)
    roster = read_roster(path)
    text = _written(tmp_path / "out.csv", roster, {"A04 Masks (123)": {"1001": 4.0, "1002": 3.0}})
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == next(csv.reader(io.StringIO(source)))  # exactly Canvas's columns
    assert rows[1] == ["    Points Possible", "", "", "", "", "4.00"]  # its header row, where it was
    assert [r[1] for r in rows[2:]] == ["1001", "1002"] and [r[-1] for r in rows[2:]] == ["4", "3"]


def test_moodle_worksheet_gets_feedback_comments(tmp_path, klass):
    path = tmp_path / "moodle.csv"
    path.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Feedback comments\n"
        "Participant 1003,Cy Young,cy@example.org,Submitted,,4,\n"
        "Participant 9001,Una Vale,una@example.org,Submitted,,4,\n"
    )
    roster = read_roster(path)
    cy, una = klass[2], klass[-1]
    cy.student_id, una.student_id = "Participant 1003", "Participant 9001"
    comments = {r.student_id: summary(r) for r in (cy, una)}
    text = _written(tmp_path / "out.csv", roster, {"Grade": {cy.student_id: cy.score, una.student_id: 0.0}}, comments)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["Grade"] == "3" and "1/sqrt(D)" in rows[0]["Feedback comments"]
    assert "seaborn" in rows[1]["Feedback comments"] and rows[1]["Feedback comments"].startswith("0 / 4 points")


@pytest.mark.slow
def test_a_failed_import_is_the_first_cause_of_a_real_submission(tmp_path):
    """A first cell that cannot import: every later NameError is listed under it, not as a misconception."""
    from grading_fake import GOOD_DOUBLE, require_sandbox, write_submission

    from mha_course.grading.engine.pipeline import grade_notebook
    from mha_course.grading.verdicts import Limits

    require_sandbox()
    with registry.registered("grading_fake"):
        path = write_submission(
            tmp_path / "zz_fake.ipynb",
            "import seaborn_not_installed\nimport numpy as np",
            "def add_arrays(a, b):\n    return np.add(a, b)\n",
            GOOD_DOUBLE,
        )
        result = grade_notebook(path, Limits(case_timeout=10), seed=3)
    assert result.score < result.max_score
    first = root_causes(result)[0]
    assert first.kind == "cell error" and "seaborn_not_installed" in first.example, root_causes(result)
    assert first.tests and all(t.exercise == "fake_add" for t in first.tests)
    feedback = feedback_markdown(result)
    assert feedback.index("## Fix this first") < feedback.index("## ", feedback.index("## Fix this first") + 3)
    report = markdown_report([result])
    assert "seaborn_not_installed" in report.split("### First causes")[1]
    assert "### Misconceptions" not in report  # the NameErrors are consequences, not misconceptions


# --- the workshop plan: timed from the measurements -----------------------------------------------


def _measured() -> dict[str, tuple[int, float]]:
    """Notebook stem -> (words, execution seconds) from RESULTS.md's table of benchmarks/chapter_times.py."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = text.split("## Chapter and assignment times")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\d\d_\w+|a\d\d\w*) \| (\d+) \| \d+ \| ([\d.]+) \|$", section, re.M)
    return {stem: (int(words), float(seconds)) for stem, words, seconds in rows}


def _plan() -> list[tuple[int, list[str], list[str], str]]:
    """(minutes, chapter numbers, assignment stems, row text) of each row of the workshop plan."""
    text = (ROOT / "docs" / "INSTRUCTORS.md").read_text()
    section = text.split("## A workshop")[1].split("\n## ")[0]
    rows = []
    for line in section.splitlines():
        m = re.match(r"^\| (?:day \d, )?(\d+):(\d\d)–(\d+):(\d\d) \|([^|]*)\|([^|]*)\|", line)
        if m:
            h1, m1, h2, m2 = map(int, m.groups()[:4])
            chapters = re.findall(r"\b(\d\d)\b(?! min)", m[5])  # "(11 min)" is a duration
            assignments = re.findall(r"\b(a\d\d\w*)\b", m[6])
            rows.append((h2 * 60 + m2 - h1 * 60 - m1, chapters, assignments, line))
    return rows


def test_every_notebook_was_measured():
    measured = _measured()
    stems = [p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")]
    stems += [p.stem for p in (ROOT / "exercises").glob("a*.ipynb")]
    assert sorted(stems) == sorted(measured), set(stems) ^ set(measured)


def test_workshop_plan_places_every_chapter_and_assignment_in_time():
    measured, plan = _measured(), _plan()
    chapters = {s[:2]: s for s in measured if s[0].isdigit()}
    assignments = {s for s in measured if s.startswith("a")}
    placed_chapters = [c for _, cs, _, _ in plan for c in cs]
    placed_assignments = [a for _, _, a_s, _ in plan for a in a_s]
    assert sorted(placed_chapters) == sorted(chapters), "each chapter exactly once"
    assert sorted(placed_assignments) == sorted(assignments), "each assignment exactly once"
    for minutes, cs, a_s, line in plan:
        # reading at 200 words a minute, running every cell once, and for an assignment 10 minutes of work at least
        need = sum(measured[chapters[c]][0] / 200 + measured[chapters[c]][1] / 60 for c in cs)
        need += sum(measured[a][0] / 200 + measured[a][1] / 60 + 10 for a in a_s)
        assert minutes >= need, f"{line}: {minutes} min for {need:.0f} min of reading, running and work"


def test_the_projected_page_is_the_anonymised_report():
    text = (ROOT / "docs" / "INSTRUCTORS.md").read_text().split("## A workshop")[1].split("\n## ")[0]
    projected = [line for line in text.splitlines() if "project" in line.lower()]
    assert projected and all("--anonymise" in line for line in projected), projected


@pytest.mark.slow
def test_command_line_anonymised_report_comments_and_modes(tmp_path):
    """`grade --report --anonymise --grades-out --feedback-dir` on a Moodle download: nobody named on the
    projected page, Moodle's comment column filled, every output with the umask's mode."""
    from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

    from mha_course.grading.grade import main

    require_sandbox()
    root = tmp_path / "submissions"
    for folder, cells in (
        ("Ann Bell_1111_assignsubmission_file_", (GOOD_ADD, GOOD_DOUBLE)),
        ("Cal Dunn_2222_assignsubmission_file_", ("import seaborn_not_installed\nimport numpy as np", GOOD_DOUBLE)),
    ):
        (root / folder).mkdir(parents=True)
        write_submission(root / folder / "zz_fake.ipynb", *cells)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Feedback comments\n"
        "Participant 1111,Ann Bell,ann@example.org,Submitted,,3,\n"
        "Participant 2222,Cal Dunn,cal@example.org,Submitted,,3,\n"
    )
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        with registry.registered("grading_fake"):
            status = main(
                [str(root), "--assignment", "zz_fake", "--roster", str(roster), "--report", str(out / "report.html"),
                 "--anonymise", "--feedback-dir", str(out / "feedback"), "--grades-out", str(out / "moodle.csv"),
                 "--seed", "7", "--quiet", "--case-timeout", "5"]
            )  # fmt: skip
    finally:
        os.umask(old)
    assert status == 0
    for name in ("report.html", "report.md"):
        text = (out / name).read_text()
        for secret in ("Ann", "Bell", "Cal", "Dunn", "1111", "2222", "assignsubmission", "zz_fake.ipynb"):
            assert secret not in text, (name, secret)
    comments = {row["Full name"]: row["Feedback comments"] for row in csv.DictReader((out / "moodle.csv").open())}
    ann = re.match(r"(\d+) / (\d+) points; all tests pass$", comments["Ann Bell"])
    assert ann and ann[1] == ann[2], comments["Ann Bell"]
    assert "seaborn_not_installed" in comments["Cal Dunn"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 5 and all(p.stat().st_mode & 0o777 == 0o644 for p in files), [
        (p.name, oct(p.stat().st_mode)) for p in files
    ]
