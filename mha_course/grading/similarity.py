"""Spot graded answers that are the library's own reference, renamed: for the instructor, never a penalty.

The lectures import :mod:`mha_course`, so every learner can read ``mha_course/softmax.py``. A
submission that pastes ``softmax_np`` from there into the softmax exercise passes every test; the
grader cannot and should not fail it (a learner may well have studied the reference), but the
instructor should see it. Each function or class a submission defines under an exercise's target
name is compared with every function and class of the library, after normalising both:

* docstrings dropped, every variable, argument and function name replaced by its order of first
  appearance (``softmax_np(x, axis)`` and ``f(a, b)`` read the same), string constants reduced to
  "a string" (reworded error messages), attribute names and numbers kept (``.max``, ``np.exp``:
  changing those changes what the code does);
* the normalised AST is compared as a sequence of node tokens: equal is reported as "identical",
  at least :data:`NEAR` similar as "nearly identical". Short definitions (under
  :data:`MIN_TOKENS` tokens, e.g. ``return a @ b.T``) are never reported: everyone writes those alike.
"""

from __future__ import annotations

import ast
import difflib
import functools
from pathlib import Path

from .scan import parse

MIN_TOKENS = 40  # a definition shorter than this is too small to tell copying from writing it
NEAR = 0.9  # SequenceMatcher ratio from which a definition is reported as nearly identical

_LIBRARY = Path(__file__).resolve().parents[1]


class _Normalise(ast.NodeTransformer):
    """Rename every Name/arg/def to its order of appearance and drop docstrings."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self._rename(node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg=self._rename(node.arg)), node)  # annotations dropped

    def _definition(self, node):
        node.name = self._rename(node.name)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:] or [ast.Pass()]
        node.body = body
        if hasattr(node, "returns"):
            node.returns = None
        node.decorator_list = []
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition


def tokens(node: ast.AST) -> tuple[str, ...]:
    """A definition as a sequence of node tokens, names normalised (see the module docstring)."""
    tree = _Normalise().visit(parse(ast.unparse(node)).body[0])
    out = []
    for sub in ast.walk(tree):
        out.append(type(sub).__name__)
        for name in ("id", "arg", "attr", "name"):
            value = getattr(sub, name, None)
            if isinstance(value, str):
                out.append(value)
        if isinstance(sub, ast.Constant):  # a message's wording is not the code's shape
            out.append("str" if isinstance(sub.value, str) else repr(sub.value))
        if isinstance(sub, ast.operator | ast.cmpop | ast.unaryop | ast.boolop):
            out.append(type(sub).__name__)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def library_definitions() -> dict[str, tuple[str, ...]]:
    """``module.name`` -> tokens, for every top-level function and class (and method) of the library."""
    found: dict[str, tuple[str, ...]] = {}
    for path in sorted(_LIBRARY.glob("*.py")):
        try:
            tree = parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        module = f"mha_course.{path.stem}"
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                found[f"{module}.{node.name}"] = tokens(node)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        found[f"{module}.{node.name}.{item.name}"] = tokens(item)
    return found


def _definitions(cells: list[tuple[int, str]], targets: set[str]) -> list[tuple[str, ast.AST]]:
    out = []
    for _, source in cells:
        try:
            tree = parse(source)
        except SyntaxError:
            continue
        out += [
            (node.name, node)
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in targets
        ]
    return out


def find_copies(cells: list[tuple[int, str]], targets: list[str]) -> list[str]:
    """One line per graded definition that is (nearly) identical to a library definition.

    ``cells`` are the notebook's code cells as (index, Python source); ``targets`` the names the
    exercises grade. Example: ``"softmax_np is identical to mha_course.softmax.softmax_np (names ignored)"``.
    """
    library = library_definitions()
    report = []
    for name, node in _definitions(cells, set(targets)):
        mine = tokens(node)
        if len(mine) < MIN_TOKENS:
            continue
        best, best_ratio = None, 0.0
        for ref_name, ref in library.items():
            if ref == mine:
                best, best_ratio = ref_name, 1.0
                break
            if min(len(ref), len(mine)) / max(len(ref), len(mine)) < NEAR:
                continue  # ratio() cannot reach NEAR; skip the quadratic comparison
            ratio = difflib.SequenceMatcher(None, ref, mine, autojunk=False).ratio()
            if ratio > best_ratio:
                best, best_ratio = ref_name, ratio
        if best_ratio == 1.0:
            report.append(f"{name} is identical to {best} (names ignored)")
        elif best_ratio >= NEAR:
            alike = min(99, int(best_ratio * 100))  # never "100%" for what is not identical
            report.append(f"{name} is nearly identical to {best} ({alike}% alike, names ignored)")
    return report
