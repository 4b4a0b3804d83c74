"""The sandbox's broker: the only process that talks to the grader, and it never runs learner code.

Each case sees the notebook as it was after its cells ran, as in Jupyter, nbgrader or otter; each case
still runs in a process of its own, replies once and is killed::

    grader <-- socket --> broker (pid 1 of the sandbox) --fork--> notebook process: runs the cells, then
                          never runs learner code, not            forks one case process per case
                          dumpable (no ptrace, no /proc/1/mem)    --fork--> case process: the notebook's
                                                                            state, that one case, one reply

The broker imports torch and the provided modules (:func:`~mha_course.grading.inside.runner.preload`), forks the notebook
process and hands it one cell at a time (the ``cell`` / ``cell_done`` / ``ready`` frames are the
broker's). Once the cells are done it SIGKILLs every other process the cells started, and notes what
the writable folders hold. For each case request it makes a socketpair, hands one end to the notebook
process with a ``case`` frame, and sends the request on the other: the notebook process forks, and the
case process answers on that socket alone. Before a case nothing but the notebook process may be alive,
and after its reply the case process must run alone on one thread (:data:`BACKGROUND` otherwise); the
broker then kills it with everything it started, removes what it added to the writable folders and
writes back what it changed of the cells' files (:class:`_Files`), so no case reaches the next. Strict mode (``--strict-definitions``, an exam setting)
kills the notebook process after the cells instead, and the broker forks each case process itself:
it loads only the notebook's definitions (:mod:`.definitions`).

The comparison is made in the grader, outside the sandbox, on plain data: a case process can forge at
most its own reply. Learner code and the tripwire share that process, so what the tripwire sees is
advice; the static scan (:mod:`mha_course.grading.static.scan`), outside the sandbox, is its second
source. Outside a PID namespace (tier B, ``--unsafe-no-isolation``) the broker is the child subreaper,
so what the submission starts stays its descendant and is counted and killed the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from typing import Any

from . import wire
from .messages import MPL_CONFIG, REPLY_FIELDS, Event, ReplyKind

BACKGROUND = (
    "not graded: {what} still running when this test ended (started by your code while the test ran: a "
    "thread pool, a timer, a process...). The grader runs each test alone; stop them before your function "
    "returns (executor.shutdown(), thread.join(), process.join())"
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


def other_processes(me: int, child: int = -1, notebook: int = -1) -> list[int]:
    """Pids of processes of the submission other than the broker, ``child`` and ``notebook`` (-1: none).

    In the sandbox's own PID namespace (the broker is pid 1) that is every pid ``/proc`` lists; outside
    one, the broker's descendants (it is their subreaper, so an orphan comes back to it).
    """
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    if me == 1:
        return [p for p in pids if p not in (me, child, notebook)]
    parents = {p: _parent_of(p) for p in pids}
    mine, found = {me}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                found = True
    return sorted(mine - {me, child, notebook})


def thread_count(pid: int) -> int:
    """Live threads of process ``pid`` (0 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def background(me: int, child: int = -1, notebook: int = -1) -> str | None:
    """None when ``child`` (a case process; -1: none) runs alone on one thread, else a sentence for the learner.

    ``notebook``, the process whose state the case was forked from, is not counted (its threads are its own).
    """
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap what ended (zombies are still listed)
            pass
    parts = []
    threads = thread_count(child)
    if threads > 1:
        parts.append(f"{threads - 1} other thread{'s' if threads > 2 else ''}")
    others = other_processes(me, child, notebook)
    if others:
        parts.append(f"{len(others)} other process{'es' if len(others) > 1 else ''}")
    if not parts:
        return None
    plural = len(parts) > 1 or threads > 2 or len(others) > 1
    return BACKGROUND.format(what=" and ".join(parts) + (" were" if plural else " was"))


def _fork(grader: socket.socket, child_side: Any) -> tuple[int, socket.socket]:
    """Fork with a fresh socketpair: in the child, ``child_side(sock)`` runs (it never returns)."""
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            grader.close()  # first thing: the grader's socket is the broker's alone
            mine.close()
            child_side(theirs)
        finally:
            os._exit(1)
    theirs.close()
    return pid, mine


def end_others(me: int, notebook: int = -1) -> list[int]:
    """SIGKILL every other process of the submission but ``notebook`` and reap it; the pids still there after 5 s."""
    deadline = time.monotonic() + 5.0
    while True:
        others = other_processes(me, notebook=notebook)
        for pid in others:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in others:  # our children (the case process, the notebook process): wait for each to end
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
        _reap()
        others = other_processes(me, notebook=notebook)
        if not others or time.monotonic() > deadline:
            return others
        time.sleep(0.01)


def _reap() -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def empty(folder: str, keep: tuple[str, ...] = ()) -> None:
    """Remove what a cell left in a writable ``folder`` (its read-only or hidden corners too), but ``keep``.

    Depth first by changing into each folder, so no path grows past PATH_MAX and no descriptor is held
    per level: a tree thousands of levels deep goes too (a file left at its bottom would otherwise reach
    the next case). A read-only mount inside is left unvisited: nothing of the submission can be there,
    and a checkout under /tmp has its whole Python environment bound read-only into the sandbox's /tmp
    (walking it after every case cost a third of a second).
    """
    import stat

    home = os.getcwd()  # the broker's own folder (short), where its case processes start
    try:
        os.chdir(folder)
        pending = [[n for n in os.listdir(".") if n not in keep]]  # each entered folder's names still to remove
        entered: list[str] = []  # the folders changed into, innermost last
        while pending:
            if not pending[-1]:
                pending.pop()
                if entered:
                    os.chdir("..")
                    with contextlib.suppress(OSError):
                        os.rmdir(entered.pop())  # fails, and stays, where it holds a read-only mount
                continue
            name = pending[-1].pop()
            with contextlib.suppress(OSError):
                if not stat.S_ISDIR(os.lstat(name).st_mode):
                    os.unlink(name)
                elif not os.statvfs(name).f_flag & os.ST_RDONLY:
                    os.chmod(name, stat.S_IRWXU)  # a folder the cell made unreadable or unwritable
                    os.chdir(name)
                    entered.append(name)
                    pending.append(os.listdir("."))
    except OSError:
        pass
    finally:
        os.chdir(home)


def run(grader: socket.socket, scratch: str, sandbox: Any) -> None:
    """The broker's whole life: the cells in one process, each case in its own.

    ``sandbox`` is the runtime module (:mod:`mha_course.grading.inside.runner`, which calls this from its ``main``): its
    ``preload``, ``run_cells`` and ``answer`` are what the broker runs and what its children run.
    """
    _prctl(_PR_SET_DUMPABLE, 0)
    with contextlib.suppress(OSError):
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the grader's stderr pipe is bwrap's; the broker prints nothing
        os.dup2(devnull, fd)
    os.close(devnull)
    me = os.getpid()
    config, _ = wire.recv(grader)
    cells = [(int(i), str(s)) for i, s in config.get("cells", [])]
    skip = {int(i) for i in config.get("skip", [])}
    settings = {k: v for k, v in config.items() if k != "cells"}
    sandbox.preload(settings, cells)
    _FONT_LISTS.update(_font_lists(scratch))
    notebook_pid, notebook = _fork(grader, lambda sock: sandbox.run_cells(sock, settings, scratch))
    for index, source in cells:
        if index in skip:
            continue
        wire.send(grader, {"event": Event.CELL, "index": index})
        wire.send(notebook, {"event": Event.CELL, "index": index, "source": source})
        done, _ = wire.recv(notebook, max_blob=0)
        error = done.get("error")
        wire.send(
            grader, {"event": Event.CELL_DONE, "index": index, "error": None if error is None else str(error)[:400]}
        )
    if settings.get("strict"):  # definitions only: nothing that ran a cell outlives the cells
        notebook.close()
        _clean(me, scratch)
        notebook_pid, threads, kept = -1, 0, None
    else:  # the notebook's state stays, in its process and its files; every other process goes
        end_others(me, notebook_pid)
        threads = max(0, thread_count(notebook_pid) - 1)
        notebook_pid = _settle(me, notebook_pid, notebook)
        kept = _Files(scratch, me)
    wire.send(grader, {"event": Event.READY, "threads": threads})
    while True:
        try:
            request, blob = wire.recv(grader)
        except (EOFError, OSError, ValueError):
            return
        if request.get("event") != Event.CASE:
            return
        if kept is None:
            reply, out = _case(grader, me, request, blob, (cells, skip, settings, scratch), sandbox)
        else:
            reply, out = _case_from_notebook(grader, me, (notebook_pid, notebook), request, blob, kept)
        wire.send(grader, reply, out)


def _settle(me: int, notebook_pid: int, notebook: socket.socket) -> int:
    """The process the cases start from: the notebook process forks it and ends (its threads with it).

    Returns its pid; every other process of the submission is ended. Raises EOFError when the notebook
    process does not answer as the runtime does (the grader then sees the sandbox end).
    """
    wire.send(notebook, {"event": Event.SETTLE})
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(notebook_pid, 0)
    answer, _ = wire.recv(notebook, max_blob=0)
    pid = answer.get("pid")
    if answer.get("event") != Event.SETTLE or not isinstance(pid, int) or pid not in other_processes(me):
        raise EOFError("the notebook process did not settle")
    end_others(me, pid)
    return pid


class _Files:
    """The writable folders as the cells left them, put back after each case.

    A file a cell wrote stays for every case, as it stays in Jupyter: its bytes are kept (up to
    :data:`KEPT_BYTES` in all) and written back when a case changed or removed it; what a case added
    goes. A file past that budget that a case changed is removed. Read-only mounts inside (a checkout
    under /tmp) are not walked, as in :func:`empty`.
    """

    KEPT_BYTES = 16 * 2**20

    def __init__(self, scratch: str, me: int) -> None:
        import stat

        # bubblewrap's own /tmp; outside a PID namespace /tmp is the host's and TMPDIR is the scratch
        self.folders = [scratch, "/tmp"] if me == 1 else [scratch]
        self.kept = {folder: self._list(folder) for folder in self.folders}
        self.bytes: dict[str, bytes] = {}  # full path -> what the cells left in it
        budget = self.KEPT_BYTES
        for folder, entries in self.kept.items():
            for path, (mode, _, size, _) in entries.items():
                if stat.S_ISREG(mode) and size <= budget:
                    with contextlib.suppress(OSError), open(os.path.join(folder, path), "rb") as f:
                        self.bytes[os.path.join(folder, path)] = data = f.read(size + 1)
                        budget -= len(data)

    @staticmethod
    def _list(folder: str) -> dict[str, tuple[int, int, int, int]]:
        """Relative path -> (mode, inode, size, mtime) of everything under ``folder``."""
        found: dict[str, tuple[int, int, int, int]] = {}
        pending = [""]
        while pending and len(found) < 100_000:
            relative = pending.pop()
            try:
                entries = list(os.scandir(os.path.join(folder, relative) if relative else folder))
            except OSError:
                continue
            for entry in entries:
                path = os.path.join(relative, entry.name)
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                found[path] = (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)
                if entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        if not os.statvfs(entry.path).f_flag & os.ST_RDONLY:
                            pending.append(path)
        return found

    def restore(self) -> None:
        """Remove what a case added or changed (deepest first), then write back the cells' files it touched."""
        import shutil
        import stat

        for folder in self.folders:
            kept = self.kept[folder]
            for path, (mode, _, _, _) in kept.items():  # a folder a case made unreadable is walked again
                if stat.S_ISDIR(mode):
                    with contextlib.suppress(OSError):
                        os.chmod(os.path.join(folder, path), stat.S_IMODE(mode) | stat.S_IRWXU)
            now = self._list(folder)
            for path in sorted((p for p, st in now.items() if kept.get(p) != st), key=len, reverse=True):
                full = os.path.join(folder, path)
                with contextlib.suppress(OSError):
                    if not stat.S_ISDIR(now[path][0]):
                        os.unlink(full)
                    elif path not in kept:
                        os.chmod(full, stat.S_IRWXU)
                        shutil.rmtree(full, ignore_errors=True)
            for path in sorted(p for p, st in kept.items() if now.get(p) != st):  # shallowest first
                full = os.path.join(folder, path)
                mode, _, _, mtime = kept[path]
                with contextlib.suppress(OSError):
                    if stat.S_ISDIR(mode):
                        os.makedirs(full, exist_ok=True)
                    elif full in self.bytes:
                        with open(os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                            f.write(self.bytes[full])
                        os.chmod(full, stat.S_IMODE(mode))
                        os.utime(full, ns=(mtime, mtime))
                    st = os.lstat(full)
                    kept[path] = (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)  # written back: a new inode


def _case_from_notebook(
    grader: socket.socket, me: int, notebook: tuple[int, socket.socket], request: dict, blob: bytes, kept: _Files
) -> tuple[dict, bytes]:
    """One case in a process the notebook process forks from the state its cells left.

    The broker makes the case's socketpair and hands one end to the notebook process with the ``case``
    frame; the case process reads the request on it, replies once and is ended. Before the case nothing
    but the notebook process may be alive; after its reply the case process must run alone on one thread.
    """
    notebook_pid, channel_to_notebook = notebook
    why = background(me, notebook=notebook_pid)
    if why is not None:
        return {"ok": False, "kind": ReplyKind.BACKGROUND, "error": why, "forbidden": []}, b""
    mine, theirs = socket.socketpair()
    try:
        wire.send(channel_to_notebook, {"event": Event.CASE})
        socket.send_fds(channel_to_notebook, [b"F"], [theirs.fileno()])
        theirs.close()
        wire.send(mine, request, blob)
        reply, out = wire.recv(mine)  # EOFError when the case process died: the grader sees the broker end
        case_pid = next(iter(other_processes(me, notebook=notebook_pid)), -1)
        why = _settled(me, case_pid, notebook=notebook_pid)
    finally:
        theirs.close()
        mine.close()
        end_others(me, notebook_pid)
        kept.restore()
    if why is None:
        return _plain(reply), out
    return {"ok": False, "kind": ReplyKind.BACKGROUND, "error": why, "forbidden": []}, b""


def _font_lists(scratch: str) -> dict[str, bytes]:
    """The matplotlib font lists the grader put in the scratch, read before any learner code ran."""
    folder, found = os.path.join(scratch, MPL_CONFIG), {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith("fontlist-") and entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as f:
                    found[entry.name] = f.read(16 * 2**20)
    return found


_FONT_LISTS: dict[str, bytes] = {}


def _clean(me: int, scratch: str) -> None:
    """Nothing of the notebook left: no process (killed and reaped), no file in the writable folders.

    The matplotlib folder goes too (a cell could leave a module or a loader's input there); its font
    lists come back as the broker read them before any learner code ran.
    """
    end_others(me)
    empty(scratch)
    with contextlib.suppress(OSError):
        folder = os.path.join(scratch, MPL_CONFIG)
        os.makedirs(folder, exist_ok=True)
        for name, data in _FONT_LISTS.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
    if me == 1:  # bubblewrap's own /tmp; outside a PID namespace /tmp is the host's and TMPDIR is the scratch
        empty("/tmp")


def _case(
    grader: socket.socket, me: int, request: dict, blob: bytes, notebook: tuple, sandbox: Any
) -> tuple[dict, bytes]:
    """One case in a fresh case process, checked alone before (nothing else alive) and after (one thread).

    ``notebook`` is (cells, skip, settings, scratch), as :func:`run` received them.
    """
    cells, skip, settings, scratch = notebook
    why = background(me)
    if why is None:
        pid, channel = _fork(grader, lambda sock: sandbox.answer(sock, settings, cells, skip, request, blob))
        try:
            reply, out = wire.recv(channel)  # EOFError when the case process died: the grader sees the broker end
            why = _settled(me, pid)
        finally:
            channel.close()
            _clean(me, scratch)
        if why is None:
            return _plain(reply), out
    return {"ok": False, "kind": ReplyKind.BACKGROUND, "error": why, "forbidden": []}, b""


def _settled(me: int, child: int, wait: float = 1.0, notebook: int = -1) -> str | None:
    """:func:`background`, given a moment to clear (a thread or process that is just ending)."""
    why = background(me, child, notebook)
    deadline = time.monotonic() + wait
    while why is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        why = background(me, child, notebook)
    return why


def _plain(reply: Any) -> dict:
    """The case process's reply with only the fields the grader reads (it judges their values itself)."""
    return {k: reply[k] for k in REPLY_FIELDS if k in reply}
