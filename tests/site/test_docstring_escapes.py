"""The reference reads docstrings as their authors wrote them: ``|i - j|`` is an absolute value, and an
indented formula may end without a blank line (site/docstrings.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "site"))

from docstrings import escape_bars, literal_blocks  # noqa: E402


def test_bars_of_the_prose_are_escaped_and_code_is_left_alone():
    lines = ["Keys with |i - j| < window; ``x | y`` and `a|b` stay.", "", "Example::", "", "    |a| = 1", "Then |b|."]
    assert escape_bars(lines) == [
        "Keys with \\|i - j\\| < window; ``x | y`` and `a|b` stay.",
        "",
        "Example::",
        "",
        "    |a| = 1",
        "Then \\|b\\|.",
    ]


def test_a_literal_block_ends_with_a_blank_line_even_when_the_docstring_has_none():
    lines = ["For each block:", "", "    s = q k^T", "    acc = acc * c", "and finally out = acc / l."]
    out = literal_blocks(lines)
    assert out[-2:] == ["", "and finally out = acc / l."]
    assert "    acc = acc * c" in out
