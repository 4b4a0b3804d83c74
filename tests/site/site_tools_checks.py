"""Checks of the site's build code that need docutils and Sphinx, which only the site's environment has.

Run by ``test_site.py::test_the_checks_that_need_the_sites_tools_pass_in_the_sites_python`` with
.venv-site's Python (the course's .venv stays free of Sphinx); the file name keeps the course's own
pytest run from collecting it.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "site"))  # course_content, docstrings

import course_content  # noqa: E402
import docstrings  # noqa: E402


def test_a_check_cell_keeps_its_code_and_loses_its_output():
    from docutils import nodes

    cell = nodes.container(nb_element="cell_code")
    source = nodes.container(nb_element="cell_code_source")
    source += nodes.literal_block("", 'check_prediction("my_D", my_D, 8)')
    output = nodes.container(nb_element="cell_code_output")
    output += nodes.literal_block("", "my_D: make your prediction first\nkey 4 loan: 0.832", classes=["output"])
    cell += [source, output]
    course_content.drop_check_output(cell)
    assert cell.astext() == 'check_prediction("my_D", my_D, 8)'


def test_a_returns_section_is_not_read_as_a_return_type():
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import GoogleDocstring

    import mha_course

    lines = [
        "Attention.",
        "",
        "Returns:",
        "    out: (B, T, E); weights: (B, H, T, S).",
        "    more.",
        "",
        "Raises:",
        "    ValueError: bad.",
    ]
    out = docstrings.returns_as_field(docstrings.literal_blocks(lines))
    assert out[2:4] == [":returns: out: (B, T, E); weights: (B, H, T, S).", "   more."], out
    rendered = str(GoogleDocstring(out, Config(napoleon_use_rtype=True), what="function"))
    assert ":rtype:" not in rendered and ":raises ValueError: bad." in rendered
    for name in mha_course._EXPORTS:  # the library's own: none gets a made-up return type
        doc = inspect.getdoc(getattr(mha_course, name)) or ""
        rendered = str(
            GoogleDocstring(docstrings.returns_as_field(docstrings.literal_blocks(doc.splitlines())), Config())
        )
        assert ":rtype:" not in rendered, name
