"""What of mha_course a submission can see while it is graded: a *view* of the package.

The view is a folder built per assignment and mounted read-only over the real package path inside
the sandbox (:mod:`.isolation`). It holds the submission runtime (:data:`RUNTIME_FILES`), the
assignment's call functions, the building blocks it declares in ``provided`` (and the library
modules those import), the self-check helpers (:data:`HELPERS`: ``assert_close``), a package
``__init__`` that exports only those, a ``check`` that does nothing, and the grader's matplotlib
font list (``mplcache/``, so no sandbox scans the fonts again). solutions/, the exercise modules (hidden tests), the reference implementations and the
grader are simply not in it.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

from .sandbox import HELPERS
from .scan import parse

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # mha_course/

# Files of mha_course/grading/ that run inside the sandbox (everything else there is the grader's).
RUNTIME_FILES = ("wire.py", "guard.py", "convert.py", "sandbox.py", "broker.py")


class IsolationError(RuntimeError):
    """Bubblewrap is missing or refuses to run here; the message says why and what to do."""


_PACKAGE_INIT = '''"""mha_course as a submission sees it while being graded: `check`, `assert_close` and the provided building blocks."""

import importlib

PROVIDED = {provided!r}
EXPORTS = {exports!r}  # public names of the provided modules, as the real package exports them


for _name, _module in EXPORTS.items():  # bound now, as the real package does (after the submodule's import)
    globals()[_name] = getattr(importlib.import_module("mha_course." + _module), _name)


def __getattr__(name):
    if name == "check":
        from .grading.selfcheck import check
        return check
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


def _local_imports(path: Path, package: str) -> set[str]:
    """mha_course modules a provided module imports (relative or absolute), for the view's closure."""

    found: set[str] = set()
    tree = parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
                found.add(mod)
                if not node.module:
                    found.update(f"{base}.{a.name}" for a in node.names)
            elif node.module and node.module.startswith("mha_course."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mha_course."))
    return {
        m
        for m in found
        if m.startswith("mha_course.") and (PACKAGE_DIR.parent / (m.replace(".", "/") + ".py")).is_file()
    }


def view_modules(call_modules: list[str], provided: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(mha_course modules in the view, extra top-level modules): call modules, provided ones and their imports."""
    inside: set[str] = set()
    done = {f"mha_course.grading.{f[:-3]}" for f in RUNTIME_FILES}  # copied by build_view itself
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
    (package / "grading").mkdir(parents=True, exist_ok=True)
    (root / "extra").mkdir(exist_ok=True)
    import mha_course

    exports = {
        name: module
        for name, module in getattr(mha_course, "_EXPORTS", {}).items()
        if f"mha_course.{module}" in inside and module != "grading.selfcheck"
    }
    (package / "__init__.py").write_text(_PACKAGE_INIT.format(provided=tuple(provided), exports=exports))
    (package / "grading" / "__init__.py").write_text('"""The grader\'s submission runtime."""\n')
    (package / "grading" / "selfcheck.py").write_text(_SELFCHECK)
    for runtime in RUNTIME_FILES:
        shutil.copyfile(PACKAGE_DIR / "grading" / runtime, package / "grading" / runtime)
    (package / "grading" / "calls").mkdir(exist_ok=True)
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
    _copy_font_cache(root / "mplcache")
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
