"""The view's closure reads each module's imports from its bytecode (no syntax tree, so no lock and no scanner):
it must find what an ``ast`` walk finds, for every module of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mha_course.grading.walls import view

PACKAGE = view.PACKAGE_DIR


def _by_ast(path: Path, package: str) -> set[str]:
    """What the view took before it read bytecode: every import statement's mha_course module, resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            found.add(f"{base}.{node.module}" if node.module else base)
            if not node.module:
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {
        m for m in found if m.startswith("mha_course.") and (PACKAGE.parent / (m.replace(".", "/") + ".py")).is_file()
    }


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_bytecode_and_syntax_tree_find_the_same_imports(path):
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = name.removesuffix(".__init__") if path.name == "__init__.py" else name.rpartition(".")[0]
    assert view._local_imports(path, package) == _by_ast(path, package)


def test_imports_inside_functions_and_relative_ones_are_found(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from . import tier, resources\n"
        "from ..inside import wire\n"
        "def late():\n    from mha_course.testing import assert_close\n    import mha_course.validation\n"
        "class K:\n    def m(self):\n        from .. import verdicts\n"
    )
    # modules only (a package's __init__ is the view's own); from a package, only what ``from . import`` names
    assert view._local_imports(source, "mha_course.grading.walls") == {
        "mha_course.grading.walls.tier",
        "mha_course.grading.walls.resources",
        "mha_course.testing",
        "mha_course.validation",
        "mha_course.grading.verdicts",
    }


def test_the_view_needs_nothing_of_the_scanner():
    text = Path(view.__file__).read_text(encoding="utf-8")
    assert "static" not in "".join(line for line in text.splitlines() if line.startswith(("from", "import")))
