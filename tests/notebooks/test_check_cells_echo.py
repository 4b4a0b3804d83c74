"""No check cell ends by echoing a bare ``True`` or ``False`` under its messages.

Jupyter shows the value of a cell's last expression. A check (``check_prediction``, ``check_choice``,
``check_exercise``) returns a :class:`~mha_course.predict.Verdict`, which shows nothing there: its
printed message is the verdict. So a check cell may end with a check call; it must not end with an
expression that is a plain bool (a comparison, ``all(...)``, ``not ...``, ``torch.allclose(...)``).
Checked in every chapter and assignment notebook, and on a real IPython shell.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from mha_course.predict import Verdict, check_choice, check_exercise, check_prediction

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))
CHECKS = re.compile(r"\bcheck(?:_prediction|_choice|_exercise)?\(")
BOOL_CALLS = {
    "all",
    "any",
    "bool",
    "isinstance",
    "issubclass",
    "callable",
    "hasattr",
    "isclose",
    "allclose",
    "array_equal",
    "equal",
    "is_tensor",
    "isfinite",
}


def _tree(source: str) -> ast.Module | None:
    lines = ["" if re.match(r"\s*[%!]", line) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def echoes_a_bool(source: str) -> str | None:
    """The cell's last statement when it is an expression whose value is a bool, else None."""
    tree = _tree(source)
    if tree is None or not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    value = tree.body[-1].value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return ast.unparse(value)
    if isinstance(value, (ast.Compare, ast.BoolOp)) or (
        isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)
    ):
        return ast.unparse(value)
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in BOOL_CALLS:
            return ast.unparse(value)
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_no_check_cell_ends_by_echoing_a_bool(path):
    nb = nbformat.read(path, as_version=4)
    found = [
        f"cell {i}: ends with `{echoed}`"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and CHECKS.search(cell.source) and (echoed := echoes_a_bool(cell.source))
    ]
    assert found == [], "\n".join(found)


def test_the_finder_sees_a_bool_and_leaves_a_check_alone():
    assert echoes_a_bool("x = 1\nall([check_prediction('x', x, 1)])")
    assert echoes_a_bool("check_prediction('x', x, 1) and check_choice('y', y, d)")
    assert echoes_a_bool("torch.allclose(a, b)") and echoes_a_bool("a == b") and echoes_a_bool("True")
    assert echoes_a_bool("check_prediction('x', x, 1)") is None
    assert echoes_a_bool("print('done')") is None and echoes_a_bool("ok = a == b") is None


def test_a_verdict_shows_nothing_as_a_cells_value_and_reads_as_a_bool():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for verdict in (check_prediction("x", None, 1.0), check_choice("x", None, "0" * 16), check_prediction("x", 1, 1)):
        assert isinstance(verdict, Verdict)
        assert shell.display_formatter.format(verdict) == ({}, {})  # no Out[] at all, not even "False"
    assert check_prediction("x", 1, 1) == True and repr(check_prediction("x", 2, 1)) == "False"  # noqa: E712
    assert sum([check_prediction("x", 1, 1), check_prediction("x", 1, 1), check_prediction("x", 3, 1)]) == 2
    assert not check_exercise("f", lambda x: None, abs, [(1.0,)])


def test_a_check_on_a_cells_last_line_leaves_only_its_message():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    with capture_output() as captured:
        result = shell.run_cell("from mha_course.predict import check_prediction\ncheck_prediction('x', None, 1.0)")
    assert result.success and isinstance(result.result, Verdict)
    assert "make your prediction first" in captured.stdout
    assert "False" not in captured.stdout and captured.outputs == []
