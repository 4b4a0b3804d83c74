"""What the grader loads of a notebook before each test: its definitions, and nothing that runs learner code.

Each case runs in a fresh process that executes only these top-level statements of the cells
(same order, same skipped cells), so the only learner code that runs there is the call of the
function under test:

* ``import`` / ``from ... import``;
* ``def`` / ``async def`` whose decorators come from :data:`DECORATORS` (resolved through the
  notebook's own imports) and whose defaults and annotations are inert;
* ``class`` with inert bases, keywords and body (defs as above, docstrings, ``pass``, inert
  assignments, nested such classes); a library base must be one of :data:`LIBRARY_BASES` (their
  class-creation hooks call no method of the subclass); a notebook base must be kept and define none of
  :data:`CLASS_HOOKS`; no ``metaclass=`` naming notebook code; an enum (its members' ``__init__``
  and ``_generate_next_value_`` run as the class is made) only with no def and no notebook base;
* ``=``, annotated and augmented assignments to plain names (or tuples of them) of inert values
  (an augmented one never to an imported name: ``path += [...]`` would change ``sys.path``).

An expression is *inert* when it holds no walrus, await or yield, no lambda except as the whole
value or an element of a display that is, no name of :data:`DENIED_NAMES`, no attribute of
:data:`DENIED_ATTRIBUTES`, no private attribute, none named like a module of :data:`DENIED_MODULES`
(``typing.sys``), no name any import binds to such a module (a second binding does not clear it),
no name that only a star import may bind, calls only of builtins or imported names, and names the
notebook binds to code (def, class, lambda, an alias or container of those) only as the whole
value, inside such a display, or as a base class.
Pure ``ast``: runs in the grader and inside the sandbox. Shapes: none (source code in, code out).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

# decorators that only wrap or register their argument (none calls it at definition time)
DECORATORS = frozenset(
    "builtins.staticmethod builtins.classmethod builtins.property functools.lru_cache "
    "functools.cache functools.wraps dataclasses.dataclass torch.no_grad torch.inference_mode "
    "torch.enable_grad torch.compile typing.overload abc.abstractmethod triton.jit".split()
)
ACCESSORS = frozenset({"setter", "getter", "deleter"})
# library classes a notebook class may derive from: their class-creation hooks (``__init_subclass__``, a
# metaclass) call none of the subclass's methods (TorchDispatchMode's, for one, does)
LIBRARY_BASES = frozenset(
    "builtins.object builtins.Exception builtins.ValueError builtins.TypeError builtins.RuntimeError "
    "builtins.KeyError builtins.IndexError builtins.tuple builtins.list builtins.dict builtins.int "
    "builtins.float builtins.str typing.NamedTuple typing.Generic typing.Protocol typing.TypedDict abc.ABC "
    "enum.Enum enum.IntEnum enum.StrEnum enum.Flag enum.IntFlag torch.nn.Module torch.nn.modules.module.Module "
    "torch.autograd.Function torch.autograd.function.Function numpy.ndarray torch.Tensor".split()
)
# a notebook base class defining one of these runs its code when a subclass is created or subscripted
CLASS_HOOKS = frozenset({"__init_subclass__", "__mro_entries__", "__class_getitem__"})
# builtins that run code given as text, reach a frame's globals, or read files (a cell may have written them)
DENIED_NAMES = frozenset(
    "exec eval compile __import__ breakpoint getattr setattr delattr globals locals vars open "
    "input type super __builtins__ __loader__ __spec__".split()
)
# attributes that load code or pickles, or run code given as text (a name reached another way is refused too)
DENIED_ATTRIBUTES = frozenset(
    "load load_library load_inline load_module exec_module import_module run_path "
    "run_module exec eval compile timeit repeat Timer system popen addsitedir "
    # torch.package imports a zip's modules while unpickling (past pickle's audit event); torch.hub a folder's hubconf
    "package PackageImporter load_pickle hub "
    # a callable named by a dotted string (logging.config's "()" factory, pydoc.locate): code given as text
    "dictConfig fileConfig listen locate resolve_name".split()
)
# modules whose every name is refused in an inert expression: they import, run or reach code (and
# matplotlib: a figure made at the top level is no function's input, and costs ~15 ms in every case process)
DENIED_MODULES = frozenset(
    "matplotlib builtins sys os importlib runpy code codeop site pdb bdb timeit subprocess pickle marshal "
    "ctypes types inspect gc _thread multiprocessing signal socket operator pkgutil zipimport "
    "shelve atexit asyncio trace cProfile profile doctest unittest io _io pathlib shutil pydoc".split()
)
_BUILTINS = frozenset(dir(builtins))
CLASS_BODY = "<class body>"  # marks ``local`` as a class body's names (never a real name)

SKIPPED_MESSAGE = (
    "{name!r} is set in cell {cell}, line {line}, which the grader does not run: before each test it loads only "
    "your notebook's definitions (imports, def, class, and assignments of plain values, not code that calls your "
    "own functions or loops), so compute {name!r} inside your function or assign it a plain value"
)


@dataclass(frozen=True)
class Skipped:
    """A top-level statement the grader does not run, and the names it would have bound."""

    cell: int  # the cell's index in the notebook (shown 1-based, as ``<cell N>``)
    line: int
    names: tuple[str, ...]
    rebinds: bool = False  # an assignment, def or class: it would always have bound ``names``


@dataclass
class Definitions:
    """The statements kept per cell (``(cell index, ast.Module)``, in order) and those skipped."""

    kept: list[tuple[int, ast.Module]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    cells: list[int] = field(default_factory=list)  # the cells that parsed, in order

    def name_error_hint(self, name: str) -> str | None:
        """The sentence for a NameError on ``name`` when a skipped statement would have bound it (the first)."""
        found = next((s for s in self.skipped if name in s.names), None)
        return None if found is None else SKIPPED_MESSAGE.format(name=name, cell=found.cell + 1, line=found.line)


def definitions(cells: list[tuple[int, str]], skip: set[int] | frozenset[int] = frozenset()) -> Definitions:
    """The definitions of ``cells`` (``(index, source)``, as the grader sends them), ``skip`` left out.

    A cell that does not parse is left out whole (its error is the cell run's to report).
    Raises TypeError when ``cells`` is not a list of (int, str).
    """
    shapes = {(type(c), len(c), type(c[0]), type(c[1])) if isinstance(c, tuple) and len(c) == 2 else 0 for c in cells}
    if not isinstance(cells, list) or not shapes <= {(tuple, 2, int, str)}:
        raise TypeError(f"cells must be a list of (int, str), got {type(cells).__name__}")
    trees = []
    for index, source in cells:
        if index in skip:
            continue
        try:
            trees.append((index, ast.parse(source)))
        except (SyntaxError, ValueError):
            continue
    scope = _Scope.of([stmt for _, tree in trees for stmt in tree.body])
    out = Definitions(cells=[i for i, _ in trees])
    for index, tree in trees:
        body = []
        for stmt in tree.body:
            if scope.keeps(stmt):
                body.append(stmt)
                if isinstance(stmt, ast.ClassDef):
                    scope.kept_classes[stmt.name] = stmt
            else:
                rebinds = isinstance(stmt, _UNCONDITIONAL)
                out.skipped.append(Skipped(index, stmt.lineno, tuple(sorted(_bound(stmt))), rebinds))
        if body:
            out.kept.append((index, ast.Module(body=body, type_ignores=[])))
    return out


_UNCONDITIONAL = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _bound(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (in its compound bodies too, not inside defs or classes)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(stmt)
    return names


def _mentions(node: ast.AST | None, names: set[str]) -> bool:
    walk = ast.walk(node) if node is not None else ()
    return any(isinstance(n, ast.Lambda) or (isinstance(n, ast.Name) and n.id in names) for n in walk)


class _Scope:
    """The notebook's top-level bindings: which names hold code, which resolve to an import."""

    def __init__(self) -> None:
        self.code: set[str] = set()
        self.bound: set[str] = set()  # every name the notebook binds at the top level
        self.imports: dict[str, str] = {}  # name -> dotted target, only when every binding is that import
        self.imported: dict[str, set[str]] = {}  # name -> every dotted target an import binds it to
        self.star = False  # a star import: a name the notebook does not bind may be any of a module's
        self.kept_classes: dict[str, ast.ClassDef] = {}

    @classmethod
    def of(cls, statements: list[ast.stmt]) -> _Scope:
        scope = cls()
        bound: dict[str, set[str]] = {}  # name -> what binds it ("import:x.y" or "other")
        valued: list[tuple[set[str], ast.AST]] = []
        for stmt in statements:
            scope._collect(stmt, bound, valued)
        scope.bound = set(bound)
        scope.imported = {n: {k[7:] for k in kinds if k.startswith("import:")} for n, kinds in bound.items()}
        scope.imports = {
            n: next(iter(kinds))[7:]
            for n, kinds in bound.items()
            if len(kinds) == 1 and next(iter(kinds)).startswith("import:")
        }
        changed = True
        while changed:  # aliases of aliases, containers of containers
            changed = False
            for targets, value in valued:
                if not targets <= scope.code and _mentions(value, scope.code):
                    scope.code |= targets
                    changed = True
        return scope

    def _collect(self, node: ast.AST, bound: dict[str, set[str]], valued: list) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.code.add(node.name)
            bound.setdefault(node.name, set()).add("other")
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    name = alias.asname or alias.name.split(".")[0]
                    target = alias.name if alias.asname else name
                else:
                    name = alias.asname or alias.name
                    target = f"{node.module}.{alias.name}" if node.module and not node.level else "."
                bound.setdefault(name, set()).add("other" if alias.name == "*" else f"import:{target}")
                self.star |= alias.name == "*"
            return
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            value = getattr(node, "value", None) if not isinstance(node, (ast.For, ast.AsyncFor)) else node.iter
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            valued.append((names, value))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    names = {n.id for n in ast.walk(item.optional_vars) if isinstance(n, ast.Name)}
                    valued.append((names, item.context_expr))
        for name in _bound(node) if isinstance(node, ast.stmt) else ():
            bound.setdefault(name, set()).add("other")
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.NamedExpr, ast.expr)):
                self._collect(child, bound, valued)

    # --- resolution --------------------------------------------------------------------------------

    def resolve(self, node: ast.expr, local: frozenset[str] = frozenset()) -> str | None:
        """The dotted name an expression refers to through imports or builtins (None if notebook code or unknown)."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id in local:
            return None
        if node.id in self.imports:
            root = self.imports[node.id]
        elif node.id in _BUILTINS and node.id not in self.bound:
            root = f"builtins.{node.id}"
        else:
            return None
        return ".".join([root, *reversed(parts)])

    # --- inert expressions -------------------------------------------------------------------------

    def inert(
        self,
        node: ast.AST | None,
        alias_ok: bool = False,
        code: frozenset[str] | set[str] = frozenset(),
        hint: bool = False,
    ) -> bool:
        """True when evaluating ``node`` runs no learner code.

        ``alias_ok``: a code name may stand here (the whole value, a display's element); ``hint``: anywhere
        (a type hint, checked by :meth:`_annotation`); ``code``: a class body's own code names.
        """
        if node is None:
            return True
        code = self.code | set(code)
        if isinstance(node, ast.Name):
            if node.id in DENIED_NAMES or self._denied_import(node.id):
                return False
            if self.star and node.id not in self.bound | _BUILTINS | set(code):  # torch.nn.functional's importlib
                return False
            return alias_ok or hint or node.id not in code
        if isinstance(node, ast.Lambda):
            defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            return alias_ok and all(self.inert(d, True, code) for d in defaults)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return all(self.inert(e, alias_ok, code, hint) for e in node.elts)
        if isinstance(node, ast.Dict):
            return all(self.inert(k, False, code, hint) for k in node.keys if k is not None) and all(
                self.inert(v, alias_ok, code, hint) for v in node.values
            )
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, ast.Attribute):
            if _denied_attribute(node.attr):
                return False
            return self.inert(node.value, False, code, hint)
        if isinstance(node, ast.Call) and self._plain_getattr(node):
            return self.inert(node.args[0], False, code, hint)
        if isinstance(node, ast.Call) and not self._callable(node.func, code):
            return False
        return all(self.inert(child, False, code, hint) for child in ast.iter_child_nodes(node))

    def _plain_getattr(self, node: ast.Call) -> bool:
        """``getattr(x, "name")``: the same as ``x.name``, when the name is a plain, allowed attribute."""
        func, args = node.func, node.args
        if not (isinstance(func, ast.Name) and func.id == "getattr" and "getattr" not in self.bound):
            return False
        if node.keywords or len(args) != 2 or not isinstance(args[1], ast.Constant):
            return False
        attr = args[1].value
        return isinstance(attr, str) and not _denied_attribute(attr)

    def _denied_import(self, name: str) -> bool:
        """Any import binding ``name`` (a second binding, ``sys = sys``, does not clear it) reaches a denied
        module, or a name a library re-exports one under (``from typing import sys``)."""
        for target in self.imported.get(name, ()):
            *modules, last = target.split(".")  # a private module may export public names (torch.utils._pytree)
            if _denied_attribute(last) or any(
                p in DENIED_ATTRIBUTES or p.lstrip("_") in DENIED_MODULES for p in modules
            ):
                return True
        return False

    def _callable(self, func: ast.expr, code: set[str]) -> bool:
        """A call may run a builtin, an imported name, or a method of a value (never notebook code)."""
        if isinstance(func, ast.Name):
            return func.id not in code and (
                func.id in self.imports or (func.id in _BUILTINS and func.id not in self.bound)
            )
        return True  # an attribute or a call's result: its parts are checked as expressions

    # --- statements --------------------------------------------------------------------------------

    def keeps(self, stmt: ast.stmt, local: frozenset[str] = frozenset()) -> bool:
        """True when running ``stmt`` at the top level (or in a class body, ``local`` its names) runs no learner code."""
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return CLASS_BODY not in local
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return not _dunder(stmt.name, local) and self._function(stmt, local)
        if isinstance(stmt, ast.ClassDef):
            return not _dunder(stmt.name, local) and self._class(stmt, local)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return self._assignment(stmt, local)
        return False

    def _assignment(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, local: frozenset[str]) -> bool:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = []
        for target in targets:
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            plain = [e for e in elts if isinstance(e, ast.Name)]
            if len(plain) != len(elts):
                return False
            names += [e.id for e in plain]
        if any(_dunder(n, local) for n in names):
            return False
        if isinstance(stmt, ast.AugAssign):  # runs the target's __iadd__: a plain value only, never a library's
            own = names[0] not in self.code | local and not self.imported.get(names[0])
            return own and self.inert(stmt.value, False, local)
        if isinstance(stmt, ast.AnnAssign) and not self._annotation(stmt.annotation, local):
            return False
        return self.inert(stmt.value, True, local)

    def _annotation(self, node: ast.expr | None, local: frozenset[str]) -> bool:
        """A notebook class may be named in a hint (``x: Block``, ``list[Block]``) but not called, subscripted or looked into."""
        if node is None:
            return True
        code = self.code | local
        for n in ast.walk(node):
            if isinstance(n, (ast.Call, ast.Attribute)) and _mentions(n, code):
                return False
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in code:
                return False
        return self.inert(node, False, local, hint=True)

    def _function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, local: frozenset[str]) -> bool:
        args = fn.args
        defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
        return (
            all(self._decorator(d, local) for d in fn.decorator_list)
            and all(self.inert(d, True, local) for d in defaults)
            and all(self._annotation(a.annotation, local) for a in every)
            and self._annotation(fn.returns, local)
        )

    def _decorator(self, node: ast.expr, local: frozenset[str]) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ACCESSORS and isinstance(node.value, ast.Name):
            return node.value.id in local  # @x.setter of a property of this class body
        call = node if isinstance(node, ast.Call) else None
        if call is not None:
            node = call.func
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if not all(self.inert(a, False, local) for a in arguments):
                return False
        return self.resolve(node, local) in DECORATORS

    def _class(self, cls: ast.ClassDef, local: frozenset[str]) -> bool:
        if cls.decorator_list and not all(self._decorator(d, local) for d in cls.decorator_list):
            return False
        code = self.code | local
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in code:
                if not self._plain_base(base.id):
                    return False
            elif not self.inert(base, False, local) or not self._library_base(base, local):
                return False
        if not all(self.inert(k.value, False, local) for k in cls.keywords):
            return False
        if self._enum(cls, local) and not self._plain_enum(cls, code):
            return False
        names: set[str] = {CLASS_BODY}  # the body's own code names (defs, aliases of them)
        for stmt in cls.body:
            if isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue
            inner = frozenset(local | names)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(stmt, ast.ClassDef) and not self._class(stmt, inner):
                    return False
                if not isinstance(stmt, ast.ClassDef) and not self._function(stmt, inner):
                    return False
                names.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and self._class_assignment(stmt, inner):
                if _mentions(stmt.value, self.code | inner):
                    names |= _bound(stmt)
            else:
                return False
        return True

    def _enum(self, cls: ast.ClassDef, local: frozenset[str]) -> bool:
        """A base or keyword that names an enum (``enum.Enum``, ``re.enum.IntFlag``, ``enum.EnumType``)."""
        for node in [*cls.bases, *(k.value for k in cls.keywords)]:
            for n in ast.walk(node):
                found = self.resolve(n, local) if isinstance(n, (ast.Name, ast.Attribute)) else None
                if found and any("enum" in p.lower() or "flag" in p.lower() for p in found.split(".")):
                    return True
        return False

    def _plain_enum(self, cls: ast.ClassDef, code: set[str]) -> bool:
        """An enum runs its members' ``__new__`` / ``__init__`` and ``_generate_next_value_`` (its bases'
        too) while the class is made: kept only with no def in its body, no code aliased there
        (``_generate_next_value_ = forge``) and no notebook base."""
        if any(isinstance(b, ast.Name) and b.id in code for b in cls.bases):
            return False
        methods = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        return not any(isinstance(s, methods) or _mentions(s, code) for s in cls.body)  # nor an alias of code

    def _class_assignment(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, local: frozenset[str]) -> bool:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:  # a dataclass field: ``x: int``
            return isinstance(stmt.target, ast.Name) and self._annotation(stmt.annotation, local)
        return self._assignment(stmt, local)

    def _library_base(self, base: ast.expr, local: frozenset[str]) -> bool:
        """A base that is no notebook class must be one of :data:`LIBRARY_BASES` (``Generic[T]`` as ``Generic``)."""
        return self.resolve(base.value if isinstance(base, ast.Subscript) else base, local) in LIBRARY_BASES

    def _plain_base(self, name: str) -> bool:
        """A notebook class may be a base only when kept and none of its own notebook bases hook subclassing."""
        cls = self.kept_classes.get(name)
        if cls is None:
            return False
        defined = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        defined |= {n for s in cls.body if isinstance(s, (ast.Assign, ast.AnnAssign)) for n in _bound(s)}
        if defined & CLASS_HOOKS:
            return False
        return all(self._plain_base(b.id) for b in cls.bases if isinstance(b, ast.Name) and b.id in self.kept_classes)


def _denied_attribute(name: str) -> bool:
    """An attribute an inert expression may not reach: one that loads or runs code, a private one
    (``torch.hub._load_local`` runs a folder's hubconf.py), or a module re-exported by a library
    (``typing.sys``, ``collections._sys``)."""
    return name in DENIED_ATTRIBUTES or name.startswith("_") or name.lstrip("_") in DENIED_MODULES


def _dunder(name: str, local: frozenset[str]) -> bool:
    """A dunder bound at the top level (``__builtins__``, ``__getattr__``) changes how the runtime runs."""
    return CLASS_BODY not in local and name.startswith("__") and name.endswith("__")
