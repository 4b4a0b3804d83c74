"""What of mha_course a submission can see while it is graded: a *view* of the package.

The view is a folder built per assignment and mounted read-only over the real package path inside
the sandbox (:mod:`mha_course.grading.walls.bubblewrap`). It holds the submission runtime (:data:`RUNTIME_FILES`), the
assignment's call functions, the building blocks it declares in ``provided`` (and the library
modules those import), the self-check helpers (:data:`HELPERS`: ``assert_close``), a package
``__init__`` that exports only those, a ``check`` that does nothing, and the grader's matplotlib
font list (``mplcache/``, so no sandbox scans the fonts again). solutions/, the exercise modules
(hidden tests), the reference implementations and the grader are simply not in it. ``progress`` (the
learner's progress listing) is a no-op there too, so a notebook that lists its progress grades as it runs.

:func:`mount_args` is the rest of what the sandbox sees: the system and the Python installation
read-only, the view over the package, every other copy of the course in those trees covered
(:func:`other_copies`), two size-limited tmpfs, and ``/``, ``/run`` and ``/dev`` read-only.
:func:`stand_ins` lets a sandbox running as a uid of its own mount what only root may reach.
"""

from __future__ import annotations

import compileall
import contextlib
import dis
import os
import shutil
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import CodeType
from typing import Any

from ..inside.messages import MPL_CACHE_DIR, SCRATCH, VIEW_EXTRA
from ..inside.runner import HELPERS
from .resources import Resources
from .tier import IsolationError

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # mha_course/
# What every sandbox reads of the system, in every tier: the loader, libraries, time zone
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/alternatives",
)
# SCRATCH: the submission's writable tmpfs; VIEW_EXTRA: extra modules (an assignment registered from elsewhere)

# The folder of what runs inside the sandbox (everything else under grading/ is the grader's): copied whole.
RUNTIME_DIR = PACKAGE_DIR / "grading" / "inside"
RUNTIME_FILES = tuple(sorted(p.name for p in RUNTIME_DIR.glob("*.py") if p.name != "__init__.py"))


_PACKAGE_INIT = '''"""mha_course as a submission sees it while being graded: `check`, `assert_close` and the provided building blocks."""

import importlib

PROVIDED = {provided!r}
EXPORTS = {exports!r}  # public names of the provided modules, as the real package exports them


for _name, _module in EXPORTS.items():  # bound once (the real package looks up on every use): forbid both spellings
    globals()[_name] = getattr(importlib.import_module("mha_course." + _module), _name)


def _no_progress(*args, **kwargs):
    return None


def __getattr__(name):
    if name == "check":
        from .grading.learner.selfcheck import check
        return check
    if name == "progress":  # the learner's progress listing: nothing to list, nothing recorded, while grading
        return _no_progress
    raise AttributeError(
        f"mha_course.{{name}} is not available while grading: it holds the course's reference answers, and this "
        "assignment asks you to write the code yourself (only `check`, `assert_close` and the building blocks this assignment "
        f"provides{{' (' + ', '.join(PROVIDED) + ')' if PROVIDED else ''}} can be imported from mha_course)")
'''

_SELFCHECK = '''"""The self-check while grading: a no-op (the grader runs the tests itself, outside this sandbox)."""

GRADING = True


def check(*args, **kwargs):
    return None
'''


def _module_file(name: str) -> Path:
    module = sys.modules.get(name)
    if module is None:
        import importlib

        module = importlib.import_module(name)
    origin = getattr(module, "__file__", None)
    if not origin:
        raise IsolationError(f"module {name} has no source file to put in the sandbox")
    return Path(origin).resolve()


def _imports_in(code: CodeType) -> Iterator[tuple[str, int, tuple[str, ...]]]:
    """(module, level, names) of each import statement compiled into ``code``, its functions' and classes' too."""
    pushed: deque[Any] = deque(maxlen=2)
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            level, names = pushed  # pushed just before it: the level, then the names a from-import takes
            yield instruction.argval, level, tuple(names or ())
        pushed.append(instruction.argval)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _imports_in(const)


def _local_imports(path: Path, package: str) -> set[str]:
    """mha_course modules a provided module imports (relative or absolute), for the view's closure.

    Read from the module's bytecode rather than its syntax tree: ``compile`` builds no Python AST objects,
    so this needs no lock against the grader's other threads building ASTs at once (the scan's ``parse``).
    """
    found: set[str] = set()
    for module, level, names in _imports_in(compile(path.read_bytes(), str(path), "exec")):
        if level:
            base = package.rsplit(".", level - 1)[0] if level > 1 else package
            found.add(f"{base}.{module}" if module else base)
            if not module:
                found.update(f"{base}.{name}" for name in names)
        elif module.startswith("mha_course."):
            found.add(module)
    return {
        m
        for m in found
        if m.startswith("mha_course.") and (PACKAGE_DIR.parent / (m.replace(".", "/") + ".py")).is_file()
    }


def view_modules(call_modules: list[str], provided: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(mha_course modules in the view, extra top-level modules): call modules, provided ones and their imports."""
    inside: set[str] = set()
    done = {f"mha_course.grading.inside.{f[:-3]}" for f in RUNTIME_FILES}  # copied by build_view itself
    extra = []
    todo = list(provided) + list(HELPERS)
    for name in call_modules:
        if name.startswith("mha_course."):
            todo.append(name)
        else:
            extra.append(name)  # e.g. a test's own assignment module
    while todo:
        name = todo.pop()
        if name in inside or name in done:
            continue
        inside.add(name)
        package = name if _module_file(name).name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_local_imports(_module_file(name), package) - inside)
    return sorted(inside), sorted(extra)


def build_view(root: Path, call_modules: list[str], provided: tuple[str, ...]) -> Path:
    """Write the sandbox's copy of mha_course under ``root`` (``root/mha_course``, ``root/extra``); returns root."""
    inside, extra = view_modules(call_modules, provided)
    package = root / "mha_course"
    for folder in ("inside", "learner", "calls"):
        (package / "grading" / folder).mkdir(parents=True, exist_ok=True)
    (root / "extra").mkdir(exist_ok=True)
    import mha_course

    exports = {
        name: module
        for name, module in getattr(mha_course, "_EXPORTS", {}).items()
        if f"mha_course.{module}" in inside and module != "grading.learner.selfcheck"
    }
    (package / "__init__.py").write_text(_PACKAGE_INIT.format(provided=tuple(provided), exports=exports))
    (package / "grading" / "__init__.py").write_text('"""The grader\'s submission runtime."""\n')
    (package / "grading" / "learner" / "__init__.py").write_text("")
    (package / "grading" / "learner" / "selfcheck.py").write_text(_SELFCHECK)
    shutil.copyfile(RUNTIME_DIR / "__init__.py", package / "grading" / "inside" / "__init__.py")
    for runtime in RUNTIME_FILES:
        shutil.copyfile(RUNTIME_DIR / runtime, package / "grading" / "inside" / runtime)
    shutil.copyfile(PACKAGE_DIR / "grading" / "calls" / "__init__.py", package / "grading" / "calls" / "__init__.py")
    for name in inside:
        source = _module_file(name)
        target = package.parent / Path(*name.split(".")).with_suffix(".py")
        if source.name == "__init__.py":
            target = package.parent / Path(*name.split(".")) / "__init__.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        for parent in target.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
    for name in extra:
        shutil.copyfile(_module_file(name), root / "extra" / (name.replace(".", "/") + ".py"))
    _copy_font_cache(root / MPL_CACHE_DIR)
    # bytecode written here, by the grader: the sandbox (python -B, a read-only view) would otherwise
    # compile these modules again for every submission
    compileall.compile_dir(root, quiet=2)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    root.chmod(0o755)
    return root


def _copy_font_cache(target: Path) -> None:
    """The grader's matplotlib font list, copied into the view (a bind of the grader's home could fail or leak)."""
    target.mkdir(exist_ok=True)
    try:
        import matplotlib

        cache = Path(matplotlib.get_cachedir())
    except Exception:
        return
    for path in cache.glob("fontlist-*.json"):
        shutil.copyfile(path, target / path.name)


# --- the mounts: the view, the system, and nothing else ------------------------------------------------


def open_to_others(path: str) -> bool:
    """Whether any uid may reach ``path`` (every folder above it searchable by others, it readable by others)."""
    path = os.path.realpath(path)
    try:
        for parent in Path(path).parents:
            if not os.stat(parent).st_mode & 0o001:
                return False
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & 0o004) and (not os.path.isdir(path) or bool(mode & 0o001))


def stand_ins(mounts: list[str], stage: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Mounts whose source another uid cannot reach (a Python under /root, mode 0700) get a stand-in.

    Each such source is bound, as root, in a private mount namespace of the process that then becomes
    the sandbox's uid, onto a stand-in under ``stage`` (a folder every uid may reach); bwrap mounts the
    stand-in. Inside, the files keep their host owners and modes: what is private on the host stays so.
    Returns the rewritten mounts and the (source, stand-in) pairs.
    """
    out = list(mounts)
    staged: list[tuple[str, str]] = []
    for i, arg in enumerate(mounts):
        if arg != "--ro-bind" or not os.path.exists(mounts[i + 1]) or open_to_others(mounts[i + 1]):
            continue
        source = mounts[i + 1]
        stage.mkdir(mode=0o755, exist_ok=True)
        stand_in = stage / str(len(staged))
        if os.path.isdir(source):
            stand_in.mkdir(mode=0o755, exist_ok=True)
        else:
            stand_in.touch(mode=0o644, exist_ok=True)
        staged.append((source, str(stand_in)))
        out[i + 1] = str(stand_in)
    return out, staged


_MS_BIND, _MS_REC, _MS_PRIVATE, _CLONE_NEWNS = 0x1000, 0x4000, 0x40000, 0x20000


def libc_handle() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def bind_privately(staged: list[tuple[str, str]], libc: Any = None) -> None:
    """Between fork and exec, as root: a mount namespace of this process's own with each source on its stand-in."""
    import ctypes

    libc = libc or libc_handle()

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), what)

    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    for source, stand_in in staged:
        check(libc.mount(source.encode(), stand_in.encode(), None, _MS_BIND | _MS_REC, None), f"bind {source}")


def mount_args(view: Path, res: Resources) -> list[str]:
    """bwrap arguments: the read-only system and Python, the view over mha_course, /scratch, /proc, /dev."""
    # The writable places first: a bind below them (a checkout under /tmp) then lands inside the tmpfs.
    size = str(res.scratch_mb * 2**20)
    args: list[str] = [
        "--perms",
        "1777",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        size,
        "--tmpfs",
        SCRATCH,
    ]
    seen: set[str] = set()

    def ro(path: str | Path) -> None:
        p = str(path)
        if p in seen or not os.path.exists(p):
            return
        seen.add(p)
        args.extend(["--ro-bind", p, p])

    for system in SYSTEM_PATHS:
        if os.path.islink(system):
            args.extend(["--symlink", os.readlink(system), system])
            seen.add(system)
        else:
            ro(system)
    for prefix in {sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}:
        if not any(prefix == s or prefix.startswith(s + "/") for s in seen):
            ro(prefix)
    # Package folders reached through a .pth file (a venv that reuses another's packages): only
    # folders named site-packages/dist-packages, never a source tree that sys.path may also hold.
    for entry in sys.path:
        if os.path.basename(entry) in ("site-packages", "dist-packages") and not any(
            entry == s or entry.startswith(s + "/") for s in seen
        ):
            ro(entry)
    # any other copy of the course in what is mounted (a second install, an editable finder, a .pth)
    # is covered by an empty folder or an empty file; the view replaces the package itself
    empty = view / "empty"
    empty.mkdir(exist_ok=True)
    for path in other_copies(sorted(seen)):
        args.extend(["--ro-bind", str(empty) if os.path.isdir(path) else os.devnull, path])
    args.extend(["--ro-bind", str(view / "mha_course"), str(PACKAGE_DIR)])
    args.extend(["--ro-bind", str(view), VIEW_EXTRA])
    # /dev read-only (its shm folder would be a writable tmpfs outside the scratch's size limit; the
    # devices themselves stay usable), and last the root (and /run in it) read-only
    args.extend(["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/"])
    return args


def _copy_names(folder: str) -> list[str]:
    """Entries of ``folder`` that are (or lead to) a copy of mha_course: the package, its metadata, finders, .pth."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(folder):
            path = os.path.join(folder, entry)
            low = entry.lower().replace("-", "_")
            if entry == "mha_course" or low.startswith("mha_course_") or low.startswith("mha_course."):
                found.append(path)  # the package, mha_course-X.dist-info / .egg-info / .egg-link
            elif "mha_course" in low:
                found.append(path)  # __editable__.mha_course-X.pth, __editable___mha_course_X_finder.py
            elif entry.endswith(".pth"):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    with open(path, encoding="utf-8") as f:
                        if "mha_course" in f.read(1 << 20):
                            found.append(path)
    return found


def other_copies(mounted: list[str]) -> list[str]:
    """Paths inside the ``mounted`` trees that hold a copy of mha_course other than :data:`PACKAGE_DIR`.

    Looked for in every import path the grader's Python has (``sys.path`` and the folders its .pth
    files add) and in the usual site folders under each mounted tree.
    """

    def inside(path: str) -> bool:
        return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounted)

    folders = {p for p in sys.path if p and os.path.isdir(p)}
    for m in mounted:
        for pattern in (
            "lib/python3*/site-packages",
            "lib/python3*/dist-packages",
            "lib/python3/dist-packages",
            "local/lib/python3*/dist-packages",
            "local/lib/python3*/site-packages",
        ):
            folders.update(str(p) for p in Path(m).glob(pattern) if p.is_dir())
    own = {str(PACKAGE_DIR), os.path.realpath(PACKAGE_DIR)}
    found: set[str] = set()
    for folder in folders:
        for path in _copy_names(folder):
            if path in own or os.path.realpath(path) in own:
                continue
            if inside(path) or inside(os.path.realpath(path)):
                found.add(path)
    return sorted(found)
