"""What a name in a submission's code reads as, for the static scan (:mod:`.scan`), without running it.

Dotted names resolved through the notebook's imports and plain assignments of them (``import
torch.nn.functional as F`` makes ``F.scaled_dot_product_attention`` read
``torch.nn.functional.scaled_dot_product_attention``); strings folded to the constant they always are
(``"grad" + "ing"``); ``getattr(obj, "name")`` with a literal name read as ``obj.name`` (a computed one
is a finding); an expression that is a number (a file descriptor); a call's arguments by name.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .scan_rules import ATTRIBUTE_BUILTINS, REACHING_ATTRIBUTES, TAMPERING_ATTRIBUTES


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = aliases.get(node.id, node.id)
    return ".".join([base, *reversed(parts)])


def import_aliases(trees: Sequence[tuple[int, ast.AST]]) -> dict[str, str]:
    """Local name -> dotted name, from imports and from plain assignments of them (``F = torch.nn.functional``)."""
    aliases: dict[str, str] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for _ in range(2):  # assignments may chain: m = torch; f = m.nn.functional
        roots = {v.split(".")[0] for v in aliases.values()}
        for _, tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    value = node.value
                    # getattr(...) calls are resolved where they are used, not here
                    if isinstance(value, (ast.Name, ast.Attribute)):
                        resolved = dotted(value, aliases)
                        root = resolved.split(".")[0] if resolved else None
                        if resolved and root in roots:
                            aliases.setdefault(node.targets[0].id, resolved)
    return aliases


def fold(node: ast.AST, strings: dict[str, str], depth: int = 0) -> str | None:
    """The string an expression always evaluates to, or None: literals, ``+``, f-strings of literals,
    ``"".join([...])`` and names assigned such a string (``strings``). ``"grad" + "ing"`` -> ``"grading"``."""
    if depth > 50:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return strings.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = fold(node.left, strings, depth + 1), fold(node.right, strings, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [fold(v, strings, depth + 1) for v in node.values]
        return "".join(p for p in parts if p is not None) if None not in parts else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        sep = fold(node.func.value, strings, depth + 1)
        parts = [fold(e, strings, depth + 1) for e in node.args[0].elts]
        return sep.join(p for p in parts if p is not None) if sep is not None and None not in parts else None
    return None


def constants(trees: Sequence[tuple[int, ast.AST]]) -> tuple[dict[str, str], set[str]]:
    """Names assigned a constant string (folded), and names assigned an int literal or looping over a range()."""
    strings: dict[str, str] = {}
    ints: set[str] = set()
    for _ in range(2):  # chains: a = "grad"; b = a + "ing"
        for _, tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    value = fold(node.value, strings)
                    if value is not None:
                        strings[node.targets[0].id] = value
                    elif isinstance(node.value, ast.Constant) and type(node.value.value) is int:
                        ints.add(node.targets[0].id)
                elif (
                    isinstance(node, (ast.For, ast.comprehension))
                    and isinstance(node.target, ast.Name)
                    and isinstance(node.iter, ast.Call)
                    and isinstance(node.iter.func, ast.Name)
                    and node.iter.func.id == "range"
                ):
                    ints.add(node.target.id)  # for k in range(3, 64): open(k) tries descriptors
    return strings, ints


def attribute_call(
    node: ast.Call, aliases: dict[str, str], strings: dict[str, str] | None = None
) -> tuple[str | None, str | None]:
    """For getattr(obj, ...) and friends: (the dotted name read, or None; a tampering reason, or None).

    A computed name is tampering, except on ``self``/``cls`` (``getattr(self, f"{p}_proj")`` is how
    modules loop over their layers). There a name that folds to a constant (``"grad" + "ing"``)
    reads as that literal, and a literal from :data:`REACHING_ATTRIBUTES` is tampering on any
    object the scan cannot name (``self`` may be the package, passed in as an argument).
    """
    func = node.func
    if not (isinstance(func, ast.Name) and func.id in ATTRIBUTE_BUILTINS and len(node.args) >= 2):
        return None, None
    obj, attr = node.args[0], node.args[1]
    on_self = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
    literal = fold(attr, strings or {})
    if literal is not None and not isinstance(attr, ast.Constant) and not on_self and func.id != "hasattr":
        # obfuscated, on a nameable object: no honest code spells a name it knows in pieces
        return None, f"{func.id}() with a computed attribute name ({literal!r}, built from pieces)"
    if literal is not None:
        if literal in TAMPERING_ATTRIBUTES or literal == "__dict__":
            return None, f"{func.id}(..., {literal!r})"
        base = dotted(obj, aliases)
        if literal in REACHING_ATTRIBUTES and (base is None or base.split(".")[0] in ("self", "cls")):
            return None, f"{func.id}(..., {literal!r})"
        return (f"{base}.{literal}" if base else None), None
    if func.id != "hasattr" and not on_self:
        return None, f"{func.id}() with a computed attribute name"
    return None, None


def is_number(node: ast.AST, ints: set[str], depth: int = 0) -> bool:
    """Whether an expression is an int literal, a name assigned one, or arithmetic on them (a file descriptor)."""
    if depth > 50:
        return True  # arithmetic this deep as a file name is no path anyone writes
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in ints
    if isinstance(node, ast.UnaryOp):
        return is_number(node.operand, ints, depth + 1)
    if isinstance(node, ast.BinOp):
        return is_number(node.left, ints, depth + 1) or is_number(node.right, ints, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "len", "abs"):
        return True
    return False


def call_arguments(node: ast.Call, names: tuple[str, ...]) -> list[ast.expr]:
    """The call's arguments at the positions, or with the keywords, of ``names``."""
    found = list(node.args[: len(names)])
    found += [k.value for k in node.keywords if k.arg in names]
    return found
