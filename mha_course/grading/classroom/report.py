"""The class report of one grading run: one section per assignment, in HTML and in Markdown.

Per assignment (never averaged across assignments): how many were graded, a histogram of the
scores (a picture, one bar per possible score), each exercise's mean and share of full marks, the
first causes (a cell that raised, before the failures it explains), the misconceptions (the root
causes of :mod:`.feedback` that are wrong results, counted over students, with the students
affected), what was not attempted or stopped by a limit (not a misconception), the submissions that
could not be graded and why, students of the roster with no submission, the answers that are the
library's own reference code, and one row per student (scores per exercise, overrides, penalties).
Above every section, the submissions **to review**: the static scan's flags with their evidence (cell,
line, the line as written), each labelled "likely tampering" or "review", the run's policy for them,
and the override row that resolves them (:mod:`.review_flags`).

``anonymise=True`` is the page to project: no names, ids or file names anywhere, counts only.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from ..safe_text import clean, code_span
from ..safe_text import markdown as md
from ..verdicts import SubmissionResult
from . import late_days, review_flags, similar_pairs
from .feedback import CauseKind, root_causes
from .submitted_code import Cells


@dataclass
class Section:
    """What the report says about one assignment."""

    key: str
    title: str
    graded: list[SubmissionResult]
    problems: list[SubmissionResult]
    exercises: list[tuple[str, str, float, float, float]] = field(default_factory=list)  # key, title, mean, max, full
    misconceptions: list[tuple[str, str, list[str]]] = field(default_factory=list)  # exercise, cause, students
    first_causes: list[tuple[str, str, list[str]]] = field(default_factory=list)  # "", cell error, students
    not_run: list[tuple[str, str, list[str]]] = field(default_factory=list)  # exercise, why, students
    copied: list[tuple[str, str]] = field(default_factory=list)  # student, line

    @property
    def excused(self) -> list[SubmissionResult]:
        """Graded submissions excused as a whole (an override waived every exercise): no score to count."""
        return [r for r in self.graded if r.max_score <= 0]

    @property
    def scores(self) -> list[float]:
        """The scores of the graded submissions, excused ones left out (they are no 0)."""
        return [r.score for r in self.graded if r.max_score > 0]

    @property
    def max_score(self) -> float:
        return max((r.max_score for r in self.graded), default=0.0)


def _who(r: SubmissionResult) -> str:
    return r.student_name or r.student or clean(Path(r.path).name)


def _ranked(found: dict[tuple[str, str], set[str]]) -> list[tuple[str, str, list[str]]]:
    """(exercise, cause, students) commonest first."""
    return sorted(((e, c, sorted(s)) for (e, c), s in found.items()), key=lambda i: (-len(i[2]), i[0], i[1]))


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
            if r.max_score <= 0:  # excused: no exercise mark to average
                continue
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
        students: dict[str, dict[tuple[str, str], set[str]]] = defaultdict(lambda: defaultdict(set))
        for r in graded:
            counted: set[tuple[str, str]] = set()
            for cause in root_causes(r):
                # a student counts once per exercise and kind, under the first (main) cause: the variants
                # of one mistake across cases would otherwise put one student on several lines
                if cause.kind == CauseKind.MISTAKE and (cause.kind, cause.exercise) in counted:
                    continue
                counted.add((cause.kind, cause.exercise))
                students[cause.kind][(cause.exercise, cause.text)].add(_who(r))

        section.first_causes, section.misconceptions, section.not_run = (
            _ranked(students.get(CauseKind.CELL_ERROR, {})),
            _ranked(students.get(CauseKind.MISTAKE, {})),
            _ranked(students.get(CauseKind.NOT_RUN, {})),
        )
        section.copied = [(_who(r), line) for r in graded for line in r.copied]
        out.append(section)
    return out


def _fraction_gcd(a: Fraction, b: Fraction) -> Fraction:
    """The largest fraction both are whole multiples of (gcd(0, b) = b)."""
    return Fraction(math.gcd(a.numerator * b.denominator, b.numerator * a.denominator), a.denominator * b.denominator)


def score_step(section: Section) -> float:
    """The resolution of the possible scores: the largest step every test's points are a multiple of."""
    points = {Fraction(t.points).limit_denominator(100) for r in section.graded for t in r.tests if t.points > 0}
    step = functools.reduce(_fraction_gcd, points, Fraction(0))
    return float(step) if step else 1.0


def score_counts(section: Section) -> list[tuple[float, int]]:
    """(possible score, students) for every score from 0 to the maximum in steps of :func:`score_step`.

    One bar per possible score: neighbouring scores are never merged. Above 200 possible scores
    (fine-grained points), the step is widened to keep 200 bars at most.
    """
    top = section.max_score
    step = score_step(section)
    while top / step > 200:
        step *= 2
    count = Counter(min(round(score / step), round(top / step)) for score in section.scores)
    return [(k * step, count.get(k, 0)) for k in range(round(top / step) + 1)]


def histogram_png(section: Section) -> bytes:
    """The score histogram of one assignment as PNG bytes: one bar per possible score."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=100)
    counts = score_counts(section)
    width = (counts[1][0] - counts[0][0]) * 0.9 if len(counts) > 1 else 0.9
    ax.bar([x for x, _ in counts], [n for _, n in counts], width=width, color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"score (out of {section.max_score:g})")
    ax.set_ylabel("students")
    # the default locator is a MaxNLocator, which takes integer= (the stubs type it as the base Locator)
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]
    ax.set_title(
        f"{section.key}: {len(section.scores)} graded"
        + (f", {len(section.excused)} excused" if section.excused else "")
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def excused_note(section: Section) -> str:
    """ "; N excused (left out of the mean and the histogram)", or "" when nobody was."""
    n = len(section.excused)
    return f"; {n} excused (left out of the mean and the histogram)" if n else ""


def _summary(section: Section) -> str:
    scores = section.scores
    if not scores:
        return "no submission could be graded" + excused_note(section)
    return (
        f"{len(scores)} graded, mean {statistics.fmean(scores):.1f} / {section.max_score:g}, "
        f"median {statistics.median(scores):g}, min {min(scores):g}, max {max(scores):g}" + excused_note(section)
    )


def _header(results: list[SubmissionResult], missing: list[str], anonymise: bool = False) -> list[str]:
    seeds = sorted({r.seed for r in results if r.seed is not None})
    kinds = sorted({(r.isolation or {}).get("kind", "?") for r in results})
    seen = sorted({(r.isolation or {}).get("cases_see", "") for r in results} - {""})
    policies = sorted({r.on_tamper for r in results}) or ["review"]
    lines = [
        f"{len(results)} submission(s); fresh inputs drawn with --seed {', '.join(map(str, seeds)) or '-'}; "
        f"isolation: {', '.join(kinds)}; {'; '.join(review_flags.policy_line(p) for p in policies)}"
        + (f"; each test saw {' / '.join(seen)}" if seen else "")
    ]
    if missing:
        who = "" if anonymise else f": {', '.join(missing)}"
        lines.append(f"{len(missing)} student(s) of the roster submitted nothing{who}")
    return lines + late_days.summary_lines(results, anonymise)


def _overrides(r: SubmissionResult) -> str:
    """The instructor's overrides and penalties of one result, as one line ("" when none)."""
    parts = [f"{k}: {'waived' if v is None else f'{v:g}'}" for k, v in r.adjustments.items()]
    parts += list(getattr(r, "adjustment_log", None) or [])  # the policy's own log, when results carry one
    late_days, late_penalty = getattr(r, "late_days", 0) or 0, getattr(r, "late_penalty", 0.0) or 0.0
    if late_days or late_penalty:
        parts.append(f"late {late_days} day(s): -{late_penalty:g}")
    return "; ".join(dict.fromkeys(parts))


def student_rows(section: Section) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the per-student table: who, file, score, each exercise, overrides, status."""
    keys = [key for key, *_ in section.exercises]
    columns = ["student", "id", "submission", "score", *keys, "overrides", "status"]
    rows = []
    for r in sorted(section.graded + section.problems, key=lambda r: (_who(r).casefold(), r.key)):
        scores, raw = r.exercise_scores(), r.raw_exercise_scores()
        cells = [f"{scores[k]:g}" if k in scores else ("waived" if k in raw else "") for k in keys]
        score = "" if r.error else f"{r.score:g} / {r.max_score:g}"
        status = f"not graded: {r.error}" if r.error else "graded"
        status += f"; {r.review_state}" if r.flags else ""
        rows.append([_who(r), r.student_id, r.key or clean(Path(r.path).name), score, *cells, _overrides(r), status])
    return columns, rows


def flagged(results: list[SubmissionResult]) -> list[SubmissionResult]:
    """The submissions with review flags, open ones first (then by student)."""
    return sorted((r for r in results if r.flags), key=lambda r: (bool(r.review), _who(r).casefold(), r.key))


def _review_heading(results: list[SubmissionResult]) -> str:
    open_ = sum(1 for r in results if r.flags and not r.review)
    return f"To review ({open_} open, {len(flagged(results)) - open_} resolved)"


_RESOLVE = (
    "Resolve a flag with a row of your overrides file (--overrides): exercise `review`, points `accept` "
    "(the tests' score stands) or a number such as `0`, and your reason."
)


def _review_markdown(results: list[SubmissionResult], anonymise: bool) -> list[str]:
    rows = flagged(results)
    if not rows:
        return []
    lines = [f"## {_review_heading(results)}", ""]
    if anonymise:
        return lines + [f"- {len(rows)} submission(s) flagged by the static scan", ""]
    lines += [_RESOLVE, ""]
    for r in rows:
        lines.append(
            f"- **{md(_who(r))}** ({code_span(r.key or clean(Path(r.path).name))}, {md(r.assignment or '')}): "
            f"{md(r.review_state)}; score {r.score:g} / {r.max_score:g} "
            f"({md(review_flags.policy_line(r.on_tamper))})"
        )
        for f in r.flags[: review_flags.SHOWN]:
            lines.append(f"  - {md(f.label)}: {code_span(f.finding)}, {f.where()}: {code_span(f.source or '?')}")
        more = max(r.flag_count, len(r.flags)) - min(len(r.flags), review_flags.SHOWN)
        if more > 0:
            lines.append(f"  - and {more} more")
        if not r.review:
            lines.append(f"  - resolve: {code_span(review_flags.resolve_row(r))}")
    return lines + [""]


def _review_html(results: list[SubmissionResult], anonymise: bool) -> list[str]:
    e = html.escape
    rows = flagged(results)
    if not rows:
        return []
    body = [f"<section id='to-review'><h2>{e(_review_heading(results))}</h2>"]
    if anonymise:
        return body + [f"<p>{len(rows)} submission(s) flagged by the static scan</p></section>"]
    body.append(f"<p>{e(_RESOLVE.replace('`', ''))}</p><ul>")
    for r in rows:
        items = [
            f"<li>{e(f.label)}: <code>{e(f.finding)}</code>, {e(f.where())}: <code>{e(f.source or '?')}</code></li>"
            for f in r.flags[: review_flags.SHOWN]
        ]
        more = max(r.flag_count, len(r.flags)) - min(len(r.flags), review_flags.SHOWN)
        items += [f"<li>and {more} more</li>"] if more > 0 else []
        items += [f"<li>resolve: <code>{e(review_flags.resolve_row(r))}</code></li>"] if not r.review else []
        body.append(
            f"<li><b>{e(_who(r))}</b> (<code>{e(r.key or clean(Path(r.path).name))}</code>, {e(r.assignment or '')}): "
            f"{e(r.review_state)}; score {r.score:g} / {r.max_score:g} ({e(review_flags.policy_line(r.on_tamper))})"
            f"<ul>{''.join(items)}</ul></li>"
        )
    return body + ["</ul></section>"]


def _lists(s: Section, anonymise: bool) -> list[tuple[str, list[tuple[str, str, list[str]]]]]:
    """The grouped failures, first causes first; misconceptions exclude what did not run."""
    return [
        ("First causes (a cell raised; the failures listed with it follow from it)", s.first_causes),
        ("Misconceptions (wrong results grouped by the hint that fired)", s.misconceptions),
        ("Not attempted or stopped by a limit (not misconceptions)", s.not_run),
    ]


def _count(who: list[str]) -> str:
    return f"{len(who)} student(s)"


def markdown_report(
    results: list[SubmissionResult],
    missing: Sequence[str] = (),
    image_names: dict[str, str] | None = None,
    anonymise: bool = False,
    similar: list[similar_pairs.SimilarPair] | None = None,  # computed (notebooks read from disk) when None
) -> str:
    """The report as Markdown; ``image_names`` maps assignment keys to histogram files beside it.

    ``anonymise``: no student names, ids or file names (the page to project to a class).
    """
    # learner text (names, keys, hints quoting exceptions) goes through md() or code_span(): no raw HTML
    lines = ["# Class report", "", *[f"{md(line)}  " for line in _header(results, list(missing), anonymise)], ""]
    lines += _review_markdown(results, anonymise)
    similar = similar_pairs.similar_pairs(results) if similar is None else similar
    lines += similar_pairs.markdown_section(similar, anonymise)
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
        for heading, entries in _lists(s, anonymise):
            if not entries:
                continue
            lines += [f"### {heading}", ""]
            for exercise, cause, who in entries:
                where = f"{code_span(exercise)}: " if exercise else ""
                names = "" if anonymise else f" ({md(', '.join(who))})"
                lines.append(f"- **{_count(who)}**, {where}{md(cause)}{names}")
            lines.append("")
        if s.copied:
            lines += ["### Answers equal to the library's reference (not penalised; for your review)", ""]
            if anonymise:
                lines.append(f"- {len({w for w, _ in s.copied})} student(s)")
            else:
                lines += [f"- {md(who)}: {md(line)}" for who, line in s.copied]
            lines.append("")
        if s.problems:
            lines += ["### Not graded", ""]
            if anonymise:
                lines.append(f"- {len(s.problems)} submission(s) could not be graded")
            else:
                lines += [f"- {md(_who(r))} ({code_span(r.key or clean(r.path))}): {md(r.error)}" for r in s.problems]
            lines.append("")
        if not anonymise and (s.graded or s.problems):
            columns, rows = student_rows(s)
            lines += ["### Students", "", "| " + " | ".join(map(md, columns)) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(md(c).replace("|", "\\|") for c in row) + " |" for row in rows]
            lines.append("")
    return "\n".join(lines)


def html_report(
    results: list[SubmissionResult],
    missing: Sequence[str] = (),
    anonymise: bool = False,
    similar: list[similar_pairs.SimilarPair] | None = None,  # computed (notebooks read from disk) when None
) -> str:
    """The report as one self-contained HTML page (histograms embedded as PNG); ``anonymise`` as in Markdown."""
    e = html.escape
    body = ["<h1>Class report</h1>", *[f"<p>{e(line)}</p>" for line in _header(results, list(missing), anonymise)]]
    body += _review_html(results, anonymise)
    similar = similar_pairs.similar_pairs(results) if similar is None else similar
    body += similar_pairs.html_section(similar, anonymise)
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
        for heading, entries in _lists(s, anonymise):
            if not entries:
                continue
            body.append(f"<h3>{e(heading)}</h3><ul>")
            for exercise, cause, who in entries:
                where = f"<code>{e(exercise)}</code>: " if exercise else ""
                names = "" if anonymise else f" <small>({e(', '.join(who))})</small>"
                body.append(f"<li><b>{_count(who)}</b>, {where}{e(cause)}{names}</li>")
            body.append("</ul>")
        if s.copied:
            body.append("<h3>Answers equal to the library's reference (not penalised; for your review)</h3><ul>")
            if anonymise:
                body.append(f"<li>{len({w for w, _ in s.copied})} student(s)</li>")
            else:
                body += [f"<li>{e(who)}: {e(line)}</li>" for who, line in s.copied]
            body.append("</ul>")
        if s.problems:
            body.append("<h3>Not graded</h3><ul>")
            if anonymise:
                body.append(f"<li>{len(s.problems)} submission(s) could not be graded</li>")
            else:
                body += [
                    f"<li>{e(_who(r))} (<code>{e(r.key or r.path)}</code>): {e(r.error or '')}</li>" for r in s.problems
                ]
            body.append("</ul>")
        if not anonymise and (s.graded or s.problems):
            columns, rows = student_rows(s)
            body.append("<h3>Students</h3><table class='students'><tr>" + "".join(f"<th>{e(c)}</th>" for c in columns))
            body += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
            body.append("</table>")
        body.append("</section>")
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
        "img.histogram{display:block;margin:1em 0}table.similar td{vertical-align:top}pre{font-size:.8em}"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Class report</title>"
        f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def write_report(
    path: str | Path,
    results: list[SubmissionResult],
    missing: list[str],
    write_text,
    write_bytes,
    anonymise: bool = False,
    code: dict[str, Cells] | None = None,
) -> list[Path]:
    """Write ``path`` (HTML), its Markdown twin (``.md``, PNG histograms beside it), ``<stem>-similarity.md/.json``.

    ``code``: each submission's code cells by path (:func:`.submitted_code.read_code`); read from disk when None.
    """
    path = Path(path)
    written = [path]
    similar = similar_pairs.similar_pairs(results, code=code)  # once: both pages and the similarity files show it
    write_text(path, html_report(results, missing, anonymise, similar))
    images = {}
    for s in sections(results):
        if s.graded:
            name = f"{path.stem}-{re.sub(r'[^A-Za-z0-9_.-]', '_', s.key)}.png"  # a key is never a path
            write_bytes(path.with_name(name), histogram_png(s))
            images[s.key] = name
            written.append(path.with_name(name))
    md = path.with_suffix(".md")
    write_text(md, markdown_report(results, missing, images, anonymise, similar))
    written.append(md)
    return written + similar_pairs.write_similarity(path, similar, write_text, anonymise)
