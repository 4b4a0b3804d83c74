"""The static scan's rules: which names, builtins, attributes and strings count as tampering, and
how a dotted name is matched against them (``pathlib.os.kill`` reads as ``os.kill``).

:mod:`.scan` walks a submission's code and asks these rules about every name it resolves; the
tables are data, kept apart so that a new rule is one line here.
"""

from __future__ import annotations

TAMPERING_PREFIXES = (
    # the interpreter, imports and code from strings or bytes
    "ctypes",
    "importlib",
    "pkgutil",
    "sys.modules",
    "sys.meta_path",
    "sys.path_hooks",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "builtins",
    "gc",
    "inspect",
    "types.FunctionType",
    "types.CodeType",
    "types.LambdaType",
    "types.ModuleType",
    "operator.attrgetter",
    "operator.methodcaller",
    "pickle",
    "_pickle",
    "marshal",
    "shelve",
    "copyreg",
    "dill",
    "cloudpickle",
    "code",
    "codeop",
    "pdb",
    "bdb",
    "timeit",
    "cProfile",
    "profile",
    "trace",
    "runpy",
    "zipimport",
    "logging.currentframe",
    "traceback.walk_stack",
    "traceback.walk_tb",
    "threading.settrace",
    "threading.setprofile",
    # torch internals: dispatch, raw operators, pickle-based loading, code strings
    "torch._C",
    "torch.ops",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch._dispatch",
    "torch.load",
    "torch.package",
    "torch.hub",
    "torch.utils.benchmark",
    "torch.multiprocessing",
    # processes, signals, file descriptors
    "os.kill",
    "os.killpg",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.setpgrp",
    "os.setsid",
    "os.dup",
    "os.dup2",
    "os.close",
    "os.closerange",
    "os.open",
    "os.fdopen",
    "os.read",
    "os.readv",
    "os.pread",
    "os.preadv",
    "os.write",
    "os.writev",
    "os.pwrite",
    "os.pwritev",
    "os.sendfile",
    "os.readlink",
    "os.pidfd_open",
    "os.register_at_fork",
    "os.setuid",
    "os.setgid",
    "os.setresuid",
    "os.setresgid",
    "os.chroot",
    "os.plock",
    "posix",
    "nt",
    "subprocess",
    "_posixsubprocess",
    "multiprocessing",
    "concurrent.futures.ProcessPoolExecutor",
    "concurrent.futures.process",
    "asyncio.subprocess",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
    "signal",
    "psutil",
    "socket",
    "pty",
    "resource",
    "mmap",
    # the grader itself
    "mha_course.grading",
)
TAMPERING_BUILTINS = (
    "__import__",
    "exec",
    "eval",
    "compile",
    "__builtins__",
    "breakpoint",
    "__loader__",
    "vars",
    "globals",
    "locals",
)
# attributes that reach into functions, frames, classes and modules instead of computing with them
TAMPERING_ATTRIBUTES = (
    "__globals__",
    "__closure__",
    "__code__",
    "__wrapped__",
    "__self__",
    "__func__",
    "__subclasses__",
    "__bases__",
    "__base__",
    "__mro__",
    "__builtins__",
    "__loader__",
    "__spec__",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__traceback__",
    "__defaults__",
    "__kwdefaults__",
    "__import__",
    "cell_contents",
    "tb_frame",
    "tb_next",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "gi_frame",
    "gi_code",
    "cr_frame",
    "ag_frame",
)
# builtins that take an attribute name: with a literal name they read as obj.name
ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr", "hasattr")
# strings that name the grader's files or other processes
TAMPERING_STRINGS = ("results.json", "/proc/", "/autograder")
ALLOWED_GRADING = ("mha_course.check", "mha_course.grading.check", "mha_course.grading.selfcheck.check")


def matches(name: str, prefixes: tuple[str, ...] | list[str]) -> str | None:
    for prefix in prefixes:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


# modules other modules re-export (pathlib.os, shutil.os, numpy.sys...): a name reached through one
# of them is checked from that module on, so pathlib.os.kill reads as os.kill
REEXPORTED = (
    "os",
    "sys",
    "gc",
    "inspect",
    "ctypes",
    "importlib",
    "pkgutil",
    "builtins",
    "pickle",
    "marshal",
    "subprocess",
    "multiprocessing",
    "signal",
    "socket",
    "resource",
    "posix",
    "psutil",
    "runpy",
    "pty",
    "mmap",
    "operator",
    "types",
    "threading",
    "traceback",
    "logging",
    "asyncio",
    "mha_course",
)


def tampering(name: str) -> str | None:
    if matches(name, ALLOWED_GRADING):
        return None
    parts = name.split(".")
    for i in range(1, len(parts) - 1):
        if parts[i] in REEXPORTED:
            hit = tampering(".".join(parts[i:]))
            if hit:
                return hit
    hit = matches(name, TAMPERING_PREFIXES)
    if hit is None and name.startswith(("os.exec", "os.spawn")):
        hit = name
    if hit is None and parts[0] == "torch" and any(p.startswith("_") and not p.endswith("__") for p in parts[1:]):
        hit = name  # a private torch name: torch._softmax, torch.autograd.graph._engine_run_backward, ...
    if hit is None and any(p in TAMPERING_ATTRIBUTES or p == "__dict__" for p in parts[1:]):
        hit = name
    return hit
