"""The grading engine on a fake assignment (grading_fake.py): notebooks, grader, outputs.

The wire format is tested in tests/grading/inside/test_wire.py, the self-check in tests/grading/learner/test_selfcheck.py.

Cheats have their own files (tests/grading/redteam/); real course content is graded in tests/notebooks/test_assign_sync.py.
"""

from __future__ import annotations

import json
import shutil

import nbformat
import numpy as np
import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.classroom.batch import grade_many
from mha_course.grading.classroom.results import class_summary, gradebook_rows, gradescope
from mha_course.grading.engine import notebook, registry
from mha_course.grading.engine import pipeline as grader
from mha_course.grading.inside import wire
from mha_course.grading.verdicts import Limits

LIMITS = Limits(case_timeout=5, cell_timeout=10, notebook_timeout=30, memory_mb=1024)


@pytest.fixture(scope="module")
def fake():
    with registry.registered("grading_fake") as assignment:
        yield assignment


# --- notebooks: markers, stubs, magics ------------------------------------------------------------


def _solution_nb():
    nb = nbformat.v4.new_notebook()
    nb.metadata["mha_course"] = {"assignment": "zz_fake", "version": 3}
    nb.cells = [
        nbformat.v4.new_markdown_cell("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
        nbformat.v4.new_code_cell(
            "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    y = x + 1\n    ### END SOLUTION\n    return y"
        ),
        nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert f(1) == 2\n### END HIDDEN TESTS"),
        nbformat.v4.new_code_cell("print(f(1))\n### BEGIN HIDDEN TESTS\nassert f(2) == 3\n### END HIDDEN TESTS"),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="x")]
    nb.cells[1].execution_count = 4
    return nb


def test_make_exercise_replaces_answers_and_removes_hidden_tests():
    solution = _solution_nb()
    exercise = notebook.make_exercise(solution)
    sources = [c.source for c in exercise.cells]
    assert sources[0] == "Why?\nYOUR ANSWER HERE"
    assert sources[1] == "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n    return y"
    assert len(exercise.cells) == 3 and sources[2] == "print(f(1))"  # the all-hidden cell is gone
    assert exercise.cells[1].outputs == [] and exercise.cells[1].execution_count is None
    assert notebook.metadata(exercise) == notebook.metadata(solution)
    assert "BEGIN SOLUTION" in solution.cells[1].source  # the solution itself is untouched
    assert [c.id for c in exercise.cells] == [solution.cells[i].id for i in (0, 1, 3)]


def test_dumps_is_deterministic():
    exercise = notebook.make_exercise(_solution_nb())
    text = notebook.dumps(exercise)
    assert text == notebook.dumps(nbformat.reads(text, as_version=4)) and text.endswith("}\n")


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1",
        "x = 1\n### END SOLUTION",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION",
    ],
)
def test_unmatched_markers_raise(source):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    with pytest.raises(notebook.MarkerError, match="cell 0"):
        notebook.make_exercise(nb)


def test_generate_and_check(tmp_path):
    (tmp_path / "solutions").mkdir()
    nbformat.write(_solution_nb(), str(tmp_path / "solutions" / "zz.ipynb"))
    nbformat.write(nbformat.v4.new_notebook(), str(tmp_path / "solutions" / "scratch.ipynb"))  # no metadata
    out = tmp_path / "exercises"
    assert notebook.stale_exercises(tmp_path / "solutions", out)
    generated = notebook.generate(tmp_path / "solutions", out)
    assert [g.exercise.name for g in generated] == ["zz.ipynb"]
    assert notebook.stale_exercises(tmp_path / "solutions", out) == []
    (out / "zz.ipynb").write_text((out / "zz.ipynb").read_text().replace("YOUR CODE HERE", "edited"))
    assert notebook.stale_exercises(tmp_path / "solutions", out)


def test_python_source_drops_ipython_syntax():
    src = "%matplotlib inline\n!pip list\nfiles = !ls\nx = 1\nif x:\n    %time y = 2\nnp.sum?"
    code = notebook.python_source(src)
    compile(code, "<cell>", "exec")
    assert code.splitlines()[3] == "x = 1" and len(code.splitlines()) == 7
    assert notebook.python_source("%%bash\necho hi") == ""
    assert notebook.python_source("%%time\nz = 3").splitlines()[1] == "z = 3"


# --- the grader on honest submissions ---------------------------------------------------------------


@pytest.fixture(scope="module")
def graded(fake, tmp_path_factory):
    require_sandbox()
    folder = tmp_path_factory.mktemp("subs")
    subs = {
        "good": write_submission(
            folder / "good.ipynb",
            "import numpy as np",
            GOOD_ADD,
            GOOD_DOUBLE,
            "from mha_course import check\ncheck('fake_add', add_arrays)\nprint('passed')",
        ),
        "todo": write_submission(
            folder / "todo.ipynb",
            "def add_arrays(a, b):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
            "def double(x):\n    raise NotImplementedError()",
        ),
        "wrong": write_submission(folder / "wrong.ipynb", "def add_arrays(a, b):\n    return a - b", GOOD_DOUBLE),
        "missing": write_submission(folder / "missing.ipynb", GOOD_ADD),
        "old": write_submission(folder / "old.ipynb", GOOD_ADD, GOOD_DOUBLE, version=1),
        "nometa": write_submission(folder / "nometa.ipynb", GOOD_ADD, metadata=False),
        "magic": write_submission(
            folder / "magic.ipynb", "%matplotlib inline\n!echo hi\n" + GOOD_ADD, "%%bash\necho hi", GOOD_DOUBLE
        ),
        "reference": write_submission(
            folder / "reference.ipynb", "from mha_course.core.softmax import softmax\n", GOOD_ADD, GOOD_DOUBLE
        ),
    }
    shutil.copy(subs["good"], folder / "renamed copy (2).ipynb")
    subs["renamed"] = folder / "renamed copy (2).ipynb"
    (folder / "garbage.ipynb").write_text("{not json")
    subs["garbage"] = folder / "garbage.ipynb"
    names = list(subs)
    results = grade_many([subs[n] for n in names], LIMITS, workers=2, progress=False)
    return dict(zip(names, results, strict=True))


@pytest.mark.slow
def test_good_submission_full_marks_and_hidden_flags(graded):
    r = graded["good"]
    assert r.error is None and r.assignment == "zz_fake" and r.version == 3
    assert r.score == r.max_score == 6
    assert [t.hidden for t in r.tests] == [False, False, True, False, True]
    assert r.exercise_scores() == {"fake_add": 4, "fake_double": 2}


@pytest.mark.slow
def test_renamed_copy_grades_the_same(graded):
    same = lambda r: [(t.name, t.score, t.output) for t in r.tests]  # noqa: E731
    assert same(graded["renamed"]) == same(graded["good"])


@pytest.mark.slow
def test_unedited_scores_zero_as_not_attempted(graded):
    r = graded["todo"]
    assert r.score == 0 and r.max_score == 6 and {t.status for t in r.tests} == {"not attempted"}


@pytest.mark.slow
def test_wrong_answer_loses_points_with_a_hint(graded):
    r = graded["wrong"]
    assert r.score == 2  # only the double exercise
    assert all(t.status == "failed" and "differ" in t.output for t in r.tests if t.exercise == "fake_add")


@pytest.mark.slow
def test_missing_target_is_explained(graded):
    r = graded["missing"]
    assert r.score == 4
    assert all("does not define 'double'" in t.output for t in r.tests if t.exercise == "fake_double")


@pytest.mark.slow
def test_version_mismatch_noted_magics_skipped(graded):
    assert graded["old"].score == 6 and any("version 1" in n for n in graded["old"].notes)
    assert graded["magic"].score == 6


@pytest.mark.slow
def test_unreadable_or_unidentified_notebooks_are_errors_not_crashes(graded):
    assert "metadata" in graded["nometa"].error and graded["nometa"].score == 0
    assert "not a readable notebook" in graded["garbage"].error
    data = gradescope(graded["garbage"])
    assert data["score"] == 0 and "Could not grade" in data["output"]


@pytest.mark.slow
def test_reference_import_is_blocked_and_explained(graded):
    r = graded["reference"]
    assert r.score == 6  # the import fails, the rest still runs
    assert any("mha_course.core.softmax" in n and "not available" in n for n in r.notes)


@pytest.mark.slow
def test_gradescope_json_gradebook_and_summary(graded):
    data = gradescope(graded["good"])
    assert set(data) >= {"score", "tests", "output", "execution_time"} and data["extra_data"]["max_score"] == 6
    assert {t["visibility"] for t in data["tests"]} == {"visible", "after_published"}
    assert all(set(t) >= {"name", "score", "max_score", "output", "visibility"} for t in data["tests"])
    json.dumps(data, allow_nan=False)
    results = list(graded.values())
    columns, rows = gradebook_rows(results)
    assert columns[:6] == ["student", "student_id", "name", "submission", "assignment", "version"]
    assert "fake_add" in columns and {"seed", "isolation", "copied_reference", "notes"} <= set(columns)
    assert len(rows) == len(results) and rows[0]["total"] == "6"
    summary = class_summary(results)
    assert "fake_add: mean" in summary and "could not be graded" in summary


@pytest.mark.slow
def test_cli_writes_json_csv_summary_and_exits_zero(fake, tmp_path):
    from mha_course.grading.grade import main

    require_sandbox()
    sub = (
        write_submission(tmp_path / "in" / "s.ipynb", "def add_arrays(a, b):\n    return a - b")
        if (tmp_path / "in").mkdir() is None
        else None
    )
    status = main(
        [
            str(tmp_path / "in"),
            "--json",
            str(tmp_path / "out" / "results.json"),
            "--csv",
            str(tmp_path / "grades.csv"),
            "--summary",
            str(tmp_path / "summary.txt"),
            "--quiet",
            "--case-timeout",
            "5",
        ]
    )
    assert status == 0 and sub.exists()
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["score"] == 0 and data["extra_data"]["max_score"] == 6 and len(data["tests"]) == 5
    assert "s.ipynb" in (tmp_path / "grades.csv").read_text()
    assert "values differ from a + b" in (tmp_path / "summary.txt").read_text()
    assert main([str(tmp_path / "nothing-here"), "--json", str(tmp_path / "r2.json")]) == 2
    assert json.loads((tmp_path / "r2.json").read_text())["score"] == 0


def test_class_summary_never_averages_across_assignments():
    from mha_course.grading.verdicts import SubmissionResult, TestResult

    def result(assignment, score, points):
        test = TestResult(
            "ex",
            "Ex",
            "case",
            points,
            score,
            "passed" if score == points else "failed",
            "passed" if score == points else "mask inverted",
            False,
        )
        return SubmissionResult(
            path=f"{assignment}-{score}.ipynb", assignment=assignment, tests=[test], max_points=points
        )

    summary = class_summary([result("a01", 10, 10), result("a01", 4, 10), result("a04", 1, 2)])
    assert "a01: 2 graded, mean 7.0 / 10, median 7" in summary
    assert "a04: 1 graded, mean 1.0 / 2, median 1" in summary
    assert "mean score" not in summary and "1  ex: mask inverted" in summary


def test_common_exceptions_become_hints():
    import torch

    from mha_course.grading.engine.error_hints import exception_hint, with_exception_hint
    from mha_course.grading.inside.convert import exception_line

    def line(fn):
        try:
            fn()
        except Exception as exc:
            return exception_line(exc)
        raise AssertionError("no error")

    inputs = {"q": np.zeros((2, 3, 4)), "k": np.zeros((2, 5, 4))}
    no_transpose = line(lambda: torch.randn(3, 5) @ torch.randn(3, 4))  # dK = dS @ Q with dS (S, T)... untransposed
    assert "transpose" in exception_hint(no_transpose, inputs)
    batched_T = line(lambda: torch.randn(2, 3, 4) @ torch.randn(2, 5, 4).permute(2, 1, 0))  # what k.T does
    assert "swap only the last two axes" in exception_hint(batched_T, inputs)
    t_for_s = line(lambda: torch.randn(2, 3, 5) * torch.randn(2, 5, 5))
    assert "T = 3 queries and S = 5 keys" in exception_hint(t_for_s, inputs)
    no_keepdims = line(lambda: np.ones((3, 5)) - np.ones(3))
    assert "keepdims" in exception_hint(no_keepdims)
    assert exception_hint("ValueError: something else") is None
    assert with_exception_hint("ValueError: something else") == "ValueError: something else"


@pytest.mark.slow  # grade_notebook starts the sandbox's broker process, even without walls
@pytest.mark.parametrize(
    ("failures", "error"),
    [
        ([], None),
        ([SystemError(grader.AST_RACE + " (before=33, after=59)")], None),  # retried once, from the start
        ([SystemError(grader.AST_RACE)] * 2, grader.AST_RACE),  # twice: reported, not retried forever
        ([SystemError("another internal error")], "another internal error"),  # not the race: no retry
        ([RuntimeError("a bug of the grader")], "a bug of the grader"),
    ],
)
def test_cpythons_ast_race_is_retried_once_and_other_failures_reported(monkeypatch, tmp_path, failures, error):
    calls = []

    def grade_into(result, path, limits, isolator, grade_as=None, meta=None):
        calls.append(result)
        result.notes.append(f"attempt {len(calls)}")
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]

    monkeypatch.setattr(grader, "_grade_into", grade_into)
    result = grader.grade_notebook(tmp_path / "any.ipynb", seed=7, unsafe_no_isolation=True)
    if error is None:
        assert result.error is None and result.notes == [f"attempt {len(calls)}"]  # a fresh result each time
        assert len(calls) == len(failures) + 1
    else:
        assert error in result.error and "the grader failed" in result.error
    assert result.seed == 7 and all(r.seed == 7 for r in calls)  # the same fresh inputs on the retry


def test_replies_are_unpacked_under_the_ast_lock(monkeypatch):
    """np.load parses each .npy header with ast.literal_eval: in the grader's threads it must hold
    scan.AST_LOCK, as ast.parse does, or CPython 3.11 can fail two concurrent parses."""
    from grading_fake import ADD

    from mha_course.grading.engine import notebook_run
    from mha_course.grading.static import scan
    from mha_course.grading.verdicts import Limits

    class Child:  # answers the case with one array, as a submission process would
        def set_deadline(self, *args):
            pass

        def send(self, message, blob):
            pass

        def recv(self):
            structure, blob = wire.pack(np.ones((3, 4)))
            return {"ok": True, "structure": structure}, blob

    held = []
    unpack = wire.unpack

    def watched_unpack(structure, blob):
        held.append(scan.AST_LOCK.locked())
        return unpack(structure, blob)

    monkeypatch.setattr(notebook_run.wire, "unpack", watched_unpack)
    run = object.__new__(notebook_run.NotebookRun)
    run.limits = Limits()
    case = ADD.cases[0]
    inputs = case.make_inputs()
    row = run._run(Child(), ADD, 0, case, inputs, wire.pack(inputs))
    assert held == [True] and not scan.AST_LOCK.locked()
    assert row.status == "failed"  # ones are not a + b: the reply was read back and judged
