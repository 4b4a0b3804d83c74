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


def check_site(html: Path, chromium: str, screenshots: Path | None = None, shots: tuple[str, ...] = ()) -> dict:
    """Visits every ``*.html`` page under ``html``; returns ``{"pages": {page: facts}, "problems": [str]}``.

    Args:
        html: the built site (``index.html`` at its root).
        chromium: the Chromium executable Playwright drives.
        screenshots: folder for full-page PNGs of the pages named in ``shots`` (paths relative to ``html``).

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
            browser.close()
    finally:
        server.shutdown()
    problems += _page_problems(html, base, facts)
    problems += content_problems(facts)
    return {"pages": facts, "problems": problems}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--chromium", default=find_chromium(), help="the Chromium executable (default: on PATH)")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--screenshots", type=Path, help="write full-page screenshots of --shots here")
    parser.add_argument("--shots", nargs="*", default=["index.html"], help="pages to screenshot")
    args = parser.parse_args(argv)
    if not args.chromium:
        parser.error("no Chromium found: install it (apt-get install chromium) or pass --chromium")
    report = check_site(args.html, args.chromium, args.screenshots, tuple(args.shots))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    figures = sum(page["outputImages"] for name, page in report["pages"].items() if name.startswith("notebooks/"))
    print(f"{len(report['pages'])} pages visited in Chromium, {figures} figures on chapter pages")
    for problem in report["problems"]:
        print("PROBLEM", problem)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
