"""A definition as a sequence of node tokens with its names normalised: what the similarity checks compare.

Two definitions that differ only in their names, docstrings, annotations, decorators or messages give the
same tokens. :mod:`.similarity` compares them with the library's references, :mod:`.fingerprints` winnows
them for student-to-student comparisons.
"""

from __future__ import annotations

import ast

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: Fields that say nothing about what a definition computes: annotations and decorators.
_SKIPPED = {"decorator_list", "returns", "annotation", "type_comment"}


def _docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def tokens(node: ast.AST) -> tuple[str, ...]:
    """A definition as a sequence of node tokens, names normalised (see the module docstring).

    One iterative pre-order walk (no recursion: a deeply nested expression cannot overflow it):
    each node gives its type; a variable, argument or definition name gives ``v<k>``, k its order of
    first appearance; an attribute its name; a constant ``str`` or its value. Docstrings,
    annotations and decorators are left out.
    """
    names: dict[str, str] = {}
    out: list[str] = []
    stack = [node]
    while stack:
        sub = stack.pop()
        out.append(type(sub).__name__)
        if isinstance(sub, ast.Name):
            out.append(names.setdefault(sub.id, f"v{len(names)}"))
        elif isinstance(sub, ast.arg):
            out.append(names.setdefault(sub.arg, f"v{len(names)}"))
        elif isinstance(sub, _DEFINITIONS):
            out.append(names.setdefault(sub.name, f"v{len(names)}"))
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant):  # a message's wording is not the code's shape
            out.append("str" if isinstance(sub.value, str) else repr(sub.value))
        elif isinstance(name := getattr(sub, "name", None), str):  # except ... as name, import ... as name
            out.append(name)
        children: list[ast.AST] = []
        for field, value in ast.iter_fields(sub):
            if field in _SKIPPED:
                continue
            items = value if isinstance(value, list) else [value]
            if field == "body" and isinstance(sub, _DEFINITIONS) and items and _docstring(items[0]):
                items = items[1:]
            children += [item for item in items if isinstance(item, ast.AST)]
        stack.extend(reversed(children))
    return tuple(out)
