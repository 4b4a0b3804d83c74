"""No notebook's source holds a control character.

A control character in a cell is invisible in Jupyter and on GitHub, yet it changes what renders:
``$\\text{...}$`` typed with a real TAB in place of ``\\t`` (as a Python string written into the
notebook turns ``"\\text"`` into TAB + ``ext``) renders as a broken formula. So every character of
Unicode category Cc except the newline is refused, TAB included (code is indented with spaces), in
markdown, code and raw cells of notebooks/, solutions/ and exercises/.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))


def control_characters(notebook, where: str) -> list[str]:
    """One line per control character (category Cc, the newline excepted) of the notebook's cell sources:
    the file, the cell (counted from 0 over all cells), its type, the line and column (from 1), the character."""
    found = []
    for index, cell in enumerate(notebook.cells):
        for line_number, line in enumerate(cell.source.split("\n"), start=1):
            for column, char in enumerate(line, start=1):
                if unicodedata.category(char) == "Cc":
                    found.append(
                        f"{where}: cell {index} ({cell.cell_type}), line {line_number}, column {column}: "
                        f"{unicodedata.name(char, f'U+{ord(char):04X}')} {char!r} in {line.strip()[:60]!r}"
                    )
    return found


def test_the_notebooks_are_found():
    assert len(NOTEBOOKS) >= 30, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_no_cell_holds_a_control_character(path):
    found = control_characters(nbformat.read(path, as_version=4), str(path.relative_to(ROOT)))
    if found:
        pytest.fail("\n".join(found), pytrace=False)


def test_a_tab_a_carriage_return_and_an_escape_are_named_and_newlines_are_not():
    notebook = new_notebook(
        cells=[
            new_markdown_cell("blocks of $T/\\text{BLOCK\\_M}$\nfine"),
            new_markdown_cell("blocks of $T/\text{BLOCK\\_M}$"),
            new_code_cell("x = 1\r\nprint('\x1b[31m')"),
        ]
    )
    found = control_characters(notebook, "nb")
    assert len(found) == 3, found
    assert found[0].startswith("nb: cell 1 (markdown), line 1, column 14: U+0009 '\\t'")
    assert "cell 2 (code), line 1, column 6" in found[1] and "line 2, column 8" in found[2]
