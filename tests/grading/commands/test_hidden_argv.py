"""The grader's arguments never stay on its command line, which every user of the machine reads (/proc/PID/cmdline).

The attack on the real grader is in tests/grading/walls/test_confined.py (a submission hunts for the class's seed and
roster in every process); these check the parts: the restart with the arguments in the environment, the
arguments read back, and arguments from a file (``@FILE``), which is how the Gradescope autograder passes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha_course.grading import grade, gradescope, hidden_argv

ROOT = Path(__file__).resolve().parents[3]

SHOW = (
    "import json, os, sys\n"
    "from mha_course.grading.hidden_argv import hide_command_line, taken\n"
    "hide_command_line()\n"
    "cmdline = open('/proc/self/cmdline', 'rb').read().split(b'\\0')[:-1]\n"
    "print(json.dumps({'cmdline': [c.decode() for c in cmdline], 'args': taken(), "
    "'env': hidden_argv_env in os.environ}))\n"
).replace("hidden_argv_env", repr(hidden_argv.ENV))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/cmdline")
def test_the_arguments_leave_the_command_line_and_come_back_from_the_environment():
    args = ["subs/", "--seed", "1357913579", "--roster", "/somewhere/roster-secret.csv"]
    done = subprocess.run([sys.executable, "-c", SHOW, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    seen = json.loads(done.stdout)
    assert seen["args"] == args, done.stderr
    assert not [a for a in args if a in seen["cmdline"]], seen["cmdline"]
    assert seen["cmdline"][1:] == ["-c", SHOW]  # the interpreter's own options stay, the arguments are gone
    assert seen["env"] is False  # read back and removed: nothing the grader starts inherits it


@pytest.mark.slow
def test_nothing_is_done_without_arguments():
    done = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert json.loads(done.stdout)["args"] == [], done.stderr


def test_a_value_that_is_no_list_of_strings_is_refused(monkeypatch):
    monkeypatch.setenv(hidden_argv.ENV, '{"seed": 3}')
    with pytest.raises(ValueError, match="JSON list of strings"):
        hidden_argv.taken()
    monkeypatch.setenv(hidden_argv.ENV, '["--seed", "3"]')
    assert hidden_argv.taken() == ["--seed", "3"]
    assert hidden_argv.ENV not in os.environ


def test_the_grader_reads_its_arguments_from_a_file(tmp_path):
    args_file = tmp_path / "grading.args"
    args_file.write_text("subs/\n--seed\n2468\n--roster\nroster.csv\n")
    args = grade._parser().parse_args([f"@{args_file}", "--quiet"])
    assert args.submissions == ["subs/"] and args.seed == 2468 and args.roster == Path("roster.csv") and args.quiet


def test_the_gradescope_script_passes_no_argument_on_a_command_line():
    script = gradescope.RUN_AUTOGRADER
    command = [line for line in script.splitlines() if "-m mha_course." in line]
    assert command == ['"$ROOT/venv/bin/python" -m mha_course.grade "@$ARGS"']
    assert 'ARGS="$(mktemp)"' in script and "printf '%s\\n'" in script and 'exit "$status"' in script
