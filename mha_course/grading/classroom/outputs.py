"""Stage 5 of grading a class, **report**: every output asked for, each written on its own.

:func:`write_outputs` prints the summary and writes, in this order: one Gradescope results.json per
submission (:mod:`.results`), one feedback file per submission (:mod:`.feedback`), the gradebook CSV, the
class report with its similarity report (:mod:`.report`, :mod:`.similar_pairs`), the roster back with the
grades for the platform's import (:mod:`.roster`, the platform's conventions from :mod:`.lms`), the class
summary, and last the merged results.json (nothing a submission wrote can replace it: none of its
processes is left). One output that fails (a full disk, a bug) is reported on stderr; the others are
still written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..engine import registry
from ..safe_text import clean
from ..verdicts import SubmissionResult
from . import late_days
from .feedback import feedback_markdown
from .feedback import summary as feedback_summary
from .record import grade_column
from .report import write_report
from .results import (
    class_summary,
    gradescope,
    merged_gradescope,
    results_file_name,
    terminal_summary,
    write_atomic,
    write_csv,
    write_json,
)
from .review_flags import policy_line
from .roster import Roster, write_grade_columns
from .submitted_code import Cells, cells_of, read_code


def write_outputs(args, results: list[SubmissionResult], roster: Roster | None, missing: list[str]) -> int:
    """Print the summary and write every output ``args`` (the command's options) asks for; returns how many failed."""
    failed = 0
    late_lines = late_days.summary_lines(results)  # several notebooks of one student, times read from files
    code = read_code(results) if args.feedback_dir or args.report else {}  # each notebook read once, for both

    def step(what: str, write) -> None:
        nonlocal failed
        try:
            write()
        except Exception as exc:
            failed += 1
            print(f"error: could not write {what} ({type(exc).__name__}: {clean(exc)})", file=sys.stderr)

    summary = lambda: sys.stdout.writelines(f"{line}\n" for line in terminal_summary(results, missing, args.quiet))
    step("the summary", summary)
    if args.results_dir:
        for r in results:
            step(
                f"results.json of {r.key or clean(r.path)}",
                lambda r=r: write_json(args.results_dir / results_file_name(r), gradescope(r)),
            )
    if args.feedback_dir:
        step("the feedback", lambda: write_feedback(results, args.feedback_dir, code))
        print(f"feedback: {args.feedback_dir}/")
    if args.csv:
        step("the gradebook", lambda: write_csv(args.csv, results))
        print(f"gradebook: {args.csv}")
    if args.report:
        step(
            "the class report",
            lambda: write_report(args.report, results, missing, write_atomic, write_atomic, args.anonymise, code),
        )
        print(
            f"class report: {args.report} (and {args.report.with_suffix('.md')}, {args.report.stem}-similarity.md/.json)"
        )
    if args.grades_out and roster is not None:
        step("the grades for import", lambda: write_grades(args, results, roster))
    elif args.grades_out:
        print("--grades-out needs --roster (the platform's class list, written back with the grades)", file=sys.stderr)
    if args.summary:
        tail = "".join(f"\n{line}" for line in late_lines)
        step("the class summary", lambda: write_atomic(args.summary, class_summary(results) + tail + "\n"))
        print(f"class summary: {args.summary}")
    if args.json:  # last: nothing a submission wrote can replace it (none of its processes is left)
        step("results.json", lambda: write_json(args.json, merged_gradescope(results)))
        print(f"results.json: {args.json}")
    sys.stdout.writelines(f"{clean(line)}\n" for line in late_lines)
    return failed


def write_feedback(results: list[SubmissionResult], folder: Path, code: dict[str, Cells] | None = None) -> None:
    """One Markdown feedback file per submission, named like its results.json.

    ``code``: each submission's code cells by path (:func:`.submitted_code.read_code`); read from disk when None.
    """
    for r in results:
        cells, targets = cells_of(r, code), {}
        if cells:
            try:
                targets = {e.key: e.target for e in registry.get_assignment(r.assignment or "").exercises}
            except (ValueError, KeyError):
                pass  # an assignment the course no longer has: the cells are still shown
        name = results_file_name(r).removesuffix(".results.json") + ".feedback.md"
        try:
            text = feedback_markdown(r, cells, targets)
        except Exception as exc:  # one submission's feedback must not cost the class its outputs
            text = feedback_markdown(r, [], {}) + f"\n(cells not shown: {type(exc).__name__})\n"
        write_atomic(folder / name, text)


def grades(results: list[SubmissionResult]) -> dict[str, dict[str, float]]:
    """Assignment key -> student id -> final points on the platform's scale: one grade per student and assignment.

    Rows are one per student and assignment already (:func:`~.collect.one_per_student`);
    should two remain, the first graded one counts.
    """
    found: dict[str, dict[str, float]] = {}
    for r in results:
        if r.student_id and not r.error and r.assignment and r.lms_score is not None:
            found.setdefault(r.assignment, {}).setdefault(r.student_id, round(r.lms_score, 2))
    return found


def excused(results: list[SubmissionResult]) -> dict[str, set[str]]:
    """Assignment key -> ids of the students excused from it (an override waived the whole assignment)."""
    found: dict[str, set[str]] = {}
    for r in results:
        if r.student_id and not r.error and r.assignment and r.max_score <= 0:
            found.setdefault(r.assignment, set()).add(r.student_id)
    return found


def write_grades(args, results: list[SubmissionResult], roster: Roster) -> None:
    """``--grades-out``: the roster with a grade column per assignment (and feedback comments)."""
    by_assignment = grades(results)
    waived = excused(results)
    if len(by_assignment) > 1:  # several assignments: a column each, never one summed grade
        columns: dict[str, dict[str, float | None]] = {key: dict(by_assignment[key]) for key in sorted(by_assignment)}
        note = (
            f"one column per assignment: {', '.join(columns)}; a platform's worksheet takes one "
            "assignment: grade it with --assignment KEY"
        )
    else:
        column = grade_column(args, roster)
        columns = {column: dict(next(iter(by_assignment.values()), {}))}
        waived = {column: set().union(*waived.values())}
        note = f"column {column!r}"
        if results and results[0].lms_max is not None:
            note += f", out of {results[0].lms_max:g}"
    flagged = [r for r in results if r.flags and not r.review and r.student_id and not r.error]
    if flagged:
        note += (
            f"; {len(flagged)} flagged for review ({policy_line(args.on_tamper)}): "
            f"{', '.join(r.student_id for r in flagged[:10])}{' ...' if len(flagged) > 10 else ''}"
        )
    comments = {r.student_id: feedback_summary(r) for r in reversed(results) if r.student_id and not r.error}
    write_grade_columns(args.grades_out, roster, columns, write_atomic, comments, waived)
    print(f"grades for import: {args.grades_out} ({note})")
