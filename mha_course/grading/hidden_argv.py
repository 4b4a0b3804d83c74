"""The grader's arguments leave its command line: no other user reads the class's seed or roster there.

Every process's command line (``/proc/PID/cmdline``) is readable by every user of the machine, a
tier B sandbox's uid included (it has no PID namespace of its own: Docker refuses one). The
environment (``/proc/PID/environ``) is not: the kernel shows it only to the same uid (and root), so
a root grader's environment is closed to the sandbox. :func:`hide_command_line` therefore starts
the grader again (``execve``: the same process, a new command line) with its arguments moved into
the environment variable :data:`ENV`, as a JSON list; :func:`taken` reads them back and removes
the variable, so no process the grader starts inherits it::

    python -m mha_course.grade CLASS/ --seed 1234 --roster r.csv   # what was typed
    python -m mha_course.grade                                     # /proc/PID/cmdline, after

It runs before the grader's imports and before any sandbox of this grader exists. A process that
started the grader (``timeout``, ``sudo``, ``make``) keeps its own command line: pass the
arguments in a file there (``@FILE``, one argument a line, mode 0600), as Gradescope's
``run_autograder`` does.
"""

from __future__ import annotations

import json
import os
import sys

ENV = "MHA_COURSE_GRADE_ARGS"


def hide_command_line() -> None:
    """Execute this program again with ``sys.argv[1:]`` in :data:`ENV` instead of on the command line.

    Does nothing when there is nothing to hide, when :data:`ENV` is already set (this is the second
    start), when the program was read from standard input (it could not be read twice), or when the
    interpreter's own command line does not end with the program's arguments (an embedding). Returns
    only when it did not execute; an ``execve`` that fails is reported on stderr and the run goes on.
    """
    args = sys.argv[1:]
    if not args or ENV in os.environ or sys.argv[0] == "-" or os.name != "posix":
        return
    original = list(getattr(sys, "orig_argv", []))
    if len(original) <= len(args) or original[-len(args) :] != args:
        return
    env = dict(os.environ, **{ENV: json.dumps(args)})
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, original[: -len(args)], env)
    except OSError as exc:
        print(f"note: the grader's arguments stay on its command line ({exc})", file=sys.stderr)


def taken() -> list[str]:
    """The arguments :func:`hide_command_line` moved into :data:`ENV` (then removed from it); [] if none.

    Raises ValueError when :data:`ENV` holds anything but a JSON list of strings.
    """
    text = os.environ.pop(ENV, None)
    if text is None:
        return []
    try:
        args = json.loads(text)
    except ValueError:
        args = None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{ENV} must be a JSON list of strings (the grader's arguments), got {text[:80]!r}")
    return args
