"""Python held in string literals, for the static scan (:mod:`.scan`): a literal that parses as code
which does something is read as the notebook's own code.

Libraries run text as code (a module a cell writes then imports, ``timeit`` of a dotted name a config
resolves, TorchScript, YAML tags, ``sympify``), so every such literal is scanned, up to
:data:`MAX_STRING_CODE` characters per notebook.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

#: Characters of string literals read as code per notebook (course notebooks hold about 20 KiB of code).
MAX_STRING_CODE = 256 * 2**10
#: A string is read as code only if its Python does something: calls, imports, binds, defines, loops.
_CODE_NODES = (
    ast.Call,
    ast.Import,
    ast.ImportFrom,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.For,
    ast.While,
    ast.With,
    ast.Try,
    ast.Lambda,
    ast.Delete,
    ast.Global,
)


def code_in_string(node: ast.AST, budget: list[int], parse: Callable[[str], ast.Module]) -> ast.Module | None:
    """A string or bytes literal that is Python which does something, parsed, every line placed on the
    literal's own line (the evidence is the line that holds the text); else None.

    Libraries run text as code (a module a cell writes then imports, ``timeit`` of a dotted name a
    config resolves, TorchScript, YAML tags, ``sympify``): whatever such text holds is scanned as the
    notebook's own code. Text built at run time is not read here; the libraries that take it are
    findings of their own (scan_rules). ``budget``: characters still to read (one item, decremented);
    ``parse``: the grader's parser (:func:`.scan.parse`, passed in because :mod:`.scan` imports this module).
    """
    if not isinstance(node, ast.Constant) or not isinstance(node.value, (str, bytes)) or len(node.value) < 8:
        return None
    text = node.value.decode("utf-8", "replace") if isinstance(node.value, bytes) else node.value
    if not any(c in text for c in "\n;(=:") or budget[0] < len(text):
        return None
    budget[0] -= len(text)
    try:
        code = parse(text)
    except (SyntaxError, ValueError):
        return None
    if not any(isinstance(n, _CODE_NODES) for n in ast.walk(code)):
        return None
    for inner in ast.walk(code):
        if hasattr(inner, "lineno"):
            line = getattr(node, "lineno", 0)
            inner.lineno = line  # every node that has a lineno
            inner.end_lineno = line  # type: ignore[attr-defined]
    return code
