"""Sphinx extension: the library's docstrings read as their authors laid them out.

The docstrings are written for ``help()`` and the editor, not for reStructuredText: a formula or a
table set off by indentation (the shape legend, ``out = softmax(q k^T / sqrt(D)) v``) would become
a block quote whose lines run together. Before Napoleon reads the Google-style sections, each such
indented block is turned into a literal block, so it keeps its lines. Section bodies (``Args:``,
``Returns:``, ...), list items' continuation lines and blocks already introduced by ``::`` are left
as they are.
"""

from __future__ import annotations

import re

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Raises|Yields?|Examples?|Notes?|Attributes|"
    r"Keyword Args|Kwargs|Other Parameters|Warns?|Warnings?|See Also|References|Todo|Methods)\s*:\s*$"
)
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def literal_blocks(lines: list[str]) -> list[str]:
    """``lines`` (a dedented docstring) with every free-standing indented block made a literal block."""
    out: list[str] = []
    section_indent: int | None = None  # inside a Google-style section whose header had this indent
    parent: str | None = None  # the last non-blank line outside any block
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            out.append(line)
            index += 1
            continue
        indent = _indent(line)
        if section_indent is not None and indent > section_indent:
            out.append(line)
            index += 1
            continue
        section_indent = None
        if _SECTION.match(line):
            section_indent = indent
        elif parent is not None and indent > _indent(parent):
            keep = parent.rstrip().endswith("::") or _LIST_ITEM.match(parent) or parent.lstrip().startswith("..")
            block_end = index
            while block_end < len(lines) and (
                not lines[block_end].strip() or _indent(lines[block_end]) > _indent(parent)
            ):
                block_end += 1
            block = lines[index:block_end]
            if not keep:
                out += ["", " " * _indent(parent) + "::", ""]
            out += block
            index = block_end
            continue
        out.append(line)
        parent = line
        index += 1
    return out


def _process(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = literal_blocks(lines)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    # before Napoleon (priority 500), which reads the sections this leaves in place
    app.connect("autodoc-process-docstring", _process, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
