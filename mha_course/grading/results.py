"""What the grader writes: Gradescope's results.json, a CSV gradebook, a class summary, a text report.

Gradescope's format (https://gradescope-autograders.readthedocs.io, "Output format")::

    {"score": 27.0, "max_score": 29.0, "execution_time": 3.1, "output": "...",
     "visibility": "visible", "stdout_visibility": "hidden",
     "tests": [{"name": "softmax: rows sum to 1", "score": 2.0, "max_score": 2.0,
                "status": "passed", "output": "passed", "visibility": "visible"}, ...]}

Public cases are ``"visible"``; hidden cases are ``"after_published"`` (the learner sees them once
the instructor publishes grades, so hidden tests cannot be probed one submission at a time, yet
the final feedback explains every lost point). Files are written atomically (temporary file,
then rename), and the grader writes results.json last, from its own process, to the path it was
given -- whatever a submission wrote elsewhere is never read.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from .grader import SubmissionResult


def _visibility(hidden: bool) -> str:
    return "after_published" if hidden else "visible"


def gradescope(result: SubmissionResult) -> dict:
    """One submission as Gradescope's results.json dictionary."""
    tests = [{"name": t.name, "score": t.score, "max_score": t.points,
              "status": "passed" if t.status == "passed" else "failed",
              "output": t.output, "visibility": _visibility(t.hidden)} for t in result.tests]
    lines = []
    if result.error:
        lines.append(f"Could not grade {Path(result.path).name}: {result.error}")
    else:
        lines.append(f"{result.title} ({result.assignment}, version {result.version}): "
                     f"{result.score:g} / {result.max_score:g} points")
    lines += [f"- {note}" for note in result.notes]
    if result.isolation and result.isolation.get("kind") != "bubblewrap":
        lines.append(f"- {result.isolation.get('summary', 'graded without isolation')}")
    return {"score": result.score, "max_score": result.max_score, "execution_time": round(result.execution_time, 3),
            "output": "\n".join(lines), "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"isolation": result.isolation, "seed": result.seed}}


def merged_gradescope(results: list[SubmissionResult]) -> dict:
    """Several notebooks in one Gradescope submission: scores add up, test names get the file name."""
    if len(results) == 1:
        return gradescope(results[0])
    parts = [gradescope(r) for r in results]
    tests = [dict(t, name=f"{Path(r.path).name} | {t['name']}") for r, p in zip(results, parts, strict=True)
             for t in p["tests"]]
    return {"score": sum(p["score"] for p in parts), "max_score": sum(p["max_score"] for p in parts),
            "execution_time": round(sum(p["execution_time"] for p in parts), 3),
            "output": "\n\n".join(p["output"] for p in parts), "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"isolation": results[0].isolation, "seed": results[0].seed}}


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    A path that exists and is not a regular file (``/dev/null``, ``/dev/stdout``, a pipe) is written
    in place: renaming over it would replace the device with a file.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def gradebook_rows(results: list[SubmissionResult]) -> tuple[list[str], list[dict]]:
    """(columns, rows): one row per submission, a column per exercise, then total and max."""
    exercises: list[str] = []
    for r in results:
        for key in r.exercise_scores():
            if key not in exercises:
                exercises.append(key)
    columns = ["submission", "assignment", "version", *exercises, "total", "max_score", "status"]
    rows = []
    for r in results:
        scores = r.exercise_scores()
        row = {"submission": Path(r.path).name, "assignment": r.assignment or "", "version": r.version or "",
               **{k: f"{scores[k]:g}" if k in scores else "" for k in exercises},
               "total": f"{r.score:g}", "max_score": f"{r.max_score:g}",
               "status": f"error: {r.error}" if r.error else "graded"}
        rows.append(row)
    return columns, rows


def write_csv(path: str | Path, results: list[SubmissionResult]) -> None:
    """The class gradebook as CSV (see :func:`gradebook_rows`)."""
    import io

    columns, rows = gradebook_rows(results)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


def class_summary(results: list[SubmissionResult], top: int = 2, limit: int = 15) -> str:
    """What the class gets wrong, one block per assignment (never averaged across assignments).

    Per assignment: how many were graded, the mean and median score out of its maximum, then its
    ``limit`` most-failed tests with their ``top`` commonest hints.
    """
    graded = [r for r in results if not r.error]
    lines = [f"{len(results)} submission(s), {len(graded)} graded, {len(results) - len(graded)} could not be graded"]
    by_assignment: dict[str, list[SubmissionResult]] = {}
    for r in graded:
        by_assignment.setdefault(r.assignment or "?", []).append(r)
    for key, group in sorted(by_assignment.items()):
        scores = sorted(r.score for r in group)
        median = scores[len(scores) // 2] if len(scores) % 2 else (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2
        lines.append(f"{key}: {len(group)} graded, mean {sum(scores) / len(scores):.1f} / "
                     f"{max(r.max_score for r in group):g}, median {median:g}")
        failures: dict[str, Counter] = {}
        totals: Counter = Counter()
        for r in group:
            for t in r.tests:
                totals[t.name] += 1
                if t.status != "passed":
                    failures.setdefault(t.name, Counter())[t.output] += 1
        if not failures:
            lines.append("  every graded test passed in every submission")
            continue
        ranked = sorted(failures.items(), key=lambda item: (-sum(item[1].values()), item[0]))
        lines.append("  tests most often failed (failed / graded, then the commonest messages):")
        for name, hints in ranked[:limit]:
            lines.append(f"  {sum(hints.values())}/{totals[name]}  {name}")
            for hint, count in hints.most_common(top):
                lines.append(f"        {count}x {hint[:160]}")
        if len(ranked) > limit:
            lines.append(f"  ... and {len(ranked) - limit} more failing tests")
    return "\n".join(lines)


def text_report(result: SubmissionResult) -> str:
    """A submission's verdicts as a plain-text table (what the CLI prints for one notebook)."""
    if result.error:
        return f"{result.path}: could not be graded: {result.error}"
    lines = [f"{result.path}: {result.title} (version {result.version}): {result.score:g} / {result.max_score:g} "
             f"points in {result.execution_time:.1f} s"]
    for t in result.tests:
        mark = "PASS" if t.status == "passed" else t.status.upper()
        hidden = " (hidden)" if t.hidden else ""
        lines.append(f"  [{mark}] {t.score:g}/{t.points:g}  {t.name}{hidden}")
        if t.status != "passed":
            lines.append(f"         -> {t.output}")
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)
