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
automatically (SIGCHLD ignored); the grader detects a dead child by its closed socket. It runs no
torch operation before forking (a started OpenMP pool does not survive fork), and it is not a
security boundary by itself: see :mod:`.sandbox`.

No learner process outlives grading. On Linux the zygote is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``): a process a submission started and detached (``setsid``, a double
fork) is re-parented to the zygote when its parent dies, not to init. Between requests (every
0.25 s) the zygote kills every child of its own that is not a submission process it forked; when
its stdin closes it kills all of them, waits until none is left, then exits -- and the grader
writes results.json only after that.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time


def _preload() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")  # this process and its children only
    # Triton kernels are graded in Triton's interpreter, GPU or not: the same results everywhere,
    # and a GPU compile would start ptxas, a new process, which the sandbox refuses.
    os.environ["TRITON_INTERPRET"] = "1"
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
    import gc

    gc.collect()
    gc.freeze()  # the preloaded heap is never collected again: no 100 ms full collections in each child


def _become_subreaper() -> None:
    """Orphans of our descendants become our children (Linux); elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _children() -> list[int]:
    """Pids of this process's children, from /proc (empty where there is none)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _sweep(sessions: set[int]) -> None:
    """Kill our children that are not submission processes we forked (escaped descendants)."""
    children = _children()
    sessions.intersection_update(children)
    for pid in children:
        if pid not in sessions:
            _kill(pid)


def _kill_all(timeout: float = 5.0) -> None:
    """Kill every child (and what gets re-parented to us meanwhile) until none is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = _children()
        if not children:
            return
        for pid in children:
            _kill(pid)
        time.sleep(0.02)


def main() -> None:
    """Preload, say "ready", then fork one submission process per request line; sweep between requests."""
    _preload()
    _become_subreaper()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    sessions: set[int] = set()
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.25)
        if not ready:
            _sweep(sessions)
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                request = json.loads(line)
                path = str(request["connect"])
            except (ValueError, KeyError, TypeError):
                out.write(json.dumps({"error": "bad request"}) + "\n")
                out.flush()
                continue
            pid = os.fork()
            if pid == 0:
                _child(path)
            sessions.add(pid)
            out.write(json.dumps({"pid": pid}) + "\n")
            out.flush()
        _sweep(sessions)
    _kill_all()


def _child(path: str) -> None:
    """The forked child: connect to the grader and serve (never returns)."""
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


if __name__ == "__main__":
    main()
