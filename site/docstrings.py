"""Sphinx extension: the library's docstrings read as their authors laid them out.

The docstrings are written for ``help()`` and the editor, not for reStructuredText: a formula or a
table set off by indentation (the shape legend, ``out = softmax(q k^T / sqrt(D)) v``) would become
a block quote whose lines run together. Before Napoleon reads the Google-style sections, each such
indented block is turned into a literal block, so it keeps its lines. Section bodies (``Args:``,
``Returns:``, ...), list items' continuation lines and blocks already introduced by ``::`` are left
as they are. A ``Returns:`` section is then written as a ``:returns:`` field, so Napoleon does not read
its first words as a return type.
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
            if block_end < len(lines) and lines[block_end].strip():
                out.append("")  # a block ends at a blank line in reStructuredText; the docstring may not have one
            index = block_end
            continue
        out.append(line)
        parent = line
        index += 1
    return out


_RETURNS = re.compile(r"^(\s*)Returns?\s*:\s*$")


def returns_as_field(lines: list[str]) -> list[str]:
    """``lines`` with each Google-style ``Returns:`` section written as a ``:returns:`` field.

    Napoleon reads the first line of a ``Returns:`` section up to its colon as the return *type*:
    ``out: (B, T, E); weights: (B, H, T, S).`` became "Return type: out". The course's docstrings
    describe what is returned in words and shapes, never a bare type, so the whole section is the
    description; Napoleon leaves a field it did not write as it is.
    """
    out: list[str] = []
    index = 0
    while index < len(lines):
        match = _RETURNS.match(lines[index])
        if match is None:
            out.append(lines[index])
            index += 1
            continue
        indent = len(match.group(1))
        end = index + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
            end += 1
        body = lines[index + 1 : end]
        while body and not body[-1].strip():
            body.pop()
        if not body:  # an empty section: leave it to Napoleon
            out += lines[index:end]
            index = end
            continue
        base = min(_indent(line) for line in body if line.strip())
        text = [line[base:] if line.strip() else "" for line in body]
        out.append(" " * indent + ":returns: " + text[0])
        out += [(" " * (indent + 3) + line) if line else "" for line in text[1:]]
        out += lines[index + 1 + len(body) : end]  # the blank lines after the section
        index = end
    return out


_INLINE_CODE = re.compile(r"(``.+?``|`[^`]+`)")


def escape_bars(lines: list[str]) -> list[str]:
    """``lines`` with each ``|`` of the prose escaped: ``|i - j|`` is an absolute value, not a substitution.

    Literal blocks (after a line ending in ``::``) and inline code are left as they are.
    """
    out: list[str] = []
    literal_indent: int | None = None  # inside a literal block introduced by a line with this indent
    for line in lines:
        if literal_indent is not None and (not line.strip() or _indent(line) > literal_indent):
            out.append(line)
            continue
        literal_indent = _indent(line) if line.rstrip().endswith("::") else None
        parts = _INLINE_CODE.split(line)
        out.append("".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts)))
    return out


def _process(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = escape_bars(returns_as_field(literal_blocks(lines)))


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    # before Napoleon (priority 500), which reads the sections this leaves in place
    app.connect("autodoc-process-docstring", _process, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
