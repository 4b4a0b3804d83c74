"""The sandbox's broker: the only process that talks to the grader, and it never runs learner code.

Nothing inside the process that ran a notebook's cells can be trusted afterwards: a cell shares its
address space with the runtime, so it can read any secret there, patch any function, open the
grader's socket by its number, or leave a thread behind that answers the grader's requests while the
runtime stays blocked in the cell. So the runtime splits before any learner code runs::

    grader  <-- socket -->  broker (pid 1 of the sandbox)  <-- socketpair -->  notebook process
                            never runs learner code,                           runs the cells, then
                            not dumpable (no ptrace, no                        each case it is given
                            /proc/1/mem or /proc/1/fd)

The broker alone holds the grader's socket (the notebook process closes it first thing), and it
writes every frame the grader reads: the ``cell`` / ``cell_done`` / ``ready`` ordering is the
broker's, since it hands the notebook one cell at a time. Around every case it checks, from outside
through ``/proc``, that the notebook process runs exactly one thread and that no other process of the
submission is alive (the sandbox has its own PID namespace, so ``/proc`` lists the submission's
processes only); otherwise the case is not run and the grader says why (:data:`BACKGROUND`). A
thread started in a cell can therefore neither answer a case nor do a case's forbidden work (autograd
in a pool's thread): it must be gone before a case runs, and threads a case itself starts are watched
by the tripwire (:mod:`.guard`).

What the broker cannot see is which code the notebook's one thread runs: a cell that never returns
and itself answers on the channel looks like the runtime. That is no more than a target that
switches the tripwire off can do, so the tripwire stays what explains a forbidden call to an honest
learner, beside the static scan (:mod:`.scan`), whose findings come from outside the sandbox.

Outside bubblewrap (``--unsafe-no-isolation``) the broker is a plain parent process: it becomes the
child subreaper, so whatever the notebook starts stays its descendant and is counted the same way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any

from . import wire

BACKGROUND = (
    "not graded: {what} still running when this test was to run (started by a cell: a thread pool, "
    "a timer, a process...). The grader runs each test with nothing else of your notebook running; "
    "stop them before the notebook ends (executor.shutdown(), thread.join(), process.join())"
)

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: the fields after its last ")"
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def other_processes(me: int, child: int) -> list[int]:
    """Pids of processes of the submission other than the broker and the notebook process.

    In the sandbox's own PID namespace (the broker is pid 1) that is every pid ``/proc`` lists; outside
    one, the broker's descendants (it is their subreaper, so an orphan comes back to it).
    """
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    if me == 1:
        return [p for p in pids if p not in (me, child)]
    parents = {p: _parent_of(p) for p in pids}
    mine, found = {me}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                found = True
    return sorted(mine - {me, child})


def thread_count(pid: int) -> int:
    """Live threads of process ``pid`` (0 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def background(me: int, child: int) -> str | None:
    """None when the notebook process runs alone on one thread, else a sentence for the learner."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap what ended (zombies are still listed)
            pass
    parts = []
    threads = thread_count(child)
    if threads > 1:
        parts.append(f"{threads - 1} other thread{'s' if threads > 2 else ''} of your notebook")
    others = other_processes(me, child)
    if others:
        parts.append(f"{len(others)} other process{'es' if len(others) > 1 else ''}")
    if not parts:
        return None
    plural = len(parts) > 1 or threads > 2 or len(others) > 1
    return BACKGROUND.format(what=" and ".join(parts) + (" were" if plural else " was"))


def split(grader: socket.socket) -> tuple[socket.socket | None, socket.socket]:
    """Fork the notebook process; returns (None, channel) in it and (grader, channel) in the broker.

    Called before any learner code (and before torch is imported, so the broker stays small). The
    notebook process loses the grader's socket at once; the channel is a socketpair, which cannot be
    reopened through ``/proc/PID/fd`` as a pipe could.
    """
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        grader.close()
        mine.close()
        return None, theirs
    theirs.close()
    _prctl(_PR_SET_DUMPABLE, 0)
    with contextlib.suppress(OSError):
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the grader's stderr pipe is bwrap's; the broker prints nothing
        os.dup2(devnull, fd)
    os.close(devnull)
    serve(grader, mine, pid)
    os._exit(0)


def serve(grader: socket.socket, child: socket.socket, pid: int) -> None:
    """Relay one submission: the cells one at a time, then each case, checked before and after."""
    me = os.getpid()
    config, _ = wire.recv(grader)
    cells = [(int(i), str(s)) for i, s in config.get("cells", [])]
    skip = {int(i) for i in config.get("skip", [])}
    wire.send(child, {k: v for k, v in config.items() if k != "cells"})
    for index, source in cells:
        if index in skip:
            continue
        wire.send(grader, {"event": "cell", "index": index})
        wire.send(child, {"event": "cell", "index": index, "source": source})
        done, _ = wire.recv(child, max_blob=0)
        error = done.get("error")
        wire.send(grader, {"event": "cell_done", "index": index, "error": None if error is None else str(error)[:400]})
    wire.send(grader, {"event": "ready"})
    wait = 1.0
    while True:
        try:
            request, blob = wire.recv(grader)
        except (EOFError, OSError, ValueError):
            return
        if request.get("event") != "case":
            return
        reply, out = _case(child, pid, me, request, blob, wait)
        wire.send(grader, reply, out)
        wait = 0.0 if reply.get("kind") == "background" else 1.0  # no second wait for what did not end


def _settled(me: int, child: int, wait: float = 1.0) -> str | None:
    """:func:`background`, given a moment to clear (a thread or process that is just ending)."""
    why = background(me, child)
    deadline = time.monotonic() + wait
    while why is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        why = background(me, child)
    return why


def _case(child: socket.socket, pid: int, me: int, request: dict, blob: bytes, wait: float) -> tuple[dict, bytes]:
    why = _settled(me, pid, wait)
    if why is None:
        wire.send(child, request, blob)
        reply, out = wire.recv(child)
        why = _settled(me, pid, wait)
        if why is None:
            return _plain(reply), out
    return {"ok": False, "kind": "background", "error": why, "forbidden": []}, b""


def _plain(reply: Any) -> dict:
    """The notebook's reply with only the fields the grader reads (it judges their values itself)."""
    keys = ("ok", "kind", "error", "structure", "forbidden", "ops")
    return {k: reply[k] for k in keys if k in reply}
