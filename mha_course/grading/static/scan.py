"""Static scan of a submission's code, before anything runs: three kinds of finding.

Names are read through the notebook's imports and constants (:mod:`.scan_names`), the modules it
imports or writes are looked up (:mod:`.scan_modules`), string literals that are Python are read as
code too (:mod:`.scan_strings`), and what counts as tampering is data (:mod:`.scan_rules`).

* **tampering** -- anywhere in the notebook: code that reaches into the grader or the interpreter
  instead of computing an answer (``sys.modules``, ``exec``, frames, ``torch._C``, file descriptors,
  ``mha_course.grading`` beyond ``check``, attribute access by a computed name, a library's function
  replaced, an import nothing installed provides, TorchScript holding a forbidden name). None is
  needed by any exercise; each finding carries its evidence (cell, line, the line as written) and a
  label (:func:`~.scan_rules.likely_tampering`: only an attack makes it, or honest code may too), and
  flags the submission for a person's review (:mod:`mha_course.grading.engine.pipeline`). A read of
  plain names through ``globals()`` is the names themselves (:mod:`.scan_keys`).
* **forbidden** -- inside the definition of an exercise's target (its ``def``/``class``, the last one
  in the notebook): a reference to one of the exercise's ``forbidden`` names, or to another spelling of
  an op family they name (``torch.logcumsumexp`` where ``torch.softmax`` is forbidden). That exercise scores 0.
  (The run-time tripwire catches the calls this cannot see, e.g. through a helper function.)
* **imports** -- ``mha_course`` imports other than ``check`` and the assignment's ``provided``
  modules: they fail in the grader, so the learner is told why.

Every tampering rule, with examples: ``docs/design/grader.md`` (mha_course.grading.static.scan).
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field

from ..inside import op_families
from ..spec import Assignment
from . import scan_values
from .scan_keys import name_sources, plain_keys
from .scan_modules import defining_module, imported_names, installed, library_value_is_code, written_module_names
from .scan_names import attribute_call, call_arguments, constants, dotted, import_aliases, is_number
from .scan_rules import (
    ALLOWED_GRADING,
    ATTRIBUTE_BUILTINS,
    CODE_STRING_CALLS,
    LIBRARY_FUNCTION_REPLACED,
    LIBRARY_SETTING_WRITTEN,
    MUTATING_METHODS,
    NAMESPACE_BUILTINS,
    OPEN_CALLS,
    TAMPERING_ATTRIBUTES,
    TAMPERING_BUILTINS,
    TAMPERING_STRINGS,
    likely_tampering,
    matches,
    tampering,
)
from .scan_strings import MAX_STRING_CODE, code_in_string

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
        self.aliases = import_aliases(trees)
        self.strings, self.ints = constants(trees)
        self.bindings = scan_values.bindings(trees)
        self.paths = scan_values.path_names(self.bindings, self.strings)
        self.functions = scan_values.Calls.of(trees)
        self.names = name_sources(trees)
        self.lines = {index: source.splitlines() for index, source in (sources or {}).items()}
        self.parents: dict[int, ast.AST] = {}
        self.seen: set[tuple[int, int, str]] = set()
        self.trees = trees
        self.budget = [MAX_STRING_CODE]  # characters of string literals still to read as code
        self.written_code = written_module_names(trees)

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
        statements, and every other string literal that is Python (see :func:`.scan_strings.code_in_string`)."""
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
            for a in call_arguments(n, ("stmt", "setup"))
        }
        for node in ast.walk(tree):
            if id(node) not in timeit_strings and self.budget[0] > 0:
                code = code_in_string(node, self.budget, parse)
                if code is not None:
                    statements.append((index, code))
        return statements

    def _call(self, index: int, node: ast.Call) -> list[tuple[int, ast.Module]]:
        """Calls that run a string as code (timeit), or open a file descriptor; returns the literal statements."""
        bucket = self.report.tampering
        func = dotted(node.func, self.aliases) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
        statements = []
        if func and matches(func, CODE_STRING_CALLS):
            for code in call_arguments(node, ("stmt", "setup")):
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    try:  # a literal statement is code: scanned like a cell
                        statements.append((index, parse(code.value)))
                    except SyntaxError:
                        pass
                elif not scan_values.is_function(code, self.bindings, self.functions):
                    self.add(bucket, index, node, f"{func} with a statement built at run time")
        files = call_arguments(node, ("file",))
        if func in OPEN_CALLS and any(is_number(a, self.ints) for a in files):
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
        name = dotted(node, self.aliases)
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
            if not installed(top) and top not in self.written_code:
                self.add(self.report.tampering, index, node, f"import of {top!r}, which no installed package provides")
        for imported in imported_names(node):
            if tampering(imported):
                self.add(self.report.tampering, index, node, imported)
            elif (
                imported.startswith("mha_course.")
                and imported not in ALLOWED_GRADING
                and not matches(defining_module(imported), self.provided)
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
            name = dotted(node, self.aliases)
            if name and name != getattr(node, "id", None) and tampering(name):
                self.add(bucket, index, node, name + (" (written)" if self._written(node) else ""))
        elif isinstance(node, ast.Call):
            name, reason = attribute_call(node, self.aliases, self.strings)
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
        name = dotted(node, self.aliases)
        if not name or tampering(name):
            return  # the tampering rules name it already (sys.modules, builtins, mha_course.grading...)
        replaced = library_value_is_code(name)
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
        func = dotted(call.func, self.aliases)
        statements = call_arguments(call, ("stmt", "setup"))
        return bool(func and matches(func, CODE_STRING_CALLS)) and all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in statements
        )

    def _namespace(self, index: int, node: ast.Name) -> None:
        """``globals()``/``locals()``/``vars()``: a read of plain names written in the notebook is not a finding.

        ``globals()[name]``, ``globals().get(name)``, ``name in globals()`` where every value ``name`` can
        hold is a plain name (:func:`.scan_keys.plain_keys`) read what writing the name reads. A dunder key
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
        keys = plain_keys(key, self.names)
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
                if inner.attr in last or matches(dotted(inner, self.aliases) or "", forbidden):
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
        name = dotted(node, self.aliases) if isinstance(node, (ast.Name, ast.Attribute)) else None
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
                name = dotted(node, self.aliases)
            elif isinstance(node, ast.Call):
                name = attribute_call(node, self.aliases)[0]
            if name and matches(name, forbidden):
                self.add(bucket, index, node, name)
        return bucket
