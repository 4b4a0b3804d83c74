"""Sphinx configuration of the course's website (``make site``; the sources are laid out by site/prepare.py).

Sphinx with MyST-NB and the Sphinx Book Theme: the notebooks are executed during the build and
cached by jupyter-cache (a rebuild after one edit re-runs that chapter alone), autodoc renders the
library reference from the docstrings, and everything the pages need (MathJax included) is
served from the built folder, so the site reads offline and on any static host.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
sys.path.insert(0, str(SITE))  # course_pages, downloads, repository, site_chrome
sys.path.insert(0, str(ROOT))  # mha_course, for autodoc

import repository  # noqa: E402

settings = tomllib.loads((SITE / "site.toml").read_text(encoding="utf-8"))

project = settings["title"]
author = "the course's authors"
copyright = "the course's authors, MIT licence"
html_title = settings["title"]

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the library's Google-style Args/Returns/Raises sections
    "docstrings",  # indented formulas and tables in docstrings kept as literal blocks
    "sphinx_copybutton",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static: no CDN at reading time
    "course_pages",
    "downloads",  # each notebook beside its page, and the course's zip
    "site_chrome",  # one menu toggle per sidebar, one search box, the theme's icons without fontawesome.js
    "course_content",  # the pages' text for the web, chapter <-> assignment links, figures' alt, code wrapping
]
templates_path = [str(SITE / "templates")]

# The one repository every launch link is made from (COURSE_REPOSITORY_URL, site.toml, or the git
# origin; the workflow sets the variable, so a fork links to itself); "" for a site without launch links.
course_repository_url = repository.course_repository(os.environ, settings, repository.git_origin(ROOT)) or ""
course_branch = os.environ.get("COURSE_BRANCH") or settings["branch"]
# The branch Colab opens (the workflow publishes there the notebooks with their install cell); "" opens
# course_branch's own notebooks, which have none.
course_colab_branch = os.environ.get("COURSE_COLAB_BRANCH") or settings.get("colab_branch", "")
course_binderhub_url = settings["binderhub_url"]

root_doc = "index"
exclude_patterns = ["jupyter_execute", ".jupyter_cache", "**.ipynb_checkpoints", "first_uses.json"]

# --- notebooks -------------------------------------------------------------------------------------
nb_execution_mode = "cache"
# One cache for the full site and the test's mini-site, so each reuses what the other executed.
nb_execution_cache_path = os.environ.get("COURSE_SITE_CACHE") or str(ROOT / "_build" / ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_raise_on_error = True  # a chapter that fails to run fails the build
nb_execution_show_tb = True
# Exercises are shown as the learner receives them: run, they would only raise "not implemented yet".
nb_execution_excludepatterns = ["exercises/*"]
nb_merge_streams = True
# An interactive cell's output holds the live widget and a PNG of its default setting: a static
# page shows the PNG (the widget needs a kernel), and loads no widget JavaScript from a CDN.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# --- the library reference -------------------------------------------------------------------------
autodoc_typehints = "description"
autodoc_member_order = "bysource"
# defaults as written (``folder=CHECKPOINT_DIR``), not their value on the machine that built the site
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# A docstring's literal blocks are formulas and tables, not Python (notebook cells keep their kernel's lexer).
highlight_language = "text"

# --- HTML ------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_static_path = [str(SITE / "static")]
html_css_files = ["course.css", "icons.css"]
html_favicon = str(SITE / "static" / "favicon.ico")  # course_content also puts it at the root, where browsers look
html_copy_source = False  # the sources would carry what the pages leave out
html_show_sourcelink = False
html_last_updated_fmt = None
# A first visit has no stored light/dark choice; without a default the theme logs a console error.
html_context = {"default_mode": "light"}
# The launch links are course_pages' box alone (the theme's launch and repository menus would be a
# second one). navbar_persistent empty: the pydata header, hidden under this theme, then holds no
# second ☰ and contents button, which the themes' scripts would bind instead of the visible ones,
# and no second search box (the one search box: the sidebar's on a desktop, the header's on a phone).
html_theme_options = {
    "use_download_button": False,
    "navbar_persistent": [],
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
