"""The course's website: a mini-site built with the real configuration, checked for leaks and in Chromium.

The mini-site is two chapters (00, 01) and one exercise (a01) built exactly as ``make site``
builds all of them (site/prepare.py, then Sphinx with site/conf.py), executed through the same
jupyter-cache (``_build/.jupyter_cache``: a machine that ran ``make site`` re-runs nothing), for a
made-up repository (:data:`TEST_REPOSITORY`); a second, smaller one (chapter 00) is built for no
repository at all, as a checkout without a GitHub origin builds it. They need the site's tools
(.venv-site, ``make site-env``); the browser checks need Chromium and are skipped without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # site_answers.py beside this file
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "site"))  # prepare, course_pages, browser_check

import browser_check  # noqa: E402
import course_pages  # noqa: E402
import docstrings  # noqa: E402
import downloads  # noqa: E402
import prepare  # noqa: E402
import repository  # noqa: E402
import site_answers as answers  # noqa: E402
import site_chrome  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SITE_PYTHON = ROOT / ".venv-site" / "bin" / "python"
MINI = ("00", "01", "a01")
TEST_REPOSITORY = "https://github.com/course-test/attention-course"
CHROMIUM = browser_check.find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make browser)")


def _site_python() -> Path:
    if SITE_PYTHON.is_file():
        return SITE_PYTHON
    if os.environ.get("MHA_COURSE_REQUIRE_SITE"):
        pytest.fail(f"{SITE_PYTHON} is missing: make site-env installs the site's tools")
    pytest.skip("the site's tools are not installed (make site-env)")


def _env(repository_url: str = TEST_REPOSITORY) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[repository.ENV] = repository_url
    return env


def _build(work: Path, only: tuple[str, ...], repository_url: str) -> tuple[Path, str]:
    python = _site_python()
    src, html = work / "src", work / "html"
    env = _env(repository_url)
    subprocess.run([python, "site/prepare.py", src, "--only", *only], cwd=ROOT, env=env, check=True, timeout=120)
    build = subprocess.run(
        [python, "-m", "sphinx", "-b", "html", "-c", "site", "-d", work / "doctrees", "-q", src, html],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert build.returncode == 0, f"sphinx failed:\n{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    return html, build.stderr


@pytest.fixture(scope="module")
def mini_site(tmp_path_factory) -> tuple[Path, str]:
    """The built mini-site's folder and Sphinx's warnings (built for TEST_REPOSITORY)."""
    return _build(tmp_path_factory.mktemp("site"), MINI, TEST_REPOSITORY)


@pytest.fixture(scope="module")
def site_without_repository(tmp_path_factory) -> Path:
    """Chapter 00 built as a checkout without a GitHub origin builds it."""
    return _build(tmp_path_factory.mktemp("site-norepo"), ("00",), repository.NONE)[0]


def _site_settings() -> tuple[str, str, str]:
    settings = tomllib.loads((ROOT / "site" / "site.toml").read_text(encoding="utf-8"))
    owner, repo = TEST_REPOSITORY.split("/")[-2:]
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
        env=_env(),  # the check takes the repository from the environment, as the build did
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report_path.is_file(), f"the browser check did not run:\n{run.stdout}\n{run.stderr[-3000:]}"
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert not report["problems"], "\n".join(report["problems"])
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert report["repository"] == TEST_REPOSITORY
    reader = report["reader"]
    assert reader["phone_menus_opened"] == {".primary-toggle": True, ".secondary-toggle": True}, reader
    assert reader["downloads"]["a.launch-download"] == "00_start_here.ipynb", reader
    assert reader["downloads"]["a.launch-zip"] == "mha-course.zip" and reader["downloads"]["zip_files"] > 100, reader
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
def test_site_without_a_repository_has_no_launch_links(site_without_repository, tmp_path):
    html = site_without_repository
    page = (html / "notebooks" / "00_start_here.html").read_text(encoding="utf-8")
    for host in ("colab.research.google.com", "mybinder.org", "github.com", "git+"):
        assert host not in page, f"{host} on a site built without a repository"
    assert 'class="launch-download"' in page and (html / "notebooks" / "00_start_here.ipynb").is_file()
    report_path = tmp_path / "report.json"
    run = subprocess.run(
        [_site_python(), "site/browser_check.py", html, "--chromium", CHROMIUM, "--json", report_path],
        cwd=ROOT,
        env=_env(repository.NONE),
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert not report["problems"] and run.returncode == 0, "\n".join(report["problems"]) + run.stderr[-2000:]
    assert report["repository"] is None and report["reader"]["phone_menus_opened"][".primary-toggle"] is True


def _unzipped(zip_path: Path, into: Path) -> Path:
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(into)
    return into / downloads.ZIP_FOLDER


def _zip_problems(course: Path) -> list[str]:
    """What the unpacked course zip must hold and must not: the files make lab needs; no solution,
    test, answer or hidden case."""
    names = {p.relative_to(course).as_posix() for p in course.rglob("*") if p.is_file()}
    problems = [
        f"missing {name}"
        for name in (
            "Makefile",
            "README.md",
            "requirements.txt",
            "pyproject.toml",
            "jupyter/overrides.json",
            "mha_course/__init__.py",
        )
        if name not in names
    ]
    chapters = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    exercises = {f"exercises/{p.name}" for p in (ROOT / "exercises").glob("*.ipynb")}
    problems += [f"missing {name}" for name in sorted((chapters | exercises) - names)]
    problems += [f"holds {name}" for name in names if name.split("/")[0] in {"solutions", "tests", "site", ".github"}]
    for name in sorted(n for n in names if n.endswith(".ipynb")):
        cells = json.loads((course / name).read_text(encoding="utf-8"))["cells"]
        if any(cell.get("outputs") for cell in cells):
            problems.append(f"{name} carries outputs")
    # The grader's exercise modules stay in the zip (the learner's check() runs their public cases),
    # cut of their hidden cases; what they share with a solution is the public cases' reference code,
    # which `pip install` of the course (the Colab route) installs as well. Anywhere else, and any
    # hidden case anywhere, is a leak.
    modules = downloads.HIDDEN_CASE_MODULES + "/"
    problems += [
        leak
        for leak in answers.leaks(course, answers.secret_strings())
        if not (leak.startswith(modules) and "(from solutions/" in leak)
    ]
    for path in (course / "mha_course" / "grading" / "exercises").glob("*.py"):
        if "hidden=True" in path.read_text(encoding="utf-8"):
            problems.append(f"{path.name} keeps a hidden case")
    return problems


@pytest.mark.slow
def test_the_mini_sites_zip_starts_the_course_and_publishes_no_secret(mini_site, tmp_path):
    html, _ = mini_site
    course = _unzipped(html / course_pages.COURSE_ZIP, tmp_path)
    assert not _zip_problems(course), _zip_problems(course)
    # the library in the zip imports, and its self-check knows every public case and no hidden one
    probe = (
        "import json; from mha_course.grading.engine.registry import assignments, discovery_errors;"
        "print(json.dumps({'errors': discovery_errors(), 'cases': sorted(f'{a.key}/{e.key}/{c.name}/{c.hidden}'"
        " for a in assignments() for e in a.exercises for c in e.cases)}))"
    )
    env = {**os.environ, "PYTHONPATH": str(course)}
    zipped = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=course, env=env, capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    env["PYTHONPATH"] = str(ROOT)
    full = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    assert zipped["errors"] == {} == full["errors"]
    assert zipped["cases"] == [case for case in full["cases"] if case.endswith("/False")]
    assert any(case.endswith("/True") for case in full["cases"]), "no hidden case in the repository to cut out"


def test_no_answer_or_hidden_test_reaches_the_full_sites_zip(tmp_path):
    zip_path = ROOT / "_build" / "html" / course_pages.COURSE_ZIP
    if not zip_path.is_file():
        pytest.skip("no full site built here (make site)")
    problems = _zip_problems(_unzipped(zip_path, tmp_path))
    assert not problems, problems[:20]


@pytest.mark.slow
@needs_chromium
def test_browser_check_reports_what_is_broken(tmp_path):
    """The browser check on a hand-made broken site: each fault it exists to find is reported."""
    site = tmp_path / "html"
    (site / "notebooks").mkdir(parents=True)
    (site / "index.html").write_text(
        '<html><body><a href="notebooks/ch.html">ok</a> <a href="missing.html">gone</a>'
        ' <a href="notebooks/ch.html#nowhere">no anchor</a> <img src="no.png">'
        ' <a href="https://mybinder.org/v2/gh/o/r/main">a launch link, but the site has no repository</a>'
        '<span class="math">\\(x^2\\)</span><script>throw new Error("boom")</script></body></html>'
    )
    (site / "notebooks" / "ch.html").write_text(
        '<html><body><div class="cell"><div class="cell_output">interactive(children=(IntSlider())</div></div>'
        '<div class="course-interactive">note</div>'
        '<div class="cell"><div class="cell_output">T=4096: 34.4 GFLOP</div></div>'
        '<div class="course-interactive">printed, so shown</div></body></html>'
    )
    run = subprocess.run(
        [_site_python(), "site/browser_check.py", site, "--chromium", CHROMIUM, "--json", tmp_path / "report.json"]
        + ["--repository", "none"],
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
        "notebooks/ch.html: at 390x844, 0 visible .primary-toggle buttons",  # no menu to tap: a problem
        "notebooks/ch.html: 0 a.launch-download links, not 1",
        "index.html: a launch link on a site built without a repository: https://mybinder.org/v2/gh/o/r/main",
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


def test_rewrite_notebook_without_a_repository_has_only_the_downloads():
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# 01 Title"}], "metadata": {}}
    box = course_pages.rewrite_notebook(notebook, "notebooks/01_x.ipynb", None, [])["cells"][1]["source"]
    assert 'href="01_x.ipynb"' in box and f"../{course_pages.COURSE_ZIP}" in box
    for absent in ("colab", "binder", "github", "git clone", "pip install"):
        assert absent not in box.lower(), absent


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/o-1/r.x",
        "https://github.com/o-1/r.x.git",
        "https://github.com/o-1/r.x/",
        "http://github.com/o-1/r.x",
        "https://user:secret@github.com/o-1/r.x.git",
        "git@github.com:o-1/r.x.git",
        "github.com:o-1/r.x",
        "ssh://git@github.com/o-1/r.x.git",
        "ssh://git@github.com:22/o-1/r.x",
        "git://github.com/o-1/r.x.git",
        "  https://github.com/o-1/r.x.git\n",
    ],
)
def test_github_url_reads_every_spelling_of_a_github_remote(remote):
    assert repository.github_url(remote) == "https://github.com/o-1/r.x"


@pytest.mark.parametrize(
    "remote",
    [
        "https://gitlab.com/o/r.git",
        "git@gitlab.com:o/r.git",
        "https://github.com/o",
        "https://github.com/o/r/tree/main",
        "https://github.com.evil.org/o/r",
        "https://evil.org/github.com/o/r",
        "/srv/git/course.git",
        "https://github.com/o/.git",
        "",
    ],
)
def test_github_url_refuses_what_is_not_a_github_repository(remote):
    assert repository.github_url(remote) is None


def test_github_url_refuses_what_is_not_a_string():
    with pytest.raises(TypeError, match="str"):
        repository.github_url(None)  # type: ignore[arg-type]


def test_course_repository_takes_the_environment_then_site_toml_then_the_origin():
    origin = "git@github.com:from/origin.git"
    toml = {"repository_url": "https://github.com/from/toml"}
    env = {repository.ENV: "https://github.com/from/env.git"}
    assert repository.course_repository(env, toml, origin) == "https://github.com/from/env"
    assert repository.course_repository({repository.ENV: ""}, toml, origin) == "https://github.com/from/toml"
    assert repository.course_repository({}, {"repository_url": ""}, origin) == "https://github.com/from/origin"
    assert repository.course_repository({}, {}, origin) == "https://github.com/from/origin"
    # none: no launch links, even where the origin is on GitHub
    assert repository.course_repository({repository.ENV: "none"}, toml, origin) is None
    assert repository.course_repository({}, {"repository_url": "none"}, origin) is None
    # an origin that is not on GitHub, or none at all: no launch links
    assert repository.course_repository({}, {}, "https://gitlab.com/o/r.git") is None
    assert repository.course_repository({}, {}, None) is None


def test_course_repository_refuses_a_configured_repository_that_is_not_on_github():
    with pytest.raises(ValueError, match=repository.ENV):
        repository.course_repository({repository.ENV: "https://gitlab.com/o/r"}, {}, None)
    with pytest.raises(ValueError, match="site.toml"):
        repository.course_repository({}, {"repository_url": "https://example.org/o/r"}, None)


@pytest.mark.slow
def test_git_origin_of_a_folder_without_git_is_none(tmp_path):
    assert repository.git_origin(tmp_path) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert repository.git_origin(tmp_path) is None
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", "git@github.com:o/r.git"], check=True)
    assert repository.git_origin(tmp_path) == "git@github.com:o/r.git"


def test_learner_notebook_strips_outputs_and_answers_and_adds_the_install_cell():
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# 01 Title"},
            {
                "cell_type": "code",
                "metadata": {},
                "source": "1 + 1",
                "execution_count": 3,
                "outputs": [{"output_type": "execute_result", "data": {"text/plain": "2"}}],
            },
            {"cell_type": "markdown", "metadata": {"tags": ["answers"]}, "source": "1. (b) because ..."},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    plain = downloads.learner_notebook(notebook)
    assert [c["source"] for c in plain["cells"]] == ["# 01 Title", "1 + 1"]
    assert plain["cells"][1]["outputs"] == [] and plain["cells"][1]["execution_count"] is None
    assert notebook["cells"][1]["outputs"], "the original was changed"
    install = downloads.install_cell("https://github.com/o/r", "main")
    cells = downloads.learner_notebook(notebook, install)["cells"]
    assert cells[1] is install and "git+https://github.com/o/r.git@main" in install["source"]
    assert 'find_spec("mha_course") is None' in install["source"]  # a no-op where the course is installed


def test_without_hidden_cases_cuts_each_hidden_case_and_refuses_what_it_cannot_cut():
    source = (
        "CASES = (\n"
        "    case('public', 1, D=2),\n"
        "    case(\n"
        "        'hidden over lines', 1, hidden=True,\n"
        "    ),\n"
        "    case('hidden', 1, hidden=True),  # a comment\n"
        "    case('also public', 1, hidden=False),\n"
        ")\n"
    )
    out = downloads.without_hidden_cases(source)
    assert "hidden over lines" not in out and "'hidden'" not in out
    assert "'public'" in out and "'also public'" in out
    compile(out, "cases.py", "exec")
    with pytest.raises(ValueError, match="line of its own"):
        downloads.without_hidden_cases("CASES = (case('a', 1), case('b', 1, hidden=True))\n")
    with pytest.raises(ValueError, match="outside a tuple or list"):
        downloads.without_hidden_cases("ONE = case('b', 1, hidden=True)\n")


def test_every_exercise_module_loses_its_hidden_cases_and_stays_python():
    modules = sorted((ROOT / downloads.HIDDEN_CASE_MODULES).glob("*.py"))
    hidden = 0
    for path in modules:
        source = path.read_text(encoding="utf-8")
        hidden += source.count("hidden=True")
        out = downloads.without_hidden_cases(source, path.name)
        assert "hidden=True" not in out, path.name
        compile(out, path.name, "exec")
    assert hidden > 20, f"only {hidden} hidden cases found: is HIDDEN_CASE_MODULES right?"


@pytest.mark.slow  # two zips of the course: 1-3 s
def test_course_zip_holds_what_make_lab_needs_and_nothing_secret(tmp_path):
    names = downloads.write_course_zip(tmp_path / "course.zip")
    assert {"Makefile", "requirements.txt", "pyproject.toml", "jupyter/overrides.json"} <= set(names)
    assert not [n for n in names if n.split("/")[0] in {"solutions", "tests", "site"} or "__pycache__" in n]
    first = (tmp_path / "course.zip").read_bytes()
    downloads.write_course_zip(tmp_path / "again.zip")
    assert (tmp_path / "again.zip").read_bytes() == first, "the same sources made a different zip"


def test_icons_css_draws_every_icon_site_chrome_names():
    css = (ROOT / "site" / "static" / "icons.css").read_text(encoding="utf-8")
    drawn = set(re.findall(r"^\.(fa-[a-z-]+) \{ --course-icon", css, re.M))
    assert drawn == set(site_chrome.ICONS)


def test_without_fontawesome_removes_the_script_and_refuses_a_head_without_it():
    head = '<link href="a.css"/>\n  <script defer src="../_static/scripts/fontawesome.js?digest=1"></script>\n  <link rel="preload"/>'
    assert "fontawesome" not in site_chrome.without_fontawesome(head)
    assert '<link href="a.css"/>' in site_chrome.without_fontawesome(head)
    with pytest.raises(ValueError, match="found 0"):
        site_chrome.without_fontawesome("<link/>")


def test_launch_urls_refuses_a_repository_url_that_is_not_github():
    with pytest.raises(ValueError, match="https://github.com/OWNER/REPO"):
        course_pages.launch_urls("https://example.org/o/r", "main", "https://mybinder.org", "notebooks/x.ipynb")


def test_colab_opens_the_published_copies_with_their_install_cell_where_a_colab_branch_is_set():
    plain = course_pages.launch_urls("https://github.com/o/r", "main", "https://mybinder.org", "notebooks/x.ipynb")
    published = course_pages.launch_urls(
        "https://github.com/o/r", "main", "https://mybinder.org", "notebooks/x.ipynb", colab_branch="colab"
    )
    assert plain["colab"].endswith("/o/r/blob/main/notebooks/x.ipynb") and not plain["colab_installs"]
    assert published["colab"].endswith("/o/r/blob/colab/notebooks/x.ipynb") and published["colab_installs"]
    assert published["binder"] == plain["binder"] and published["source"] == plain["source"]  # the sources stay
    box = course_pages._launch_cell(published, "notebooks/x.ipynb", [])["source"]
    assert "starts with the cell that installs the course" in box and "pip install" not in box
    assert "pip install" in course_pages._launch_cell(plain, "notebooks/x.ipynb", [])["source"]
    # the workflow that sets the branch is the one that publishes it, from the notebooks the site offers
    workflow = (ROOT / ".github" / "workflows" / "site.yml").read_text(encoding="utf-8")
    assert "COURSE_COLAB_BRANCH: colab" in workflow and "contents: write" in workflow
    assert (
        "find notebooks exercises -name '*.ipynb'" in workflow
        and '${TOKEN}@github.com/${GITHUB_REPOSITORY}.git" colab' in workflow
    )


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
    copy = downloads.learner_notebook(notebook)
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


@pytest.mark.slow  # starts the site's Python: docutils and Sphinx live in .venv-site, not in the course's .venv
def test_the_checks_that_need_the_sites_tools_pass_in_the_sites_python():
    here = Path(__file__).resolve().parent
    run = subprocess.run(
        [
            _site_python(),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            here,
            here / "site_tools_checks.py",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]


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
