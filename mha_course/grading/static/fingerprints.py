"""Fingerprints of a graded function, for comparing students with each other and with the references.

A definition is normalised before it is compared, so that what a copier changes cheaply does not
hide the copy:

* the AST is used (comments and formatting are gone), docstrings dropped, every name replaced by
  its order of first appearance (:func:`.similarity.tokens`);
* **validation lines** are removed: ``assert ...``, an ``if`` whose body only raises (or warns), and a
  call of a checking helper (``require_*``, ``check_*``, ``validate*``, alone or assigned back):
  pasting a reference without its checks is still the reference.

A graded function's **unit** is its own tokens followed by those of the notebook's functions it
calls (transitively, in order of first call): a renamed helper behind a wrapper is still compared.
Units are compared through winnowed fingerprints (Schleimer, Wilkerson and Aiken, "Winnowing",
SIGMOD 2003; the method of MOSS): the hashes of every :data:`K` consecutive tokens, of which each
window of :data:`WINDOW` hashes keeps its smallest. The score of a pair is the Jaccard index of the
two fingerprint sets (1.0: the same normalised code).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from typing import Any

from .code_tokens import tokens
from .scan import parse

K = 8  # tokens per k-gram: about one short statement (``m = x.max(axis=a, keepdims=True)`` is 15)
WINDOW = 4  # hashes per winnowing window: a match of K + WINDOW - 1 tokens is always seen

_CHECKERS = ("require_", "check_", "_check", "validate", "_validate", "_require", "ensure_", "_ensure")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _called_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return ""


def _only_raises(body: list[ast.stmt]) -> bool:
    return bool(body) and all(
        isinstance(s, ast.Raise)
        or isinstance(s, ast.Expr)
        and _called_name(s.value) in ("warn", "warning")
        or isinstance(s, ast.Pass)
        for s in body
    )


def is_validation(statement: ast.stmt) -> bool:
    """True for a line that checks the input rather than computes the answer (see the module docstring)."""
    if isinstance(statement, ast.Assert):
        return True
    if isinstance(statement, ast.If):
        return _only_raises(statement.body) and (
            not statement.orelse or all(isinstance(s, ast.stmt) and is_validation(s) for s in statement.orelse)
        )
    value = statement.value if isinstance(statement, ast.Expr | ast.Assign) else None
    return value is not None and _called_name(value).lower().startswith(_CHECKERS)


class _StripValidation(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
                kept = [s for s in body if not is_validation(s)]
                if field == "body" and not kept:
                    kept = [ast.Pass()]  # a body must not be empty; only validation: ``pass``
                setattr(node, field, kept)
        return node


def copy_tree(node: Any) -> Any:
    """A copy of a syntax tree: new nodes and lists, the leaves (names, constants, positions) shared.

    What ``copy.deepcopy`` makes of a tree, without its memo of every object visited: the grader strips the
    validation lines of every definition of every notebook it grades, so the copy's cost counts.
    """
    if isinstance(node, list):
        return [copy_tree(item) for item in node]
    if not isinstance(node, ast.AST):
        return node  # str, int, None, a constant's value: never changed in place
    clone = node.__class__.__new__(node.__class__)
    for field in node._fields:
        if hasattr(node, field):
            setattr(clone, field, copy_tree(getattr(node, field)))
    for attribute in node._attributes:
        if hasattr(node, attribute):
            setattr(clone, attribute, getattr(node, attribute))
    return clone


def strip_validation(node: ast.AST) -> ast.AST:
    """A copy of ``node`` without its validation lines (``node`` is left as it was)."""
    return _StripValidation().visit(copy_tree(node))


def normalised(node: ast.AST) -> tuple[str, ...]:
    """The tokens of a definition with names normalised and validation lines removed."""
    return tokens(strip_validation(node))


def definitions(cells: Iterable[tuple[int, str]]) -> dict[str, tuple[int, ast.AST]]:
    """Name -> (cell index, node) of each top-level function or class of the cells; the last definition wins.

    A factory's inner function (``softmax = make_softmax()``) is reached through the factory, the
    name's last assignment from a call of a notebook function.
    """
    found: dict[str, tuple[int, ast.AST]] = {}
    for index, source in cells:
        try:
            tree = parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, _DEFS):
                found[node.name] = (index, node)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                called = _called_name(node.value) if isinstance(node.value, ast.Call) else ""
                if isinstance(node.value, ast.Name):
                    called = node.value.id  # an alias: f = g
                if called in found and node.targets[0].id != called:
                    found[node.targets[0].id] = found[called]
    return found


def unit(name: str, found: dict[str, tuple[int, ast.AST]]) -> list[tuple[str, int, ast.AST]]:
    """The definition of ``name`` and the notebook definitions it uses, transitively, in order of first use."""
    out: list[tuple[str, int, ast.AST]] = []
    seen: set[int] = set()
    queue = [name]
    while queue:
        current = queue.pop(0)
        if current not in found or id(found[current][1]) in seen:
            continue
        index, node = found[current]
        seen.add(id(node))
        out.append((current, index, node))
        queue += [sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and sub.id in found]
    return out


def unit_tokens(parts: list[tuple[str, int, ast.AST]]) -> tuple[str, ...]:
    """The normalised tokens of a unit's definitions, one after the other."""
    out: list[str] = []
    for _, _, node in parts:
        try:
            out += normalised(node)
        except (RecursionError, ValueError):
            continue  # too deep to normalise: nothing anyone would paste
    return tuple(out)


def _hash(gram: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(gram).encode(), digest_size=8).digest(), "big")


def fingerprints(sequence: tuple[str, ...], k: int = K, window: int = WINDOW) -> frozenset[int]:
    """The winnowed fingerprints of a token sequence (a sequence shorter than ``k`` is one k-gram)."""
    if not sequence:
        return frozenset()
    hashes = [_hash(sequence[i : i + k]) for i in range(max(1, len(sequence) - k + 1))]
    if len(hashes) <= window:
        return frozenset([min(hashes)])
    return frozenset(min(hashes[i : i + window]) for i in range(len(hashes) - window + 1))


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """|a & b| / |a | b| (0.0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0
