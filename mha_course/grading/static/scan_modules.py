"""The modules a submission imports or changes, for the static scan (:mod:`.scan`): the names an import
brings in, where a package-level course name is defined, whether something installed provides a module,
which modules the notebook writes as literal text, and whether a library attribute it replaces is a
function or class in the grader's process (the runtime calls those libraries after the target returns).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Sequence

from .scan_rules import ALLOWED_GRADING, matches


def imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{a.name}" for a in node.names]
        if all(matches(n, ALLOWED_GRADING) for n in names):
            return names  # from mha_course.grading.learner.selfcheck import check: the module itself is not used
        return names + [node.module]
    return []


def defining_module(name: str) -> str:
    """``mha_course.softmax_np`` (a package-level name) -> ``mha_course.core.softmax.softmax_np``; others unchanged."""
    parts = name.split(".")
    if len(parts) == 2 and parts[0] == "mha_course":
        import mha_course

        module = getattr(mha_course, "_EXPORTS", {}).get(parts[1])
        if module:
            return f"mha_course.{module}.{parts[1]}"
    return name


def written_module_names(trees: Sequence[tuple[int, ast.AST]]) -> set[str]:
    """Modules the notebook writes as literal text the scan reads: ``open("helper.py", "w").write("...")``.

    A name ``X`` is in it when the notebook names a file ``X.py`` and every text it writes (``.write``,
    ``.write_text``, ``.writelines``) is a literal: then ``import X`` runs code the scan has read.
    """
    names: set[str] = set()
    literal_writes = True
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py"):
                stem = node.value.replace("\\", "/").rsplit("/", 1)[-1][:-3]
                if stem.isidentifier():
                    names.add(stem)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("write", "write_text", "writelines", "write_bytes")
            ):
                text = node.args[0] if node.args else None
                # a literal only: a text folded from pieces is not read as code (scan_strings)
                if not (isinstance(text, ast.Constant) and isinstance(text.value, (str, bytes))):
                    literal_writes = False
    return names if literal_writes else set()


def library_value_is_code(name: str) -> bool:
    """Whether the dotted ``name`` is, in the grader's process, a function or class of a module already
    imported (nothing is imported for it); an attribute it cannot look up counts as code."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        value: object = module
        try:
            for part in parts[cut:]:
                value = getattr(value, part)
        except Exception:
            return True
        return callable(value)
    return True


@functools.lru_cache(maxsize=4096)
def installed(top: str) -> bool:
    """Whether an installed package or the standard library provides the top-level module ``top``."""
    if top in sys.builtin_module_names or top in sys.stdlib_module_names or top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
