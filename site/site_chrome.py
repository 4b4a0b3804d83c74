"""Sphinx extension: the theme's page chrome, made lighter (with ``templates/layout.html`` and ``static/icons.css``).

pydata-sphinx-theme loads ``fontawesome.js`` (1.5 MB, every icon of Font Awesome) on every page to
draw a dozen icons. ``layout.html`` passes the theme's ``<head>`` assets through the
``without_fontawesome`` filter below, ``icons.css`` draws the icons the pages use (:data:`ICONS`) as
CSS masks, and the file itself is removed from the built site, so a page still asking for it
fails the browser check with a 404.
"""

from __future__ import annotations

import re
from pathlib import Path

FONTAWESOME = "_static/scripts/fontawesome.js"
_SCRIPT = re.compile(r'\s*<script[^>]*\bsrc="[^"]*scripts/fontawesome\.js[^"]*"[^>]*>\s*</script>')
# The Font Awesome classes the theme's pages and scripts use: icons.css draws each (the browser
# check reports any other on a page).
ICONS = (
    "fa-angle-left",
    "fa-angle-right",
    "fa-arrow-up",
    "fa-bars",
    "fa-chevron-down",  # a chapter list with nested pages
    "fa-circle-half-stroke",
    "fa-download",
    "fa-expand",
    "fa-list",
    "fa-magnifying-glass",
    "fa-moon",
    "fa-outdent",
    "fa-sun",
    "fa-xmark",
)


def without_fontawesome(head: str) -> str:
    """The theme's ``<head>`` assets without the ``<script>`` that loads fontawesome.js.

    Raises:
        ValueError: there is no such script (the theme changed how it loads its icons: look again).
    """
    out, count = _SCRIPT.subn("", str(head))
    if count != 1:
        raise ValueError(f"expected one <script> loading fontawesome.js in the theme's head, found {count}")
    return out


def _on_builder_inited(app) -> None:
    if app.builder.format == "html":
        app.builder.templates.environment.filters["without_fontawesome"] = without_fontawesome


def _on_build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    scripts = Path(app.outdir) / Path(FONTAWESOME).parent
    for path in scripts.glob("fontawesome.js*"):  # the script, its source map and licence notes
        path.unlink()


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
