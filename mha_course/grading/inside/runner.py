"""The submission runtime: the code that runs inside a learner's sandbox, for the cells and for each case.

The grader starts ``python -m mha_course.grading.inside.runner FD`` inside the sandbox (:mod:`mha_course.grading.walls.bubblewrap`
or :mod:`mha_course.grading.walls.confined`): its own namespaces, an unprivileged uid, no network, a read-only view in which
``mha_course`` holds only this runtime, the assignment's call functions (:mod:`.calls`), its provided
building blocks, the self-check helpers and a no-op ``check``. That process is the broker
(:mod:`.broker`): it alone talks to the grader, imports what every submission uses (:func:`preload`)
and never runs learner code. It forks

* the notebook process, which runs :func:`run_cells`: every code cell in one namespace (with a
  ``display`` that does nothing and a ``get_ipython`` that returns None), reporting each cell's error;
  then, for each case, it forks a case process (:func:`_case_from_state`) that starts from the state
  the cells left, calls the function under test through the named call function with the target
  guarded and the tripwire armed, replies once on a socketpair of its own and is ended;
* in strict mode, the notebook process is killed once the cells are done, and each case process
  runs :func:`answer`: it loads only the notebook's definitions (:mod:`.definitions`: no learner code
  runs at load time) and answers the same way.

Both first :func:`enter` the sandbox's inner rules: stdin/stdout/stderr to /dev/null, work in the
scratch folder, ``RLIMIT_AS`` = current size + the memory limit, one torch thread, the blocker of
reference modules, the forbidden-call wrappers (:class:`.guard.Tripwire`) and an audit hook that
*explains* what grading never needs. Neither is a wall (the kernel is); they turn a refused or
pointless operation into a sentence an honest learner can act on. Replies are :mod:`.wire` frames
(JSON + ``.npy``, never pickle): per cell ``{"event": "cell_done", "error": str|None}``; per case
``{"ok": true, "structure": ..., "forbidden": [...], "ops": [...]}`` + blob or ``{"ok": false, "kind":
"not_implemented"|"missing"|"error", "error": str, "forbidden": [...]}``. Every judgement happens in
the grader. The whole design and its reasons: docs/INSTRUCTORS.md, "How the sandbox runs a notebook".
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from . import wire
from .convert import exception_line
from .guard import Tripwire, guarded
from .messages import MPL_CACHE, MPL_CONFIG, SCRATCH, SCRATCH_ENV, Event

CALL_PACKAGE = "mha_course.grading.calls."
# the reply's functions, bound when the broker imports this module (before any learner code runs)
_SEND, _RECV, _EXIT = wire.send, wire.recv, os._exit
# Library modules every sandbox may import: the self-check helpers the lectures import next to `check`
# (tolerances and assert_close compare what they are given and hold no answers); :mod:`mha_course.grading.walls.view` copies them.
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
    "os.fork os.forkpty os.posix_spawn os.spawn os.exec os.system os.startfile subprocess.Popen pty.spawn "
    "resource.setrlimit resource.prlimit sys.settrace sys.setprofile pickle.find_class marshal.load "
    "os.add_dll_directory webbrowser.open urllib.Request".split()
)
_DENIED_PREFIXES = tuple(
    "socket. ctypes. os.exec os.spawn ftplib. http. smtplib. imaplib. poplib. nntplib. telnetlib.".split()
)


_PERMITTED = frozenset({"os.fork", "socket.__new__"})


def _install_audit_hook() -> list[bool]:
    """Explain, in every thread, the operations grading never needs (new processes, sockets, ctypes, ...).

    This is not the security boundary (the kernel is: see :mod:`mha_course.grading.walls.bubblewrap`); it turns what the
    sandbox would refuse or make pointless into a sentence an honest learner can act on. A refused
    operation raises PermissionError whose message says it is not available while grading.
    Returns the runtime's permit: the notebook process sets its one flag while it wraps a case's socket and
    forks the case process (:data:`_PERMITTED` only).
    """
    message = (
        "{what} is not available while grading: the grader runs your notebook in a sandbox "
        "(no processes, signals to others, sockets, ctypes; files only in its scratch folder)"
    )
    denied, prefixes = _DENIED_EVENTS, _DENIED_PREFIXES

    me = os.getpid()
    fork_permit = [False]

    def hook(event: str, args: tuple) -> None:
        if fork_permit[0] and event in _PERMITTED:
            return
        if event in denied or event.startswith(prefixes):
            raise PermissionError(message.format(what=event))
        if event in ("os.kill", "os.killpg") and args and args[0] not in (0, me, -me):
            raise PermissionError(message.format(what="sending a signal to another process"))

    sys.addaudithook(hook)
    return fork_permit


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
    """Run one cell as IPython would: its source is in ``linecache`` (TorchScript and ``inspect`` read it)."""
    import linecache

    filename = f"<cell {index + 1}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
        exec(code, namespace)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the next cell still runs
        return error_text(exc)
    return None


def _call_module(module_name: str, extra: frozenset[str]) -> bool:
    """``module_name`` may hold call functions: it is in :mod:`.calls` or a module the grader put in the view."""
    return module_name.startswith(CALL_PACKAGE) or module_name in extra


def _call_function(name: str, extra: frozenset[str]) -> Any:
    """The call function ``"module:function"``, from :mod:`.calls` or a module the grader put in the view."""
    module_name, _, function = str(name).partition(":")
    if not _call_module(module_name, extra):
        raise ValueError(f"the grader asked for an unknown call function {name!r}")
    return getattr(importlib.import_module(module_name), function)


def _run_case(
    request: dict, namespace: dict, inputs: dict, tripwire: Tripwire, extra: frozenset[str], found: Any = None
) -> tuple[dict, bytes]:
    target_name = str(request["target"])
    forbidden = tuple(str(n) for n in request.get("forbidden") or ())
    target = namespace.get(target_name)
    if target is None:
        hint = found.name_error_hint(target_name) if found is not None else None
        return {
            "ok": False,
            "kind": "missing",
            "error": f"{target_name!r} is not defined: {hint}"
            if hint
            else f"your notebook does not define {target_name!r}",
            "forbidden": [],
        }, b""
    call = _call_function(request["call"], extra)
    try:
        with guarded(target) as guarded_target, tripwire.armed(forbidden):
            got = call(guarded_target, inputs)
            structure, blob = wire.pack(got)  # armed still: a library function a cell replaced runs here too
        return {"ok": True, "structure": structure, "forbidden": tripwire.hits, "ops": tripwire.ops}, blob
    except NotImplementedError:
        kind, error = "not_implemented", "not attempted yet"
    except BaseException as exc:
        kind, error = "error", error_text(exc)
        hint = found.name_error_hint(exc.name) if isinstance(exc, NameError) and found is not None else None
        if hint:
            error = f"{error[:300]}: {hint}"[:600]
    return {"ok": False, "kind": kind, "error": error, "forbidden": tripwire.hits, "ops": tripwire.ops}, b""


# libraries the broker may import for a notebook that imports them (each case process then finds them loaded)
PRELOADED = frozenset({"torch", "numpy", "matplotlib", "math", "triton", "einops", "scipy", "functools", "typing"})
# torch imports sympy (about half a second) on the first autograd call given output gradients or the first
# torch.broadcast_shapes: once in the broker for cells that name them, not once in every case process
LAZY_TORCH = ("torch.fx.experimental.symbolic_shapes", ("autograd", "backward", "broadcast_shapes"))


def preload(config: dict, cells: Sequence[tuple[int, str]] = ()) -> None:
    """Import what the submission uses, in the broker before anything is forked (no learner code has run).

    That is torch, numpy, matplotlib, the provided modules, and whatever a cell's top-level import
    names under :data:`PRELOADED` (pyplot, triton: so each case process does not import them again).
    """
    scratch = os.environ.get(SCRATCH_ENV, SCRATCH)
    config_dir = os.path.join(scratch, MPL_CONFIG)
    os.makedirs(config_dir, exist_ok=True)
    cache = MPL_CACHE
    if os.path.isdir(cache):  # the grader's font list: matplotlib need not scan the fonts again
        import shutil

        for name in os.listdir(cache):
            if name.startswith("fontlist-"):
                shutil.copyfile(os.path.join(cache, name), os.path.join(config_dir, name))
    # torch.compile runs the function as written: compiling needs a C++ compiler and worker processes the
    # sandbox refuses, and each case process would compile again (it starts from the notebook's state)
    os.environ["TORCH_COMPILE_DISABLE"] = "1"
    importlib.import_module("numpy")
    importlib.import_module("psutil")  # _isolate reads the process size with it
    import torch

    torch.set_num_threads(1)
    import torch.nn.functional

    try:
        import matplotlib

        matplotlib.use("Agg")  # pyplot (about 1 s) only for a notebook that imports it: see _imported
    except Exception:
        pass
    try:  # tqdm's monitor is a thread, and a case process must run alone on one thread (.broker)
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except Exception:
        pass
    lazy, words = LAZY_TORCH
    extra = frozenset(str(m) for m in config.get("extra_modules", ()))
    calls = [str(m) for m in config.get("call_modules", ()) if _call_module(str(m), extra)]
    imported = _imported(cells)
    # what a case would otherwise import each time: its call module, numpy's random (lazy since NumPy 2),
    # and the interpreter's code generator of a Triton kernel (imported at its first launch)
    warm = [
        "numpy.random",
        *calls,
        *(["triton.compiler.code_generator"] if any(n.split(".")[0] == "triton" for n in imported) else []),
        *([lazy] if any(word in source for _, source in cells for word in words) else []),
    ]
    for name in [*config.get("provided", ()), *HELPERS, "mha_course.grading.learner.selfcheck", *imported, *warm]:
        try:
            importlib.import_module(str(name))
        except Exception:
            pass
    importlib.import_module(f"{__package__}.definitions")  # the case process parses the cells with it


def _imported(cells: Any) -> list[str]:
    """The modules under :data:`PRELOADED` that the cells import at the top level (parsed, never run)."""
    import ast

    names = []
    for _, source in cells:
        try:
            body = ast.parse(source).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Import):
                names += [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                names.append(stmt.module)
    return [n for n in dict.fromkeys(names) if n.split(".")[0] in PRELOADED]


def _display(*objects: Any, **kwargs: Any) -> None:
    """IPython's ``display`` while grading: nothing is shown, so it does nothing (a cell may still call it)."""


def _get_ipython() -> None:
    """No IPython kernel while grading (the idiom ``if get_ipython() is not None`` works)."""
    return None


def _namespace() -> dict:
    return {"__name__": "__main__", "__builtins__": builtins, "display": _display, "get_ipython": _get_ipython}


def enter(config: dict, scratch: str) -> tuple[Tripwire, frozenset[str], list[bool]]:
    """The inner rules, before any learner code: isolation, blocker, tripwire, audit hook (in this order).

    Returns the tripwire, the extra call modules and the audit hook's fork permit.
    """
    _isolate(scratch, int(config.get("memory_mb", 0)))
    provided = tuple(str(p) for p in config.get("provided", ()))
    extra = frozenset(str(m) for m in config.get("extra_modules", ()))
    sys.meta_path.insert(0, _Blocker(provided))
    tripwire = Tripwire()
    tripwire.install({str(n) for n in config.get("forbidden", ())})
    fork_permit = _install_audit_hook()
    return tripwire, extra, fork_permit


def run_cells(sock: Any, config: dict, scratch: str) -> None:
    """The notebook process: run each cell the broker hands over and report its error; then, unless the
    run is strict, fork one case process per ``case`` frame, each from the state the cells left.

    Before the cases (``settle``) it forks once and ends: the copy has the cells' state but none of the
    threads they left running (a fork copies only the thread that forks), and it serves the cases. Ends
    when the broker closes the channel (or sends anything else).
    """
    import signal
    import socket

    tripwire, extra, fork_permit = enter(config, scratch)
    send, recv, recv_fds, fork, exit_now = wire.send, wire.recv, socket.recv_fds, os.fork, os._exit  # bound first
    namespace = _namespace()
    while True:
        try:
            message, _ = recv(sock)
        except (EOFError, OSError, ValueError):
            break
        event = message.get("event")
        if event == Event.CELL:
            error = _run_cell(str(message["source"]), int(message["index"]), namespace)
            try:
                send(sock, {"event": Event.CELL_DONE, "error": error})
            except BaseException:
                break
        elif event == Event.SETTLE:  # the cases' process: a copy of this one, without the threads cells left
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a case process is reaped as it ends
                fork_permit[0] = True
                try:
                    pid = fork()
                finally:
                    fork_permit[0] = False
                if pid:
                    exit_now(0)
                send(sock, {"event": Event.SETTLE, "pid": os.getpid()})
            except BaseException:
                break
        elif event == Event.CASE:
            try:
                _, fds, _, _ = recv_fds(sock, 1, 1)
                fork_permit[0] = True
                try:
                    channel = socket.socket(fileno=fds[0])
                    pid = fork()
                finally:
                    fork_permit[0] = False
            except BaseException:
                break
            if pid == 0:
                _case_from_state(sock, channel, namespace, tripwire, extra)
            channel.close()
        else:
            break
    exit_now(0)


def _case_from_state(notebook: Any, channel: Any, namespace: dict, tripwire: Tripwire, extra: frozenset[str]) -> None:
    """A case process forked from the notebook process: the broker's request on ``channel``, one reply, then wait."""
    import signal

    try:
        notebook.close()  # the broker's channel to the notebook process is not this process's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    except BaseException:
        _EXIT(1)

    def case() -> tuple[dict, bytes]:
        torch = sys.modules.get("torch")
        if torch is not None:  # a cell may have asked for more threads: a case runs on one
            torch.set_num_threads(1)
        request, blob = _RECV(channel)
        return _run_case(request, namespace, wire.unpack(request["inputs"], blob), tripwire, extra)

    _reply_once(channel, case)


def _reply_once(channel: Any, case: Any) -> None:
    """Send what ``case()`` returns (or the error it raised) as the case's one reply; wait to be ended."""
    try:
        reply, out = case()
    except BaseException as exc:
        reply, out = {"ok": False, "kind": "error", "error": error_text(exc), "forbidden": []}, b""
    try:
        _SEND(channel, reply, out)
        _RECV(channel)  # the broker looks at this process, then ends it
    except BaseException:
        pass
    _EXIT(0)


def _own_path(scratch: str) -> None:
    """Drop ``''``, the writable folders and the working folder (unless ``/``) from ``sys.path``.

    A file a cell wrote there is then no module a case process could import.
    """
    # /tmp is the sandbox's own tmpfs only under bubblewrap (the broker is pid 1); in tier B it is the
    # host's, read-only there, and holds the grader's view of the package
    tmp = ("/tmp",) if os.getppid() == 1 else ()
    folders = {os.path.realpath(p) for p in (scratch, *tmp, os.getcwd())} - {os.sep}
    writable = tuple(f.rstrip(os.sep) + os.sep for f in folders)
    sys.path[:] = [p for p in sys.path if p and not _under_writable(p, writable)]


def _under_writable(path: str, writable: tuple[str, ...]) -> bool:
    """``path`` lies in a writable folder and is no read-only mount inside it (the Python environment
    of a checkout under /tmp is bound read-only into the sandbox's own /tmp, and must stay importable)."""
    if not (os.path.realpath(path) + os.sep).startswith(writable):
        return False
    try:
        return not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return True


def load_definitions(cells: list[tuple[int, str]], skip: set[int], namespace: dict) -> Any:
    """Run the notebook's definitions (:mod:`.definitions`) in ``namespace``, one statement at a time.

    A statement that fails (an import of a missing module) ends its cell's loading, as the error ended the
    cell in the notebook (the cell's own run reported it); the next cell loads as usual.
    A skipped statement that rebinds a name unconditionally (``kernel = Lookalike()``) removes the
    earlier binding, so the case never calls what the notebook itself had replaced.
    """
    import ast

    from .definitions import definitions

    found = definitions(cells, skip)
    kept = dict(found.kept)
    for index in found.cells:
        drops = [d for d in found.skipped if d.cell == index and d.rebinds]
        future = 0
        for stmt in [*(kept[index].body if index in kept else ()), None]:
            line = stmt.lineno if stmt is not None else float("inf")
            while drops and drops[0].line < line:  # the notebook rebound these without running code here
                for name in drops.pop(0).names:
                    namespace.pop(name, None)
            if stmt is None:
                break
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                future |= _future_flags(stmt)
                continue
            try:
                code = compile(ast.Module(body=[stmt], type_ignores=[]), f"<cell {index + 1}>", "exec", flags=future)
                exec(code, namespace)
            except BaseException:
                break
    return found


def _future_flags(stmt: Any) -> int:
    import __future__

    return sum(getattr(__future__, a.name).compiler_flag for a in stmt.names if hasattr(__future__, a.name))


def answer(sock: Any, config: dict, cells: list[tuple[int, str]], skip: set[int], request: dict, blob: bytes) -> None:
    """One case process: the definitions, then the one case of ``request``, one reply, then wait to be ended."""
    scratch = os.environ.get(SCRATCH_ENV, SCRATCH)

    def case() -> tuple[dict, bytes]:
        _own_path(scratch)
        tripwire, extra, _ = enter(config, scratch)
        namespace = _namespace()
        found = load_definitions(cells, skip, namespace)
        return _run_case(request, namespace, wire.unpack(request["inputs"], blob), tripwire, extra, found)

    _reply_once(sock, case)


def main(argv: list[str] | None = None) -> None:
    """``python -m mha_course.grading.inside.runner FD``: the broker on the inherited socket FD (:mod:`.broker`)."""
    import socket

    from . import broker

    argv = sys.argv[1:] if argv is None else argv
    code = 0
    try:
        runtime = sys.modules[__name__]
        broker.run(socket.socket(fileno=int(argv[0])), os.environ.get(SCRATCH_ENV, SCRATCH), runtime)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


if __name__ == "__main__":
    main()
