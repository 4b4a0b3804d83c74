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
- and that the search page finds a word every chapter uses.

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
    return {"pages": facts, "problems": problems}


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
