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
  ``getattr`` passed around as a value, ``vars()``/``globals()``); and strings naming the grader's
  files or processes (``results.json``, ``/proc/``). ``getattr(obj, "name")`` with a literal name
  is read as ``obj.name``, so it meets every other rule. None of these is needed by any exercise;
  the grader gives such a submission 0 and says exactly what it found, for a person to review.
* **forbidden** -- inside the definition of an exercise's target (its ``def``/``class``, the last one
  in the notebook): a reference to one of the exercise's ``forbidden`` names, or to another spelling of
  an op family they name (``torch.logcumsumexp`` where ``torch.softmax`` is forbidden). That exercise scores 0.
  (The run-time tripwire catches the calls this cannot see, e.g. through a helper function.)
* **imports** -- ``mha_course`` imports other than ``check`` and the assignment's ``provided``
  modules: they fail in the grader, so the learner is told why.
"""

from __future__ import annotations

import ast
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
    OPEN_CALLS,
    REACHING_ATTRIBUTES,
    TAMPERING_ATTRIBUTES,
    TAMPERING_BUILTINS,
    TAMPERING_STRINGS,
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
    """One thing the scan found: where (1-based cell number as Jupyter counts, line) and what."""

    cell: int
    line: int
    name: str

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"


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
    """Names assigned a constant string (folded) and names assigned an int literal, anywhere."""
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
    return strings, ints


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
        return None, f"{func.id}() with a computed attribute name"  # obfuscated, on a nameable object
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
    scanner = _Scanner(report, trees, tuple(assignment.provided))
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
    return report


class _Scanner:
    """The rules of :func:`scan`, with what they read resolved once per notebook (imports, constants, paths)."""

    def __init__(self, report: ScanReport, trees: list[tuple[int, ast.Module]], provided: tuple[str, ...]) -> None:
        self.report, self.provided = report, provided
        self.aliases = _aliases(trees)
        self.strings, self.ints = _constants(trees)
        self.bindings = scan_values.bindings(trees)
        self.paths = scan_values.path_names(self.bindings, self.strings)
        self.functions = scan_values.Calls.of(trees)
        self.seen: set[tuple[int, int, str]] = set()

    def add(self, bucket: list[Finding], index: int, node: ast.AST, name: str) -> None:
        key = (index, getattr(node, "lineno", 0), name)
        if key not in self.seen:
            self.seen.add(key)
            bucket.append(Finding(index + 1, getattr(node, "lineno", 0), name))

    def tree(self, index: int, tree: ast.Module) -> list[tuple[int, ast.Module]]:
        """Apply every rule to every node of ``tree``; returns the literal statements (timeit's) to scan next."""
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        statements: list[tuple[int, ast.Module]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                statements += self._call(index, node)
            if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in called:
                self._value(index, node)
            self._imports(index, node)
            self._names(index, node, called)
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
        return statements

    def _value(self, index: int, node: ast.Name | ast.Attribute) -> None:
        """A code-running or file-opening callable passed around instead of called."""
        name = _dotted(node, self.aliases)
        if name and matches(name, CODE_STRING_CALLS) and isinstance(node.ctx, ast.Load):
            self.add(self.report.tampering, index, node, f"{name} passed around as a value")
        if name in OPEN_CALLS and isinstance(node.ctx, ast.Load):
            self.add(self.report.tampering, index, node, f"{name} passed around as a value")

    def _imports(self, index: int, node: ast.AST) -> None:
        """Tampering imports, and course modules the grader's process does not provide."""
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
        if isinstance(node, ast.Name) and node.id in TAMPERING_BUILTINS:
            self.add(bucket, index, node, node.id)
        elif isinstance(node, ast.Name) and node.id in ATTRIBUTE_BUILTINS and id(node) not in called:
            self.add(bucket, index, node, f"{node.id} passed around as a value")
        elif isinstance(node, ast.Attribute) and (
            node.attr in TAMPERING_ATTRIBUTES or node.attr in ("grading", "_getframe", "_current_frames")
        ):
            self.add(bucket, index, node, f".{node.attr}")
        elif isinstance(node, ast.Attribute) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            # an attribute also when assigned: timeit.template = "..." is compiled as code
            name = _dotted(node, self.aliases)
            if name and name != getattr(node, "id", None) and tampering(name):
                self.add(bucket, index, node, name)
        elif isinstance(node, ast.Call):
            name, reason = _attribute_call(node, self.aliases, self.strings)
            if reason or (name and tampering(name)):
                self.add(bucket, index, node, reason or str(name))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = next((t for t in TAMPERING_STRINGS if t in node.value), None)
            if hit:
                self.add(bucket, index, node, f"the string {hit!r}")

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
