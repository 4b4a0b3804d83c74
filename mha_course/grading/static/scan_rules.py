"""The static scan's rules: which names, builtins, attributes and strings count as tampering, and
how a dotted name is matched against them (``pathlib.os.kill`` reads as ``os.kill``).

:mod:`.scan` walks a submission's code and asks these rules about every name it resolves; the
tables are data, kept apart so that a new rule is one line here.

What the rules are for. A submission runs behind the operating system's wall (:mod:`mha_course.grading.walls.bubblewrap`):
it cannot read the grader's files, start processes that outlive it, or reach a network. What the
wall cannot stop is the submission changing the grader's own runtime *inside its process* (the
case runner, the reply framing of :mod:`mha_course.grading.inside.wire`, the tripwire of :mod:`mha_course.grading.inside.guard`) or writing on the
runtime's reply channel (the socket whose number is in ``sys.argv``). So the rules flag:

* reaching the runtime's objects: imports machinery, ``sys.modules``, frames and their globals,
  ``gc.get_objects``/``get_referrers``, introspection attributes, ``inspect`` functions that hand
  out frames, members or closures, attribute access by computed names, ``mha_course.grading``;
* code hidden from the scan: ``exec``, ``eval``, ``compile``, pickle, ``timeit`` with a statement
  built at run time (a literal statement is scanned as code), and every library that runs text as
  Python (``logging.config``, ``pydoc``, ``sympy``, YAML's loaders, ``allow_pickle``, TorchScript, a
  module imported from ``sys.path`` after a cell wrote it);
* the libraries the runtime itself calls after the function under test returns (``numpy.save``,
  ``json.dumps``, ``torch.Tensor.numpy``): a function of theirs replaced by a cell;
* the reply channel: ``sys.argv``, file descriptors (``os.fdopen``, ``open(3)``, ``open`` of anything
  not written as a path, ``/proc/self/fd``, ``/dev/fd``), sockets, ``select``;
* hooks into the interpreter or torch that could hide a call from the tripwire (``sys.settrace``,
  dispatch modes, private torch names), and signals and processes (they interfere with the
  runtime's own watchdog).

And not what only looks dangerous: ``import timeit`` with a lambda, ``inspect.getsource``,
``inspect.signature``, ``gc.collect`` are the lectures' own idioms and score like any other code.
"""

from __future__ import annotations

from .scan_labels import (
    LIKELY_TAMPERING_ATTRIBUTES,
    LIKELY_TAMPERING_BUILTINS,
    LIKELY_TAMPERING_PHRASES,
    LIKELY_TAMPERING_PREFIXES,
    LIKELY_TAMPERING_STRINGS,
)

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
    "sys.argv",  # holds the number of the runtime's reply socket
    "sys.orig_argv",
    "builtins",
    # gc and inspect: only what hands out the runtime's objects (gc.collect, inspect.getsource are fine)
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "gc.callbacks",
    "inspect.currentframe",
    "inspect.stack",
    "inspect.trace",
    "inspect.getouterframes",
    "inspect.getinnerframes",
    "inspect.getframeinfo",
    "inspect.getmembers",
    "inspect.getmembers_static",
    "inspect.getattr_static",
    "inspect.getclosurevars",
    "inspect.getmodule",
    "inspect.unwrap",
    "inspect.getgeneratorlocals",
    "inspect.getcoroutinelocals",
    "inspect.getasyncgenlocals",
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
    # timeit compiles its template and main()'s arguments as code
    "timeit.template",
    "timeit.main",
    "timeit.reindent",
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
    "os.fstat",
    "os.set_inheritable",
    "os.get_inheritable",
    "os.set_blocking",
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
    "_socket",  # socket.socket without the module: _socket.socket(1, 1, 0, fd) wraps a descriptor
    "select",
    "selectors",
    "fcntl",
    "os.splice",
    "os.copy_file_range",
    "os.pipe",
    "pty",
    "resource",
    "mmap",
    "io.FileIO",
    "_io",  # io's C module: _io.FileIO, _io.open
    "_pyio",  # io in Python: _pyio.open(fd, "r+b") reads and writes a descriptor
    "fileinput",  # fileinput.input(files=[fd]) and tokenize.open(fd) read one
    "tokenize.open",
    # the grader itself
    "mha_course.grading",
    # where imports are found: a module a cell wrote, or one that shadows a library, is imported from there
    "sys.path",
    "site",
    # libraries that run text as Python (code the scan would not otherwise read): a dotted name resolved
    # and called, a statement compiled, an annotation or an expression evaluated, a document's tags
    "logging.config",
    "pydoc",
    "doctest",
    "rlcompleter",
    "sympy",
    "jinja2",
    "yaml.load",
    "yaml.load_all",
    "yaml.unsafe_load",
    "yaml.unsafe_load_all",
    "yaml.full_load",
    "yaml.full_load_all",
    "yaml.Loader",
    "yaml.FullLoader",
    "yaml.UnsafeLoader",
    "yaml.constructor",
    "typing.get_type_hints",
    "typing.ForwardRef",
    "inspect.get_annotations",
    "pandas.eval",
    "pandas.read_pickle",
    "numexpr",
    "torch.serialization",
    # TorchScript runs its operators below torch's Python API, where the run-time tripwire does not look
    "torch.jit.CompilationUnit",
    "torch.jit.load",
    "torch.jit.trace",
    "torch.jit.trace_module",
    "torch.utils.cpp_extension",
    # attributes set or read by a name given as text, and evaluated annotations
    "unittest.mock",
    "string.Formatter",
    "functools.singledispatch",
    "functools.singledispatchmethod",
)
#: Calls that compile a statement given as a string (stmt and setup): a literal is scanned as code,
#: a lambda or a function is fine, anything built at run time is tampering.
CODE_STRING_CALLS = ("timeit.timeit", "timeit.repeat", "timeit.Timer")
#: Functions that open a file: with a number (an int literal, or arithmetic on one) they open an
#: inherited file descriptor, such as the runtime's reply socket.
OPEN_CALLS = ("open", "io.open", "codecs.open")
#: Attribute names that reach the runtime whatever object they are read from (``self`` may be
#: any object, e.g. the package passed in as an argument): flagged also through a literal or
#: constant-folded ``getattr(obj, "grad" + "ing")``.
REACHING_ATTRIBUTES = (
    "grading",
    "_getframe",
    "_current_frames",
    "modules",
    "meta_path",
    "path_hooks",
    "settrace",
    "setprofile",
    "addaudithook",
    "argv",
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
    "__setattr__",
    "__delattr__",
    "__annotations__",
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
TAMPERING_STRINGS = ("results.json", "/proc/", "/autograder", "/dev/fd", "mha_course.grading")
# the self-check, and the progress listing (both no-ops in the sandbox's view of the package)
ALLOWED_GRADING = (
    "mha_course.check",
    "mha_course.grading.learner.selfcheck.check",
    "mha_course.progress",
)


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


#: The suffixes of a write into a library: a function or class replaced (the grader's runtime calls the
#: library in the same process: ``json.dumps``, ``numpy.save``, ``torch.Tensor.numpy``), or a setting.
LIBRARY_FUNCTION_REPLACED = " (a library function replaced)"
LIBRARY_SETTING_WRITTEN = " (a library attribute written)"
#: The builtins that hand out a namespace: a read of a plain name through them is the name itself.
NAMESPACE_BUILTINS = ("globals", "locals", "vars")
#: Methods that change the object they are called on (a dict, a module's namespace, sys.modules).
MUTATING_METHODS = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__")


def likely_tampering(finding: str) -> bool:
    """Whether a tampering finding (its name, as :mod:`.scan` writes it) is one only an attack makes
    (the tables: :mod:`.scan_labels`).

    ``"os.write"``, ``".f_back"``, ``"getattr(..., '__globals__')"``, ``"the string '/dev/fd'"`` -> True;
    ``"importlib.reload"``, ``"eval"``, ``"getattr() with a computed attribute name"`` -> False.
    """
    if finding.endswith(" (written)"):
        return True
    if any(phrase in finding for phrase in LIKELY_TAMPERING_PHRASES):
        return True
    if finding.startswith("the string "):
        return any(repr(s) == finding.removeprefix("the string ") for s in LIKELY_TAMPERING_STRINGS)
    if finding.startswith("."):
        return finding[1:] in LIKELY_TAMPERING_ATTRIBUTES
    if "(..., " in finding:  # getattr(..., 'name') with a literal name
        literal = finding.split("(..., ", 1)[1].rstrip(")").strip("'\"")
        return literal in LIKELY_TAMPERING_ATTRIBUTES
    if finding in TAMPERING_BUILTINS:
        return finding in LIKELY_TAMPERING_BUILTINS
    hit = tampering(finding) if " " not in finding else None
    if hit is None:
        return False
    if matches(hit, LIKELY_TAMPERING_PREFIXES) or hit.startswith(("os.exec", "os.spawn")):
        return True
    return any(part in LIKELY_TAMPERING_ATTRIBUTES for part in finding.split(".")[1:])
