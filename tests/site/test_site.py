"""The course's website: a mini-site built with the real configuration, checked for leaks and in Chromium.

The mini-site is two chapters (00, 01) and one exercise (a01) built exactly as ``make site``
builds all of them (site/prepare.py, then Sphinx with site/conf.py), executed through the same
jupyter-cache (``_build/.jupyter_cache``: a machine that ran ``make site`` re-runs nothing). It
needs the site's tools (.venv-site, ``make site-env``); the browser checks need Chromium and are
skipped without it.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # site_answers.py beside this file
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "site"))  # prepare, course_pages, browser_check

import browser_check  # noqa: E402
import course_pages  # noqa: E402
import docstrings  # noqa: E402
import prepare  # noqa: E402
import site_answers as answers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SITE_PYTHON = ROOT / ".venv-site" / "bin" / "python"
MINI = ("00", "01", "a01")
CHROMIUM = browser_check.find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make browser)")


def _site_python() -> Path:
    if SITE_PYTHON.is_file():
        return SITE_PYTHON
    if os.environ.get("MHA_COURSE_REQUIRE_SITE"):
        pytest.fail(f"{SITE_PYTHON} is missing: make site-env installs the site's tools")
    pytest.skip("the site's tools are not installed (make site-env)")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="module")
def mini_site(tmp_path_factory) -> tuple[Path, str]:
    """The built mini-site's folder and Sphinx's warnings."""
    python = _site_python()
    work = tmp_path_factory.mktemp("site")
    src, html = work / "src", work / "html"
    subprocess.run([python, "site/prepare.py", src, "--only", *MINI], cwd=ROOT, env=_env(), check=True, timeout=120)
    build = subprocess.run(
        [python, "-m", "sphinx", "-b", "html", "-c", "site", "-d", work / "doctrees", "-q", src, html],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, f"sphinx failed:\n{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    return html, build.stderr


def _site_settings() -> tuple[str, str, str]:
    settings = tomllib.loads((ROOT / "site" / "site.toml").read_text(encoding="utf-8"))
    url = os.environ.get("COURSE_REPOSITORY_URL") or settings["repository_url"]
    owner, repo = url.rstrip("/").removesuffix(".git").split("/")[-2:]
    return owner, repo, os.environ.get("COURSE_BRANCH") or settings["branch"]


# --- the mini-site ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_mini_site_builds_every_page_without_warnings(mini_site):
    html, warnings = mini_site
    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html") if p.relative_to(html).parts[0] != "_static"}
    expected = {
        "index.html",
        "reference.html",
        "search.html",
        "notebooks/00_start_here.html",
        "notebooks/01_dot_products.html",
        "exercises/a01_dot_products.html",
    }
    assert expected <= pages, f"missing pages: {sorted(expected - pages)}"
    assert not any(p.startswith(("solutions/", "_sources/")) for p in pages), sorted(pages)
    # Sphinx's own complaints (autodoc on a broken docstring, a link to no page) fail the build's test;
    # the kernel's and nbformat's chatter on stderr is not Sphinx's.
    problems = [line for line in warnings.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b:", line)]
    problems = [line for line in problems if "Kernel is running over TCP" not in line]
    assert not problems, "\n".join(problems)
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file(), "MathJax is not served by the site itself"


@pytest.mark.slow
def test_no_answer_or_hidden_test_reaches_the_mini_site(mini_site):
    html, _ = mini_site
    secrets = answers.secret_strings()
    assert len(secrets) > 50, f"too few answer strings collected to mean anything: {len(secrets)}"
    leaked = answers.leaks(html, secrets)
    assert not leaked, "\n".join(leaked[:20])


def test_no_answer_or_hidden_test_reaches_the_full_site():
    html = ROOT / "_build" / "html"
    if not (html / "index.html").is_file():
        pytest.skip("no full site built here (make site)")
    leaked = answers.leaks(html, answers.secret_strings())
    assert not leaked, "\n".join(leaked[:20])


def _missing_figures(html: Path) -> list[str]:
    """Chapter pages without an image, or with a figure shown as its text stand-in ``<Figure size ...>``
    (what a page shows when an output's picture was lost and only its plain-text form was left)."""
    missing = []
    for page in sorted((html / "notebooks").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        if 'src="../_images/' not in text:
            missing.append(f"{page.name}: no image")
        stand_ins = re.findall(r"&lt;(?:Figure size|matplotlib\.[\w.]+ object)[^&]*&gt;", text)
        if stand_ins:
            missing.append(f"{page.name}: figures shown as text: {stand_ins[:3]}")
    return missing


@pytest.mark.slow
def test_every_figure_of_the_mini_site_is_an_image(mini_site):
    html, _ = mini_site
    assert not _missing_figures(html), _missing_figures(html)


def test_every_figure_of_the_full_site_is_an_image():
    html = ROOT / "_build" / "html"
    if not (html / "index.html").is_file():
        pytest.skip("no full site built here (make site)")
    assert len(list((html / "notebooks").glob("*.html"))) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert not _missing_figures(html), _missing_figures(html)


@pytest.mark.slow
def test_the_reference_has_every_public_name_and_chapters_link_to_it(mini_site):
    html, _ = mini_site
    reference = (html / "reference.html").read_text(encoding="utf-8")
    import mha_course

    missing = [name for name in mha_course._EXPORTS if f'id="mha_course.{name}"' not in reference]
    assert not missing, f"not in the reference: {missing}"
    assert "Raises" in reference and "(B, H, T, D)" in reference.replace('<span class="pre">', "")
    chapter = (html / "notebooks" / "00_start_here.html").read_text(encoding="utf-8")
    uses = prepare.first_uses([ROOT / "notebooks" / "00_start_here.ipynb"], list(mha_course._EXPORTS))
    assert uses, "chapter 00 uses no public name any more: pick another chapter for this test"
    for name in uses:
        assert f'href="../reference.html#mha_course.{name}"' in chapter, f"chapter 00 does not link {name}"


@pytest.mark.slow
@needs_chromium
def test_mini_site_in_chromium(mini_site, tmp_path):
    html, _ = mini_site
    report_path = tmp_path / "report.json"
    run = subprocess.run(
        [_site_python(), "site/browser_check.py", html, "--chromium", CHROMIUM, "--json", report_path],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report_path.is_file(), f"the browser check did not run:\n{run.stdout}\n{run.stderr[-3000:]}"
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert not report["problems"], "\n".join(report["problems"])
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    pages = report["pages"]
    for chapter in ("notebooks/00_start_here.html", "notebooks/01_dot_products.html"):
        assert pages[chapter]["outputImages"] > 0, f"{chapter} shows no figure"
    assert pages["notebooks/01_dot_products.html"]["math"] > 10, "chapter 01's formulas are missing"
    assert pages["notebooks/01_dot_products.html"]["interactive"], "chapter 01's interactive cell has no note"
    owner, repo, branch = _site_settings()
    for name in ("notebooks/00_start_here.html", "notebooks/01_dot_products.html", "exercises/a01_dot_products.html"):
        notebook = name.removesuffix(".html") + ".ipynb"
        assert (ROOT / notebook).is_file()
        launch = pages[name]["launch"]
        colab = urlparse(launch["launch-colab"])
        assert (colab.scheme, colab.netloc) == ("https", "colab.research.google.com")
        assert colab.path == f"/github/{owner}/{repo}/blob/{branch}/{notebook}", launch["launch-colab"]
        binder = urlparse(launch["launch-binder"])
        assert binder.path == f"/v2/gh/{owner}/{repo}/{branch}", launch["launch-binder"]
        assert parse_qs(binder.query) == {"labpath": [notebook]}, launch["launch-binder"]
        assert urlparse(launch["launch-source"]).path == f"/{owner}/{repo}/blob/{branch}/{notebook}"


@pytest.mark.slow
@needs_chromium
def test_browser_check_reports_what_is_broken(tmp_path):
    """The browser check on a hand-made broken site: each fault it exists to find is reported."""
    site = tmp_path / "html"
    (site / "notebooks").mkdir(parents=True)
    (site / "index.html").write_text(
        '<html><body><a href="notebooks/ch.html">ok</a> <a href="missing.html">gone</a>'
        ' <a href="notebooks/ch.html#nowhere">no anchor</a> <img src="no.png">'
        '<span class="math">\\(x^2\\)</span><script>throw new Error("boom")</script></body></html>'
    )
    (site / "notebooks" / "ch.html").write_text(
        '<html><body><div class="cell"><div class="cell_output">interactive(children=(IntSlider())</div></div>'
        '<div class="course-interactive">note</div>'
        '<div class="cell"><div class="cell_output">T=4096: 34.4 GFLOP</div></div>'
        '<div class="course-interactive">printed, so shown</div></body></html>'
    )
    run = subprocess.run(
        [_site_python(), "site/browser_check.py", site, "--chromium", CHROMIUM, "--json", tmp_path / "report.json"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, f"the check passed a broken site:\n{run.stdout}\n{run.stderr[-3000:]}"
    problems = "\n".join(json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["problems"])
    for expected in (
        "JavaScript error: boom",
        "image did not load",
        "broken link to missing.html",
        "broken link to notebooks/ch.html#nowhere",
        "1 of 1 formulas not typeset",
        "notebooks/ch.html: a chapter page without figures",
        "notebooks/ch.html: interactive cell 1 shows nothing of its default setting",
    ):
        assert expected in problems, f"{expected!r} not reported; got:\n{problems}"
    assert "interactive cell 2" not in problems, "an interactive cell that prints its result was reported"


# --- the pieces, without a build -------------------------------------------------------------------


def test_leaks_finds_a_secret_inside_highlighted_code(tmp_path):
    secrets = answers.secret_strings()
    secret = next(s for s in secrets if "(" in s)
    head, tail = secret.split("(", 1)
    page = f'<div class="highlight"><pre><span class="n">{head}</span><span class="p">(</span>{tail}</pre></div>'
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    assert answers.leaks(tmp_path, {secret: "test"}), "a secret split by highlighting tags was not found"


def test_rewrite_notebook_drops_answers_and_adds_launch_box_and_notes():
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# 01 Title"},
            {"cell_type": "code", "metadata": {}, "source": "sliders.interactive(draw, tau=(0.1, 5.0))", "outputs": []},
            {"cell_type": "code", "metadata": {}, "source": "sliders.interactive(draw, tau=(0.1, 5.0))", "outputs": []},
            {"cell_type": "markdown", "metadata": {"tags": ["answers"]}, "source": "1. (b) because ..."},
        ],
        "metadata": {},
    }
    urls = course_pages.launch_urls("https://github.com/o/r", "main", "https://mybinder.org", "notebooks/01_x.ipynb")
    cells = course_pages.rewrite_notebook(notebook, "notebooks/01_x.ipynb", urls, ["softmax"])["cells"]
    sources = [cell["source"] for cell in cells]
    assert not any("because" in source for source in sources)
    assert 'href="https://colab.research.google.com/github/o/r/blob/main/notebooks/01_x.ipynb"' in sources[1]
    assert "mha_course.softmax" in sources[1]  # the public name, not a module path
    assert "course-interactive" in sources[3] and "course-interactive" in sources[5]
    ids = [cell["id"] for cell in cells if "id" in cell]
    assert len(ids) == 3 and len(set(ids)) == 3, ids  # the two identical notes get ids of their own


def test_launch_urls_refuses_a_repository_url_that_is_not_github():
    with pytest.raises(ValueError, match="https://github.com/OWNER/REPO"):
        course_pages.launch_urls("https://example.org/o/r", "main", "https://mybinder.org", "notebooks/x.ipynb")


def test_syllabus_needs_the_readme_table():
    with pytest.raises(ValueError, match="Syllabus"):
        prepare.syllabus("# A README without one\n")
    header, rows, parsed = prepare.syllabus((ROOT / "README.md").read_text(encoding="utf-8"))
    chapters = [chapter for chapter, _ in parsed]
    assert chapters == sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb"))
    linked = {path for _, exercises in parsed for path in exercises}
    assert linked == {p.relative_to(ROOT).as_posix() for p in (ROOT / "exercises").glob("*.ipynb")}


def test_first_uses_reads_every_import_form(tmp_path):
    notebook = {
        "cells": [
            {"cell_type": "code", "source": "from mha_course.core.masks import (causal_mask,\n    padding_mask)  # x"},
            {"cell_type": "code", "source": "import mha_course as mc\nmc.softmax(x)\nmha_course.check"},
            {"cell_type": "code", "source": "from mha_course import split_heads as sh"},
        ]
    }
    (tmp_path / "c.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    names = ["causal_mask", "padding_mask", "softmax", "check", "split_heads", "merge_heads"]
    uses = prepare.first_uses([tmp_path / "c.ipynb"], names, root=tmp_path)
    assert uses["softmax"] == "c.ipynb"
    assert set(uses) == {"causal_mask", "padding_mask", "softmax", "check", "split_heads"}


def test_prepare_lays_out_only_what_it_is_asked(tmp_path):
    laid = prepare.prepare(tmp_path / "src", ["02", "a02"])
    assert laid == {"chapters": ["notebooks/02_softmax.ipynb"], "exercises": ["exercises/a02_softmax.ipynb"]}
    assert sorted(p.relative_to(tmp_path / "src").as_posix() for p in (tmp_path / "src").rglob("*.ipynb")) == [
        "exercises/a02_softmax.ipynb",
        "notebooks/02_softmax.ipynb",
    ]
    index = (tmp_path / "src" / "index.md").read_text(encoding="utf-8")
    assert "notebooks/02_softmax" in index and "notebooks/03_" not in index
    assert not list((tmp_path / "src").rglob("solutions*"))
    mtime = (tmp_path / "src" / "index.md").stat().st_mtime_ns
    prepare.prepare(tmp_path / "src", ["02", "a02"])  # again: nothing changed, nothing rewritten
    assert (tmp_path / "src" / "index.md").stat().st_mtime_ns == mtime
    prepare.prepare(tmp_path / "src", ["03"])  # the pages of 02 are removed
    assert sorted(p.name for p in (tmp_path / "src").rglob("*.ipynb")) == ["03_scaled_dot_product_attention.ipynb"]
    with pytest.raises(ValueError, match="keeps no chapter"):
        prepare.prepare(tmp_path / "none", ["99"])


def test_docstring_blocks_keep_their_lines_and_sections_stay_for_napoleon():
    lines = [
        "Attention.",
        "",
        "    out = softmax(q k^T / sqrt(D)) v     (B, T, E)",
        "    weights                             (B, H, T, S)",
        "",
        "Args:",
        "    q: queries (B, H, T, D).",
        "        continued.",
        "",
        "- a list item",
        "  continued",
    ]
    out = docstrings.literal_blocks(lines)
    assert out[out.index("::") + 2 : out.index("::") + 4] == lines[2:4]
    assert out.count("::") == 1, out
    assert out[out.index("Args:") + 1 : out.index("Args:") + 3] == lines[6:8]
    assert out[-2:] == lines[-2:]


def test_missing_figures_finds_a_figure_left_as_text(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "a.html").write_text(
        '<img src="../_images/x.png"><pre>&lt;Figure size 640x480 with 1 Axes&gt;</pre>'
    )
    (tmp_path / "notebooks" / "b.html").write_text("<p>no picture at all</p>")
    (tmp_path / "notebooks" / "c.html").write_text('<img src="../_images/y.png">')
    assert [line.split(":")[0] for line in _missing_figures(tmp_path)] == ["a.html", "b.html"]


# --- the pages written for the web (site/course_content.py, site/about_pages.py) ---------------------

import about_pages  # noqa: E402
import course_content  # noqa: E402


def _web_notebook(path: str) -> dict:
    """A repository notebook as its page shows it: course_pages' then course_content's rewrite."""
    notebook = json.loads((ROOT / path).read_text(encoding="utf-8"))
    urls = course_pages.launch_urls("https://github.com/o/r", "main", "https://mybinder.org", path)
    notebook = course_pages.rewrite_notebook(notebook, path, urls, [])
    to_assignments, to_chapter = course_content._pairs(ROOT)
    title = course_content._notebook_title
    assignments = [(a, title(ROOT, a)) for a in to_assignments.get(path, [])]
    chapter = (to_chapter[path], title(ROOT, to_chapter[path])) if path in to_chapter else None
    return course_content.rewrite_notebook(notebook, path, assignments, chapter)


def _markdown(notebook: dict) -> str:
    return "\n".join(course_content._source(c) for c in notebook["cells"] if c["cell_type"] == "markdown")


ALL_PAGES = sorted(
    p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("exercises/*.ipynb")]
)


@pytest.mark.parametrize("path", ALL_PAGES)
def test_no_page_points_at_the_answers_the_site_leaves_out(path):
    notebook = _web_notebook(path)
    text = _markdown(notebook)
    said = [phrase for phrase in course_content.UNPUBLISHED_PHRASES if phrase in text]
    assert not said, f"{path} still says {said}: course_content.web_text must rewrite the sentence"
    assert "Answers — open after you have tried" not in text
    original = _markdown(json.loads((ROOT / path).read_text(encoding="utf-8")))
    if "## Check yourself" in original and "collapsed cell" in original:
        name = Path(path).name
        assert f'href="{name}" download' in text, f"{path}: its Check yourself does not say how to check on the web"
    checks = [
        c
        for c in notebook["cells"]
        if c["cell_type"] == "code"
        and course_content._CHECK_CALL.search(c["source"] if isinstance(c["source"], str) else "".join(c["source"]))
    ]
    notes = [c for c in notebook["cells"] if "course-check-note" in course_content._source(c)]
    assert len(notes) == len(checks), f"{path}: {len(checks)} check cells, {len(notes)} notes"


@pytest.mark.parametrize("path", ALL_PAGES)
def test_the_downloadable_notebook_has_no_answers_and_does_not_promise_them(path):
    notebook = json.loads((ROOT / path).read_text(encoding="utf-8"))
    copy = course_content.downloadable_notebook(notebook, Path(path).name)
    assert not [c for c in copy["cells"] if course_pages.ANSWERS_TAG in c.get("metadata", {}).get("tags", [])]
    text = _markdown(copy)
    assert not [phrase for phrase in course_content.UNPUBLISHED_PHRASES if phrase in text], path
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert [c for c in copy["cells"] if c["cell_type"] == "code"] == code  # every code cell, as it is


def test_code_cells_are_left_as_they_are_so_the_executed_outputs_stay_cached():
    for path in ALL_PAGES:
        original = json.loads((ROOT / path).read_text(encoding="utf-8"))
        code = [(c["source"], c["metadata"]) for c in original["cells"] if c["cell_type"] == "code"]
        web = [(c["source"], c["metadata"]) for c in _web_notebook(path)["cells"] if c["cell_type"] == "code"]
        assert web == code, f"{path}: a code cell changed (jupyter-cache would run the chapter again)"


def test_every_chapter_links_its_assignments_and_each_assignment_its_chapter():
    _, _, rows = prepare.syllabus((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sum(len(a) for _, a in rows) == len(list(ROOT.glob("exercises/*.ipynb")))
    for chapter, assignments in rows:
        text = _markdown(_web_notebook(chapter))
        if not assignments:
            assert "course-next-assignment" not in text
        for assignment in assignments:
            number = Path(assignment).stem.split("_")[0]
            assert "course-next-assignment" in text and f"](../{assignment})" in text, (
                f"{chapter} does not link {assignment}"
            )
            assert number in text.split("course-next-assignment")[0].rsplit("```{admonition}", 1)[1]
            back = _markdown(_web_notebook(assignment))
            assert f"Read chapter {Path(chapter).stem[:2]} first" in back and f"](../{chapter})" in back


def test_the_navigation_puts_each_assignment_after_its_chapter(tmp_path):
    prepare.prepare(tmp_path / "src", ["02", "a02", "03", "a03", "04"])
    index = (tmp_path / "src" / "index.md").read_text(encoding="utf-8")
    toc = index.split(":caption: Chapters and assignments\n\n")[1].split("```")[0].split()
    assert toc == [
        "notebooks/02_softmax",
        "exercises/a02_softmax",
        "notebooks/03_scaled_dot_product_attention",
        "exercises/a03_attention",
        "notebooks/04_masks",
    ], toc
    for page in about_pages.ABOUT_PAGES:
        assert (tmp_path / "src" / page).is_file() and page.removesuffix(".md") in index


def test_figure_alt_comes_from_the_cell_and_is_never_a_path():
    assert course_content.figure_alt('ax.set_title("softmax over keys")\nfig.suptitle(f"T={T}")', "") == (
        "Figure: softmax over keys; T=…"
    )
    assert course_content.figure_alt("ax.plot(x)\nax.set_xlabel('key j')\nax.set_ylabel('weight')", "") == (
        "Figure plotting weight against key j"
    )
    assert course_content.figure_alt("# the weights of head 0\nplt.imshow(w)", "") == "Figure: the weights of head 0"
    assert course_content.figure_alt("plt.imshow(w)", "Some text. The **causal** mask hides the future:") == (
        "Figure: The causal mask hides the future"
    )
    # computed titles are completed by the text before the cell
    assert "(The mask halves the work.)" in course_content.figure_alt(
        'ax.set_title(f"{n}: {k}")', "The mask halves the work."
    )
    for path in ALL_PAGES:
        for alt in course_content.figure_alts(json.loads((ROOT / path).read_text(encoding="utf-8"))).values():
            assert alt.startswith("Figure") and len(alt) > 10 and "_images/" not in alt, (path, alt)


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


def test_every_paper_of_the_reference_list_is_cited_by_a_chapter_and_linked():
    chapters = [p.relative_to(ROOT).as_posix() for p in sorted(ROOT.glob("notebooks/*.ipynb"))]
    for entry in about_pages.papers():
        assert entry["url"].startswith("https://"), entry
        assert about_pages.citing_chapters(entry, chapters), (
            f"no chapter cites {entry['title']!r} ({entry['cited_as']})"
        )
    page = about_pages.references_page(chapters, chapters)
    assert page.count("](https://") == len(about_pages.papers())
    # a citation written "(Name et al., YYYY)" in a chapter has its entry
    cited = set()
    for chapter in chapters:
        cited |= set(
            re.findall(r"([A-Z][a-z]+) et al\.", _markdown(json.loads((ROOT / chapter).read_text(encoding="utf-8"))))
        )
    listed = " ".join(e["authors"] + " " + e["cited_as"] for e in about_pages.papers())
    assert not [name for name in cited if name not in listed], sorted(cited)


def test_citation_file_and_cite_page_agree_with_the_library():
    import yaml

    import mha_course

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["version"] == mha_course.__version__
    page = about_pages.cite_page()
    assert "@software{mha_course," in page and cff["title"] in page


@pytest.mark.slow
def test_mini_site_joins_chapter_and_assignment_and_says_only_what_it_has(mini_site):
    html, _ = mini_site
    chapter = (html / "notebooks" / "01_dot_products.html").read_text(encoding="utf-8")
    assignment = (html / "exercises" / "a01_dot_products.html").read_text(encoding="utf-8")
    assert 'href="../exercises/a01_dot_products.html"' in chapter.split("course-next-assignment")[1]
    assert 'href="../notebooks/01_dot_products.html"' in assignment.split("course-read-chapter")[1]
    # reading order: 01 -> a01
    next_link = re.search(r'class="right-next"\s+href="([^"]+)"', chapter)
    assert next_link and next_link.group(1) == "../exercises/a01_dot_products.html", next_link
    prev_link = re.search(r'class="left-prev"\s+href="([^"]+)"', assignment)
    assert prev_link and prev_link.group(1) == "../notebooks/01_dot_products.html", prev_link
    for page in ("notebooks/00_start_here.html", "notebooks/01_dot_products.html", "exercises/a01_dot_products.html"):
        text = (html / page).read_text(encoding="utf-8")
        plain = re.sub(r"<[^>]+>", "", text)
        said = [phrase for phrase in course_content.UNPUBLISHED_PHRASES if phrase in plain]
        assert not said, f"{page} says {said}"
        assert not re.search(r'href="[^"]*solutions/', text)
    assert (
        'href="01_dot_products.ipynb" download' in chapter and (html / "notebooks" / "01_dot_products.ipynb").is_file()
    )
    for page in ("how_to_run.html", "references.html", "cite.html"):
        assert (html / page).is_file(), page
    assert (html / "favicon.ico").is_file()


@pytest.mark.slow
def test_mini_site_figures_have_alt_texts_and_the_reference_no_made_up_return_type(mini_site):
    html, _ = mini_site
    for page in (html / "notebooks").glob("*.html"):
        figures = re.findall(r'<img[^>]*src="\.\./_images/[^>]*>', page.read_text(encoding="utf-8"))
        alts = [re.search(r'\balt="([^"]*)"', figure) for figure in figures]
        assert figures and all(alts), f"{page.name}: a figure without alt"
        alts = [alt.group(1) for alt in alts]
        assert all(alt.startswith("Figure") and "_images" not in alt for alt in alts), alts
    reference = (html / "reference.html").read_text(encoding="utf-8")
    assert not re.search(r"Return type:.*?<p>out</p>", reference, re.S), "Napoleon read 'out:' as a return type"


def test_full_site_says_only_what_it_has():
    html = ROOT / "_build" / "html"
    if not (html / "index.html").is_file():
        pytest.skip("no full site built here (make site)")
    problems = []
    for page in sorted(html.rglob("*.html")):
        if page.relative_to(html).parts[0] == "_static":
            continue
        text = page.read_text(encoding="utf-8")
        plain = re.sub(r"<[^>]+>", "", text)
        problems += [f"{page.relative_to(html)}: {p!r}" for p in course_content.UNPUBLISHED_PHRASES if p in plain]
        problems += [f"{page.relative_to(html)}: links solutions/" for _ in re.findall(r'href="[^"]*solutions/', text)]
        problems += [
            f"{page.relative_to(html)}: img alt {a!r}"
            for a in re.findall(r'<img[^>]*\balt="([^"]*)"', text)
            if not a or re.fullmatch(r"\S*/\S*", a)  # empty, or a path: what a browser shows without one
        ]
    # the notebooks a reader downloads beside the pages promise no answer cell either
    for notebook in sorted([*html.glob("notebooks/*.ipynb"), *html.glob("exercises/*.ipynb")]):
        text = _markdown(json.loads(notebook.read_text(encoding="utf-8")))
        problems += [f"{notebook.relative_to(html)}: {p!r}" for p in course_content.UNPUBLISHED_PHRASES if p in text]
    assert not problems, "\n".join(problems[:20])


@pytest.mark.slow
@needs_chromium
def test_browser_check_reports_what_a_reader_cannot_read(tmp_path):
    """Alt texts, buttons' names, pointers at unpublished answers, cut-off code, a page wider than a phone."""
    site = tmp_path / "html"
    site.mkdir()
    (tmp_path / "html" / "pic.png").write_bytes((ROOT / "site" / "static" / "favicon.ico").read_bytes())
    (site / "favicon.ico").write_bytes((ROOT / "site" / "static" / "favicon.ico").read_bytes())
    (site / "index.html").write_text(
        '<html><body><div class="bd-article"><img src="pic.png" alt="_images/ab12.png"><img src="pic.png">'
        '<button class="copybtn"></button><button aria-label="Search">⌕</button>'
        '<p>The answers are in the collapsed cell at the end.</p><a href="solutions/a01.ipynb">answers</a>'
        '<div class="highlight"><pre>' + "x = 1  # " + "a" * 300 + "</pre></div>"
        '<p><code style="white-space: nowrap">' + "torch.nn.functional." * 12 + "</code></p></div></body></html>"
    )
    run = subprocess.run(
        [_site_python(), "site/browser_check.py", site, "--chromium", CHROMIUM, "--json", tmp_path / "report.json"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, f"the check passed a broken page:\n{run.stdout}\n{run.stderr[-3000:]}"
    problems = "\n".join(json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["problems"])
    for expected in (
        'image without a meaningful alt text: pic.png (alt "_images/ab12.png")',
        "image without a meaningful alt text: pic.png (alt null)",
        'button without an accessible name: <button class="copybtn">',
        "says 'collapsed cell'",
        "links to the unpublished solutions/a01.ipynb",
        "a code block scrolls sideways at 1366 px",
        "wider than a 390-px phone screen",
    ):
        assert expected in problems, f"{expected!r} not reported; got:\n{problems}"
    assert "Search" not in problems


def test_full_site_reads_each_assignment_after_its_chapter():
    html = ROOT / "_build" / "html"
    if not (html / "index.html").is_file():
        pytest.skip("no full site built here (make site)")
    _, _, rows = prepare.syllabus((ROOT / "README.md").read_text(encoding="utf-8"))
    order = [page for chapter, assignments in rows for page in (chapter, *assignments)]
    for here, there in zip(order[:-1], order[1:], strict=True):
        text = (html / here.replace(".ipynb", ".html")).read_text(encoding="utf-8")
        link = re.search(r'class="right-next"\s+href="([^"]+)"', text)
        assert link, f"{here} has no Next link"
        target = (Path(here).parent / link.group(1)).as_posix()
        target = os.path.normpath(target)
        assert target == there.replace(".ipynb", ".html"), f"{here}: Next is {target}, not {there}"
