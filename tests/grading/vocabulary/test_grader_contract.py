"""The grader's typed contract: verdict and tier names as instructors' files and Gradescope read them,
the messages on the sandbox's channel, and the one tolerance policy of the diagnoses."""

from __future__ import annotations

import ast
import csv
import json
import socket
from pathlib import Path

import numpy as np
import pytest

from mha_course.grading import verdicts
from mha_course.grading.classroom import results
from mha_course.grading.classroom.feedback import CauseKind, root_causes
from mha_course.grading.inside import messages, wire
from mha_course.grading.inside import runner as sandbox
from mha_course.grading.learner import hints
from mha_course.grading.verdicts import STOPPED, Status, SubmissionResult
from mha_course.grading.walls import confined, tiers
from mha_course.grading.walls.bubblewrap import WallKind
from mha_course.testing import TOLERANCES


def test_verdict_names_are_the_strings_written_to_files():
    assert {s.value for s in Status} == {
        "passed",
        "failed",
        "not attempted",
        "timeout",
        "crashed",
        "memory",
        "forbidden",
        "not run",
    }
    assert STOPPED == {"timeout", "crashed", "memory"}
    assert [k.value for k in CauseKind] == ["mistake", "cell error", "not run"]
    # the documented tiers keep their names and letters (a new tier adds its own)
    letters = {t.name: t.label for t in tiers.registered()}
    assert letters.items() >= {"bubblewrap": "A", "landlock": "B", "uid": "C"}.items()
    assert [label for label in tiers.labels() if label in "ABC"] == ["A", "B", "C"]  # strongest first
    assert tiers.DEFAULT_MIN_ISOLATION == "B"
    assert {k.value for k in WallKind} == {"bubblewrap", "none"}


def _result() -> SubmissionResult:
    tests = [
        verdicts.TestResult("softmax_np", "Softmax", "rows sum to 1", 2.0, 2.0, Status.PASSED, "passed", False),
        verdicts.TestResult("softmax_np", "Softmax", "big inputs", 2.0, 0.0, Status.NOT_RUN, "not run: limits", True),
        verdicts.TestResult(
            "softmax_np", "Softmax", "axis", 1.0, 0.0, Status.NOT_ATTEMPTED, "not attempted yet", False
        ),
    ]
    walls = confined.LANDLOCK.walls(4, None, {"A": "no user namespaces"})
    return SubmissionResult("alice.ipynb", "a02_softmax", tests=tests, max_points=5.0, isolation=walls.as_dict())


def test_results_json_and_csv_carry_the_plain_strings(tmp_path):
    result = _result()
    data = json.loads(json.dumps(results.gradescope(result)))
    assert [t["status"] for t in data["tests"]] == ["passed", "failed", "failed"]
    assert [t["tags"][1] for t in data["tests"]] == ["passed", "not_run", "not_attempted"]
    isolation = json.loads(json.dumps(result.isolation))
    assert (isolation["kind"], isolation["tier"], isolation["refused"]) == (
        "landlock",
        "B",
        {"A": "no user namespaces"},
    )
    path = tmp_path / "grades.csv"
    results.write_csv(path, [result])
    with open(path, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["isolation"] == "landlock"
    assert "[NOT RUN]" in results.text_report(result)
    assert [c.kind for c in root_causes(result)] == ["not run", "not run"]


def test_messages_cross_the_socket_as_their_protocol_strings():
    request: messages.CaseRequest = {
        "event": messages.Event.CASE,
        "call": "mha_course.grading.calls.a02_softmax.softmax_np",
        "target": "softmax_np",
        "forbidden": [],
        "inputs": {"t": "scalar", "v": 1},
    }
    a, b = socket.socketpair()
    with a, b:
        wire.send(a, request, b"blob")
        got, blob = wire.recv(b)
    assert got == {**request, "event": "case"} and type(got["event"]) is str and blob == b"blob"
    assert [e.value for e in messages.Event] == ["cell", "cell_done", "ready", "case", "settle"]
    assert {k.value for k in messages.ReplyKind} == {"not_implemented", "missing", "error", "background"}
    # the fields the broker passes on, in its order
    assert messages.REPLY_FIELDS == ("ok", "kind", "error", "structure", "forbidden", "ops")


def test_both_sides_use_the_same_paths():
    assert messages.SCRATCH == sandbox.SCRATCH == "/scratch"
    # the sandbox's side spells no path or event of its own: it imports them from messages
    inside = Path(sandbox.__file__).parent
    spelled = {"/scratch", "mplcache", "cell", "cell_done", "ready", "case", "background", "MHA_COURSE_SCRATCH"}
    for name in ("runner.py", "broker.py"):
        tree = ast.parse((inside / name).read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        strings = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        }
        assert sorted(strings & spelled) == [] and not any(s.startswith("/run/grader") for s in strings), name
    assert messages.MPL_CACHE == "/run/grader/mplcache"
    assert "messages.py" in __import__("mha_course.grading.walls.view", fromlist=["RUNTIME_FILES"]).RUNTIME_FILES


def test_diagnoses_use_the_library_tolerances():
    import torch

    atol32, rtol32 = TOLERANCES[torch.float32]
    expected = np.linspace(1.0, 2.0, 5, dtype=np.float32)
    assert hints.close(expected + 2 * (atol32 + 2 * rtol32), expected) is False
    assert hints.close(expected + 0.1 * atol32, expected) is True
    assert hints.close(expected.astype(np.float16) + np.float16(1e-3), expected.astype(np.float16)) is True
    # integers are exact at any size: float32's rtol would let 20000 pass for 20001
    assert hints.close(np.array([20001]), np.array([20000])) is False
    assert hints.close(np.array([20000.0]), np.array([20000])) is True
    with pytest.raises(ValueError, match="no tolerance"):
        hints.close(np.ones(2, dtype=np.complex64), np.ones(2, dtype=np.complex64), dtype=torch.complex32)
