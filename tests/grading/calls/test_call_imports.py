"""What the submission sandbox may see: call functions live in mha_course.grading.calls, importing little.

Every case's ``call`` runs in the submission process, whose filesystem view holds only the call
modules, :mod:`mha_course.grading.inside.convert` and the assignment's provided building blocks. So each
call must come from a ``mha_course.grading.calls`` module, and those modules (and ``convert``)
must import nothing that would drag an exercise module, ``hints``, ``spec`` or a reference
implementation in. "Did the function change its input" is judged in the grader: see the
``unchanged_case`` tests at the end.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import numpy as np
import pytest

from mha_course.grading import calls as calls_package
from mha_course.grading.engine import case_inputs, registry
from mha_course.grading.inside import convert

GRADING = Path(convert.__file__).resolve().parents[1]  # mha_course/grading/
CALLS_PREFIX = "mha_course.grading.calls."

# Imports any call module (and convert.py) may make: the module itself or any of its submodules.
ALLOWED = (
    "__future__",
    "typing",
    "collections.abc",
    "math",
    "numpy",
    "torch",
    "mha_course.grading.inside.convert",
    "mha_course.grading.calls",
    # small standard-library modules the calls need as they are: a08 patches
    # MultiHeadAttention.forward (contextlib, sys), a13 finds and places the learner's kernel
    # (inspect, os); convert.tensor_to_numpy looks torch up in sys.modules
    "contextlib",
    "inspect",
    "os",
    "sys",
)
# Per call module: a13 launches the learner's Triton kernels.
EXTRA = {"mha_course.grading.calls.a13_triton_kernel": ("triton",)}


def _calls_modules() -> list[str]:
    return sorted(f"{CALLS_PREFIX}{info.name}" for info in pkgutil.iter_modules(calls_package.__path__))


def _allowed_for(module: str) -> tuple[str, ...]:
    """ALLOWED, EXTRA, and for a call module its own assignment's ``provided`` building blocks."""
    extra = EXTRA.get(module, ())
    key = module.rpartition(".")[2]
    for assignment in registry.assignments():
        if assignment.key == key:
            extra += tuple(assignment.provided)
    return ALLOWED + extra


def _is_allowed(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports, at module top or inside functions.

    Relative imports are resolved against ``package``; ``from X import y`` yields ``X.y`` when ``X``
    itself is not importable as allowed (``from mha_course.grading.inside import convert``), else ``X``.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Name) and node.id == "__import__":
            found.append((node.lineno, "__import__ (a dynamic import)"))
    return found


def _violations(path: Path, module: str, package: str) -> list[str]:
    allowed = _allowed_for(module)
    shown = path.relative_to(GRADING.parent.parent) if path.is_relative_to(GRADING.parent.parent) else path
    bad = []
    imports = _imports(path, package)
    for line, name in imports:
        if _is_allowed(name, allowed):
            continue
        # ``from X import y``: also listed as ``X.y``; fine when that is allowed (X = mha_course.grading)
        if any(n.startswith(name + ".") and _is_allowed(n, allowed) for ln, n in imports if ln == line):
            continue
        bad.append(f"{module} ({shown}:{line}) imports {name}")
    return bad


SANDBOX_MODULES = [
    (m, GRADING / "calls" / (m.rpartition(".")[2] + ".py"), "mha_course.grading.calls") for m in _calls_modules()
]
SANDBOX_MODULES += [
    ("mha_course.grading.calls", GRADING / "calls" / "__init__.py", "mha_course.grading.calls"),
    ("mha_course.grading.inside.convert", GRADING / "inside" / "convert.py", "mha_course.grading.inside"),
]


@pytest.mark.parametrize(("module", "path", "package"), SANDBOX_MODULES, ids=[m for m, _, _ in SANDBOX_MODULES])
def test_sandbox_modules_import_only_what_the_sandbox_holds(module, path, package):
    bad = _violations(path, module, package)
    assert not bad, (
        "a module that runs in the submission sandbox imports something it must not "
        "(allowed: numpy, torch, math, typing, mha_course.grading.inside.convert, "
        "mha_course.grading.calls.*, ...; see tests/grading/calls/test_call_imports.py):\n  " + "\n  ".join(bad)
    )


def test_the_import_check_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy as np\nfrom ..learner import hints\n\n\ndef f():\n    from mha_course.core.softmax import softmax_np\n"
        "    from mha_course.grading.inside import convert\n    from mha_course.grading import spec\n"
        "    return __import__('mha_course.core.attention')\n"
    )
    found = "\n".join(_violations(bad, "mha_course.grading.calls.bad", "mha_course.grading.calls"))
    for name in (
        "mha_course.grading.learner.hints",
        "mha_course.core.softmax",
        "mha_course.grading.spec",
        "__import__",
    ):
        assert f"imports {name}" in found, found
    assert "imports numpy" not in found and "grading.inside.convert" not in found, found


def test_every_case_calls_a_function_of_a_calls_module():
    assert not registry.discovery_errors()
    assignments = [
        a for a in registry.assignments() if registry.module_name(a.key).startswith("mha_course.grading.exercises.")
    ]  # not a test's own
    assert assignments
    bad = []
    for assignment in assignments:
        expected = CALLS_PREFIX + assignment.key
        for exercise in assignment.exercises:
            for case in exercise.cases:
                call = case.call
                where = f"{assignment.key} / {exercise.key} / {case.name!r}: {call.__module__}.{call.__qualname__}"
                if not call.__module__.startswith(CALLS_PREFIX):
                    bad.append(f"{where} is not in mha_course.grading.calls")
                elif call.__module__ != expected:
                    bad.append(f"{where} should come from {expected}, the assignment's own call module")
                elif getattr(importlib.import_module(call.__module__), call.__name__, None) is not call:
                    bad.append(f"{where} is not a module-level function of its module")
    assert not bad, "\n".join(bad)


def test_one_calls_module_per_exercise_module():
    from mha_course.grading import exercises

    names = {info.name for info in pkgutil.iter_modules(exercises.__path__) if not info.name.startswith("_")}
    assert {m.rpartition(".")[2] for m in _calls_modules()} == names  # _common: shared grader-side helpers


# --- "inputs unchanged" cases: judged in the grader, bit for bit ------------------------------------


def _case(names):
    def reference(inputs):
        return inputs["x"] * 2

    def diagnose(got, expected, inputs):
        return None if np.allclose(got, expected, equal_nan=True) else "wrong"

    return case_inputs.unchanged_case(reference, diagnose, "changed", names)


def test_with_inputs_after_reads_the_inputs_back():
    import torch

    x, t = np.arange(3.0), torch.ones(2, dtype=torch.float64)
    result, after = convert.with_inputs_after("r", [x, t])
    assert result == "r" and isinstance(after, tuple) and len(after) == 2
    assert all(isinstance(a, np.ndarray) for a in after)
    t.add_(1)  # a copy: later changes do not leak into what was read
    assert np.array_equal(after[1], np.ones(2))


@pytest.mark.parametrize("names", [("x",), lambda inputs: [inputs["x"]]], ids=["names", "callable"])
def test_unchanged_case_compares_with_the_inputs_sent(names):
    ref, judge = _case(names)
    x = np.array([1.0, np.nan, -np.inf, -0.0])
    inputs = {"x": x}
    expected = ref(inputs)
    assert isinstance(expected, tuple) and len(expected) == 2 and np.array_equal(expected[1][0], x, equal_nan=True)

    def got(after, result=None):
        return (x * 2 if result is None else result), tuple(after)

    assert judge(got([x.copy()]), expected, inputs) is None  # NaN matches NaN
    assert judge(got([x + 1]), expected, inputs) == "changed"
    assert judge(got([np.array([1.0, np.nan, -np.inf, 0.0])]), expected, inputs) == "changed"  # -0.0 -> 0.0 is a write
    assert judge(got([x.astype(np.float32)]), expected, inputs) == "changed"  # dtype
    assert judge(got([x[None]]), expected, inputs) == "changed"  # shape
    assert judge(got([]), expected, inputs) == "changed"
    assert judge(got([x.tolist()]), expected, inputs) == "changed"  # not an array
    assert judge((x * 2, np.asarray(True)), expected, inputs) == "changed"  # the old "unchanged" flag is not trusted
    assert "result is wrong" in judge(got([x.copy()], result=x), expected, inputs)
    assert judge("nonsense", expected, inputs).startswith("expected (result, inputs after the call)")
