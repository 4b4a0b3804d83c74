"""The class report of one grading run: one section per assignment, in HTML and in Markdown.

Per assignment (never averaged across assignments): how many were graded, a histogram of the
scores (a picture), each exercise's mean and share of full marks, the misconceptions (the root
causes of :mod:`.feedback`, counted over students, with the students affected), the submissions
that could not be graded and why, students of the roster with no submission, and the answers that
are the library's own reference code.
"""

from __future__ import annotations

import base64
import html
import io
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .feedback import root_causes
from .safe_text import clean, code_span
from .safe_text import markdown as md
from .verdicts import SubmissionResult


@dataclass
class Section:
    """What the report says about one assignment."""

    key: str
    title: str
    graded: list[SubmissionResult]
    problems: list[SubmissionResult]
    exercises: list[tuple[str, str, float, float, float]] = field(default_factory=list)  # key, title, mean, max, full
    misconceptions: list[tuple[str, str, list[str]]] = field(default_factory=list)  # exercise, cause, students
    copied: list[tuple[str, str]] = field(default_factory=list)  # student, line

    @property
    def scores(self) -> list[float]:
        return [r.score for r in self.graded]

    @property
    def max_score(self) -> float:
        return max((r.max_score for r in self.graded), default=0.0)


def _who(r: SubmissionResult) -> str:
    return r.student_name or r.student or clean(Path(r.path).name)


def sections(results: list[SubmissionResult]) -> list[Section]:
    """Group a run's results into one :class:`Section` per assignment."""
    by_key: dict[str, list[SubmissionResult]] = defaultdict(list)
    for r in results:
        by_key[r.assignment or "unknown assignment"].append(r)
    out = []
    for key, group in sorted(by_key.items()):
        graded = [r for r in group if not r.error]
        section = Section(key, next((r.title for r in graded if r.title), key), graded, [r for r in group if r.error])
        per_exercise: dict[str, list[tuple[float, float]]] = defaultdict(list)
        titles: dict[str, str] = {}
        for r in graded:
            for t in r.tests:
                titles.setdefault(t.exercise, t.exercise_title)
            for exercise, (got, most) in r.raw_exercise_scores().items():
                per_exercise[exercise].append((got, most))
        for exercise, pairs in per_exercise.items():
            section.exercises.append(
                (
                    exercise,
                    titles[exercise],
                    statistics.fmean(g for g, _ in pairs),
                    max(m for _, m in pairs),
                    sum(g >= m for g, m in pairs) / len(pairs),
                )
            )
        students: dict[tuple[str, str], set[str]] = defaultdict(set)
        for r in graded:
            for cause in root_causes(r):
                students[(cause.exercise, cause.text)].add(_who(r))
        section.misconceptions = sorted(
            ((e, c, sorted(s)) for (e, c), s in students.items()), key=lambda item: (-len(item[2]), item[0], item[1])
        )
        section.copied = [(_who(r), line) for r in graded for line in r.copied]
        out.append(section)
    return out


def histogram_png(section: Section) -> bytes:
    """The score histogram of one assignment as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=100)
    top = section.max_score or 1.0
    bins = min(20, max(5, int(top)))
    ax.hist(section.scores, bins=bins, range=(0, top), color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"score (out of {top:g})")
    ax.set_ylabel("students")
    ax.set_title(f"{section.key}: {len(section.graded)} graded")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _summary(section: Section) -> str:
    scores = section.scores
    if not scores:
        return "no submission could be graded"
    return (
        f"{len(scores)} graded, mean {statistics.fmean(scores):.1f} / {section.max_score:g}, "
        f"median {statistics.median(scores):g}, min {min(scores):g}, max {max(scores):g}"
    )


def _header(results: list[SubmissionResult], missing: list[str]) -> list[str]:
    seeds = sorted({r.seed for r in results if r.seed is not None})
    kinds = sorted({(r.isolation or {}).get("kind", "?") for r in results})
    lines = [
        f"{len(results)} submission(s); fresh inputs drawn with --seed {', '.join(map(str, seeds)) or '-'}; "
        f"isolation: {', '.join(kinds)}"
    ]
    if missing:
        lines.append(f"{len(missing)} student(s) of the roster submitted nothing: {', '.join(missing)}")
    return lines


def markdown_report(
    results: list[SubmissionResult], missing: list[str] = (), image_names: dict[str, str] | None = None
) -> str:
    """The report as Markdown; ``image_names`` maps assignment keys to histogram files beside it."""
    # learner text (names, keys, hints quoting exceptions) goes through md() or code_span(): no raw HTML
    lines = ["# Class report", "", *[f"{md(line)}  " for line in _header(results, list(missing))], ""]
    for s in sections(results):
        lines += [f"## {md(s.title)} ({code_span(s.key)})", "", _summary(s), ""]
        if image_names and s.key in image_names:
            lines += [f"![score histogram of {md(s.key)}]({image_names[s.key]})", ""]
        if s.exercises:
            lines += ["| exercise | mean | max | full marks |", "|---|---|---|---|"]
            lines += [
                f"| {md(title)} ({code_span(key)}) | {mean:.2f} | {most:g} | {full:.0%} |"
                for key, title, mean, most, full in s.exercises
            ]
            lines.append("")
        if s.misconceptions:
            lines += ["### Misconceptions (failures grouped by the hint that fired)", ""]
            lines += [
                f"- **{len(who)} student(s)**, {code_span(exercise)}: {md(cause)} ({md(', '.join(who))})"
                for exercise, cause, who in s.misconceptions
            ]
            lines.append("")
        if s.copied:
            lines += ["### Answers equal to the library's reference (not penalised; for your review)", ""]
            lines += [f"- {md(who)}: {md(line)}" for who, line in s.copied]
            lines.append("")
        if s.problems:
            lines += ["### Not graded", ""]
            lines += [f"- {md(_who(r))} ({code_span(r.key or clean(r.path))}): {md(r.error)}" for r in s.problems]
            lines.append("")
    return "\n".join(lines)


def html_report(results: list[SubmissionResult], missing: list[str] = ()) -> str:
    """The report as one self-contained HTML page (histograms embedded as PNG)."""
    e = html.escape
    body = ["<h1>Class report</h1>", *[f"<p>{e(line)}</p>" for line in _header(results, list(missing))]]
    for s in sections(results):
        body += [
            f"<section id='{e(s.key)}'><h2>{e(s.title)} (<code>{e(s.key)}</code>)</h2>",
            f"<p class='summary'>{e(_summary(s))}</p>",
        ]
        if s.graded:
            png = base64.b64encode(histogram_png(s)).decode("ascii")
            body.append(
                f"<img class='histogram' alt='score histogram of {e(s.key)}' src='data:image/png;base64,{png}'>"
            )
        if s.exercises:
            body.append("<table><tr><th>exercise</th><th>mean</th><th>max</th><th>full marks</th></tr>")
            body += [
                f"<tr><td>{e(title)} (<code>{e(key)}</code>)</td><td>{mean:.2f}</td><td>{most:g}</td>"
                f"<td>{full:.0%}</td></tr>"
                for key, title, mean, most, full in s.exercises
            ]
            body.append("</table>")
        if s.misconceptions:
            body.append("<h3>Misconceptions (failures grouped by the hint that fired)</h3><ul>")
            body += [
                f"<li><b>{len(who)} student(s)</b>, <code>{e(exercise)}</code>: {e(cause)} "
                f"<small>({e(', '.join(who))})</small></li>"
                for exercise, cause, who in s.misconceptions
            ]
            body.append("</ul>")
        if s.copied:
            body.append("<h3>Answers equal to the library's reference (not penalised; for your review)</h3><ul>")
            body += [f"<li>{e(who)}: {e(line)}</li>" for who, line in s.copied]
            body.append("</ul>")
        if s.problems:
            body.append("<h3>Not graded</h3><ul>")
            body += [
                f"<li>{e(_who(r))} (<code>{e(r.key or r.path)}</code>): {e(r.error or '')}</li>" for r in s.problems
            ]
            body.append("</ul>")
        body.append("</section>")
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
        "img.histogram{display:block;margin:1em 0}"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Class report</title>"
        f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def write_report(
    path: str | Path, results: list[SubmissionResult], missing: list[str], write_text, write_bytes
) -> list[Path]:
    """Write ``path`` (HTML) and its Markdown twin (``.md``, with PNG histograms beside it); returns the files."""
    path = Path(path)
    written = [path]
    write_text(path, html_report(results, missing))
    images = {}
    for s in sections(results):
        if s.graded:
            name = f"{path.stem}-{re.sub(r'[^A-Za-z0-9_.-]', '_', s.key)}.png"  # a key is never a path
            write_bytes(path.with_name(name), histogram_png(s))
            images[s.key] = name
            written.append(path.with_name(name))
    md = path.with_suffix(".md")
    write_text(md, markdown_report(results, missing, images))
    written.append(md)
    return written
