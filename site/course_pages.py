"""Sphinx extension: what each chapter and exercise page adds to its notebook, and what it leaves out.

Applied to the notebook's JSON as Sphinx reads it (``source-read``), before MyST-NB parses and
executes it, so the repository's notebooks stay untouched:

- cells tagged ``answers`` (the answers to a chapter's "Check yourself" predictions) are dropped,
  so they reach neither the page nor the executed copy MyST-NB writes;
- after the first cell (the title), a box with the notebook's download (``downloads``: the
  ``.ipynb`` beside the page and the zip of the whole course) and, where the site has a repository
  (``repository.course_repository``), the launch links: Colab, Binder, GitHub; and, on a chapter,
  links to the reference entry of each library name the chapter is the first to use;
- after each interactive cell (``interactive(...)``), a note that the page shows its default
  setting as a picture and the slider lives in the notebook.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import quote

ANSWERS_TAG = "answers"
LAUNCH_CLASS = "course-launch"
COURSE_ZIP = "mha-course.zip"  # at the site's root, written by downloads.py


def launch_urls(
    repository_url: str, branch: str, binderhub_url: str, path: str, colab_branch: str = ""
) -> dict[str, str]:
    """The launch links of the notebook at ``path`` (relative to the repository's root). Colab opens
    ``colab_branch`` where one is given: the site's workflow publishes there each notebook as the site
    offers it for download, starting with the cell that installs the course (Colab opens only GitHub files).

    Raises:
        ValueError: ``repository_url`` is not ``https://github.com/OWNER/REPO``.
    """
    parts = repository_url.rstrip("/").removesuffix(".git").split("/")
    if len(parts) != 5 or parts[:3] != ["https:", "", "github.com"] or not all(parts[3:]):
        raise ValueError(f"repository_url must look like https://github.com/OWNER/REPO, got {repository_url!r}")
    owner, repo = parts[3], parts[4]
    return {
        "colab": f"https://colab.research.google.com/github/{owner}/{repo}/blob/{colab_branch or branch}/{path}",
        "colab_installs": "yes" if colab_branch else "",
        "binder": f"{binderhub_url.rstrip('/')}/v2/gh/{owner}/{repo}/{branch}?labpath={quote(path, safe='')}",
        "source": f"https://github.com/{owner}/{repo}/blob/{branch}/{path}",
        "clone": f"https://github.com/{owner}/{repo}.git",
        "folder": repo,
    }


def _markdown_cell(text: str, after: int) -> dict:
    # an id made from the text and the cell it follows: nbformat requires unique ids, and a rebuilt
    # page gets the same ones
    key = f"{after}:{text}"
    return {
        "cell_type": "markdown",
        "id": "site-" + hashlib.sha1(key.encode()).hexdigest()[:12],
        "metadata": {},
        "source": text,
    }


def _launch_cell(urls: dict[str, str] | None, path: str, first_used: list[str]) -> dict:
    name = Path(path).name
    links = [f'<a class="launch-download" href="{name}" download="{name}">Download this notebook</a>']
    if urls is not None:
        links += [
            f'<a class="launch-colab" href="{urls["colab"]}">Open in Colab</a>',
            f'<a class="launch-binder" href="{urls["binder"]}">Launch on Binder</a>',
            f'<a class="launch-source" href="{urls["source"]}">Notebook on GitHub</a>',
        ]
    links.append(f'<a class="launch-zip" href="../{COURSE_ZIP}" download="{COURSE_ZIP}">The whole course (.zip)</a>')
    locally = (
        f"Locally: download <a href='../{COURSE_ZIP}'>the whole course</a> (or `git clone {urls['clone']}`), "
        f"then `make lab` in its folder and open `{path}`."
        if urls is not None
        else f"Locally: download <a href='../{COURSE_ZIP}'>the whole course</a>, unzip it, then `make lab` in its folder "
        f"and open `{path}`."
    )
    if urls is not None:
        install = f'!pip install "mha_course[grading] @ git+{urls["clone"]}"'
        locally += (
            " On Colab the notebook starts with the cell that installs the course; run it first."
            if urls["colab_installs"]
            else f" On Colab, first run `{install}` in a new cell (the notebook downloaded from this page "
            "starts with that cell)."
        )
    text = (
        f'<div class="{LAUNCH_CLASS}">\n'
        + "\n".join(links)
        + "\n</div>\n\n"
        + "```{admonition} Run this notebook\n"
        + ":class: tip course-run-locally\n"
        + locally
        + "\n```\n"
    )
    if first_used:
        links_ = ", ".join(f"{{py:obj}}`~mha_course.{name}`" for name in sorted(first_used, key=str.lower))
        text += f"\n```{{admonition}} The library in this chapter\n:class: note course-first-use\nFirst used here: {links_}.\n```\n"
    return _markdown_cell(text, 0)


INTERACTIVE_NOTE = (
    "```{admonition} Interactive in the notebook\n"
    ":class: note course-interactive\n"
    "In JupyterLab this cell has sliders; this page shows what it draws or prints at its default setting. "
    "Run the notebook to move them.\n"
    "```\n"
)


def rewrite_notebook(notebook: dict, path: str, urls: dict[str, str] | None, first_used: list[str]) -> dict:
    """The notebook as the site shows it: answers dropped, launch box and interactive notes added."""
    cells = [cell for cell in notebook["cells"] if ANSWERS_TAG not in cell.get("metadata", {}).get("tags", [])]
    out = []
    for index, cell in enumerate(cells):
        out.append(cell)
        if index == 0:
            out.append(_launch_cell(urls, path, first_used))
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "interactive(" in source:
            out.append(_markdown_cell(INTERACTIVE_NOTE, index))
    return {**notebook, "cells": out}


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if not (docname.startswith("notebooks/") or docname.startswith("exercises/")):
        return
    path = docname + ".ipynb"
    if not (Path(app.srcdir) / path).is_file():
        return
    config = app.config
    urls = (
        launch_urls(
            config.course_repository_url,
            config.course_branch,
            config.course_binderhub_url,
            path,
            config.course_colab_branch,
        )
        if config.course_repository_url
        else None
    )
    uses_file = Path(app.srcdir) / "first_uses.json"
    uses = json.loads(uses_file.read_text(encoding="utf-8")) if uses_file.is_file() else {}
    notebook = json.loads(source[0])
    source[0] = json.dumps(rewrite_notebook(notebook, path, urls, uses.get(path, [])))


def setup(app):
    app.add_config_value("course_repository_url", "", "env")
    app.add_config_value("course_branch", "main", "env")
    app.add_config_value("course_colab_branch", "", "env")
    app.add_config_value("course_binderhub_url", "https://mybinder.org", "env")
    # Sphinx re-reads a page when its source or an "env" config value changes; this value changes
    # with this file, so a change to what the pages add re-reads every notebook (outputs stay cached).
    app.add_config_value("course_pages_digest", hashlib.sha1(Path(__file__).read_bytes()).hexdigest(), "env")
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
