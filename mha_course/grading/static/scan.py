"""Static scan of a submission's code, before anything runs.

Names are resolved through the notebook's imports (``import torch.nn.functional as F`` makes
``F.scaled_dot_product_attention`` read ``torch.nn.functional.scaled_dot_product_attention``).
Three kinds of finding:

* **tampering** -- anywhere in the notebook: tools that reach into the grader or the interpreter
  instead of computing an answer (``sys.modules``, ``importlib``, ``pkgutil``, ``__import__``,
  ``exec``/``eval``, ``pickle``, ``ctypes``, ``gc.get_referrers``, frame inspection, ``torch._C`` /
  ``torch.ops`` / any other private ``torch._name``, process, signal and file-descriptor control
  such as ``os.kill``, ``os.write`` or ``subprocess``, and ``mha_course.grading`` beyond ``check``);
  introspection attributes (``__globals__``, ``__closure__``, ``__wrapped__``, ``__subclasses__``,
  ``f_back``, ...); attribute access by a computed name (``getattr(torch, "_" + "C")``,
  ``getattr`` passed around as a value, ``vars()``/``globals()`` beyond reading a plain name); and
  strings naming the grader's files or processes (``results.json``, ``/proc/``); a library's function
  replaced (``np.save = f``: the runtime calls it after the target returns); an import of a module
  nothing installed provides; TorchScript that holds a forbidden name. Every string literal that is
  Python is also read as code (a module a cell writes, text a library runs). ``getattr(obj,
  "name")`` with a literal name is read as ``obj.name``, so it meets every other rule. None of these
  is needed by any exercise; each finding carries its evidence (cell, line, the line as written) and
  a label (:func:`~.scan_rules.likely_tampering`: only an attack makes it, or honest code may too),
  and flags the submission for a person's review (:mod:`mha_course.grading.engine.pipeline`).
  ``globals()[name]``, ``globals().get(name)``, ``name in globals()`` (also ``locals()``, ``vars()``)
  where ``name`` can only be plain names written in the notebook (a self-check loop over
  ``["softmax", "attention"]``) are the names themselves, not findings; a dunder key
  (``globals()["__builtins__"]``) or a write (``globals()[name] = ...``, ``globals().update``) is one.
* **forbidden** -- inside the definition of an exercise's target (its ``def``/``class``, the last one
  in the notebook): a reference to one of the exercise's ``forbidden`` names, or to another spelling of
  an op family they name (``torch.logcumsumexp`` where ``torch.softmax`` is forbidden). That exercise scores 0.
  (The run-time tripwire catches the calls this cannot see, e.g. through a helper function.)
* **imports** -- ``mha_course`` imports other than ``check`` and the assignment's ``provided``
  modules: they fail in the grader, so the learner is told why.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.spec import Assignment
from ..inside import op_families
from . import scan_values
from .scan_rules import (
    ALLOWED_GRADING,
    ATTRIBUTE_BUILTINS,
    CODE_STRING_CALLS,
    LIBRARY_FUNCTION_REPLACED,
    LIBRARY_SETTING_WRITTEN,
    MUTATING_METHODS,
    NAMESPACE_BUILTINS,
    OPEN_CALLS,
    REACHING_ATTRIBUTES,
    TAMPERING_ATTRIBUTES,
    TAMPERING_BUILTINS,
    TAMPERING_STRINGS,
    likely_tampering,
    matches,
    tampering,
)

#: Held by every thread of the grader's process that builds Python AST objects: ``ast.parse`` here,
#: and NumPy's .npy header reader (``ast.literal_eval``) when a reply is unpacked. CPython < 3.12
#: keeps one AST recursion counter per interpreter, so two threads building ASTs at once can fail
#: with SystemError ("AST constructor recursion depth mismatch").
AST_LOCK = threading.Lock()


@dataclass(frozen=True)
class Finding:
    """One thing the scan found: where (1-based cell number as Jupyter counts, line) and what.

    ``source`` is that line as written (stripped, at most :data:`SOURCE_CHARS` characters), the evidence
    a reviewer reads; ``likely`` marks a tampering finding only an attack makes (see scan_rules).
    """

    cell: int
    line: int
    name: str
    source: str = ""
    likely: bool = False

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"


SOURCE_CHARS = 160


@dataclass
class ScanReport:
    tampering: list[Finding] = field(default_factory=list)
    forbidden: dict[str, list[Finding]] = field(default_factory=dict)  # exercise key -> findings
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


def _aliases(trees: Sequence[tuple[int, ast.AST]]) -> dict[str, str]:
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
                        dotted = _dotted(value, aliases)
                        root = dotted.split(".")[0] if dotted else None
                        if dotted and root in roots:
                            aliases.setdefault(node.targets[0].id, dotted)
    return aliases


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{a.name}" for a in node.names]
        if all(matches(n, ALLOWED_GRADING) for n in names):
            return names  # from mha_course.grading.learner.selfcheck import check: the module itself is not used
        return names + [node.module]
    return []


def _defining_module(name: str) -> str:
    """``mha_course.softmax_np`` (a package-level name) -> ``mha_course.core.softmax.softmax_np``; others unchanged."""
    parts = name.split(".")
    if len(parts) == 2 and parts[0] == "mha_course":
        import mha_course

        module = getattr(mha_course, "_EXPORTS", {}).get(parts[1])
        if module:
            return f"mha_course.{module}.{parts[1]}"
    return name


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


def _constants(trees: Sequence[tuple[int, ast.AST]]) -> tuple[dict[str, str], set[str]]:
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


#: What a name may hold for :func:`_plain_keys`: ("value", expression assigned), ("items", iterable looped
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


def _name_sources(trees: Sequence[tuple[int, ast.AST]]) -> dict[str, list[NameSource]]:
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


def _plain_keys(
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
                _plain_keys(value, names, depth + 1, budget)
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
        values = _plain_keys(element, names, depth + 1, budget)
        if values is None:
            return None
        out |= values
    return out


def _attribute_call(
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
        base = _dotted(obj, aliases)
        if literal in REACHING_ATTRIBUTES and (base is None or base.split(".")[0] in ("self", "cls")):
            return None, f"{func.id}(..., {literal!r})"
        return (f"{base}.{literal}" if base else None), None
    if func.id != "hasattr" and not on_self:
        return None, f"{func.id}() with a computed attribute name"
    return None, None


def _number(node: ast.AST, ints: set[str], depth: int = 0) -> bool:
    """Whether an expression is an int literal, a name assigned one, or arithmetic on them (a file descriptor)."""
    if depth > 50:
        return True  # arithmetic this deep as a file name is no path anyone writes
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in ints
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand, ints, depth + 1)
    if isinstance(node, ast.BinOp):
        return _number(node.left, ints, depth + 1) or _number(node.right, ints, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "len", "abs"):
        return True
    return False


def _call_arguments(node: ast.Call, names: tuple[str, ...]) -> list[ast.expr]:
    """The call's arguments at the positions, or with the keywords, of ``names``."""
    found = list(node.args[: len(names)])
    found += [k.value for k in node.keywords if k.arg in names]
    return found


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


def _code_in_string(node: ast.AST, budget: list[int]) -> ast.Module | None:
    """A string or bytes literal that is Python which does something, parsed, every line placed on the
    literal's own line (the evidence is the line that holds the text); else None.

    Libraries run text as code (a module a cell writes then imports, ``timeit`` of a dotted name a
    config resolves, TorchScript, YAML tags, ``sympify``): whatever such text holds is scanned as the
    notebook's own code. Text built at run time is not read here; the libraries that take it are
    findings of their own (scan_rules).
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


def _written_module_names(trees: Sequence[tuple[int, ast.AST]]) -> set[str]:
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
                # a literal only: a text folded from pieces is not read as code (_code_in_string)
                if not (isinstance(text, ast.Constant) and isinstance(text.value, (str, bytes))):
                    literal_writes = False
    return names if literal_writes else set()


def _library_value_is_code(name: str) -> bool:
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
def _installed(top: str) -> bool:
    """Whether an installed package or the standard library provides the top-level module ``top``."""
    if top in sys.builtin_module_names or top in sys.stdlib_module_names or top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def parse(source: str) -> ast.Module:
    """``ast.parse`` for the grader's threads, under :data:`AST_LOCK`: every parse in the grader goes through here.

    Raises SyntaxError also for code nested too deeply for CPython's parser (``not not ... True``
    or ``((((...))))`` raise MemoryError or RecursionError there), so callers handle one error.
    """
    with AST_LOCK:
        try:
            return ast.parse(source)
        except (MemoryError, RecursionError) as exc:
            message = f"nested too deeply for the grader to read ({type(exc).__name__})"
            raise SyntaxError(message, ("<cell>", 1, 1, "")) from None


def scan(cells: list[tuple[int, str]], assignment: Assignment) -> ScanReport:
    """Scan ``(cell index, source)`` pairs (from :func:`~mha_course.grading.engine.notebook.code_cells`) for ``assignment``."""
    report = ScanReport()
    trees: list[tuple[int, ast.Module]] = []
    for index, source in cells:
        try:
            trees.append((index, parse(source)))
        except SyntaxError as exc:
            report.syntax_errors.append(f"cell {index + 1}, line {exc.lineno}: SyntaxError: {exc.msg}")
    scanner = _Scanner(report, trees, tuple(assignment.provided), dict(cells))
    targets: dict[str, tuple[int, ast.AST]] = {}
    pending: list[tuple[int, ast.Module]] = list(trees)
    while pending:
        index, tree = pending.pop(0)
        pending += scanner.tree(index, tree)
        for node in tree.body if any(tree is t for _, t in trees) else []:  # not a timeit statement's
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                targets[node.name] = (index, node)
    for exercise in assignment.exercises:
        if exercise.target in targets:
            bucket = scanner.forbidden(exercise.forbidden, *targets[exercise.target])
            if bucket:
                report.forbidden[exercise.key] = bucket
    scanner.torchscript([n for e in assignment.exercises for n in e.forbidden])
    return report


#: What compiles Python into TorchScript, whose operators run below the API the run-time tripwire watches.
TORCHSCRIPT = ("torch.jit.script", "torch.jit.script_method", "torch.jit.export")


class _Scanner:
    """The rules of :func:`scan`, with what they read resolved once per notebook (imports, constants, paths)."""

    def __init__(
        self,
        report: ScanReport,
        trees: list[tuple[int, ast.Module]],
        provided: tuple[str, ...],
        sources: dict[int, str] | None = None,
    ) -> None:
        self.report, self.provided = report, provided
        self.aliases = _aliases(trees)
        self.strings, self.ints = _constants(trees)
        self.bindings = scan_values.bindings(trees)
        self.paths = scan_values.path_names(self.bindings, self.strings)
        self.functions = scan_values.Calls.of(trees)
        self.names = _name_sources(trees)
        self.lines = {index: source.splitlines() for index, source in (sources or {}).items()}
        self.parents: dict[int, ast.AST] = {}
        self.seen: set[tuple[int, int, str]] = set()
        self.trees = trees
        self.budget = [MAX_STRING_CODE]  # characters of string literals still to read as code
        self.written_code = _written_module_names(trees)

    def add(self, bucket: list[Finding], index: int, node: ast.AST, name: str, likely: bool | None = None) -> None:
        """Record a finding once per (cell, line, name); a tampering one is labelled (see scan_rules)."""
        line = getattr(node, "lineno", 0)
        key = (index, line, name)
        if key not in self.seen:
            self.seen.add(key)
            lines = self.lines.get(index, [])
            source = lines[line - 1].strip()[:SOURCE_CHARS] if 0 < line <= len(lines) else ""
            if likely is None:
                likely = bucket is self.report.tampering and likely_tampering(name)
            bucket.append(Finding(index + 1, line, name, source, likely))

    def tree(self, index: int, tree: ast.Module) -> list[tuple[int, ast.Module]]:
        """Apply every rule to every node of ``tree``; returns the code to scan next: timeit's literal
        statements, and every other string literal that is Python (see :func:`_code_in_string`)."""
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        self.parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        statements: list[tuple[int, ast.Module]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                statements += self._call(index, node)
            if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in called:
                self._value(index, node)
            self._imports(index, node)
            self._names(index, node, called)
        timeit_strings = {
            id(a)
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and self._timeit(n)
            for a in _call_arguments(n, ("stmt", "setup"))
        }
        for node in ast.walk(tree):
            if id(node) not in timeit_strings and self.budget[0] > 0:
                code = _code_in_string(node, self.budget)
                if code is not None:
                    statements.append((index, code))
        return statements

    def _call(self, index: int, node: ast.Call) -> list[tuple[int, ast.Module]]:
        """Calls that run a string as code (timeit), or open a file descriptor; returns the literal statements."""
        bucket = self.report.tampering
        func = _dotted(node.func, self.aliases) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
        statements = []
        if func and matches(func, CODE_STRING_CALLS):
            for code in _call_arguments(node, ("stmt", "setup")):
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    try:  # a literal statement is code: scanned like a cell
                        statements.append((index, parse(code.value)))
                    except SyntaxError:
                        pass
                elif not scan_values.is_function(code, self.bindings, self.functions):
                    self.add(bucket, index, node, f"{func} with a statement built at run time")
        files = _call_arguments(node, ("file",))
        if func in OPEN_CALLS and any(_number(a, self.ints) for a in files):
            self.add(bucket, index, node, f"{func}() of a file descriptor number")
        elif func in OPEN_CALLS and not all(scan_values.is_path(a, self.paths) for a in files):
            self.add(bucket, index, node, f"{func}() of a file not written as a path (a descriptor?)")
        if any(k.arg == "fileno" for k in node.keywords):
            self.add(bucket, index, node, "a file descriptor passed as fileno=")
        for keyword, what in (
            ("allow_pickle", "a pickle runs code from the file it loads"),
            ("eval_str", "annotations evaluated as code"),
        ):
            if any(
                k.arg == keyword and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in node.keywords
            ):
                self.add(bucket, index, node, f"{keyword}=True ({what})")
        return statements

    def _value(self, index: int, node: ast.Name | ast.Attribute) -> None:
        """A code-running or file-opening callable passed around instead of called."""
        name = _dotted(node, self.aliases)
        if name and matches(name, CODE_STRING_CALLS) and isinstance(node.ctx, ast.Load):
            self.add(self.report.tampering, index, node, f"{name} passed around as a value")
        if name in OPEN_CALLS and isinstance(node.ctx, ast.Load):
            self.add(self.report.tampering, index, node, f"{name} passed around as a value")

    def _imports(self, index: int, node: ast.AST) -> None:
        """Tampering imports, course modules the grader's process does not provide, and modules nothing
        installed provides (a file the notebook wrote, unless the scan read the text it wrote)."""
        tops = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops = [node.module]
        for top in dict.fromkeys(t.split(".")[0] for t in tops):
            if not _installed(top) and top not in self.written_code:
                self.add(self.report.tampering, index, node, f"import of {top!r}, which no installed package provides")
        for imported in _imported_names(node):
            if tampering(imported):
                self.add(self.report.tampering, index, node, imported)
            elif (
                imported.startswith("mha_course.")
                and imported not in ALLOWED_GRADING
                and not matches(_defining_module(imported), self.provided)
                and not (isinstance(node, ast.ImportFrom) and imported == node.module and node.module == "mha_course")
            ):
                self.add(self.report.imports, index, node, imported)

    def _names(self, index: int, node: ast.AST, called: set[int]) -> None:
        """Builtins, attributes, dotted names, computed-name calls and strings that reach into the grader."""
        bucket = self.report.tampering
        if isinstance(node, ast.Name) and node.id in NAMESPACE_BUILTINS:
            self._namespace(index, node)
        elif isinstance(node, ast.Name) and node.id in TAMPERING_BUILTINS:
            self.add(bucket, index, node, node.id)
        elif isinstance(node, ast.Name) and node.id in ATTRIBUTE_BUILTINS and id(node) not in called:
            self.add(bucket, index, node, f"{node.id} passed around as a value")
        elif isinstance(node, ast.Attribute) and (
            node.attr in TAMPERING_ATTRIBUTES or node.attr in ("grading", "_getframe", "_current_frames")
        ):
            self.add(bucket, index, node, f".{node.attr}" + (" (written)" if self._written(node) else ""))
        elif isinstance(node, ast.Attribute) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self._library_write(index, node)
            # an attribute also when assigned: timeit.template = "..." is compiled as code
            name = _dotted(node, self.aliases)
            if name and name != getattr(node, "id", None) and tampering(name):
                self.add(bucket, index, node, name + (" (written)" if self._written(node) else ""))
        elif isinstance(node, ast.Call):
            name, reason = _attribute_call(node, self.aliases, self.strings)
            if reason or (name and tampering(name)):
                self.add(bucket, index, node, reason or str(name))
            elif name and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
                literal = ast.Attribute(value=node.args[0], attr=name.rsplit(".", 1)[-1], ctx=ast.Store())
                ast.copy_location(literal, node)
                self._library_write(index, literal)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = next((t for t in TAMPERING_STRINGS if t in node.value), None)
            if hit:
                self.add(bucket, index, node, f"the string {hit!r}")

    def _library_write(self, index: int, node: ast.Attribute) -> None:
        """An attribute of an imported library set or deleted (``np.save = f``, ``setattr(json, "dumps", f)``), or
        of a class reached through an instance (``type(x).numpy = f``, ``x.__class__.numpy = f``).

        The grader's runtime calls the same libraries in the same process after the function under test
        returns (packing and sending the reply), so a replaced function can rewrite the answer there.
        A function or class replaced is "likely tampering"; a setting (``cudnn.deterministic = True``) is "review".
        """
        root: ast.AST = node.value
        while isinstance(root, ast.Attribute):
            if root.attr == "__class__":
                self.add(self.report.tampering, index, node, f".{node.attr} (a class changed through an instance)")
                return
            root = root.value
        if isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and root.func.id == "type":
            self.add(self.report.tampering, index, node, f".{node.attr} (a class changed through an instance)")
            return
        if not isinstance(root, ast.Name) or root.id not in self.aliases:
            return
        name = _dotted(node, self.aliases)
        if not name or tampering(name):
            return  # the tampering rules name it already (sys.modules, builtins, mha_course.grading...)
        replaced = _library_value_is_code(name)
        self.add(
            self.report.tampering,
            index,
            node,
            name + (LIBRARY_FUNCTION_REPLACED if replaced else LIBRARY_SETTING_WRITTEN),
        )

    def _written(self, node: ast.AST) -> bool:
        """Whether ``node`` is changed here: assigned or deleted through (``sys.modules[k] = m``,
        ``sys.modules[k].judge = f``, ``builtins.len = f``), given to ``setattr``/``delattr``, or a
        mutating method is called on it (``sys.modules.pop(k)``)."""
        current = node
        if isinstance(current, ast.Attribute) and isinstance(current.ctx, (ast.Store, ast.Del)):
            return True
        parent = self.parents.get(id(current))
        while isinstance(parent, (ast.Subscript, ast.Attribute)) and parent.value is current:
            if isinstance(parent.ctx, (ast.Store, ast.Del)):
                return True
            if isinstance(parent, ast.Attribute) and parent.attr in MUTATING_METHODS:
                call = self.parents.get(id(parent))
                if isinstance(call, ast.Call) and call.func is parent:
                    return True
            current, parent = parent, self.parents.get(id(parent))
        return (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("setattr", "delattr")
            and bool(parent.args)
            and parent.args[0] is current
        )

    def _timeit(self, call: ast.AST | None) -> bool:
        """Whether ``call`` runs a literal statement (timeit's), which the scan reads as code."""
        if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Name, ast.Attribute)):
            return False
        func = _dotted(call.func, self.aliases)
        statements = _call_arguments(call, ("stmt", "setup"))
        return bool(func and matches(func, CODE_STRING_CALLS)) and all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in statements
        )

    def _namespace(self, index: int, node: ast.Name) -> None:
        """``globals()``/``locals()``/``vars()``: a read of plain names written in the notebook is not a finding.

        ``globals()[name]``, ``globals().get(name)``, ``name in globals()`` where every value ``name`` can
        hold is a plain name (:func:`_plain_keys`) read what writing the name reads. A dunder key
        reaches the interpreter (``__builtins__`` is the builtins module): likely tampering. Any other
        use (a key the scan cannot read, ``.items()``, ``vars(obj)``, the namespace passed around) is
        a finding for review; a write (``globals()[k] = v``, ``.update``) is labelled by its key.
        """
        bucket, name = self.report.tampering, node.id
        call = self.parents.get(id(node))
        if not (isinstance(call, ast.Call) and call.func is node and not call.args and not call.keywords):
            self.add(bucket, index, node, name)
            return
        use = self.parents.get(id(call))
        key: ast.AST | None = None
        written = False
        if isinstance(use, ast.Subscript) and use.value is call:
            key, written = use.slice, not isinstance(use.ctx, ast.Load)
        elif isinstance(use, ast.Attribute) and use.value is call:
            method = self.parents.get(id(use))
            if not (isinstance(method, ast.Call) and method.func is use):
                self.add(bucket, index, node, f"{name}().{use.attr}")
                return
            if use.attr in ("get", "__getitem__", "__contains__", "pop", "setdefault") and method.args:
                key, written = method.args[0], use.attr in MUTATING_METHODS
            else:
                written = use.attr in MUTATING_METHODS
                self.add(bucket, index, node, f"{name}().{use.attr}()" + (" (written)" if written else ""), False)
                return
        elif (
            isinstance(use, ast.Compare)
            and any(c is call for c in use.comparators)
            and all(isinstance(op, (ast.In, ast.NotIn)) for op in use.ops)
        ):
            return  # "softmax" in globals(): whether a name is defined
        elif isinstance(use, ast.keyword) and use.arg == "globals" and self._timeit(self.parents.get(id(use))):
            return  # timeit.timeit("softmax(x)", globals=globals()): the statement is literal, scanned as code
        else:
            self.add(bucket, index, node, f"{name}()")
            return
        keys = _plain_keys(key, self.names)
        dunder = keys is not None and any(k.startswith("__") for k in keys)
        if keys is not None and not dunder and not written:
            return  # globals()["softmax"] reads softmax, as writing softmax does
        what = f"{name}()[{sorted(keys)[0]!r}]" if dunder and keys else f"{name}()[...]"
        what += " (written)" if written else " read by a name the scan cannot tell" if keys is None else ""
        self.add(bucket, index, node, what, likely=dunder)

    def torchscript(self, forbidden: list[str]) -> None:
        """A forbidden name (or a method of that name: ``x.softmax(-1)``) in code TorchScript compiles:
        the run-time tripwire never sees it there, so it is a finding wherever it is (in a helper the
        target calls). ``torch.jit.script`` of something the scan cannot follow to its code is one too."""
        last = {n.rsplit(".", 1)[-1] for n in forbidden}
        for index, node in self._compiled():
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Attribute):
                    continue
                if inner.attr in last or matches(_dotted(inner, self.aliases) or "", forbidden):
                    what = f".{inner.attr} in TorchScript (a forbidden name the run-time check cannot see there)"
                    self.add(self.report.tampering, index, inner, what)

    def _compiled(self) -> list[tuple[int, ast.AST]]:
        """The functions, classes and lambdas ``torch.jit.script`` compiles (decorated, or passed to it)."""
        defined = {
            node.name: (index, node)
            for index, tree in self.trees
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        compiled: list[tuple[int, ast.AST]] = []
        for index, tree in self.trees:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    heads = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
                    if any(self._is_torchscript(h) for h in heads):
                        compiled.append((index, node))
                elif isinstance(node, ast.Call) and self._is_torchscript(node.func) and node.args:
                    what = node.args[0]
                    if isinstance(what, ast.Call) and isinstance(what.func, ast.Name):
                        what = what.func  # torch.jit.script(Model()): the class
                    if isinstance(what, ast.Lambda):
                        compiled.append((index, what))
                    elif isinstance(what, ast.Name) and what.id in defined:
                        compiled.append(defined[what.id])
                    else:
                        self.add(self.report.tampering, index, node, "torch.jit.script of code the scan cannot follow")
        return compiled

    def _is_torchscript(self, node: ast.AST) -> bool:
        name = _dotted(node, self.aliases) if isinstance(node, (ast.Name, ast.Attribute)) else None
        return bool(name and matches(name, TORCHSCRIPT))

    def forbidden(self, names: tuple[str, ...], index: int, definition: ast.AST) -> list[Finding]:
        """The references to ``names`` inside a target's definition (methods of torch.Tensor: the tripwire's).

        ``names`` counts with the other spellings of the op families it arms (:func:`.op_families.scan_names`:
        ``torch.logcumsumexp``, ``F.cross_entropy``, ``np.logaddexp.reduce`` where a softmax is forbidden).
        """
        forbidden = [f for f in op_families.scan_names(names) if not f.startswith("torch.Tensor.")]
        bucket: list[Finding] = []
        for node in ast.walk(definition):
            name = None
            if isinstance(node, (ast.Attribute, ast.Name)):
                name = _dotted(node, self.aliases)
            elif isinstance(node, ast.Call):
                name = _attribute_call(node, self.aliases)[0]
            if name and matches(name, forbidden):
                self.add(bucket, index, node, name)
        return bucket
