"""Sphinx extension: what a chapter or assignment page says differently from its notebook, because it is a web page.

The repository's notebooks are written for JupyterLab; the site shows them executed, without the
answers (course_pages drops them) and without a kernel. This extension, applied to the notebook's
JSON as Sphinx reads it (``source-read``, after course_pages) and to the parsed page
(``doctree-read``), makes the page say only what the page has:

- "Check yourself": the sentences that point at the collapsed answer cell or at ``solutions/``
  (neither is published) say instead how to check yourself here: download the notebook (the
  ``.ipynb`` beside the page) and run it; the check cells' output is left out (run with nothing
  answered, it says "make your prediction first", and the values it prints would give the answers
  away), and a note says what the cell does when run;
- chapters and assignments are joined: "Now do assignment aNN" at a chapter's end, "Read chapter NN
  first" at the top of an assignment (the pairs are the README's syllabus rows);
- every figure among the outputs gets an ``alt`` text: the titles its cell's code gives the figure
  (``set_title``, ``suptitle``, ``title=``), else its axis labels, else the cell's first comment,
  else the sentence before the cell;
- the assets of the page: a stylesheet that wraps long code lines, a script that names the copy
  buttons, and a ``favicon.ico`` at the site's root.

Only markdown cells and the notebook's own metadata are changed, never a code cell: jupyter-cache
hashes the code cells with their metadata, so the executed outputs stay cached.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent

# --- "Check yourself" written for the web ------------------------------------------------------------

# The sentence of every chapter's "Check yourself" that points at the answer cell the site drops.
_ANSWER_CELL = re.compile(
    r"(?:The answers, with their reasons,|A worked answer)\s+(?:are|is)\s+in\s+the\s+collapsed\s+cell\s+at\s+"
    r"the\s+end\s+of\s+the\s+notebook:\s+open\s+it\s+only\s+after\s+trying\."
)
# "(answers in `solutions/a01_x.ipynb`)", "(the answers are in `solutions/...`, if you must)"
_SOLUTIONS_ASIDE = re.compile(r"\s*\((?:the\s+)?answers\s+(?:are\s+)?in\s+`solutions/[^`]+`(?:,\s*if\s+you\s+must)?\)")
# chapter 00's description of the repository: "`solutions/aNN_*.ipynb` hold the answers and are ..."
_SOLUTIONS_SOURCE = re.compile(
    r"`solutions/aNN_\*\.ipynb` hold the answers and are the single source of truth;\s*"
    r"`exercises/aNN_\*\.ipynb` are the student versions, \*generated\* from them with\s*"
    r"`python -m mha_course\.assign` \(answers between `### BEGIN SOLUTION` / `### END SOLUTION`\s*"
    r"are replaced by a stub\)\."
)
# What a page must never say: it has no answer cell, no solutions folder, no run of the checks.
UNPUBLISHED_PHRASES = (
    "collapsed cell",
    "make your prediction first",
    "still raises NotImplementedError",
    "solutions/",
)
_CHECK_CALL = re.compile(r"\bcheck_(?:prediction|exercise|choice)\(")

WEB_CHECK = (
    "On this website nothing has been predicted and the answers are left out. To check yourself, "
    'download this notebook (<a class="course-notebook-file" href="{name}" download>{name}</a>, or the '
    "download button at the top of the page), run it in JupyterLab or Colab (see [How to run](../how_to_run.md)), "
    "fill in the cells below and run the check: it says whether each answer is right, and why not."
)
CHECK_NOTE = (
    "```{admonition} Run in the notebook\n"
    ":class: note course-check-note\n"
    "Run in the notebook, this cell says for each of your answers whether it is right. "
    "On this page nothing was answered, and what it prints would give the answers away, so its output is left out.\n"
    "```\n"
)


DOWNLOAD_CHECK = (
    "This copy of the notebook, from the course's website, leaves the answers out: the check cell "
    "says whether each of yours is right, and why not."
)


def web_text(markdown: str, notebook_name: str, check: str = WEB_CHECK) -> str:
    """A markdown cell's text with every pointer at the unpublished answers replaced or removed.

    ``check`` replaces the sentence about the answer cell (``{name}``: the notebook's file name).
    """
    text = _ANSWER_CELL.sub(lambda _: check.format(name=notebook_name), markdown)
    text = _SOLUTIONS_ASIDE.sub("", text)
    return _SOLUTIONS_SOURCE.sub(
        "`exercises/aNN_*.ipynb` are the assignments, with a stub where your code goes "
        "(their answers are kept for the grader and not published).",
        text,
    )


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _markdown_cell(text: str, key: str) -> dict:
    return {
        "cell_type": "markdown",
        "id": "web-" + hashlib.sha1(f"{key}:{text}".encode()).hexdigest()[:12],
        "metadata": {},
        "source": text,
    }


# --- chapters and assignments ------------------------------------------------------------------------


def reading_order(readme: str) -> list[tuple[str, list[str]]]:
    """The syllabus rows: (chapter path, its assignment paths), in the README's order."""
    import prepare  # site/prepare.py: the one reader of the syllabus table

    return prepare.syllabus(readme)[2]


def _title(notebook: dict) -> str:
    """The notebook's first heading without its "# " (e.g. "03 · Scaled dot-product attention")."""
    first = _source(notebook["cells"][0]).strip().splitlines()[0] if notebook["cells"] else ""
    return first.lstrip("#").strip()


def _link(from_path: str, to_path: str, text: str) -> str:
    relative = Path("..") / to_path if Path(from_path).parent != Path(to_path).parent else Path(to_path).name
    return f"[{text}]({relative.as_posix()})"


def assignment_box(chapter: str, assignments: list[tuple[str, str]]) -> str:
    """The box at a chapter's end: "Now do assignment aNN", linking each assignment page."""
    links = "\n".join(f"- {_link(chapter, path, title)}" for path, title in assignments)
    which = "assignment" if len(assignments) == 1 else "assignments"
    names = " and ".join(Path(path).stem.split("_")[0] for path, _ in assignments)
    return (
        f"```{{admonition}} Now do {which} {names}\n:class: tip course-next-assignment\n"
        f"This chapter's {which}, with a self-check in each notebook:\n\n{links}\n```\n"
    )


def chapter_box(assignment: str, chapter: str, title: str) -> str:
    """The box at an assignment's top: "Read chapter NN first", linking the chapter page."""
    number = Path(chapter).stem[:2]
    return (
        f"```{{admonition}} Read chapter {number} first\n:class: note course-read-chapter\n"
        f"This assignment asks for what {_link(assignment, chapter, title)} builds step by step.\n```\n"
    )


# --- figures' alt texts ------------------------------------------------------------------------------

_STRING = r"""f?(?:"((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)')"""
_TITLE = re.compile(r"(?:set_title|suptitle|plt\.title|\btitle\s*=)\s*\(?\s*" + _STRING)
_LABEL = re.compile(r"(?:set_xlabel|set_ylabel|plt\.xlabel|plt\.ylabel|\b[xy]label\s*=)\s*\(?\s*" + _STRING)
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _clean(text: str) -> str:
    text = _PLACEHOLDER.sub("…", text.replace("\\n", " "))
    text = re.sub(r"\$([^$]*)\$", r"\1", text)  # TeX in a label: its letters read well enough
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\*\*?([^*]+)\*\*?", r"\1", text)
    text = re.sub(r"\\(?:text|mathrm|operatorname)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\([a-zA-Z]+)", r"\1", text).replace("{", "").replace("}", "")
    return re.sub(r"\s+", " ", text).strip(" :")


def _strings(pattern: re.Pattern, code: str) -> list[str]:
    found = []
    for match in pattern.finditer(code):
        text = _clean(match.group(1) if match.group(1) is not None else match.group(2))
        if text and text != "…" and text not in found:
            found.append(text)
    return found


def _last_sentence(markdown: str) -> str:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = _clean(re.sub(r"^#+\s*", "", text, flags=re.M))
    sentences = [s for s in re.split(r"(?<=[.:?!])\s+", text) if len(s) > 3]
    return sentences[-1].rstrip(":") if sentences else ""


def figure_alt(code: str, markdown_before: str) -> str:
    """The alt text of the figures a code cell draws, from the cell itself (see the module's docstring)."""
    titles = _strings(_TITLE, code)
    if titles:
        alt = "Figure: " + "; ".join(titles)
        if len(re.findall(r"[^\W\d_]", alt)) < 24:  # titles made mostly of computed values: add the context
            sentence = _last_sentence(markdown_before)
            alt += f" ({sentence})" if sentence else ""
        return alt
    labels = _strings(_LABEL, code)
    if labels:
        return "Figure plotting " + " against ".join(labels[:2][::-1])
    comment = next((line.strip().lstrip("#").strip() for line in code.splitlines() if line.strip().startswith("#")), "")
    if comment:
        return "Figure: " + _clean(comment)
    sentence = _last_sentence(markdown_before)
    return ("Figure: " + sentence) if sentence else "Figure drawn by the code above"


def figure_alts(notebook: dict) -> dict[str, str]:
    """sha1 of each code cell's source -> the alt text of its figures (a cell's source is its key: the
    page's cells are the notebook's, whatever was inserted between them)."""
    alts, markdown_before = {}, ""
    for cell in notebook["cells"]:
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            markdown_before = source
        elif cell["cell_type"] == "code":
            alts[hashlib.sha1(source.strip().encode()).hexdigest()] = figure_alt(source, markdown_before)
    return alts


# --- Sphinx ------------------------------------------------------------------------------------------


def rewrite_notebook(
    notebook: dict, path: str, assignments: list[tuple[str, str]], chapter: tuple[str, str] | None
) -> dict:
    """The notebook as the web page shows it: "Check yourself" for the web, the chapter and assignment boxes.

    Args:
        notebook: the notebook's JSON (as course_pages left it).
        path: its path in the site (``notebooks/03_x.ipynb``).
        assignments: on a chapter, its assignments' (path, title), in the syllabus's order.
        chapter: on an assignment, its chapter's (path, title).
    """
    name = Path(path).name
    cells = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            rewritten = web_text(text, name)
            cell = {**cell, "source": rewritten} if rewritten != text else cell
        cells.append(cell)
        if index == 0 and chapter is not None:
            cells.append(_markdown_cell(chapter_box(path, *chapter), f"{path}:chapter"))
        if cell["cell_type"] == "code" and _CHECK_CALL.search(_source(cell)):
            cells.append(_markdown_cell(CHECK_NOTE, f"{path}:{index}"))
    if assignments:
        cells.append(_markdown_cell(assignment_box(path, assignments), f"{path}:assignments"))
    return {**notebook, "cells": cells}


def _pairs(srcdir: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """chapter -> its assignments, assignment -> its chapter: the syllabus, limited to the pages laid out."""
    to_assignments, to_chapter = {}, {}
    for chapter, assignments in reading_order((ROOT / "README.md").read_text(encoding="utf-8")):
        if not (srcdir / chapter).is_file():
            continue
        present = [path for path in assignments if (srcdir / path).is_file()]
        to_assignments[chapter] = present
        for path in present:
            to_chapter[path] = chapter
    return to_assignments, to_chapter


def _notebook_title(srcdir: Path, path: str) -> str:
    return _title(json.loads((srcdir / path).read_text(encoding="utf-8")))


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if not docname.startswith(("notebooks/", "exercises/")):
        return
    srcdir = Path(app.srcdir)
    path = docname + ".ipynb"
    if not (srcdir / path).is_file():
        return
    to_assignments, to_chapter = _pairs(srcdir)
    assignments = [(a, _notebook_title(srcdir, a)) for a in to_assignments.get(path, [])]
    chapter = (to_chapter[path], _notebook_title(srcdir, to_chapter[path])) if path in to_chapter else None
    source[0] = json.dumps(rewrite_notebook(json.loads(source[0]), path, assignments, chapter))


def _cell_source(container) -> str:
    from docutils import nodes

    for block in container.findall(nodes.literal_block):
        parent = block.parent
        if parent is not None and parent.get("nb_element") == "cell_code_source":
            return block.astext()
    return ""


def _on_doctree_read(app, doctree) -> None:
    from docutils import nodes

    docname = app.env.docname
    path = Path(app.srcdir) / (docname + ".ipynb")
    if not docname.startswith(("notebooks/", "exercises/")) or not path.is_file():
        return
    alts = figure_alts(json.loads(path.read_text(encoding="utf-8")))
    for cell in doctree.findall(
        lambda node: isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"
    ):
        code = _cell_source(cell)
        images = [image for image in cell.findall(nodes.image) if not image.get("alt")]
        alt = alts.get(hashlib.sha1(code.strip().encode()).hexdigest(), "Figure drawn by the code above")
        # one picture per output: a mime bundle may hold the same figure twice (PNG and its widget)
        outputs = [b for b in cell.findall(nodes.container) if b.get("nb_element") == "mime_bundle"]
        count = sum(1 for bundle in outputs if any(True for _ in bundle.findall(nodes.image)))
        numbered: dict[int, int] = {}
        for image in images:
            bundle = next((p for p in _ancestors(image) if p.get("nb_element") == "mime_bundle"), None)
            key = id(bundle) if bundle is not None else id(image)
            numbered.setdefault(key, len(numbered) + 1)
            image["alt"] = alt if count <= 1 else f"{alt} (figure {numbered[key]} of {count})"
        if _CHECK_CALL.search(code):
            drop_check_output(cell)


def _ancestors(node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def drop_check_output(cell) -> None:
    """Takes a check cell's output off the page: run with no answer given, it says only "make your
    prediction first" / "write it first", and what else it prints (the scores it compares, a decoded
    sequence) would give the answers away before the reader has tried."""
    for output in [c for c in cell.children if c.get("nb_element") == "cell_code_output"]:
        cell.remove(output)


def _favicon(app, exception) -> None:
    """``/favicon.ico`` at the site's root: browsers ask for it on every page."""
    if exception is None and app.builder.format == "html":
        shutil.copyfile(SITE / "static" / "favicon.ico", Path(app.outdir) / "favicon.ico")


def setup(app):
    app.setup_extension("course_pages")  # its source-read runs first: the answers are dropped before this reads
    app.add_config_value("course_content_digest", hashlib.sha1(Path(__file__).read_bytes()).hexdigest(), "env")
    app.connect("source-read", _on_source_read, priority=600)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("build-finished", _favicon)
    app.add_css_file("course_content.css")
    app.add_js_file("course_content.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
