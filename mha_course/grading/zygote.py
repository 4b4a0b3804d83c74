"""The zygote: a clean process with torch already imported that forks one child per submission.

Importing torch takes seconds; forking a process that already has it takes milliseconds. The
grader starts one zygote (``python -m mha_course.grading.zygote``) and asks it, one JSON line on
stdin at a time, to fork::

    -> {"connect": "/tmp/mhag-xyz/child.sock"}
    <- {"pid": 12345}

The child connects to that Unix socket (where the grader is listening) and becomes the
submission process (:func:`.sandbox.serve`). The zygote itself never runs learner code and never
imports ``mha_course``'s reference implementations -- only the grading package and the exercise
modules (whose references are imported lazily) -- so neither do its children. Children are reaped
automatically (SIGCHLD ignored); the grader detects a dead child by its closed socket. The zygote
exits when its stdin closes. It runs no torch operation before forking (a started OpenMP pool does
not survive fork), and it is not a security boundary by itself: see :mod:`.sandbox`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def _preload() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")  # this process and its children only
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    import torch.nn.functional  # noqa: F401

    try:
        import matplotlib
        import matplotlib.pyplot  # noqa: F401

        matplotlib.use("Agg")
    except Exception:
        pass
    try:
        import IPython.display  # noqa: F401
    except Exception:
        pass
    from . import guard, registry, sandbox, selfcheck, wire  # noqa: F401

    registry.assignments()  # imports every exercise module (their call functions)


def main() -> None:
    """Preload, say "ready", then fork one submission process per request line."""
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            path = str(request["connect"])
        except (ValueError, KeyError, TypeError):
            out.write(json.dumps({"error": "bad request"}) + "\n")
            out.flush()
            continue
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                from .sandbox import serve

                serve(sock)
            except BaseException:
                code = 1
                debug = os.environ.get("MHA_COURSE_GRADER_DEBUG")  # a file for the child's traceback
                if debug:
                    import traceback

                    with open(debug, "a") as log:
                        traceback.print_exc(file=log)
            finally:
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
