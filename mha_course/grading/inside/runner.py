"""The submission runtime: runs one learner's notebook and its cases, untrusted, inside its sandbox.

The grader starts it as ``python -m mha_course.grading.inside.runner FD`` inside a bubblewrap sandbox
(:mod:`.isolation`): its own namespaces, uid nobody, no capabilities, no network, and a read-only
view in which ``mha_course`` holds only this runtime, the assignment's call functions
(:mod:`.calls`), its provided building blocks, the self-check helpers (``assert_close``) and a no-op
``check``. Before anything else it splits in two (:mod:`.broker`): the broker, pid 1, keeps the
socket ``FD`` to the grader and never runs learner code; the notebook process below it runs the code
below, talking to the broker only. Frames are :mod:`.wire`'s (JSON + ``.npy``, never pickle). Its life:

1. import torch and numpy (before any learner code), stdin/stdout/stderr to /dev/null (printing
   "passed" reaches nobody), work in the private scratch folder, ``RLIMIT_AS`` = current size +
   the memory limit (a hog gets ``MemoryError``), one torch thread, no tqdm monitor thread;
2. install the forbidden-call wrappers (:class:`.guard.Tripwire`) and an audit hook that *explains*
   what grading never needs (new processes, sockets, ctypes, ...). Neither is a wall: the kernel is;
   they turn a refused or pointless operation into a sentence an honest learner can act on;
3. run each code cell the broker hands over, in one namespace (which also holds a ``display`` that
   does nothing and a ``get_ipython`` that returns None); an exception, ``sys.exit()`` or
   ``KeyboardInterrupt`` in a cell is recorded and the next cell runs;
4. answer case requests: import the named call function (only from :mod:`.calls` or a module the
   grader put in the view), run ``call(target, inputs)`` with the target guarded (subclasses
   rejected) and the tripwire armed; reply with the output as plain data, or the error's last line
   with the learner's own cell and line. Every judgement happens in the grader.

Messages, broker -> notebook process: the configuration (no cells), then ``{"event": "cell",
"index": i, "source": str}`` or ``{"event": "case", ...}`` + inputs blob. Notebook process -> broker:
``{"event": "cell_done", "error": str|None}``, and per case ``{"ok": true, "structure": ...,
"forbidden": [...], "ops": [...]}`` + blob, or ``{"ok": false, "kind": "not_implemented"|"missing"|
"error", "error": str, "forbidden": [...]}``. The grader reads only the broker's frames: ``{"event":
"cell", "index": i}``, ``{"event": "cell_done", "index": i, "error": ...}``, ``{"event": "ready"}``, then
per case the notebook's reply (its known fields only) or ``{"ok": false, "kind": "background",
"error": str}`` when something else of the notebook was running.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import os
import sys
import traceback
from typing import Any

from . import wire
from .convert import exception_line
from .guard import Tripwire, guarded

SCRATCH = "/scratch"
CALL_PACKAGE = "mha_course.grading.calls."
# Library modules every sandbox may import: the self-check helpers the lectures import next to `check`
# (tolerances and assert_close compare what they are given and hold no answers); :mod:`.view` copies them.
HELPERS = ("mha_course.testing",)

_BLOCK_MESSAGE = (
    "{name} is not available while grading: it holds the course's reference answers, and this "
    "assignment asks you to write the code yourself (only `check`, `assert_close` and the building "
    "blocks this assignment provides{provided} can be imported from mha_course)"
)


class _Blocker(importlib.abc.MetaPathFinder):
    """Explains why an mha_course module is missing (it is not in the sandbox's view at all)."""

    def __init__(self, provided: tuple[str, ...]) -> None:
        self.provided = provided

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if not fullname.startswith("mha_course.") or fullname.startswith("mha_course.grading"):
            return None
        if any(fullname == p or fullname.startswith(p + ".") for p in self.provided + HELPERS):
            return None
        listed = f" ({', '.join(self.provided)})" if self.provided else ""
        raise ImportError(_BLOCK_MESSAGE.format(name=fullname, provided=listed), name=fullname)


def error_text(exc: BaseException) -> str:
    """``"TypeError: message (cell 4, line 7)"``: the last line, and where in the learner's own cells.

    Only frames of the learner's cells are named (never the runtime's or a library's), and the text is
    cut to 400 characters, so an error carries no more than the learner's own code put in it.
    """
    if isinstance(exc, SystemExit):
        return f"SystemExit({str(exc.code)[:60]!r}): the code called sys.exit() / exit()"
    text = exception_line(exc)
    try:
        own = [f for f in traceback.extract_tb(exc.__traceback__) if str(f.filename).startswith("<cell ")]
    except BaseException:
        own = []
    if own:
        text += f" ({own[-1].filename.strip('<>')}, line {own[-1].lineno})"
    return text[:400]


_DENIED_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "resource.setrlimit",
        "resource.prlimit",
        "sys.settrace",
        "sys.setprofile",
        "pickle.find_class",
        "marshal.load",
        "os.add_dll_directory",
        "webbrowser.open",
        "urllib.Request",
    }
)
_DENIED_PREFIXES = (
    "socket.",
    "ctypes.",
    "os.exec",
    "os.spawn",
    "ftplib.",
    "http.",
    "smtplib.",
    "imaplib.",
    "poplib.",
    "nntplib.",
    "telnetlib.",
)


def _install_audit_hook() -> None:
    """Explain, in every thread, the operations grading never needs (new processes, sockets, ctypes, ...).

    This is not the security boundary (the kernel is: see :mod:`.isolation`); it turns what the
    sandbox would refuse or make pointless into a sentence an honest learner can act on. A refused
    operation raises PermissionError whose message says it is not available while grading.
    """
    message = (
        "{what} is not available while grading: the grader runs your notebook in a sandbox "
        "(no processes, signals to others, sockets, ctypes; files only in its scratch folder)"
    )
    denied, prefixes = _DENIED_EVENTS, _DENIED_PREFIXES

    me = os.getpid()

    def hook(event: str, args: tuple) -> None:
        if event in denied or event.startswith(prefixes):
            raise PermissionError(message.format(what=event))
        if event in ("os.kill", "os.killpg") and args and args[0] not in (0, me, -me):
            raise PermissionError(message.format(what="sending a signal to another process"))

    sys.addaudithook(hook)


def _isolate(scratch: str, memory_mb: int) -> None:
    """Inside the sandbox: stdio to /dev/null, work in the scratch folder, cap memory (MemoryError, not a kill)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.chdir(scratch)
    os.environ["TMPDIR"] = scratch
    import tempfile

    tempfile.tempdir = scratch
    try:
        import resource

        if memory_mb > 0:
            import psutil

            limit = psutil.Process().memory_info().vms + memory_mb * 2**20
            _, ceiling = resource.getrlimit(resource.RLIMIT_AS)  # tier B sets one before exec: stay under it
            if ceiling != resource.RLIM_INFINITY:
                limit = min(limit, ceiling)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # the cgroup and the grader's memory watch still apply
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _run_cell(source: str, index: int, namespace: dict) -> str | None:
    try:
        code = compile(source, f"<cell {index + 1}>", "exec")
        exec(code, namespace)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the next cell still runs
        return error_text(exc)
    return None


def _call_function(name: str, extra: frozenset[str]) -> Any:
    """The call function ``"module:function"``, from :mod:`.calls` or a module the grader put in the view."""
    module_name, _, function = str(name).partition(":")
    if not (module_name.startswith(CALL_PACKAGE) or module_name in extra):
        raise ValueError(f"the grader asked for an unknown call function {name!r}")
    return getattr(importlib.import_module(module_name), function)


def _run_case(
    request: dict, namespace: dict, inputs: dict, tripwire: Tripwire, extra: frozenset[str]
) -> tuple[dict, bytes]:
    target_name = str(request["target"])
    forbidden = tuple(str(n) for n in request.get("forbidden") or ())
    target = namespace.get(target_name)
    if target is None:
        return {
            "ok": False,
            "kind": "missing",
            "error": f"your notebook does not define {target_name!r}",
            "forbidden": [],
        }, b""
    call = _call_function(request["call"], extra)
    try:
        with guarded(target) as guarded_target, tripwire.armed(forbidden):
            got = call(guarded_target, inputs)
        structure, blob = wire.pack(got)
        return {"ok": True, "structure": structure, "forbidden": tripwire.hits, "ops": tripwire.ops}, blob
    except NotImplementedError:
        kind, error = "not_implemented", "not attempted yet"
    except BaseException as exc:
        kind, error = "error", error_text(exc)
    return {"ok": False, "kind": kind, "error": error, "forbidden": tripwire.hits, "ops": tripwire.ops}, b""


def _preload() -> None:
    """Import what every submission uses before any learner code runs (and before the memory cap)."""
    scratch = os.environ.get("MHA_COURSE_SCRATCH", SCRATCH)
    config_dir = os.path.join(scratch, ".matplotlib")
    os.makedirs(config_dir, exist_ok=True)
    cache = "/run/grader/mplcache"
    if os.path.isdir(cache):  # the grader's font list: matplotlib need not scan the fonts again
        import shutil

        for name in os.listdir(cache):
            if name.startswith("fontlist-"):
                shutil.copyfile(os.path.join(cache, name), os.path.join(config_dir, name))
    # imported now, before any learner code (numpy and torch.nn.functional load their C parts here, not in a cell)
    importlib.import_module("numpy")
    import torch

    torch.set_num_threads(1)
    import torch.nn.functional

    try:
        import matplotlib

        matplotlib.use("Agg")
    except Exception:
        pass
    try:  # tqdm's monitor is a thread, and a case runs only while the notebook runs one thread (.broker)
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except Exception:
        pass


def _display(*objects: Any, **kwargs: Any) -> None:
    """IPython's ``display`` while grading: nothing is shown, so it does nothing (a cell may still call it)."""


def _get_ipython() -> None:
    """No IPython kernel while grading (the idiom ``if get_ipython() is not None`` works)."""
    return None


def serve(sock: Any, scratch: str) -> None:
    """The notebook process's loop, after :func:`.broker.split`: cells one at a time, then cases.

    Only the broker is on the other end of ``sock``; it frames everything the grader reads.
    """
    config, _ = wire.recv(sock)
    _isolate(scratch, int(config.get("memory_mb", 0)))
    provided = tuple(str(p) for p in config.get("provided", ()))
    extra = frozenset(str(m) for m in config.get("extra_modules", ()))
    for name in provided:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    sys.meta_path.insert(0, _Blocker(provided))
    tripwire = Tripwire()
    tripwire.install({str(n) for n in config.get("forbidden", ())})
    send, recv, unpack, run_case = wire.send, wire.recv, wire.unpack, _run_case  # bound before learner code
    _install_audit_hook()
    namespace: dict = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "display": _display,
        "get_ipython": _get_ipython,
    }
    exit_now = os._exit
    while True:
        try:
            message, blob = recv(sock)
        except (EOFError, OSError, ValueError):
            break
        event = message.get("event")
        if event == "cell":
            reply: dict = {
                "event": "cell_done",
                "error": _run_cell(str(message["source"]), int(message["index"]), namespace),
            }
            out = b""
        elif event == "case":
            try:
                inputs = unpack(message["inputs"], blob)
                reply, out = run_case(message, namespace, inputs, tripwire, extra)
            except BaseException as exc:
                reply, out = {"ok": False, "kind": "error", "error": error_text(exc), "forbidden": []}, b""
        else:
            break
        try:
            send(sock, reply, out)
        except BaseException:
            break
    exit_now(0)


def main(argv: list[str] | None = None) -> None:
    """``python -m mha_course.grading.inside.runner FD``: the broker on the inherited socket FD, the notebook below it."""
    import socket

    from . import broker

    argv = sys.argv[1:] if argv is None else argv
    code = 0
    try:
        grader = socket.socket(fileno=int(argv[0]))
        _, channel = broker.split(grader)  # only the notebook process returns
        _preload()
        serve(channel, os.environ.get("MHA_COURSE_SCRATCH", SCRATCH))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


if __name__ == "__main__":
    main()
