"""Every module of mha_course opens with at most 30 lines of prose (its docstring and the comments before its
first statement other than an import): what a module is and why fits there; measurements, tuning history and
rejected designs go to benchmarks/RESULTS.md or docs/design/, linked from the module in one line."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mha_course"
MAX_PROSE = 30
# Modules allowed a longer opening, each with its reason (none today); a module that comes under the
# limit leaves this list (the test fails until it does), and a new long opening fails.
KNOWN_LONG: set[str] = set()


def opening_prose(source: str) -> int:
    """Lines of the module docstring plus own-line comments before the first statement that is not an import."""
    tree = ast.parse(source)
    body = list(tree.body)
    lines = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            lines += body[0].end_lineno - body[0].lineno + 1
            body = body[1:]
    code = next((s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))), None)
    end = code.lineno if code is not None else len(source.splitlines()) + 1
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.start[0] >= end:
            break
        if token.type == tokenize.COMMENT and not token.line[: token.start[1]].strip():
            lines += 1  # a comment on a line of its own, not one trailing code
    return lines


def _modules() -> dict[str, Path]:
    return {str(p.relative_to(ROOT)): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_opening_prose_counts_the_docstring_and_leading_comments():
    assert opening_prose('"""One.\n\nTwo."""\n# a note\nimport os  # trailing\n# why X\nX = 1\n# later\n') == 5
    assert opening_prose("import os\n\n\ndef f():\n    pass\n") == 0
    assert opening_prose("# only comments\n# here\n") == 2


@pytest.mark.parametrize("path", sorted(_modules()))
def test_module_opens_with_at_most_30_lines_of_prose(path):
    lines = opening_prose(_modules()[path].read_text(encoding="utf-8"))
    if path in KNOWN_LONG:
        assert lines > MAX_PROSE, f"{path} now opens with {lines} lines: remove it from KNOWN_LONG"
        pytest.xfail(f"{path}: {lines} lines of opening prose, known")
    assert lines <= MAX_PROSE, (
        f"{path} opens with {lines} lines of prose (at most {MAX_PROSE}): move measurements, history and rejected "
        "designs to benchmarks/RESULTS.md or docs/design/ and link them in one line"
    )
