"""The course's API: what the notebooks import, and nothing else.

The API is ``mha_course``'s export map and those of its documented subpackages (``mha_course._API_PACKAGES``,
docs/ARCHITECTURE.md "The course's API"). Every chapter, solution and exercise imports only from them;
every name they export resolves, stays the object it names after every module is imported, is in the
site's reference with a docstring, and is used by a notebook or says here why it is kept.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import sys
import types
from pathlib import Path

import pytest

import mha_course

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))

# Exported names no notebook uses, each with why it stays in the API. A name a notebook starts to use
# leaves this table (the test says so); a new export nobody uses needs a line here.
KEPT_UNUSED = {
    "invert_bool_mask": "chapter 04's two boolean conventions: the conversion between them, documented with the masks",
    "from_torch_attn_mask": "the way back from torch's attn_mask, the pair of to_torch_attn_mask (chapter 04)",
    "from_key_padding_mask": "the way back from torch's key_padding_mask, the pair of to_key_padding_mask",
    "scaled_dot_product_attention_np": "attention in NumPy for readers without torch; the assignments' checks use it",
    "TOLERANCES": "the per-dtype tolerances assert_close applies (CONTRIBUTING names them for new checks)",
    "answer_digest": "how an author writes a prediction's answer as a digest (CONTRIBUTING, 'Add a prediction')",
    "progress": "the learner's progress in a notebook, mha_course.progress() (README, 'Your progress')",
    "kernels.ON_GPU": "whether the compiled kernels can run here; the kernel tests and gpu_report read it",
    "kernels.flash_backward": "the backward kernels' launcher, beside triton_attention (chapter 13 shows their source)",
    "parallel.shard_sequence": "the sequence split that ring attention's ranks start from (chapter 15's workloads)",
    "parallel.rank_chunks": "which positions each rank holds, contiguous or zigzag (chapter 15's prose)",
    "parallel.ring_step": "one step of the ring, the unit chapter 15 describes (the demo runs it)",
    "parallel.ring_attention": "ring attention itself, run by chapter 15 through its workloads",
    "parallel.ulysses_attention": "DeepSpeed-Ulysses, run by chapter 15 through its workloads",
}


def api_packages() -> dict[str, types.ModuleType]:
    """``"mha_course"`` and each documented subpackage's dotted name -> the package."""
    found = {"mha_course": mha_course}
    for name in mha_course._API_PACKAGES:
        found[f"mha_course.{name}"] = importlib.import_module(f"mha_course.{name}")
    return found


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def imports(code: str) -> list[tuple[str, str | None, str | None]]:
    """Every mha_course import in ``code``, at any depth: (module, name imported from it or None, alias)."""
    masked = "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    found = []
    for node in ast.walk(ast.parse(masked)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mha_course" and not node.level:
            found += [(node.module, alias.name, alias.asname) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None, a.asname) for a in node.names if a.name.split(".")[0] == "mha_course"]
    return found


def off_api(code: str, packages: dict[str, set[str]]) -> list[str]:
    """The imports in ``code`` that are not the API: a module path that is not an API package, or a name it lacks."""
    wrong = []
    for module, name, _ in imports(code):
        if module not in packages:
            wrong.append(f"{module}" + (f" ({name})" if name else "") + ": not mha_course or a documented subpackage")
        elif name is not None and name not in packages[module]:
            wrong.append(f"{module}.{name}: not in {module}.__all__")
    return wrong


def _exports() -> dict[str, set[str]]:
    return {name: set(package.__all__) for name, package in api_packages().items()}


def test_every_notebook_imports_only_the_api():
    packages = _exports()
    wrong = {
        path.relative_to(ROOT).as_posix(): found
        for path in NOTEBOOKS
        if (found := [w for code in _code_cells(path) for w in off_api(code, packages)])
    }
    assert wrong == {}, f"import these from mha_course or a documented subpackage: {wrong}"


def test_the_check_finds_an_import_off_the_api():
    packages = {"mha_course": {"causal_mask"}, "mha_course.inference": {"KVCache"}}
    code = (
        "%matplotlib inline\nimport mha_course as mc\nfrom mha_course import causal_mask\n"
        "from mha_course.inference import KVCache\n"
        "from mha_course.core.masks import causal_mask\nimport mha_course.kernels.forward\n"
        "def f():\n    from mha_course.inference import decode_step\n"
    )
    assert off_api(code, packages) == [
        "mha_course.core.masks (causal_mask): not mha_course or a documented subpackage",
        "mha_course.kernels.forward: not mha_course or a documented subpackage",
        "mha_course.inference.decode_step: not in mha_course.inference.__all__",
    ]


def test_every_api_name_resolves_and_stays_itself_after_every_module_is_imported():
    # Importing a submodule binds the package's attribute of its name to it (models/train.py and the
    # function train): the package must keep giving the function.
    for package in api_packages().values():
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.startswith("mha_course.grading") or info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
    for dotted, package in api_packages().items():
        modules = set(getattr(package, "_MODULES", ()))
        for name in package.__all__:
            value = getattr(package, name)
            if name in modules:
                assert isinstance(value, types.ModuleType), f"{dotted}.{name} should be the module"
                continue
            assert not isinstance(value, types.ModuleType), f"{dotted}.{name} is a module, expected the object"
            source = importlib.import_module(f"{dotted}.{package._EXPORTS[name]}")
            assert value is getattr(source, name), f"{dotted}.{name} is not {source.__name__}.{name}"
    from mha_course.models import train

    assert callable(train) and train.__module__ == "mha_course.models.train"


def test_a_name_is_looked_up_where_it_is_defined_on_every_use():
    """What the defining module holds now is what the package gives (the grader wraps names there)."""
    module = importlib.import_module("mha_course.core.softmax")
    original = module.LOG2E
    try:
        module.LOG2E = "replaced"
        assert importlib.import_module("mha_course.core").LOG2E == "replaced"
    finally:
        module.LOG2E = original


def test_each_name_has_one_home():
    homes: dict[str, list[str]] = {}
    for dotted, names in _exports().items():
        for name in names:
            homes.setdefault(name, []).append(dotted)
    assert {n: h for n, h in homes.items() if len(h) > 1} == {}, "exported from two places: keep one"


def _reference() -> tuple[dict[str, str], str]:
    sys.path.insert(0, str(ROOT / "site"))
    try:
        import prepare
    finally:
        sys.path.remove(str(ROOT / "site"))
    names = prepare.api_names()
    return names, prepare._reference(names, {}, {})


def test_every_api_name_is_in_the_reference_with_a_docstring():
    names, page = _reference()
    expected = {
        n if p == "mha_course" else f"{p.removeprefix('mha_course.')}.{n}" for p, ns in _exports().items() for n in ns
    }
    assert set(names) == expected
    entries = set(re.findall(r"^\.\. \w+:: mha_course\.([\w.]+)$", page, re.M))
    for name, module in re.findall(r"^```\{py:data\} (\w+)\n:module: ([\w.]+)$", page, re.M):
        entries.add(name if module == "mha_course" else f"{module.removeprefix('mha_course.')}.{name}")
    assert sorted(set(names) - entries) == [], "not in the site's reference"
    undocumented = []
    for name in names:
        package, _, last = f"mha_course.{name}".rpartition(".")
        value = getattr(importlib.import_module(package), last)
        if (isinstance(value, (type, types.ModuleType)) or callable(value)) and not (value.__doc__ or "").strip():
            undocumented.append(name)
    assert undocumented == [], "these API names have no docstring"


def _used() -> set[str]:
    """API names (dotted below mha_course) a notebook imports from their package or reads as ``x.name``."""
    used = set()
    for path in NOTEBOOKS:
        for code in _code_cells(path):
            for module, name, _ in imports(code):
                if name is not None:
                    used.add(name if module == "mha_course" else f"{module.removeprefix('mha_course.')}.{name}")
            used |= {f"@{attribute}" for attribute in re.findall(r"\b\w+\.(\w+)", code)}
    return used


def test_every_api_name_is_used_by_a_notebook_or_says_why_it_is_kept():
    used = _used()
    unused = set()
    for dotted, names in _exports().items():
        prefix = "" if dotted == "mha_course" else dotted.removeprefix("mha_course.") + "."
        unused |= {prefix + n for n in names if prefix + n not in used and f"@{n}" not in used}
    assert sorted(unused - set(KEPT_UNUSED)) == [], "used by no notebook: use it, or say in KEPT_UNUSED why it stays"
    assert sorted(set(KEPT_UNUSED) - unused) == [], "used now: take these out of KEPT_UNUSED"


@pytest.mark.parametrize("package", mha_course._API_PACKAGES)
def test_the_api_packages_are_named_in_the_docs(package):
    architecture = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = architecture[architecture.index("## The course's API") :].split("\n## ")[0]
    assert f"mha_course.{package}" in section, f"docs/ARCHITECTURE.md's API section does not name {package}"
    assert f"``{package}``" in mha_course.__doc__
