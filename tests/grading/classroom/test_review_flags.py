"""What a static-scan finding does to a grade: it flags the submission for review with its evidence, never
zeroes it by itself (``--on-tamper review``, the default), and ``--on-tamper zero`` scores an open flag 0.

* the scan: a self-check loop reading ``globals()[name]`` over names the notebook writes out is not a
  finding; a dunder key, a write, or a key the scan cannot read is, with the cell, line and source, and
  each finding's label ("likely tampering" or "review") follows the table in docs/INSTRUCTORS.md;
* the outputs of a flagged result: CSV, class report (the "to review" list at the top), the learner's
  feedback (neutral), results.json, the grade export's comment; each states the policy;
* overrides: a ``review`` row resolves the flag (accept, or points), with a reason;
* end to end (slow, in the sandbox): an honest notebook with the self-check loop gets full marks and no
  flag; a notebook that rebinds a builtin is flagged everywhere, keeps its points under ``review``, scores
  0 under ``zero`` and says so, and an override row resolves it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, require_sandbox, write_submission

from mha_course.grading.classroom import review_flags
from mha_course.grading.classroom.feedback import feedback_markdown, summary
from mha_course.grading.classroom.policy import Override, apply_overrides, read_overrides
from mha_course.grading.classroom.report import html_report, markdown_report
from mha_course.grading.classroom.results import gradebook_rows, gradescope
from mha_course.grading.engine import registry
from mha_course.grading.gradescope import validate_results
from mha_course.grading.static import scan
from mha_course.grading.static.scan_rules import likely_tampering
from mha_course.grading.verdicts import ReviewFlag, SubmissionResult
from mha_course.grading.verdicts import TestResult as Verdict

ROOT = Path(__file__).resolve().parents[3]
ACCUSING = ("cheat", "tamper", "attack", "evasion", "suspicious")


def _tampering(*sources: str) -> list[scan.Finding]:
    return scan.scan(list(enumerate(sources)), registry.get_assignment("a02_softmax")).tampering


# --- the scan: globals() for a lookup by name ------------------------------------------------------------

SELF_CHECK_LOOPS = {
    "the measured loop": 'for name in ["softmax", "attention"]:\n    check(name, globals()[name])',
    "a tuple named once": 'NAMES = ("softmax_np", "softmax")\nfor n in NAMES:\n    fn = globals().get(n)',
    "a comprehension over locals()": 'found = {n: locals()[n] for n in ["softmax"]}',
    "a dict's keys": 'POINTS = {"softmax": 2}\nfor name in POINTS:\n    check(name, globals()[name])',
    "vars() at the top": 'for name in ["softmax"]:\n    check(name, vars()[name])',
    "inside a helper": 'def run_checks():\n    for name in ["softmax"]:\n        check(name, globals()[name])',
    "a literal name": 'f = globals()["softmax"]',
    "a list read by len()": 'NAMES = ["softmax"]\nprint(len(NAMES))\nfor n in NAMES:\n    f = globals()[n]',
    "a tuple printed": 'NAMES = ("softmax",)\nprint(NAMES)\nfor n in NAMES:\n    f = globals()[n]',
    "membership": 'if "softmax" in globals():\n    print("defined")',
    "timeit's globals": 'import timeit\ntimeit.timeit("softmax(x)", globals=globals(), number=3)',
}


@pytest.mark.parametrize("name", list(SELF_CHECK_LOOPS))
def test_a_lookup_of_names_the_notebook_writes_out_is_not_a_finding(name):
    assert _tampering(SELF_CHECK_LOOPS[name]) == []


NAMESPACE_FINDINGS = {
    # source -> (finding contains, likely tampering)
    "g = globals()['__builtins__']": ("globals()['__builtins__']", True),
    "k = '__buil' + 'tins__'\nb = globals()[k]": ("globals()['__builtins__']", True),
    "for n in ['softmax', '__loader__']:\n    globals()[n]": ("globals()['__loader__']", True),
    "k = input()\nf = globals()[k]": ("read by a name the scan cannot tell", False),
    "def get(name):\n    return globals()[name]": ("read by a name the scan cannot tell", False),
    "globals()['softmax'] = lambda x: x": ("globals()[...] (written)", False),
    "globals().update({'softmax': print})": ("globals().update() (written)", False),
    "for k, v in globals().items():\n    pass": ("globals().items()", False),
    "ns = globals": ("globals", False),
    # a list named once that changes later, or a name bound again by a match: not the literal any more
    "NAMES = ['softmax']\nNAMES.append(input())\nfor n in NAMES:\n    globals()[n]": ("cannot tell", False),
    "NAMES = ['softmax']\nNAMES[0] = input()\nfor n in NAMES:\n    globals()[n]": ("cannot tell", False),
    "for n in ['softmax']:\n    globals()[n]\nmatch 1:\n    case x as n:\n        pass": ("cannot tell", False),
    "import mha_course\nvars(mha_course)['grading']": ("vars", False),
}


@pytest.mark.parametrize("source", list(NAMESPACE_FINDINGS))
def test_namespace_reads_that_can_reach_further_and_writes_are_findings(source):
    expected, likely = NAMESPACE_FINDINGS[source]
    found = [f for f in _tampering(source) if expected in f.name]
    assert found, (source, _tampering(source))
    assert found[0].likely is likely, found


def test_a_finding_carries_its_cell_line_and_source():
    findings = _tampering("x = 1", "import os\n\nos.write(5, b'x')  # the reply channel")
    (f,) = [f for f in findings if f.name == "os.write"]
    assert (f.cell, f.line, f.source, f.likely) == (2, 3, "os.write(5, b'x')  # the reply channel", True)


# Honest code can make these (review); only an attack makes those (likely tampering).
LABELS = {
    "import importlib\nimportlib.reload(m)": ("importlib.reload", False),
    "import pickle\npickle.dump(r, f)": ("pickle.dump", False),
    "import torch\ntorch.load('w.pt')": ("torch.load", False),
    "x = eval('1 + 1')": ("eval", False),
    "breakpoint()": ("breakpoint", False),
    "import torch.nn.functional as F\ndef act(x, name):\n    return getattr(F, name)(x)": ("computed", False),
    "for p in paths:\n    open(p)": ("not written as a path", False),
    "print(open('/proc/meminfo').read())": ("the string '/proc/'", False),
    "import sys\nprint('torch' in sys.modules)": ("sys.modules", False),
    "import gc\nn = len(gc.get_objects())": ("gc.get_objects", False),
    "import subprocess\nsubprocess.run(['nvidia-smi'])": ("subprocess", False),
    "import torch\ntorch._dynamo.reset()": ("torch._dynamo", False),
    "import os\nos.write(5, b'x')": ("os.write", True),
    "open(3)": ("file descriptor number", True),
    "import socket\nsocket.socket(fileno=3)": ("fileno=", True),
    "import sys\nsys.modules['mha_course.grading.engine.scoring'].judge = print": ("sys.modules (written)", True),
    "import builtins\nbuiltins.len = len": ("builtins.len (written)", True),
    "import mha_course.grading.learner.selfcheck as sc\nsc.GRADING = False": ("GRADING (written)", True),
    "def f(): pass\nf.__globals__['x'] = 1": (".__globals__", True),
    "import sys\nsys._getframe(1).f_back": ("._getframe", True),
    "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame": (".tb_frame", True),
    "object.__subclasses__()": (".__subclasses__", True),
    "import os\ngetattr(os, 'ki' + 'll')(1, 9)": ("built from pieces", True),
    "import ctypes": ("ctypes", True),
    "open('/dev/fd/3')": ("the string '/dev/fd'", True),
    # round 5: text a library runs as code, libraries the runtime calls after the target, TorchScript
    "s = 'import sys\\nf = sys._getframe()'": ("._getframe", True),  # a string that is Python is read as code
    "import numpy as np\nnp.save = print": ("numpy.save (a library function replaced)", True),
    "import json\nsetattr(json, 'dumps', repr)": ("json.dumps (a library function replaced)", True),
    "import torch\ntype(torch.ones(1)).numpy = print": ("a class changed through an instance", True),
    "import torch\ntorch.backends.cudnn.deterministic = True": ("(a library attribute written)", False),
    "import helper_i_wrote": ("import of 'helper_i_wrote'", False),
    "import sys\nsys.path.append('..')": ("sys.path", False),
    "import yaml\nyaml.unsafe_load(text)": ("yaml.unsafe_load", False),
    "import numpy as np\nnp.load('a.npy', allow_pickle=True)": ("allow_pickle=True", False),
    "import inspect\ninspect.signature(f, eval_str=True)": ("eval_str=True", False),
    "import sympy\nsympy.sympify(text)": ("sympy", False),
    "import logging.config\nlogging.config.dictConfig(c)": ("logging.config", False),
    "import unittest.mock\nunittest.mock.patch(name, f)": ("unittest.mock", False),
    "import torch\ncu = torch.jit.CompilationUnit(text)": ("torch.jit.CompilationUnit", False),
    "import torch\n@torch.jit.script\ndef h(x):\n    return x.softmax(0)": (".softmax in TorchScript", False),
    "x = 'mha_course.grading.inside.runner'": ("the string 'mha_course.grading'", False),
}

#: Honest code near the round-5 rules: no finding at all.
NOT_FINDINGS = {
    "a helper module written as a literal and imported": (
        "with open('helpers.py', 'w') as f:\n    f.write('def twice(x):\\n    return 2 * x\\n')\nimport helpers"
    ),
    "a string that is prose": "print('softmax(x) = exp(x) / sum(exp(x)), see sys.argv')",
    "an attribute of one's own object": "class A:\n    pass\na = A()\na.save = print",
    "a TorchScript helper without a forbidden name": (
        "import torch\n@torch.jit.script\ndef h(x):\n    return x.exp() / x.exp().sum()"
    ),
    "a subscript of a library's settings": "import matplotlib.pyplot as plt\nplt.rcParams['figure.dpi'] = 100",
}


@pytest.mark.parametrize("name", list(NOT_FINDINGS))
def test_honest_code_near_the_round_5_rules_is_not_a_finding(name):
    assert _tampering(NOT_FINDINGS[name]) == []


@pytest.mark.parametrize("source", list(LABELS))
def test_each_finding_is_labelled_as_the_decision_table_says(source):
    expected, likely = LABELS[source]
    found = [f for f in _tampering(source) if expected in f.name]
    assert found, (source, [f.name for f in _tampering(source)])
    assert found[0].likely is likely and likely_tampering(found[0].name) is likely, found


def test_the_guide_has_the_decision_table():
    guide = (ROOT / "docs" / "INSTRUCTORS.md").read_text()
    section = guide.split("### What a scan finding does", 1)[1].split("\n## ", 1)[0]
    for words in ("likely tampering", "--on-tamper zero", "review,accept", "globals()[name]", "builtins.len ="):
        assert words in section, words


# --- the outputs of a flagged result ---------------------------------------------------------------------

FLAG = ReviewFlag("builtins.len (written)", 4, 2, "builtins.len = fake_len", True)


def _result(name: str = "Bob_Ray", sid: str = "1002", flags=(FLAG,), **fields) -> SubmissionResult:
    tests = [
        Verdict("fake_add", "Add two arrays", "a + b", 4, 4, "passed", "passed", False),
        Verdict("fake_double", "Double a tensor", "2 x", 2, 2, "passed", "passed", False),
    ]
    return SubmissionResult(
        path=f"/class/{name}/zz_fake.ipynb",
        assignment="zz_fake",
        title="Fake",
        version=3,
        tests=tests,
        max_points=6.0,
        key=f"{name}/zz_fake.ipynb",
        student=name,
        student_id=sid,
        student_name=name.replace("_", " "),
        flags=list(flags),
        flag_count=len(flags),
        **fields,
    )


def test_review_keeps_the_tests_score_and_every_output_shows_the_flag():
    r = _result()
    assert (r.score, r.review_state, r.withheld) == (6, "to review (likely tampering)", False)
    columns, rows = gradebook_rows([r, _result("Ada_Lo", "1001", flags=())])
    assert {"review", "on_tamper"} <= set(columns)
    flagged, clean_row = rows
    assert flagged["review"].startswith("to review (likely tampering): builtins.len (written) (cell 4, line 2")
    assert "builtins.len = fake_len" in flagged["review"] and flagged["final"] == "6"
    assert flagged["on_tamper"] == clean_row["on_tamper"] == "review" and clean_row["review"] == ""

    data = gradescope(r)
    assert data["score"] == 6 and validate_results(data) == []
    assert (
        "Your notebook uses builtins.len (written) (cell 4, line 2); the instructor will review it." in data["output"]
    )
    review = data["extra_data"]["review"]
    assert data["extra_data"]["on_tamper"] == "review" and review["state"] == "to review (likely tampering)"
    assert review["flags"] == [FLAG.as_dict()] and review["flags"][0]["source"] == "builtins.len = fake_len"

    feedback = feedback_markdown(r)
    assert "## For review" in feedback and "the instructor will review it" in feedback
    assert "(cell 4, line 2)" in feedback and "6 / 6 points" in feedback
    assert not any(word in feedback.lower() for word in ACCUSING), feedback
    comment = summary(r)
    assert "the instructor will review it" in comment and not any(w in comment.lower() for w in ACCUSING)


def test_the_report_lists_what_to_review_at_the_top_with_the_evidence():
    results = [_result("Ada_Lo", "1001", flags=()), _result()]
    md = markdown_report(results)
    top = md.split("\n## ", 2)
    assert top[1].startswith("To review (1 open, 0 resolved)"), md[:600]
    assert "Bob Ray" in top[1] and "likely tampering" in top[1] and "`builtins.len = fake_len`" in top[1]
    assert "cell 4, line 2" in top[1] and "1002,review,accept" in top[1]
    assert "--on-tamper review" in md.splitlines()[2]  # the header states the policy, as it states the tier
    page = html_report(results)
    assert page.index("To review") < page.index("<section id='zz_fake'>") and "builtins.len = fake_len" in page
    anonymous = markdown_report(results, anonymise=True)
    assert "1 submission(s) flagged" in anonymous and "fake_len" not in anonymous and "Bob" not in anonymous


def test_a_flag_with_hostile_source_stays_text_in_every_output():
    from mha_course.grading.safe_text import clean_result, code_span

    hostile = ReviewFlag("eval", 1, 1, "=eval('<script>x</script>')\x1b]52;c;aGk=\x07", False)
    r = _result(flags=(hostile,))
    clean_result(r)
    assert "\x1b" not in r.flags[0].source and "<script>" not in html_report([r])
    md = markdown_report([r])  # in a code span, HTML shows as text
    assert code_span(r.flags[0].source) in md and "<script>" not in md.replace(code_span(r.flags[0].source), "")
    assert "<script>" not in feedback_markdown(r)
    assert not gradebook_rows([r])[1][0]["review"].startswith("=")


def test_zero_withholds_the_score_until_resolved_and_says_so():
    r = _result(on_tamper="zero")
    assert (r.withheld, r.score, r.raw_score) == (True, 0, 6)
    data = gradescope(r)
    assert data["score"] == 0 and data["extra_data"]["on_tamper"] == "zero"
    assert "Until then this submission scores 0" in data["output"]
    assert "scored 0 until reviewed (--on-tamper zero)" in markdown_report([r])
    assert gradebook_rows([r])[1][0]["on_tamper"] == "zero"


# --- overrides resolve a flag --------------------------------------------------------------------------


def test_an_accepting_review_row_resolves_the_flag_and_keeps_the_score():
    open_ = _result(on_tamper="zero")
    apply_overrides([open_], [Override("1002", "review", "accept", None, "len = len changes nothing")])
    assert open_.review == "accept (len = len changes nothing)" and open_.score == 6 and not open_.withheld
    assert open_.review_state == "reviewed: accept (len = len changes nothing)"
    assert "review: accept (len = len changes nothing)" in open_.adjustment_log
    assert "the instructor has reviewed it" in gradescope(open_)["output"]
    assert "reviewed: accept" in gradebook_rows([open_])[1][0]["review"]
    assert "To review (0 open, 1 resolved)" in markdown_report([open_])


def test_a_review_row_with_points_sets_the_total_and_resolves_the_flag():
    r = _result()
    apply_overrides(
        [r],
        [
            Override("1002", "*", "add", 1.0, "bonus"),
            Override("1002", "review", "set", 0.0, "rebinds len for the grader"),
        ],
    )
    # the review decision comes before the total's rows: 0, then +1
    assert r.review.startswith("set 0") and r.score == 1, (r.review, r.adjustment_log)


def test_a_review_row_for_a_submission_without_a_flag_is_noted_not_applied():
    r = _result(flags=())
    apply_overrides([r], [Override("1002", "review", "set", 0.0, "old decision")])
    assert r.score == 6 and r.review == "" and any("has no review flag; not applied" in n for n in r.notes)


@pytest.mark.parametrize(
    "row, message",
    [
        ("1002,review,accept,", "needs a reason"),
        ("1002,fake_add,accept,ok", "'accept' is for exercise 'review' only"),
        ("1002,review,waive,ok", "exercise 'review' takes 'accept' or points"),
    ],
)
def test_review_rows_that_do_not_say_what_they_mean_are_refused(tmp_path, row, message):
    path = tmp_path / "overrides.csv"
    path.write_text("student,exercise,points,reason\n" + row + "\n")
    with pytest.raises(ValueError, match=message):
        read_overrides(path)


def test_the_policy_is_named_in_words():
    assert (
        review_flags.policy_line("review")
        == "scan findings: flagged for review, the tests' score kept (--on-tamper review)"
    )
    assert (
        review_flags.policy_line("zero")
        == "scan findings: flagged for review, scored 0 until reviewed (--on-tamper zero)"
    )


# --- end to end, in the sandbox --------------------------------------------------------------------------

REBIND = "import builtins\nbuiltins.len = len  # changes nothing, but reaches the interpreter"
SELF_CHECK = (
    "from mha_course.grading.learner.selfcheck import check\n"
    'for name in ["add_arrays", "double"]:\n    check(name, globals()[name])'
)


def _class(root: Path, students: dict[str, list[str]]) -> Path:
    folder = root / "subs"
    for who, cells in students.items():
        (folder / who).mkdir(parents=True)
        write_submission(folder / who / "zz_fake.ipynb", *cells)
    roster = root / "roster.csv"
    roster.write_text(
        "Identifier,Full name,Username,Grade,Feedback comments\n"
        "1001,Ada Lo,ada,,\n1002,Bob Ray,bob,,\n1003,Cy Dee,cy,,\n",
        encoding="utf-8",
    )
    return folder


def _run(root: Path, folder: Path, *extra: str) -> tuple[int, dict]:
    from mha_course.grading.grade import main

    out = root / "out"
    with registry.registered("grading_fake"):
        status = main(
            [
                str(folder),
                "--roster",
                str(root / "roster.csv"),
                "--csv",
                str(out / "grades.csv"),
                "--report",
                str(out / "report.html"),
                "--feedback-dir",
                str(out / "feedback"),
                "--results-dir",
                str(out / "each"),
                "--grades-out",
                str(out / "moodle.csv"),
                "--quiet",
                "--workers",
                "2",
                "--seed",
                "5",
                *extra,
            ]
        )
    with open(out / "grades.csv", newline="") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    each = {d["extra_data"]["student"]: d for d in (json.loads(p.read_text()) for p in (out / "each").iterdir())}
    feedback = {p.name.split("__")[0]: p.read_text() for p in (out / "feedback").iterdir()}
    with open(out / "moodle.csv", newline="") as handle:
        moodle = {r["Username"]: r for r in csv.DictReader(handle)}
    return status, {
        "rows": rows,
        "each": each,
        "feedback": feedback,
        "report": (out / "report.md").read_text(),
        "moodle": moodle,
    }


@pytest.mark.slow
def test_review_an_honest_loop_scores_full_and_a_rebinding_is_flagged_everywhere(tmp_path, capsys):
    require_sandbox()
    folder = _class(tmp_path, {"ada": [GOOD_ADD, GOOD_DOUBLE, SELF_CHECK], "bob": [GOOD_ADD, GOOD_DOUBLE, REBIND]})
    status, out = _run(tmp_path, folder)
    assert status == 0
    ada, bob = out["rows"]["ada"], out["rows"]["bob"]
    assert (ada["final"], ada["review"], ada["on_tamper"]) == ("6", "", "review"), ada
    assert out["each"]["ada"]["score"] == 6 and out["each"]["ada"]["extra_data"]["review"]["flags"] == []
    # the flag does not cost the points, and it is never silent
    assert bob["final"] == "6" and bob["review"].startswith("to review (likely tampering): builtins.len (written)")
    assert "cell 4, line 2: builtins.len = len" in bob["review"], bob["review"]
    flags = out["each"]["bob"]["extra_data"]["review"]["flags"]
    assert flags[0] == {
        "finding": "builtins.len (written)",
        "cell": 4,
        "line": 2,
        "source": "builtins.len = len  # changes nothing, but reaches the interpreter",
        "label": "likely tampering",
    }
    assert "the instructor will review it" in out["each"]["bob"]["output"]
    bob_feedback = next(text for name, text in out["feedback"].items() if name.startswith("bob"))
    assert "Your notebook uses builtins.len (written) (cell 4, line 2), builtins (cell 4, line 1); the instructor " in (
        bob_feedback
    )
    assert "## For review" not in next(text for name, text in out["feedback"].items() if name.startswith("ada"))
    to_review = out["report"].split("\n## ", 2)[1]
    assert to_review.startswith("To review (1 open") and "Bob Ray" in to_review and "Ada" not in to_review
    assert (
        out["moodle"]["bob"]["Grade"] == "6"
        and "the instructor will review it" in out["moodle"]["bob"]["Feedback comments"]
    )
    assert "1 flagged for review" in capsys.readouterr().out  # the export's note names the flagged


@pytest.mark.slow
def test_zero_scores_an_open_flag_0_says_so_and_an_override_resolves_it(tmp_path):
    require_sandbox()
    folder = _class(tmp_path, {"bob": [GOOD_ADD, GOOD_DOUBLE, REBIND], "cy": [GOOD_ADD, GOOD_DOUBLE, REBIND]})
    overrides = tmp_path / "overrides.csv"
    overrides.write_text("student,exercise,points,reason\ncy,review,accept,len = len changes nothing\n")
    status, out = _run(tmp_path, folder, "--on-tamper", "zero", "--overrides", str(overrides))
    assert status == 0
    bob, cy = out["rows"]["bob"], out["rows"]["cy"]
    assert (bob["raw"], bob["final"], bob["on_tamper"]) == ("6", "0", "zero"), bob
    assert bob["review"].startswith("to review (likely tampering)")
    assert out["each"]["bob"]["score"] == 0 and "Until then this submission scores 0" in out["each"]["bob"]["output"]
    assert out["each"]["bob"]["extra_data"]["on_tamper"] == "zero" and out["moodle"]["bob"]["Grade"] == "0"
    assert "scored 0 until reviewed (--on-tamper zero)" in out["report"]
    assert cy["final"] == "6" and cy["review"].startswith("reviewed: accept (len = len changes nothing)"), cy
    assert out["each"]["cy"]["score"] == 6 and out["moodle"]["cy"]["Grade"] == "6"


@pytest.mark.slow
def test_the_a02_solution_with_a_self_check_loop_gets_full_marks_and_no_flag(tmp_path):
    """The measured case: this notebook scored 0 when any globals() was tampering."""
    from mha_course.grading.engine import pipeline
    from mha_course.grading.engine.process import Isolator

    require_sandbox()
    nb = json.loads((ROOT / "solutions" / "a02_softmax.ipynb").read_text())
    loop = 'for name in ["softmax_np", "softmax"]:\n    check(name, globals()[name])\n'
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": loop})
    path = tmp_path / "a02_softmax.ipynb"
    path.write_text(json.dumps(nb))
    isolator = Isolator(min_isolation="A")
    try:
        result = pipeline.grade_notebook(path, isolator=isolator, seed=3)
    finally:
        isolator.close()
    assert result.error is None and result.flags == [] and result.review_state == ""
    assert result.score == result.max_score > 0, [(t.name, t.output) for t in result.tests if not t.score]
