"""What must never reach the website: every answer and hidden-test string, and a search of a built site for them.

Collected from the sources, never from the site: the solution regions and hidden-test regions of
``solutions/*.ipynb`` (and their markdown answer cells), the chapters' cells tagged ``answers``,
and the names of the grader's hidden cases (``Case(..., hidden=True)`` in
``mha_course/grading/exercises/*.py``). A line that the course publishes anyway is no secret and
is left out: one that a chapter or an exercise holds, or that the library's own source holds (a
chapter may print the library's ``tiled_attention`` loop, which an assignment asks the learner to
write again; the library is the learner's to read), as are lines too short to be telling
(``return out``). The grader's exercise modules, where the hidden cases live, do not count as public.
"""

from __future__ import annotations

import ast
import html.parser
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_LENGTH = 12
_REGIONS = [("### BEGIN SOLUTION", "### END SOLUTION"), ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")]


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _region_lines(source: str) -> list[str]:
    lines, inside = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if any(stripped.startswith(begin) for begin, _ in _REGIONS):
            inside = True
        elif any(stripped.startswith(end) for _, end in _REGIONS):
            inside = False
        elif inside:
            lines.append(stripped)
    return lines


def _hidden_case_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Case"):
            continue
        hidden = any(k.arg == "hidden" and getattr(k.value, "value", False) is True for k in node.keywords)
        if hidden and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.append(node.args[0].value)
    return names


def published_text() -> str:
    """What the course publishes anyway: chapters (without answers), exercises, the library's source
    (but for the grader's exercise modules)."""
    parts = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb")):
        parts += [_source(c) for c in _cells(path) if "answers" not in c.get("metadata", {}).get("tags", [])]
    hidden = ROOT / "mha_course" / "grading" / "exercises"
    parts += [
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "mha_course").rglob("*.py")) if hidden not in p.parents
    ]
    return normalise("\n".join(parts))


def secret_strings() -> dict[str, str]:
    """Answer or hidden-test string -> where it comes from (only those the published notebooks do not hold)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for index, cell in enumerate(_cells(path)):
            source = _source(cell)
            lines = _region_lines(source)
            if cell["cell_type"] == "markdown" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                lines += [line.strip() for line in source.splitlines()]
            for line in lines:
                found.setdefault(line, f"{path.relative_to(ROOT)} cell {index}")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(_cells(path)):
            if "answers" in cell.get("metadata", {}).get("tags", []):
                for line in _source(cell).splitlines():
                    found.setdefault(line.strip(), f"{path.relative_to(ROOT)} answers cell {index}")
    for path in sorted((ROOT / "mha_course" / "grading" / "exercises").glob("*.py")):
        for name in _hidden_case_names(path):
            found.setdefault(name, f"{path.relative_to(ROOT)} hidden case")
    public = published_text()
    return {
        normalise(line): where
        for line, where in found.items()
        if len(normalise(line)) >= MIN_LENGTH and normalise(line) not in public
    }


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def site_text(html_dir: Path) -> dict[str, str]:
    """File (relative to the site) -> its text: the visible text of HTML pages (code highlighting's
    tags removed, so a code line reads as written), and the whole of every other text file
    (the search index included)."""
    texts = {}
    for path in sorted(html_dir.rglob("*")):
        # _static/ holds the theme's and MathJax's files, copied from packages: no page content
        if path.relative_to(html_dir).parts[0] == "_static":
            continue
        if not path.is_file() or path.suffix in {".png", ".jpg", ".gif", ".svg", ".woff", ".woff2", ".ttf", ".eot"}:
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".html":
            parser = _Text()
            parser.feed(raw)
            raw = "".join(parser.parts)
        texts[path.relative_to(html_dir).as_posix()] = normalise(raw)
    return texts


def leaks(html_dir: Path, secrets: dict[str, str]) -> list[str]:
    """``"file: 'string' (from where)"`` for every secret string found in the built site."""
    return [
        f"{name}: {secret!r} (from {where})"
        for name, text in site_text(html_dir).items()
        for secret, where in secrets.items()
        if secret in text
    ]
