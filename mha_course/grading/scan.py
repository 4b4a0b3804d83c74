"""Static scan of a submission's code, before anything runs.

Names are resolved through the notebook's imports (``import torch.nn.functional as F`` makes
``F.scaled_dot_product_attention`` read ``torch.nn.functional.scaled_dot_product_attention``).
Three kinds of finding:

* **tampering** -- anywhere in the notebook: tools that reach into the grader or the interpreter
  instead of computing an answer (``sys.modules``, ``importlib``, ``__import__``, ``exec``/``eval``,
  ``ctypes``, ``gc.get_referrers``, frame inspection, ``torch._C`` / ``torch.ops`` / torch's
  dispatch internals, process and signal control such as ``os.kill`` or ``subprocess``, and
  ``mha_course.grading`` beyond ``check``). None of these is needed by any exercise; the grader
  gives such a submission 0 and says exactly what it found, for a person to review.
* **forbidden** -- inside the definition of an exercise's target (its ``def``/``class``, the last one
  in the notebook): a reference to one of the exercise's ``forbidden`` names. That exercise scores 0.
  (The run-time tripwire catches the calls this cannot see, e.g. through a helper function.)
* **imports** -- ``mha_course`` imports other than ``check`` and the assignment's ``provided``
  modules: they fail in the grader, so the learner is told why.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .spec import Assignment

TAMPERING_PREFIXES = (
    "ctypes", "importlib", "sys.modules", "sys.meta_path", "sys.path_hooks", "sys._getframe",
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "builtins", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "inspect.currentframe", "inspect.stack",
    "inspect.getouterframes", "inspect.trace", "torch._C", "torch.ops", "torch.overrides",
    "torch.utils._python_dispatch", "torch._dispatch", "os.kill", "os.killpg", "os.fork",
    "os.forkpty", "os.system", "os.popen", "os.exec", "os.spawn", "os.posix_spawn", "os.setpgrp",
    "os.setsid", "os.dup2", "os.close", "subprocess", "multiprocessing", "signal", "psutil",
    "socket", "pty", "runpy", "resource", "mha_course.grading",
)
TAMPERING_BUILTINS = ("__import__", "exec", "eval", "compile", "__builtins__", "breakpoint", "__loader__")
_ALLOWED_GRADING = ("mha_course.check", "mha_course.grading.check", "mha_course.grading.selfcheck.check")


@dataclass(frozen=True)
class Finding:
    """One thing the scan found: where (1-based cell number as Jupyter counts, line) and what."""

    cell: int
    line: int
    name: str

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"


@dataclass
class ScanReport:
    tampering: list[Finding] = field(default_factory=list)
    forbidden: dict[str, list[Finding]] = field(default_factory=dict)   # exercise key -> findings
    imports: list[Finding] = field(default_factory=list)
    syntax_errors: list[str] = field(default_factory=list)


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = aliases.get(node.id, node.id)
    return ".".join([base, *reversed(parts)])


def _aliases(trees: list[tuple[int, ast.AST]]) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    return []


def _matches(name: str, prefixes: tuple[str, ...] | list[str]) -> str | None:
    for prefix in prefixes:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


def _tampering(name: str) -> str | None:
    if _matches(name, _ALLOWED_GRADING):
        return None
    hit = _matches(name, TAMPERING_PREFIXES)
    if hit is None and name.startswith(("os.exec", "os.spawn")):
        hit = name
    return hit


def scan(cells: list[tuple[int, str]], assignment: Assignment) -> ScanReport:
    """Scan ``(cell index, source)`` pairs (from :func:`.notebook.code_cells`) for ``assignment``."""
    report = ScanReport()
    trees: list[tuple[int, ast.AST]] = []
    for index, source in cells:
        try:
            trees.append((index, ast.parse(source)))
        except SyntaxError as exc:
            report.syntax_errors.append(f"cell {index + 1}, line {exc.lineno}: SyntaxError: {exc.msg}")
    aliases = _aliases(trees)
    provided = tuple(assignment.provided)
    seen: set[tuple[int, int, str]] = set()

    def add(bucket: list[Finding], index: int, node: ast.AST, name: str) -> None:
        key = (index, getattr(node, "lineno", 0), name)
        if key not in seen:
            seen.add(key)
            bucket.append(Finding(index + 1, getattr(node, "lineno", 0), name))

    targets: dict[str, tuple[int, ast.AST]] = {}
    for index, tree in trees:
        for node in ast.walk(tree):
            for imported in _imported_names(node):
                if _tampering(imported):
                    add(report.tampering, index, node, imported)
                elif (imported.startswith("mha_course.") and imported not in _ALLOWED_GRADING
                      and not _matches(imported, provided) and not (
                          isinstance(node, ast.ImportFrom) and imported == node.module and node.module == "mha_course")):
                    add(report.imports, index, node, imported)
            if isinstance(node, ast.Name) and node.id in TAMPERING_BUILTINS:
                add(report.tampering, index, node, node.id)
            elif isinstance(node, (ast.Attribute, ast.Name)) and isinstance(getattr(node, "ctx", None), ast.Load):
                name = _dotted(node, aliases)
                if name and name != getattr(node, "id", None) and _tampering(name):
                    add(report.tampering, index, node, name)
        for node in tree.body if isinstance(tree, ast.Module) else []:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                targets[node.name] = (index, node)
    for exercise in assignment.exercises:
        if exercise.target not in targets:
            continue
        index, definition = targets[exercise.target]
        forbidden = [f for f in exercise.forbidden if not f.startswith("torch.Tensor.")]
        bucket: list[Finding] = []
        for node in ast.walk(definition):
            if isinstance(node, (ast.Attribute, ast.Name)):
                name = _dotted(node, aliases)
                if name and _matches(name, forbidden):
                    add(bucket, index, node, name)
        if bucket:
            report.forbidden[exercise.key] = bucket
    return report
