"""What a name in a submission may hold, for the static scan (:mod:`.scan`): every binding of every
name, where each function defined in the cells is called, and from these whether an argument is
written as a path (``open`` of anything else may open a file descriptor, such as the runtime's
channel) or a statement given to ``timeit`` is a function (a string there is compiled as code the
scan never read).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

#: Calls that return a path or a string (``Path(3)``, ``os.path.join(3)``, ``os.fspath(3)`` raise
#: TypeError, ``str(3)`` is the file named "3"): a file opened through one is a file, not a descriptor.
PATH_CALLS = frozenset(
    ("Path", "PurePath", "PosixPath", "PurePosixPath", "join", "joinpath", "with_suffix", "with_name", "with_stem")
    + ("str", "format", "abspath", "realpath", "normpath", "relpath", "expanduser", "expandvars", "resolve")
    + ("absolute", "dirname", "basename", "fspath", "cwd", "home", "getcwd", "gettempdir", "mkdtemp")
)


def is_path(node: ast.AST, paths: set[str], depth: int = 0) -> bool:
    """Whether an expression is written as a path: a string, an f-string, ``Path(...)``, ``p / "x"``,
    a name only ever assigned such a value. Anything else given to ``open`` may be a descriptor
    number (``for k in range(3, 64): open(k)`` finds the runtime's channel)."""
    if depth > 50:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes))
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Name):
        return node.id in paths
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div, ast.Mod)):
        return is_path(node.left, paths, depth + 1) or is_path(node.right, paths, depth + 1)
    if isinstance(node, ast.Call):
        func = node.func
        last = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        return last in PATH_CALLS
    return False


def bindings(trees: Sequence[tuple[int, ast.AST]]) -> dict[str, list[ast.AST | None]]:
    """Every binding of every name, anywhere: the value assigned (an expression, a ``def``), or None
    where the value cannot be read (a parameter, a loop variable, ``with ... as``, an unpacking).
    An attribute assigned (``obj.s = ...``) counts as a binding of ``.s``."""
    values: dict[str, list[ast.AST | None]] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    plain = isinstance(target, (ast.Name, ast.Attribute))
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and not isinstance(target, ast.Attribute):
                            values.setdefault(name.id, []).append(node.value if plain else None)
                    if isinstance(target, ast.Attribute):
                        values.setdefault("." + target.attr, []).append(node.value)
            elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)):
                bound = node.optional_vars if isinstance(node, ast.withitem) else node.target
                for name in ast.walk(bound) if bound is not None else ():
                    if isinstance(name, ast.Name):
                        values.setdefault(name.id, []).append(None)
                    elif isinstance(name, ast.Attribute):
                        values.setdefault("." + name.attr, []).append(None)
            elif isinstance(node, ast.arg):
                values.setdefault(node.arg, []).append(node)  # a parameter: its values are the calls' arguments
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                values.setdefault(node.name, []).append(node)
    return values


@dataclass
class Calls:
    """Where each function defined in the cells is called, for the values of its parameters."""

    owner: dict[int, tuple[ast.AST, int | None]]  # id(ast.arg) -> (its def or lambda, position or None)
    calls: dict[str, list[ast.Call]]  # function name -> calls of it (f(...) or obj.f(...))
    escapes: set[str]  # function names also used as values (called from places the scan cannot see)

    @classmethod
    def of(cls, trees: Sequence[tuple[int, ast.AST]]) -> Calls:
        owner: dict[int, tuple[ast.AST, int | None]] = {}
        calls: dict[str, list[ast.Call]] = {}
        called: set[int] = set()
        for _, tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    positional = node.args.posonlyargs + node.args.args
                    for i, arg in enumerate(positional):
                        owner[id(arg)] = (node, i)
                    for arg in node.args.kwonlyargs + [a for a in (node.args.vararg, node.args.kwarg) if a]:
                        owner[id(arg)] = (node, None)
                elif isinstance(node, ast.Call):
                    func = node.func
                    name = (
                        func.id
                        if isinstance(func, ast.Name)
                        else func.attr
                        if isinstance(func, ast.Attribute)
                        else None
                    )
                    if name:
                        calls.setdefault(name, []).append(node)
                        called.add(id(func))
        escapes = {
            n.id if isinstance(n, ast.Name) else n.attr
            for _, tree in trees
            for n in ast.walk(tree)
            if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load) and id(n) not in called
        }
        return cls(owner, calls, escapes)

    def arguments(self, param: ast.arg) -> list[ast.expr] | None:
        """Every expression passed as ``param`` (its default included), or None when they cannot all be seen."""
        if id(param) not in self.owner:
            return None
        func, position = self.owner[id(param)]
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name in self.escapes:
            return None
        if position is None:
            return None
        positional = func.args.posonlyargs + func.args.args
        defaults = dict(zip(positional[len(positional) - len(func.args.defaults) :], func.args.defaults, strict=True))
        found = [defaults[param]] if param in defaults else []
        for call in self.calls.get(func.name, []):
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None
            shift = 1 if isinstance(call.func, ast.Attribute) and positional and positional[0].arg == "self" else 0
            at = position - shift
            if 0 <= at < len(call.args):
                found.append(call.args[at])
            found += [k.value for k in call.keywords if k.arg == param.arg]
        return found


def path_names(values: dict[str, list[ast.AST | None]], strings: dict[str, str]) -> set[str]:
    """Names whose every binding is a path expression (:func:`is_path`); a parameter, a loop variable
    or a name bound by ``with``/``import`` is not one (it may hold a number)."""
    paths = {name for name in strings}
    for _ in range(3):  # chains: root = Path("data"); f = root / "x.npy"
        paths |= {n for n, vs in values.items() if vs and all(v is not None and is_path(v, paths) for v in vs)}
    return {n for n in paths if all(v is not None and is_path(v, paths) for v in values.get(n, [ast.Constant("")]))}


def is_function(node: ast.AST, values: dict[str, list[ast.AST | None]], calls: Calls, depth: int = 0) -> bool:
    """Whether a statement given to timeit is a function: a lambda, a name bound only by ``def`` or
    to lambdas, an attribute never assigned anything else (``model.forward``), a parameter every call
    passes such a function (``def time_ms(fn): timeit.repeat(fn)``). A name holding a string would be
    compiled as code the scan never read."""
    if depth > 20:
        return False
    if isinstance(node, ast.Lambda):
        return True
    if isinstance(node, (ast.Name, ast.Attribute)):
        key = node.id if isinstance(node, ast.Name) else "." + node.attr
        bound = values.get(key, [] if isinstance(node, ast.Attribute) else [None])
        if isinstance(node, ast.Attribute):
            bound = bound + values.get(node.attr, [])  # class attributes: s = "..." in a class body
        for v in bound:
            if isinstance(v, ast.arg):
                passed = calls.arguments(v)
                if passed is None or not all(is_function(a, values, calls, depth + 1) for a in passed):
                    return False
            elif not isinstance(v, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
        return True
    return False
