"""Spot graded answers that are the library's own reference, renamed: for the instructor, never a penalty.

The lectures import :mod:`mha_course`, so every learner can read ``mha_course/core/softmax.py``. A
submission that pastes ``softmax_np`` from there into the softmax exercise passes every test; the
grader cannot and should not fail it (a learner may well have studied the reference), but the
instructor should see it. Each function or class a submission defines (the exercises' targets, and
every helper and method: a pasted reference behind a thin wrapper counts) is compared with every
function and class of the library and of the assignments' references, after normalising both:

* docstrings dropped, every variable, argument and function name replaced by its order of first
  appearance (``softmax_np(x, axis)`` and ``f(a, b)`` read the same), string constants reduced to
  "a string" (reworded error messages), attribute names and numbers kept (``.max``, ``np.exp``:
  changing those changes what the code does);
* the normalised AST is compared as a sequence of node tokens: equal is reported as "identical",
  at least :data:`NEAR` similar as "nearly identical". Short definitions (under
  :data:`MIN_TOKENS` tokens, e.g. ``return a @ b.T``) are never reported: everyone writes those alike;
* a definition that matches nothing so is compared once more with its validation lines removed, on
  both sides (:mod:`.fingerprints`): a reference pasted without its ``raise``/``require_*`` lines is
  reported as "identical (names and validation lines ignored)" or nearly so.
"""

from __future__ import annotations

import ast
import difflib
import functools
from collections.abc import Sequence
from pathlib import Path

from .code_tokens import tokens
from .scan import parse

MIN_TOKENS = 40  # a definition shorter than this is too small to tell copying from writing it
#: Tokens a definition keeps once its validation lines are gone, from which it is compared without them:
#: below it are the one- and two-line bodies independent answers share (``x.transpose(1, 2).reshape(...)``:
#: 56 tokens; the honest corpus of tests/grading/honest has 6 such matches under 80, none above).
MIN_STRIPPED_TOKENS = 80
NEAR = 0.9  # SequenceMatcher ratio from which a definition is reported as nearly identical

_LIBRARY = Path(__file__).resolve().parents[2]  # mha_course/


@functools.lru_cache(maxsize=1)
def library_without_validation() -> dict[str, tuple[str, ...]]:
    """:func:`library_definitions`, each definition's validation lines removed (:func:`.fingerprints.normalised`)."""
    from . import fingerprints  # it builds on this module's tokens()

    found: dict[str, tuple[str, ...]] = {}
    for module, node in _library_top_level():
        if isinstance(node, ast.FunctionDef):
            stripped = fingerprints.normalised(node)
            if len(stripped) >= MIN_STRIPPED_TOKENS:
                found[f"{module}.{node.name}"] = stripped
    return found


@functools.lru_cache(maxsize=1)
def _library_top_level() -> tuple[tuple[str, ast.stmt], ...]:
    """(``mha_course.module``, node) for every top-level statement of the library's modules that count as
    references: the whole package and the assignments' own references (``grading/exercises``), not the
    rest of ``grading`` (the grader itself). Parsed once: both tables read it, and neither changes a node."""
    found: list[tuple[str, ast.stmt]] = []
    for path in sorted(_LIBRARY.rglob("*.py")):
        parts = path.relative_to(_LIBRARY).with_suffix("").parts
        if parts[0] == "grading" and parts[:2] != ("grading", "exercises"):
            continue
        try:
            tree = parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, OSError, UnicodeDecodeError):
            continue
        module = ".".join(("mha_course", *parts))
        found += [(module, node) for node in tree.body]
    return tuple(found)


@functools.lru_cache(maxsize=1)
def library_definitions() -> dict[str, tuple[str, ...]]:
    """``module.name`` -> tokens, for every function and class (and method) of the library.

    The whole package is read, subpackages included, and the assignments' own references
    (``grading/exercises``); the rest of ``grading`` (the grader itself) is not a reference.
    """
    found: dict[str, tuple[str, ...]] = {}
    for module, node in _library_top_level():
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[f"{module}.{node.name}"] = tokens(node)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{module}.{node.name}.{item.name}"] = tokens(item)
    return found


#: Definitions of one submission compared token by token (exact matches are found for all of them):
#: bounds the time a notebook of thousands of functions can take.
MAX_COMPARED = 200


def _definitions(
    cells: list[tuple[int, str]],
) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    """Every function and class the cells define, at any depth (helpers and methods included)."""
    out = []
    for _, source in cells:
        try:
            tree = parse(source)
        except SyntaxError:
            continue
        out += [
            (node.name, node)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
    return out


def _users(definitions: Sequence[tuple[str, ast.AST]], targets: set[str]) -> dict[str, list[str]]:
    """Helper name -> the graded definitions that mention it (``softmax`` calling a pasted ``_ref``)."""
    users: dict[str, list[str]] = {}
    for name, node in definitions:
        if name in targets:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id != name and name not in users.get(sub.id, []):
                    users.setdefault(sub.id, []).append(name)
    return users


def _closest(mine: tuple[str, ...], library: dict[str, tuple[str, ...]]) -> tuple[str | None, float]:
    """The library definition most like ``mine``, among those at least :data:`NEAR` alike (else None, 0.0)."""
    best, best_ratio = None, 0.0
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(mine)  # the matcher indexes its second sequence once, for every comparison
    for ref_name, ref in library.items():
        if min(len(ref), len(mine)) / max(len(ref), len(mine)) < NEAR:
            continue  # ratio() cannot reach NEAR; skip the quadratic comparison
        matcher.set_seq1(ref)
        floor = max(NEAR, best_ratio)
        if matcher.quick_ratio() < floor:
            continue  # an upper bound of ratio() from the tokens' counts alone, in linear time
        ratio = matcher.ratio()
        if ratio >= floor and ratio > best_ratio:
            best, best_ratio = ref_name, ratio
    return best, best_ratio


def find_copies(cells: list[tuple[int, str]], targets: list[str]) -> list[str]:
    """One line per definition that is (nearly) identical to a library definition.

    ``cells`` are the notebook's code cells as (index, Python source); ``targets`` the names the
    exercises grade. Every definition counts, not only the targets: a reference pasted as a helper
    behind a thin wrapper (``def softmax(x, dim=-1): return _ref(x, dim)``) is named with the graded
    function that uses it. Examples: ``"softmax_np is identical to mha_course.core.softmax.softmax_np
    (names ignored)"``, ``"_ref (used by softmax) is identical to mha_course.core.softmax.softmax (names
    ignored)"``.
    """
    library = library_definitions()
    exact = {ref: name for name, ref in reversed(library.items())}
    definitions = _definitions(cells)
    users = _users(definitions, set(targets))
    report, compared = [], 0
    for name, node in definitions:
        try:
            mine = tokens(node)
        except (SyntaxError, RecursionError, ValueError):
            continue  # too deep to normalise: nothing anyone would paste
        if len(mine) < MIN_TOKENS:
            continue
        label = name if name in targets or name not in users else f"{name} (used by {', '.join(users[name])})"
        if mine in exact:
            report.append(f"{label} is identical to {exact[mine]} (names ignored)")
            continue
        if compared >= MAX_COMPARED:
            continue
        compared += 1
        best, best_ratio = _closest(mine, library)
        if best_ratio >= NEAR:
            alike = min(99, int(best_ratio * 100))  # never "100%" for what is not identical
            report.append(f"{label} is nearly identical to {best} ({alike}% alike, names ignored)")
            continue
        if line := _without_validation(node, label):
            report.append(line)
    return report


def _without_validation(node: ast.AST, label: str) -> str | None:
    """The report line of a definition equal or near to a reference once both lose their validation lines."""
    from . import fingerprints

    try:
        mine = fingerprints.normalised(node)
    except (RecursionError, ValueError):
        return None
    if len(mine) < MIN_STRIPPED_TOKENS:
        return None
    stripped = library_without_validation()
    for ref_name, ref in stripped.items():
        if ref == mine:
            return f"{label} is identical to {ref_name} (names and validation lines ignored)"
    best, best_ratio = _closest(mine, stripped)
    if best_ratio >= NEAR:
        alike = min(99, int(best_ratio * 100))
        return f"{label} is nearly identical to {best} ({alike}% alike, names and validation lines ignored)"
    return None
