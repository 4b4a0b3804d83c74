"""The keys a notebook reads through ``globals()``/``locals()``/``vars()``, for the static scan (:mod:`.scan`).

``globals()[name]``, ``globals().get(name)``, ``name in globals()`` where ``name`` can only hold plain
names written in the notebook (a self-check loop over ``["softmax", "attention"]``) read what writing
those names reads: not a finding. :func:`plain_keys` says which strings an expression can hold, or None
when the scan cannot tell (a parameter, an import, a list that may change, anything computed).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .scan_names import fold

#: What a name may hold for :func:`plain_keys`: ("value", expression assigned), ("items", iterable looped
#: over), None where the scan cannot read it (a parameter, an import, an unpacking, ``with``, ``del``,
#: ``case ... as``), or ("used", the Name) where it is read other than as a loop's iterable, in an ``in``
#: test or by len() (a list read there may be changed there).
NameSource = tuple[str, ast.AST] | None


def _unreadable_bindings(node: ast.AST, known: set[int]) -> list[str]:
    """The names ``node`` binds to a value the scan does not read (``known``: the Name targets it does read)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in known:
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.split(".")[0]]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler)) and node.name:
        return [node.name]  # case ... as name, except E as name: a str, not a Name node
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _safe_reads(trees: Sequence[tuple[int, ast.AST]]) -> set[int]:
    """Reads that cannot change what a name holds: what a loop runs over, an ``in`` test, len()."""
    safe: set[int] = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                safe.add(id(node.iter))
            elif isinstance(node, ast.Compare):
                safe.update(id(c) for c in node.comparators)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
                safe.update(id(a) for a in node.args)
    return safe


def name_sources(trees: Sequence[tuple[int, ast.AST]]) -> dict[str, list[NameSource]]:
    """Every binding of every name: what was assigned, what a loop ran over, or None (unreadable); and
    every read that may change it (a list, set or dict named once may still change: ``NAMES.append(k)``,
    ``NAMES[0] = k``, ``f(NAMES)``)."""
    sources: dict[str, list[NameSource]] = {}
    known: set[int] = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        known.add(id(target))
                        sources.setdefault(target.id, []).append(("value", node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
                known.add(id(node.target))
                sources.setdefault(node.target.id, []).append(("items", node.iter))
    safe = _safe_reads(trees)
    for _, tree in trees:
        for node in ast.walk(tree):
            for name in _unreadable_bindings(node, known):
                sources.setdefault(name, []).append(None)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in safe:
                sources.setdefault(node.id, []).append(("used", node))
    return sources


def plain_keys(
    node: ast.AST, names: dict[str, list[NameSource]], depth: int = 0, budget: list[int] | None = None
) -> set[str] | None:
    """Every string ``node`` can evaluate to, when the notebook writes them all out; None otherwise.

    ``"softmax"``, a loop variable over ``["softmax", "attention"]`` (or a name assigned such a list,
    or a dict's literal keys), a name only ever assigned literal strings. Anything computed is None,
    and so is anything that takes more than a few thousand steps to read (names bound to each other
    many times over).
    """
    budget = [5000] if budget is None else budget
    budget[0] -= 1
    if depth > 10 or budget[0] < 0:
        return None
    if isinstance(node, ast.Name):
        found: set[str] = set()
        for source in names.get(node.id) or [None]:
            if source is None:
                return None
            kind, value = source
            if kind == "used":
                continue  # a read of the name: it binds nothing
            values = (
                plain_keys(value, names, depth + 1, budget)
                if kind == "value"
                else _elements(value, names, depth + 1, budget)
            )
            if values is None:
                return None
            found |= values
        return found
    folded = fold(node, {})  # literals only: a name inside is resolved above, never by its last assignment
    return {folded} if folded is not None else None


def _elements(node: ast.AST, names: dict[str, list[NameSource]], depth: int, budget: list[int]) -> set[str] | None:
    """What iterating ``node`` yields, when it is a literal list, tuple, set or dict (keys) of strings."""
    budget[0] -= 1
    if depth > 10 or budget[0] < 0:
        return None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        elements: list[ast.AST | None] = list(node.elts)
    elif isinstance(node, ast.Dict):
        elements = list(node.keys)  # None for **other: unreadable
    elif isinstance(node, ast.Name):
        found: set[str] = set()
        sources = names.get(node.id) or [None]
        mutable = any(s is not None and s[0] == "value" and not isinstance(s[1], ast.Tuple) for s in sources)
        for source in sources:
            if source is None or (source[0] == "used" and mutable):
                return None  # unreadable, or a list, set or dict that may have changed since it was written
            if source[0] == "used":
                continue
            if source[0] != "value":
                return None
            values = _elements(source[1], names, depth + 1, budget)
            if values is None:
                return None
            found |= values
        return found
    else:
        return None
    out: set[str] = set()
    for element in elements:
        if element is None or isinstance(element, ast.Starred):
            return None
        values = plain_keys(element, names, depth + 1, budget)
        if values is None:
            return None
        out |= values
    return out
