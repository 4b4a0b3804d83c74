"""Opens every page of the built website in headless Chromium and lists what a reader would find broken.

``python site/browser_check.py _build/html [--json report.json] [--screenshots DIR]`` serves the
folder on 127.0.0.1, visits each page with Playwright driving the system's Chromium (no browser
is downloaded: ``--chromium`` or ``$CHROMIUM``, default the first of chromium / chromium-browser /
google-chrome on PATH) and reports, per page:

- JavaScript errors (uncaught exceptions and ``console.error``), failed requests, requests that
  leave the machine (the site must read offline);
- images that did not load, links to a page or an anchor that does not exist;
- math that MathJax did not typeset, or typeset as an error; code blocks without a copy button;
- on a chapter (``notebooks/``): the figures among its outputs (none is a problem), and each
  interactive cell that shows nothing of its default setting (neither its figure nor what it prints);
- on a chapter or exercise: the launch links (Colab, Binder, GitHub), for the caller to check;
- and that the search page finds a word every chapter uses;
- the reader's controls (``_reader_checks``): at 390x844 on a touch phone, tapping ☰ opens the
  chapter list and tapping the contents button opens the page's contents; on a desktop ☰ hides the
  sidebar and shows it again; one search box and at most one launch menu per page; every icon is
  one the site draws (``site_chrome.ICONS``: fontawesome.js is not shipped);
- every external link's host against the site's repository (``_link_host_problems``): Colab and
  Binder links, and GitHub links in the launch box, name that repository, and a site without one
  has none of them;
- the downloads: one chapter's notebook and the course's zip are fetched through their links and
  opened (nbformat reads the notebook; the zip holds the course and no solution or test);
- every image's alt text (present, not a file path), every button's accessible name, no sentence or
  link pointing at the answers the site leaves out, no code block scrolling sideways at 1366 px
  (printed outputs may: they keep their columns), and no page wider than a 390-px phone screen.

Exits 1 when any problem was found; the JSON report holds everything it saw.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import repository
import site_chrome

SEARCH_WORD = "attention"

# Read in the page once MathJax is done: what the checks below need from the DOM.
_PAGE_FACTS = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const maths = [...document.querySelectorAll('.math')];
  const launch = {};
  for (const a of document.querySelectorAll('.course-launch a')) { launch[a.className] = a.href; }
  const interactive = [...document.querySelectorAll('.course-interactive')].map(note => {
    let cell = note.previousElementSibling;
    while (cell && !cell.classList.contains('cell')) { cell = cell.previousElementSibling; }
    const output = cell && cell.querySelector('.cell_output');
    return {images: output ? output.querySelectorAll('img').length : 0, text: output ? output.innerText.trim() : ''};
  });
  return {
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    brokenImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    outputImages: document.querySelectorAll('.cell_output img').length,
    codeBlocks: document.querySelectorAll('div.highlight').length,
    copyButtons: document.querySelectorAll('button.copybtn').length,
    math: maths.length,
    mathUnrendered: maths.filter(m => !m.querySelector('mjx-container')).length,
    mathErrors: document.querySelectorAll('mjx-merror').length,
    launch, interactive,
  };
}"""


# The page's controls, read at the size the page is open at (a control is shown when it has a box).
_CHROME_FACTS = """async () => {
  const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const icons = new Set();
  for (const e of document.querySelectorAll('[class*="fa-"]')) {
    for (const c of e.classList) { if (/^fa-(?!solid$|brands$|regular$|lg$|fw$|xs$|sm$|xl$|2xl$)/.test(c)) icons.add(c); }
  }
  const facts = {
    searchBoxes: [...document.querySelectorAll('.search-button__button, .bd-search, form.search')].filter(shown).length,
    launchMenus: document.querySelectorAll('.course-launch, .dropdown-launch-buttons').length,
    launchGithub: [...document.querySelectorAll('.course-launch a, .course-run-locally a, .bd-header-article a')]
      .map(a => a.href).filter(h => h.startsWith('https://github.com/')),
    installCommands: [...document.body.textContent.matchAll(/(?:git\\+|git clone )(https?:\\/\\/[^\\s"'`@)]+)/g)]
      .map(m => m[1]),
    icons: [...icons],
  };
  // measuring the controls lays the page out, which may fetch a font only now: let it arrive before
  // the next page is opened (leaving aborts it, a failed request though nothing is broken)
  await document.fonts.ready;
  return facts;
}"""


def find_chromium() -> str | None:
    """The system's Chromium: ``$CHROMIUM``, else the first of chromium / chromium-browser / google-chrome on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _serve(folder: Path) -> http.server.ThreadingHTTPServer:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the report says what failed; the access log would drown it
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            # the browser drops a transfer it no longer needs when it leaves a page: not a fault of the site
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def check_site(
    html: Path,
    chromium: str,
    screenshots: Path | None = None,
    shots: tuple[str, ...] = (),
    repository_url: str | None = None,
) -> dict:
    """Visits every ``*.html`` page under ``html``; returns ``{"pages": {page: facts}, "problems": [str]}``.

    Args:
        html: the built site (``index.html`` at its root).
        chromium: the Chromium executable Playwright drives.
        screenshots: folder for full-page PNGs of the pages named in ``shots`` (paths relative to ``html``).
        repository_url: the site's repository (``https://github.com/OWNER/NAME``), None for a site
            built without one: the external links are checked against it.

    Raises:
        ValueError: ``html`` has no ``index.html``, or a page in ``shots`` does not exist.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    html = html.resolve()
    if not (html / "index.html").is_file():
        raise ValueError(f"{html} has no index.html: build the site first (make site)")
    # _static/ holds the themes' template fragments, not pages
    pages = sorted(
        p.relative_to(html).as_posix() for p in html.rglob("*.html") if not p.relative_to(html).parts[0] == "_static"
    )
    missing = [shot for shot in shots if shot not in pages]
    if missing:
        raise ValueError(f"no such pages to screenshot: {missing}; pages: {pages[:10]}...")
    server = _serve(html)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems: list[str] = []
    facts: dict[str, dict] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--headless=new"])
            context = browser.new_context(viewport={"width": 1280, "height": 900})

            def keep_local(route):
                if route.request.url.startswith(base) or route.request.url.startswith("data:"):
                    route.continue_()
                else:  # the site must read offline: anything fetched from elsewhere is a problem
                    problems.append(f"{current[0]}: fetches {route.request.url} from outside the site")
                    route.abort()

            current = [""]
            context.route("**/*", keep_local)
            page = context.new_page()
            page.on("pageerror", lambda error: problems.append(f"{current[0]}: JavaScript error: {error}"))
            page.on(
                "console",
                lambda message: (
                    message.type == "error" and problems.append(f"{current[0]}: console error: {message.text}")
                ),
            )
            page.on(
                "requestfailed",
                lambda request: (
                    request.url.startswith(base)
                    and problems.append(f"{current[0]}: request failed: {request.url} ({request.failure})")
                ),
            )
            page.on(
                "response",
                lambda response: (
                    response.status >= 400
                    and problems.append(f"{current[0]}: HTTP {response.status} for {response.url}")
                ),
            )
            for name in pages:
                current[0] = name
                # network idle, not load: MathJax fetches its fonts after the load event, and opening the next
                # page while they are on their way aborts them (a failed request, though nothing is broken)
                page.goto(base + name, wait_until="networkidle")
                facts[name] = page.evaluate(_PAGE_FACTS)
                facts[name].update(page.evaluate(_CHROME_FACTS))
                page.wait_for_load_state("networkidle")
                facts[name]["content"] = content_facts(page)
                if screenshots is not None and name in shots:
                    screenshots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(screenshots / (name.replace("/", "_") + ".png")), full_page=True)
            if "search.html" in pages:  # the search box's results page finds a word every chapter uses
                current[0] = f"search.html?q={SEARCH_WORD}"
                page.goto(f"{base}search.html?q={SEARCH_WORD}", wait_until="load")
                try:
                    page.wait_for_selector("#search-results li", timeout=20_000)
                except PlaywrightTimeout:
                    problems.append(f"search.html: searching {SEARCH_WORD!r} found nothing")
            reader_problems, reader = _reader_checks(browser, base, pages, repository_url)
            problems += reader_problems
            browser.close()
    finally:
        server.shutdown()
    problems += _page_problems(html, base, facts)
    problems += content_problems(facts)
    problems += _link_host_problems(base, facts, repository_url)
    problems += _chrome_problems(facts)
    return {"pages": facts, "problems": problems, "reader": reader}


# --- what a page says and how it fits: alt texts, buttons' names, unpublished answers, widths ---------

WIDE_VIEWPORT = {"width": 1366, "height": 900}
NARROW_VIEWPORT = {"width": 390, "height": 844}
# A page must not point at what the site does not publish (course_content.UNPUBLISHED_PHRASES).
UNPUBLISHED_PHRASES = ("collapsed cell", "make your prediction first", "still raises NotImplementedError")

_CONTENT_FACTS = r"""(phrases) => {
  // a file's path or name, or a hash: what a browser shows when an image has no alt of its own
  const pathLike = alt => /^\S*[\\/]\S*$|\.(png|jpe?g|gif|svg|webp)$|^[0-9a-f]{16,}/i.test(alt.trim());
  const badAlt = [...document.images].filter(i => !i.alt || !i.alt.trim() || pathLike(i.alt))
    .map(i => `${i.src.split('/').pop()} (alt ${JSON.stringify(i.getAttribute('alt'))})`);
  const named = b => (b.getAttribute('aria-label') || '').trim() || (b.innerText || '').trim() || (b.title || '').trim()
    || [...b.querySelectorAll('img[alt]')].some(i => i.alt.trim())
    || (b.getAttribute('aria-labelledby') || '').split(/\s+/).some(id => id && document.getElementById(id)
        && document.getElementById(id).textContent.trim());
  const unnamedButtons = [...document.querySelectorAll('button, [role=button]')].filter(b => !named(b))
    .map(b => b.outerHTML.slice(0, 120));
  const text = document.body.innerText;
  return {
    badAlt, unnamedButtons,
    phrases: phrases.filter(p => text.includes(p)),
    solutionLinks: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))
      .filter(h => /(^|\/)solutions\//.test(h)),
    solutionText: /(^|[\s`(])solutions\/[\w*]/.test(text),
    images: document.images.length,
  };
}"""

# Code blocks whose lines are cut off (they scroll sideways) at the current width; printed outputs keep
# their columns and may scroll, so they are counted apart and are no problem.
_CODE_SCROLL = r"""() => {
  const cut = sel => [...document.querySelectorAll(sel)].filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => (e.innerText.split('\n').find(l => l.length > 60) || e.innerText).slice(0, 100));
  return {code: cut('.bd-article div.highlight pre'), outputs: cut('.bd-article div.cell_output pre').length};
}"""

# How much wider than the screen the page is, and the elements that make it so (those that stick out
# without an ancestor that scrolls or clips them).
_PAGE_WIDTH = r"""() => {
  const width = document.documentElement.clientWidth;
  const over = Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - width;
  const culprits = [];
  if (over > 1) {
    for (const e of document.body.querySelectorAll('*')) {
      const r = e.getBoundingClientRect();
      if (r.width === 0 || r.right <= width + 1) continue;
      // a box inside one that scrolls or clips, or a fixed one (an off-screen drawer), widens nothing
      let clipped = getComputedStyle(e).position === 'fixed';
      for (let a = e.parentElement; !clipped && a && a !== document.body; a = a.parentElement) {
        const style = getComputedStyle(a);
        if (style.overflowX !== 'visible' || style.position === 'fixed') { clipped = true; }
      }
      if (!clipped) culprits.push(`${e.tagName.toLowerCase()}.${[...e.classList].join('.')} ` +
        `"${(e.innerText || '').trim().slice(0, 50)}" right=${Math.round(r.right)}`);
      if (culprits.length >= 3) break;
    }
  }
  return {over: Math.round(over), culprits};
}"""


def content_facts(page) -> dict:
    """What the reader meets on the open page: alt texts, buttons' names, pointers at unpublished answers,
    and the layout at a desktop width (code cut off) and at a phone's (the page wider than the screen)."""
    facts = page.evaluate(_CONTENT_FACTS, list(UNPUBLISHED_PHRASES))
    size = page.viewport_size
    try:
        page.set_viewport_size(WIDE_VIEWPORT)
        facts["desktop"] = page.evaluate(_CODE_SCROLL)
        page.set_viewport_size(NARROW_VIEWPORT)
        # loaded afresh at the phone's width: a page resized from a desktop's is caught mid-transition
        page.reload(wait_until="networkidle")
        if page.evaluate("!!(window.MathJax && MathJax.startup && MathJax.startup.promise)"):
            page.evaluate("MathJax.startup.promise.then(() => true)")
        facts["phone"] = page.evaluate(_PAGE_WIDTH)
    finally:
        if size:
            page.set_viewport_size(size)
    return facts


def content_problems(facts: dict[str, dict]) -> list[str]:
    problems = []
    for name, page in facts.items():
        content = page.get("content")
        if not content:
            continue
        problems += [f"{name}: image without a meaningful alt text: {image}" for image in content["badAlt"]]
        problems += [f"{name}: button without an accessible name: {button}" for button in content["unnamedButtons"]]
        problems += [f"{name}: says {phrase!r}, which the site does not have" for phrase in content["phrases"]]
        problems += [f"{name}: links to the unpublished {href}" for href in content["solutionLinks"]]
        if content["solutionText"]:
            problems.append(f"{name}: points at solutions/, which the site does not publish")
        for line in content["desktop"]["code"]:
            problems.append(f"{name}: a code block scrolls sideways at {WIDE_VIEWPORT['width']} px: {line!r}")
        phone = content["phone"]
        if phone["over"] > 1:
            problems.append(
                f"{name}: {phone['over']} px wider than a {NARROW_VIEWPORT['width']}-px phone screen: {'; '.join(phone['culprits'])}"
            )
    return problems


def _page_problems(html: Path, base: str, facts: dict[str, dict]) -> list[str]:
    problems = []
    for name, page in facts.items():
        problems += [f"{name}: image did not load: {src}" for src in page["brokenImages"]]
        if page["mathUnrendered"]:
            problems.append(f"{name}: {page['mathUnrendered']} of {page['math']} formulas not typeset by MathJax")
        if page["mathErrors"]:
            problems.append(f"{name}: {page['mathErrors']} formulas typeset as errors")
        if name.startswith("notebooks/") and page["outputImages"] == 0:
            problems.append(f"{name}: a chapter page without figures among its outputs")
        if page["copyButtons"] < page["codeBlocks"]:
            problems.append(f"{name}: {page['codeBlocks'] - page['copyButtons']} code blocks without a copy button")
        for index, shown in enumerate(page["interactive"]):
            # its default setting's figure, or what it prints; a widget's bare repr is not an output
            if not shown["images"] and (not shown["text"] or shown["text"].startswith("interactive(")):
                problems.append(f"{name}: interactive cell {index + 1} shows nothing of its default setting")
        for link in page["links"]:
            if not link.startswith(base):
                continue
            target, anchor = urldefrag(link)
            path = unquote(urlparse(target).path.lstrip("/")) or "index.html"
            if path.endswith("/"):
                path += "index.html"
            if not (html / path).is_file():
                problems.append(f"{name}: broken link to {path}")
            elif anchor and path in facts and unquote(anchor) not in facts[path]["ids"]:
                problems.append(f"{name}: broken link to {path}#{anchor}")
    return problems


# --- the reader's controls, the downloads and the launch links -------------------------------------

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 3}
ZIP_REQUIRED = ("README.md", "Makefile", "requirements.txt", "pyproject.toml", "mha_course/__init__.py")
ZIP_FORBIDDEN_FOLDERS = ("solutions", "tests", "site", ".github")


def site_repository(given: str | None = None) -> str | None:
    """The repository the site is checked against: ``given`` (a URL, or ``none``), else as site/conf.py decides."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    settings = tomllib.loads((root / "site" / "site.toml").read_text(encoding="utf-8"))
    environ = dict(os.environ)
    if given is not None:
        environ[repository.ENV] = given
    return repository.course_repository(environ, settings, repository.git_origin(root))


def _launch_hosts() -> set[str]:
    import tomllib

    settings = tomllib.loads((Path(__file__).resolve().parent / "site.toml").read_text(encoding="utf-8"))
    return {"colab.research.google.com", "mybinder.org", urlparse(settings["binderhub_url"]).hostname or ""}


def _opens(page, selector: str, timeout: float = 5_000) -> bool:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(selector, state="visible", timeout=timeout)
    except PlaywrightTimeout:
        return False
    return True


def _phone_menus(browser, base: str, name: str) -> tuple[list[str], dict]:
    """Taps ☰ and the contents button of page ``name`` on a 390x844 touch screen; each must open its menu."""
    context = browser.new_context(**PHONE)
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
    page = context.new_page()
    page.goto(base + name, wait_until="networkidle")
    problems, seen = [], {}
    for label, toggle, menu in (
        ("☰ (the chapter list)", ".primary-toggle", "#pst-primary-sidebar-modal[open] .bd-docs-nav a"),
        ("the contents button", ".secondary-toggle", "#pst-secondary-sidebar-modal[open] nav a"),
    ):
        buttons = page.locator(f"{toggle}:visible")
        if buttons.count() != 1:
            problems.append(f"{name}: at 390x844, {buttons.count()} visible {toggle} buttons for {label}, not 1")
            continue
        buttons.first.tap()
        seen[toggle] = _opens(page, menu)
        if not seen[toggle]:
            problems.append(f"{name}: at 390x844 on a touch screen, tapping {label} did not open it")
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
    searches = page.evaluate(_CHROME_FACTS)["searchBoxes"]
    if searches != 1:
        problems.append(f"{name}: at 390x844, {searches} search boxes shown, not 1")
    context.close()
    return problems, seen


def _desktop_toggle(page, name: str) -> list[str]:
    """On a desktop, ☰ hides the chapter list and a second click shows it again."""
    hidden = "() => getComputedStyle(document.querySelector('#pst-primary-sidebar')).visibility === '{}'"
    buttons = page.locator(".primary-toggle:visible")
    if buttons.count() != 1:
        return [f"{name}: on a desktop, {buttons.count()} visible ☰ buttons, not 1"]
    problems = []
    for state, says in (("hidden", "hide"), ("visible", "show")):
        buttons.first.click()
        try:
            page.wait_for_function(hidden.format(state), timeout=5_000)
        except Exception:
            problems.append(f"{name}: on a desktop, clicking ☰ did not {says} the chapter list")
            break
    return problems


def _check_notebook(path: Path, where: str, install_from: str | None) -> list[str]:
    import nbformat

    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # any failure to read is the finding
        return [f"{where}: not a notebook nbformat reads: {error}"]
    problems = []
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if any(cell.get("outputs") for cell in code):
        problems.append(f"{where}: carries outputs")
    if any("answers" in cell.get("metadata", {}).get("tags", []) for cell in notebook.cells):
        problems.append(f"{where}: carries the cells tagged answers")
    installs = [cell for cell in code if "pip install" in cell.source]
    if install_from is None and any("git+" in cell.source for cell in installs):
        problems.append(f"{where}: installs from a repository, but the site has none")
    if install_from is not None and not any(f"git+{install_from}" in cell.source for cell in installs):
        problems.append(f"{where}: no cell installs the course from {install_from}")
    return problems


def _downloads(page, base: str, name: str, chapters: list[str], install_from: str | None) -> tuple[list[str], dict]:
    """Downloads page ``name``'s notebook and the course's zip through their links, and opens both."""
    import tempfile
    import zipfile

    problems: list[str] = []
    seen: dict = {}
    page.goto(base + name, wait_until="networkidle")
    with tempfile.TemporaryDirectory() as tmp:
        for link, target in (("a.launch-download", "notebook.ipynb"), ("a.launch-zip", "course.zip")):
            if page.locator(link).count() != 1:
                problems.append(f"{name}: {page.locator(link).count()} {link} links, not 1")
                continue
            with page.expect_download(timeout=30_000) as download:
                page.locator(link).click()
            download.value.save_as(Path(tmp) / target)
            seen[link] = download.value.suggested_filename
        if (Path(tmp) / "notebook.ipynb").is_file():
            problems += _check_notebook(Path(tmp) / "notebook.ipynb", f"{name}'s download", install_from)
        if (Path(tmp) / "course.zip").is_file():
            with zipfile.ZipFile(Path(tmp) / "course.zip") as archive:
                entries = [entry.split("/", 1)[1] for entry in archive.namelist() if "/" in entry]
                seen["zip_files"] = len(entries)
                missing = [f for f in ZIP_REQUIRED if f not in entries]
                missing += [
                    f"notebooks/{Path(c).stem}.ipynb"
                    for c in chapters
                    if f"notebooks/{Path(c).stem}.ipynb" not in entries
                ]
                if missing:
                    problems.append(f"the course's zip lacks {missing[:10]}")
                forbidden = sorted({e.split("/")[0] for e in entries if e.split("/")[0] in ZIP_FORBIDDEN_FOLDERS})
                if forbidden:
                    problems.append(f"the course's zip holds {forbidden}/")
                inside = next((e for e in archive.namelist() if e.endswith(".ipynb")), None)
                if inside:
                    archive.extract(inside, tmp)
                    problems += _check_notebook(Path(tmp) / inside, f"the zip's {inside}", None)
    return problems, seen


def _reader_checks(browser, base: str, pages: list[str], repository_url: str | None) -> tuple[list[str], dict]:
    """The menus at phone width and on a desktop, and the downloads, on the first chapter page."""
    chapters = [name for name in pages if name.startswith("notebooks/")]
    if not chapters:
        return ["no chapter page (notebooks/) to check the menus and downloads on"], {}
    name = chapters[0]
    problems, phone = _phone_menus(browser, base, name)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
    page = context.new_page()
    page.goto(base + name, wait_until="networkidle")
    problems += _desktop_toggle(page, name)
    download_problems, downloads = _downloads(page, base, name, chapters, repository_url)
    context.close()
    return problems + download_problems, {"page": name, "phone_menus_opened": phone, "downloads": downloads}


def _link_host_problems(base: str, facts: dict[str, dict], repository_url: str | None) -> list[str]:
    """Colab and Binder links, GitHub links in the launch box and install commands, against the repository."""
    wanted = urlparse(repository_url).path.strip("/") if repository_url else None
    hosts = _launch_hosts()
    problems = []
    for name, page in facts.items():
        launch = [link for link in page["links"] if urlparse(link).hostname in hosts] + page.get("launchGithub", [])
        for link in launch:
            if wanted is None:
                problems.append(f"{name}: a launch link on a site built without a repository: {link}")
            elif f"/{wanted}/" not in urlparse(link).path + "/":
                problems.append(f"{name}: a launch link not for {repository_url}: {link}")
        for command in page.get("installCommands", []):
            command = command.rstrip("/,.").removesuffix(".git")
            if wanted is None or command != repository_url:
                problems.append(f"{name}: an install or clone command for {command}, not for {repository_url}")
    return problems


def _chrome_problems(facts: dict[str, dict]) -> list[str]:
    problems = []
    for name, page in facts.items():
        if page.get("searchBoxes", 1) != 1 and name != "search.html":  # the search page has its query's box too
            problems.append(f"{name}: {page['searchBoxes']} search boxes shown, not 1")
        if page.get("launchMenus", 0) > 1:
            problems.append(f"{name}: {page['launchMenus']} launch menus")
        undrawn = sorted(set(page.get("icons", [])) - set(site_chrome.ICONS))
        if undrawn:
            problems.append(f"{name}: icons the site does not draw (site_chrome.ICONS): {undrawn}")
    return problems


def _reader_summary(report: dict) -> str:
    reader = report.get("reader") or {}
    phone = reader.get("phone_menus_opened", {})
    downloads = reader.get("downloads", {})
    external: dict[str, int] = {}
    for page in report["pages"].values():
        for link in page["links"]:
            host = urlparse(link).hostname
            if link.startswith("http") and host not in {"127.0.0.1", None}:
                external[host] = external.get(host, 0) + 1
    return (
        f"on {reader.get('page')}: at 390x844 ☰ opened: {phone.get('.primary-toggle')}, contents opened: "
        f"{phone.get('.secondary-toggle')}; downloaded {downloads.get('a.launch-download')} and "
        f"{downloads.get('a.launch-zip')} ({downloads.get('zip_files')} files); repository: "
        f"{report.get('repository')}; external links by host: {dict(sorted(external.items()))}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--chromium", default=find_chromium(), help="the Chromium executable (default: on PATH)")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--screenshots", type=Path, help="write full-page screenshots of --shots here")
    parser.add_argument("--shots", nargs="*", default=["index.html"], help="pages to screenshot")
    parser.add_argument(
        "--repository",
        help="the repository the site was built for (https://github.com/OWNER/NAME, or none); "
        "default: as site/conf.py decides (COURSE_REPOSITORY_URL, site/site.toml, the git origin)",
    )
    args = parser.parse_args(argv)
    if not args.chromium:
        parser.error("no Chromium found: install it (apt-get install chromium) or pass --chromium")
    repository_url = site_repository(args.repository)
    report = check_site(args.html, args.chromium, args.screenshots, tuple(args.shots), repository_url)
    report["repository"] = repository_url
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    figures = sum(page["outputImages"] for name, page in report["pages"].items() if name.startswith("notebooks/"))
    print(f"{len(report['pages'])} pages visited in Chromium, {figures} figures on chapter pages")
    print(_reader_summary(report))
    for problem in report["problems"]:
        print("PROBLEM", problem)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
