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
3. turn the self-check into a no-op (``selfcheck.GRADING = True``) and install the forbidden-call
   wrappers (:class:`.guard.Tripwire`) before any learner code runs;
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


def _isolate(workdir: str, memory_mb: int) -> None:
    os.setpgrp()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.chdir(workdir)
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


def _run_case(exercise: Any, case: Any, namespace: dict, inputs: dict, tripwire: Tripwire) -> tuple[dict, bytes]:
    target = namespace.get(exercise.target)
    if target is None:
        return {"ok": False, "kind": "missing", "error": f"your notebook does not define {exercise.target!r}",
                "forbidden": []}, b""
    try:
        with guarded(target) as guarded_target, tripwire.armed(exercise.forbidden):
            got = case.call(guarded_target, inputs)
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
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    skip = set(config.get("skip", []))
    for index, source in config["cells"]:
        if index in skip:
            continue
        wire.send(sock, {"event": "cell", "index": index})
        wire.send(sock, {"event": "cell_done", "index": index, "error": _run_cell(source, index, namespace)})
    wire.send(sock, {"event": "ready"})
    exercises = {e.key: e for e in assignment.exercises}
    while True:
        try:
            message, blob = wire.recv(sock)
        except (EOFError, OSError, ValueError):
            break
        if message.get("event") != "case":
            break
        exercise = exercises[message["exercise"]]
        inputs = wire.unpack(message["inputs"], blob)
        reply, out = _run_case(exercise, exercise.cases[int(message["case"])], namespace, inputs, tripwire)
        try:
            wire.send(sock, reply, out)
        except BaseException:
            break
    os._exit(0)
