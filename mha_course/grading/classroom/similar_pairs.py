"""Student-to-student similarity: pairs of submissions whose graded functions are alike, for review.

For each assignment, each graded function of each graded submission becomes a **unit** (the
function and the notebook functions it calls, :func:`..static.fingerprints.unit`), normalised
(names, docstrings, comments, formatting and validation lines removed) and winnowed into
fingerprints. Two students' units of one exercise are reported when

* their fingerprints' Jaccard index is at least :data:`THRESHOLD`, and
* both have at least :data:`MIN_TOKENS` normalised tokens: short functions (``return a @ b.T``,
  ``x.transpose(1, 2).reshape(...)``) come out alike however independently they were written.

How the threshold was set: the honest corpus of tests/grading/honest (60 notebooks, 6 per
assignment) gives 217 pairs of units written independently (no definition alike as written): the
highest index among them is 0.56, none reaches 0.7 (``tests/grading/classroom/test_similar_pairs.py``
measures it on every run). A renamed copy of a classmate's notebook scores 1.0.

Findings are advice with evidence (both definitions side by side), never a penalty: the
instructor decides, and may resolve with an override as for any review.
"""

from __future__ import annotations

import ast
import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..engine import registry
from ..safe_text import clean, code_span
from ..safe_text import markdown as md
from ..static import fingerprints
from ..verdicts import SubmissionResult
from .submitted_code import Cells, cells_of

THRESHOLD = 0.7  # Jaccard index of winnowed fingerprints from which a pair is reported
MIN_TOKENS = 80  # normalised tokens each unit needs to be compared (see the module docstring)
MAX_LINES = 80  # lines of each side's code shown as evidence


@dataclass(frozen=True)
class SimilarPair:
    """Two students' answers to one exercise that are alike: the evidence for a review."""

    assignment: str
    exercise: str  # the graded function's name
    first: str
    second: str
    score: float  # Jaccard index of the two units' fingerprints, 0..1
    first_code: str
    second_code: str


def _who(r: SubmissionResult) -> str:
    return clean(r.student_name or r.student or Path(r.path).name)


def _source(cells: dict[int, str], parts: list[tuple[str, int, ast.AST]]) -> str:
    """The unit's definitions as the student wrote them (comments included), at most :data:`MAX_LINES` lines."""
    texts = []
    for _, index, node in parts:
        text = ast.get_source_segment(cells.get(index, ""), node) or ast.unparse(node)
        start = getattr(node, "decorator_list", None)
        if start:  # the decorators belong with the definition
            first = min(d.lineno for d in start)
            text = "\n".join(cells[index].splitlines()[first - 1 : getattr(node, "end_lineno", None)])
        texts.append(text)
    lines = "\n\n".join(texts).splitlines()
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... ({len(lines) - MAX_LINES} more lines)"]
    return clean("\n".join(lines))


def _units(cells: Cells, targets: list[str]) -> dict[str, tuple[tuple[str, ...], frozenset[int], str]]:
    """Exercise target -> (normalised tokens, fingerprints, source) for one submission's code cells."""
    found = fingerprints.definitions(cells)
    out = {}
    for target in targets:
        parts = fingerprints.unit(target, found)
        tokens = fingerprints.unit_tokens(parts)
        if len(tokens) >= MIN_TOKENS:
            out[target] = (tokens, fingerprints.fingerprints(tokens), _source(dict(cells), parts))
    return out


def similar_pairs(
    results: list[SubmissionResult], threshold: float = THRESHOLD, code: dict[str, Cells] | None = None
) -> list[SimilarPair]:
    """The pairs of graded submissions (same assignment) with an exercise at least ``threshold`` alike, most alike first.

    ``code``: each submission's code cells by path (:func:`.submitted_code.read_code`); read from disk when None.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1]; got {threshold}")
    by_assignment: dict[str, list[SubmissionResult]] = defaultdict(list)
    for r in results:
        if not r.error and r.assignment and r.path:
            by_assignment[r.assignment].append(r)
    pairs = []
    for key, group in sorted(by_assignment.items()):
        try:
            targets = list(dict.fromkeys(e.target for e in registry.get_assignment(key).exercises))
        except (KeyError, ValueError):
            continue
        units = [(_who(r), _units(cells_of(r, code), targets)) for r in group]
        for (a, units_a), (b, units_b) in itertools.combinations(units, 2):
            for target in targets:
                if target in units_a and target in units_b:
                    score = fingerprints.jaccard(units_a[target][1], units_b[target][1])
                    if score >= threshold:
                        first, second = sorted([(a, units_a[target][2]), (b, units_b[target][2])])
                        pairs.append(SimilarPair(key, target, first[0], second[0], score, first[1], second[1]))
    return sorted(pairs, key=lambda p: (-p.score, p.assignment, p.first, p.second, p.exercise))


def _heading(anonymise: bool, pairs: list[SimilarPair]) -> list[str]:
    return [
        f"Pairs of students whose graded functions are at least {THRESHOLD:.0%} alike (winnowed fingerprints of the "
        "code with names, comments, docstrings and validation lines removed; functions under "
        f"{MIN_TOKENS} tokens are not compared). Advice for review, never a penalty.",
        f"{len(pairs)} match(es) among {len({(p.first, p.second) for p in pairs})} pair(s) of students."
        if pairs
        else "No pair of students above the threshold.",
    ]


def markdown_section(pairs: list[SimilarPair], anonymise: bool = False, level: str = "##") -> list[str]:
    """The report's section (Markdown lines): each pair with both definitions side by side (one after the other)."""
    lines = [f"{level} Similar answers between students (for your review; not penalised)", ""]
    lines += [f"{md(line)}  " for line in _heading(anonymise, pairs)] + [""]
    if anonymise or not pairs:
        return lines
    for p in pairs:
        lines += [
            f"- **{md(p.first)}** and **{md(p.second)}**, {code_span(p.assignment)} {code_span(p.exercise)}: "
            f"{p.score:.0%} alike",
            "",
            f"  {md(p.first)}:",
            "",
            *[f"      {line}" for line in p.first_code.splitlines()],
            "",
            f"  {md(p.second)}:",
            "",
            *[f"      {line}" for line in p.second_code.splitlines()],
            "",
        ]
    return lines


def html_section(pairs: list[SimilarPair], anonymise: bool = False) -> list[str]:
    """The report's section as HTML: one table row per match, the two definitions in adjacent cells."""
    import html

    e = html.escape
    body = ["<h2>Similar answers between students (for your review; not penalised)</h2>"]
    body += [f"<p>{e(line)}</p>" for line in _heading(anonymise, pairs)]
    if anonymise or not pairs:
        return body
    body.append("<table class='similar'><tr><th>exercise</th><th>alike</th><th>first</th><th>second</th></tr>")
    body += [
        f"<tr><td><code>{e(p.assignment)}</code> <code>{e(p.exercise)}</code></td><td>{p.score:.0%}</td>"
        f"<td><b>{e(p.first)}</b><pre>{e(p.first_code)}</pre></td>"
        f"<td><b>{e(p.second)}</b><pre>{e(p.second_code)}</pre></td></tr>"
        for p in pairs
    ]
    return body + ["</table>"]


def write_similarity(
    base: str | Path, pairs: list[SimilarPair], write_text: Callable[[Path, str], object], anonymise: bool = False
) -> list[Path]:
    """``<base>-similarity.md`` and ``.json`` beside the report (the JSON names no one when ``anonymise``)."""
    base = Path(base)
    markdown_path = base.with_name(f"{base.stem}-similarity.md")
    json_path = markdown_path.with_suffix(".json")
    text = "\n".join(["# Similarity report", "", *markdown_section(pairs, anonymise, "##")]) + "\n"
    write_text(markdown_path, text)
    document = {
        "threshold": THRESHOLD,
        "min_tokens": MIN_TOKENS,
        "measure": f"Jaccard index of winnowed fingerprints (k={fingerprints.K}, window={fingerprints.WINDOW}) "
        "of normalised code",
        "pairs": [] if anonymise else [asdict(p) for p in pairs],
        "count": len(pairs),
    }
    write_text(json_path, json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return [markdown_path, json_path]
