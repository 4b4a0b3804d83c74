"""The submission process: runs one learner's notebook and its cases, untrusted, in isolation.

It is forked from the zygote (:mod:`.zygote`, torch already imported) and talks to the grader over
a Unix socket with :mod:`.wire` frames (JSON + ``.npy``, never pickle). Its life:

1. isolate itself: own process group (the grader kills the group), stdin/stdout/stderr to
   /dev/null (printing "passed" reaches nobody), a scratch working directory (a fake
   ``results.json`` lands there), ``RLIMIT_AS`` = current size + the memory limit (a hog gets
   ``MemoryError``), ``RLIMIT_FSIZE``, no core files, one torch thread;
2. import the assignment's exercise module (``call`` functions only; references are imported
   lazily and never here), load the assignment's ``provided`` building blocks, then block every
   other ``mha_course`` module: importing one raises ImportError with an explanation;
3. turn the self-check into a no-op (``selfcheck.GRADING = True``), install the forbidden-call
   wrappers (:class:`.guard.Tripwire`) and an audit hook (:func:`_install_audit_hook`; Python offers
   no way to remove one) before any learner code runs. The hook refuses what no exercise needs and
   a cheat would: new processes, signals to other processes, sockets, ctypes, changing resource
   limits, tracing and ``gc`` introspection, pickle, opening file descriptors by number, writing,
   renaming or deleting outside the scratch directory, reading other processes' ``/proc`` entries,
   and importing or reading the source of the blocked ``mha_course`` modules (so removing the
   import blocker from ``sys.meta_path`` gains nothing);
4. run the notebook's code cells in one namespace, announcing each cell first (so if the process
   dies or hangs in a cell, the grader knows which one and skips it next time); an exception,
   ``sys.exit()`` or ``KeyboardInterrupt`` in a cell is recorded and the next cell runs;
5. answer case requests: ``case.call(target, inputs)`` with the target guarded (subclasses
   rejected) and the tripwire armed; reply with the output as plain data, or the error's last line.

Messages (child -> grader): ``{"event": "cell", "index": i}``, ``{"event": "cell_done", "index": i,
"error": str|None}``, ``{"event": "ready"}``, and per case ``{"ok": true, "structure": ...,
"forbidden": [...]}`` + blob, or ``{"ok": false, "kind": "not_implemented"|"missing"|"error",
"error": str, "forbidden": [...]}``.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import os
import sys
from typing import Any

from . import wire
from .guard import Tripwire, guarded
from .scoring import exception_line

_BLOCK_MESSAGE = ("{name} is not available while grading: it holds the course's reference answers, and this "
                  "assignment asks you to write the code yourself (only `check` and the building blocks this "
                  "assignment provides{provided} can be imported from mha_course)")


def _allowed(name: str, provided: tuple[str, ...]) -> bool:
    if name == "mha_course" or name == "mha_course.grading" or name.startswith("mha_course.grading."):
        return True
    return any(name == p or name.startswith(p + ".") for p in provided)


class _Blocker(importlib.abc.MetaPathFinder):
    """Refuses to import mha_course modules other than the allowed ones."""

    def __init__(self, provided: tuple[str, ...]) -> None:
        self.provided = provided

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.startswith("mha_course.") and not _allowed(fullname, self.provided):
            listed = f" ({', '.join(self.provided)})" if self.provided else ""
            raise ImportError(_BLOCK_MESSAGE.format(name=fullname, provided=listed), name=fullname)
        return None


def _block_references(provided: tuple[str, ...]) -> None:
    for name in provided:
        try:
            importlib.import_module(name)  # before the blocker: they may need blocked modules inside
        except Exception:
            pass
    for name in [n for n in sys.modules if n.startswith("mha_course.") and not _allowed(n, provided)]:
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
            try:
                delattr(sys.modules[parent], child)
            except AttributeError:
                pass
    package = sys.modules.get("mha_course")
    if package is not None:  # names the lazy __getattr__ cached from blocked modules
        for attr, value in list(vars(package).items()):
            module = getattr(value, "__module__", None) or ""
            if module.startswith("mha_course.") and not _allowed(module, provided):
                delattr(package, attr)
    sys.meta_path.insert(0, _Blocker(provided))


_DENIED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "resource.setrlimit", "resource.prlimit", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile", "sys._current_frames",
    "pickle.find_class", "marshal.load", "os.add_dll_directory", "webbrowser.open", "urllib.Request",
})
_DENIED_PREFIXES = ("socket.", "ctypes.", "os.exec", "os.spawn", "ftplib.", "http.", "smtplib.", "imaplib.",
                    "poplib.", "nntplib.", "telnetlib.")
_PATH_EVENTS = frozenset({  # events whose path arguments must stay inside the scratch directory
    "os.remove", "os.rename", "os.rmdir", "os.truncate", "os.chmod", "os.chown", "os.chflags", "os.link",
    "os.symlink", "os.mkdir", "os.utime", "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod",
    "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
    "shutil.move", "shutil.chown", "shutil.make_archive", "shutil.unpack_archive",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})


def _install_audit_hook(workdir: str, provided: tuple[str, ...]) -> list[bool]:
    """Refuse, from now on and in every thread, what grading never needs (see the module docstring).

    A refused operation raises PermissionError (ImportError for an import) in the learner's code,
    whose message says it is not available while grading. Returns a one-element list: while its
    item is True (a case is running) frames are refused too (``sys._getframe``, a traceback's or a
    generator's frame), so the code under test cannot walk up to the grader's frames; notebook
    cells keep them, since libraries use ``sys._getframe`` at import time.
    """
    case_running = [False]
    package = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # mha_course/
    allowed = [os.path.join(package, "grading") + os.sep, os.path.join(package, "__init__.py")]
    for name in provided:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None)
        if origin:
            allowed.append(os.path.realpath(origin))
    scratch = os.path.realpath(workdir) + os.sep
    me = os.getpid()
    own_proc = (f"/proc/{me}/", "/proc/self/", "/proc/thread-self/")
    blocked_message = ("{what} is not available while grading: the grader runs your notebook in a sandbox "
                       "(no processes, signals, sockets, ctypes or files outside its scratch folder)")

    def path_of(value: Any) -> str | None:
        try:
            return os.path.realpath(os.fsdecode(value))
        except (TypeError, ValueError):
            return None

    def outside_scratch(value: Any) -> bool:
        path = path_of(value)
        return path is not None and not (path + os.sep).startswith(scratch)

    def reference_source(path: str) -> bool:
        if not (path + os.sep).startswith(package + os.sep):
            return False
        return not any(path == a or path.startswith(a) for a in allowed)

    def hook(event: str, args: tuple) -> None:
        if event in _DENIED_EVENTS or event.startswith(_DENIED_PREFIXES):
            raise PermissionError(blocked_message.format(what=event))
        if case_running[0] and (event == "sys._getframe" or event == "object.__getattr__" and len(args) > 1
                                and args[1] in _FRAME_ATTRIBUTES):
            raise PermissionError("frame inspection is not available while your code is being graded")
        if event == "import":
            name = args[0] if args else ""
            if isinstance(name, str) and name.startswith("mha_course.") and not _allowed(name, provided):
                listed = f" ({', '.join(provided)})" if provided else ""
                raise ImportError(_BLOCK_MESSAGE.format(name=name, provided=listed), name=name)
        elif event == "open":
            target, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(target, int):
                raise PermissionError(blocked_message.format(what="opening a file descriptor by number"))
            path = path_of(target)
            if path is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and not (path + os.sep).startswith(scratch):
                raise PermissionError(blocked_message.format(what=f"writing {path}"))
            if reference_source(path):
                raise PermissionError(blocked_message.format(what=f"reading {path} (the course's reference code)"))
            if path.startswith("/proc/") and not path.startswith(own_proc):
                raise PermissionError(blocked_message.format(what=f"reading {path}"))
        elif event in ("os.listdir", "os.scandir"):
            path = path_of(args[0]) if args and args[0] is not None else None
            if path is not None and (path == "/proc" or path.startswith("/proc/") and not path.startswith(own_proc)
                                     or reference_source(path)):
                raise PermissionError(blocked_message.format(what=f"listing {path}"))
        elif event in ("os.kill", "os.killpg"):
            pid = args[0] if args else None
            own = me if event == "os.kill" else os.getpgid(0)
            if pid not in (0, own) and not (event == "os.kill" and pid == -own):
                raise PermissionError(blocked_message.format(what="sending a signal to another process"))
        elif event in _PATH_EVENTS:
            if any(outside_scratch(a) for a in args if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError(blocked_message.format(what=event))

    sys.addaudithook(hook)
    return case_running


def _isolate(workdir: str, memory_mb: int) -> None:
    os.setpgrp()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.chdir(workdir)
    os.environ["TMPDIR"] = workdir
    import tempfile

    tempfile.tempdir = workdir  # temporary files stay in the scratch folder
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 2**20, 64 * 2**20))
        if memory_mb > 0:
            import psutil

            limit = psutil.Process().memory_info().vms + memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # the grader's memory watch still applies
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _run_cell(source: str, index: int, namespace: dict) -> str | None:
    try:
        code = compile(source, f"<cell {index + 1}>", "exec")
        exec(code, namespace)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the next cell still runs
        try:
            return exception_line(exc)
        except BaseException:
            return type(exc).__name__
    return None


def _run_case(exercise: Any, case: Any, namespace: dict, inputs: dict, tripwire: Tripwire,
              case_running: list[bool] | None = None) -> tuple[dict, bytes]:
    target = namespace.get(exercise.target)
    if target is None:
        return {"ok": False, "kind": "missing", "error": f"your notebook does not define {exercise.target!r}",
                "forbidden": []}, b""
    running = case_running if case_running is not None else [False]
    try:
        with guarded(target) as guarded_target, tripwire.armed(exercise.forbidden):
            running[0] = True
            try:
                got = case.call(guarded_target, inputs)
            finally:
                running[0] = False
        structure, blob = wire.pack(got)
        return {"ok": True, "structure": structure, "forbidden": tripwire.hits, "ops": tripwire.ops}, blob
    except NotImplementedError:
        kind, error = "not_implemented", "not attempted yet"
    except BaseException as exc:
        kind = "error"
        try:
            error = exception_line(exc)
        except BaseException:
            error = type(exc).__name__
    return {"ok": False, "kind": kind, "error": error, "forbidden": tripwire.hits, "ops": tripwire.ops}, b""


def serve(sock: Any) -> None:
    """The submission process's main loop (called in the forked child; never returns normally)."""
    config, _ = wire.recv(sock)
    _isolate(config["workdir"], int(config.get("memory_mb", 0)))
    for entry in reversed(config.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    assignment = importlib.import_module(config["module"]).ASSIGNMENT
    _block_references(tuple(assignment.provided))
    from . import selfcheck

    selfcheck.GRADING = True
    tripwire = Tripwire()
    tripwire.install({name for e in assignment.exercises for name in e.forbidden})
    send, recv, unpack, run_case = wire.send, wire.recv, wire.unpack, _run_case  # bound before learner code
    case_running = _install_audit_hook(config["workdir"], tuple(assignment.provided))
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    skip = set(config.get("skip", []))
    exercises = {e.key: e for e in assignment.exercises}
    exit_now = os._exit
    for index, source in config["cells"]:
        if index in skip:
            continue
        send(sock, {"event": "cell", "index": index})
        send(sock, {"event": "cell_done", "index": index, "error": _run_cell(source, index, namespace)})
    send(sock, {"event": "ready"})
    while True:
        try:
            message, blob = recv(sock)
        except (EOFError, OSError, ValueError):
            break
        if message.get("event") != "case":
            break
        exercise = exercises[message["exercise"]]
        inputs = unpack(message["inputs"], blob)
        reply, out = run_case(exercise, exercise.cases[int(message["case"])], namespace, inputs, tripwire,
                              case_running)
        try:
            send(sock, reply, out)
        except BaseException:
            break
    exit_now(0)
