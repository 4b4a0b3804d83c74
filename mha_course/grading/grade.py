"""``python -m mha_course.grading.grade SUBMISSIONS ... [--assignment KEY]``: grade a class, each in a sandbox.

Each submission runs inside bubblewrap's sandbox (own namespaces, uid nobody, no network, a
read-only view without the grader, the hidden tests or the answers; time, memory and process
limits); results come back as plain arrays and are compared here. Where bubblewrap cannot run,
grading is refused unless ``--unsafe-no-isolation`` is given; the output says which isolation ran.

A folder is a class as a learning platform downloads it: each first-level folder (or flat file)
is one student (see :mod:`.classroom.collect`), keyed by its path: same-named files never overwrite
each other. ``--assignment KEY`` grades one assignment: a notebook of another assignment, a missing
notebook or a broken link gets a row saying so, never a silent skip; without it, each notebook is graded as the assignment its metadata names. A student gets one
grade per assignment: of several notebooks the one named like the assignment's, else the newest,
is graded, and the row names the others (never a sum). Links are never followed.

Outputs: a table (one submission) or a progress bar and a class summary (many); ``--csv`` a gradebook (student, file, a column
per exercise, raw, adjustments, final, the platform's grade, seeds, isolation, notes); ``--report`` an HTML class report with its Markdown twin; ``--feedback-dir`` one Markdown file per submission for
the student; ``--results-dir`` one Gradescope results.json per submission; ``--json`` one merged
results.json; ``--grades-out`` the roster back with the grade filled in (Canvas/Moodle import);
``--overrides`` per-student decisions applied on every (re)grade (a ``review`` row resolves a flag).
Code the static scan finds reaching into the grader or the interpreter flags the submission for
review with its evidence in every output; ``--on-tamper review`` (default) keeps the tests' score,
``--on-tamper zero`` (exams) scores it 0 until resolved; every output names the policy. Whatever one submission holds,
the run ends with every output for the others (its failure is its row); learner text is made safe
for each output (:mod:`.classroom.safe_text`). Exit status 0 whenever grading ran, however the
submissions scored; 1 when an output could not be written (the others are); 2 for a usage error;
3 when submissions cannot be isolated here and ``--unsafe-no-isolation`` was not given.

More in ``docs/design/grader.md`` (mha_course.grading.grade).
"""

from __future__ import annotations

if __name__ == "__main__":  # first of all, before the imports below (a second): see hidden_argv
    from mha_course.grading.hidden_argv import hide_command_line

    hide_command_line()

import argparse
import sys
from pathlib import Path

from . import grade_options
from .classroom import bookkeeping
from .classroom.bookkeeping import apply_policy, grade_column, identify, picker
from .classroom.collect import collect, one_per_student
from .classroom.feedback import feedback_markdown
from .classroom.feedback import summary as feedback_summary
from .classroom.picks import read_picks
from .classroom.policy import LatePolicy, read_overrides
from .classroom.report import write_report
from .classroom.results import (
    class_summary,
    gradescope,
    merged_gradescope,
    results_file_name,
    terminal_summary,
    write_atomic,
    write_csv,
    write_json,
)
from .classroom.review_flags import policy_line
from .classroom.roster import Roster, read_roster, write_grade_columns
from .classroom.safe_text import clean
from .classroom.seeds import choose_seed, class_key, record_seed
from .engine import notebook, registry
from .engine.dask_executor import ClusterError, parse_address
from .engine.executors import executor_for
from .engine.pipeline import MAX_CODE_BYTES, grade_many, new_seed
from .engine.process import Isolator
from .engine.verdicts import CASES_SEE, Limits, SubmissionResult
from .hidden_argv import hide_command_line, taken
from .walls.view import IsolationError


def _feedback(results: list[SubmissionResult], folder: Path) -> None:
    """One Markdown feedback file per submission, named like its results.json."""
    for r in results:
        cells, targets = [], {}
        if not r.error and r.assignment:
            try:
                cells = notebook.code_cells(notebook.load(r.path))
                targets = {e.key: e.target for e in registry.get_assignment(r.assignment).exercises}
            except (ValueError, OSError, KeyError):
                pass
        if sum(len(source) for _, source in cells) > MAX_CODE_BYTES:
            cells = []  # the grader refused to read this much code; the feedback does not parse it either
        name = results_file_name(r).removesuffix(".results.json") + ".feedback.md"
        try:
            text = feedback_markdown(r, cells, targets)
        except Exception as exc:  # one submission's feedback must not cost the class its outputs
            text = feedback_markdown(r, [], {}) + f"\n(cells not shown: {type(exc).__name__})\n"
        write_atomic(folder / name, text)


_parser = grade_options.parser  # the option table lives in its own module


def _announce(args: argparse.Namespace, isolator: Isolator) -> None:
    """The run's settings that every output names: the walls, what each test sees, the scan policy."""
    if not args.quiet or not isolator.walls.isolated:
        print(f"isolation: {isolator.walls.summary()}", file=sys.stderr if not isolator.walls.isolated else sys.stdout)
    if not args.quiet or args.strict_definitions:
        print(f"each test sees {CASES_SEE[args.strict_definitions]}")
    if not args.quiet:
        print(policy_line(args.on_tamper))


def _own_arguments() -> list[str]:
    """This process's arguments, once moved off its command line (exit status 2 if the environment's do not parse)."""
    hide_command_line()
    try:
        return taken() + sys.argv[1:]
    except ValueError as exc:
        _parser().error(str(exc))


def main(argv: list[str] | None = None) -> int:
    """Run the command line (``argv``, else this process's, moved off it by :func:`.hidden_argv.hide_command_line`); returns the exit status."""
    args = _parser().parse_args(_own_arguments() if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints escaped, never aborts
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    fail_json = (
        (lambda text: write_json(args.json, {"score": 0, "output": text, "tests": []}))
        if args.json
        else (lambda text: None)
    )  # Gradescope still gets a result it can show
    try:
        if args.assignment:
            registry.get_assignment(args.assignment)
        roster = read_roster(args.roster) if args.roster else None
        overrides = read_overrides(args.overrides) if args.overrides else []
        if args.late_penalty:
            LatePolicy.parse(args.late_penalty, args.due)  # a usage error before grading, not after
        elif args.due:
            raise ValueError("--due is the deadline of --late-penalty; give the penalty too (e.g. 10%/day)")
        if args.dask:
            parse_address(args.dask)  # a usage error before grading
        if args.lms_max is not None and not 0 < args.lms_max < float("inf"):
            raise ValueError(f"--lms-max must be a positive number; got {args.lms_max:g}")
        names = {a.key: a.notebook for a in registry.assignments()}
        skip = tuple(f for f in args.skip_folders.split(",") if f)
        skipped: list[str] = []
        pick = picker(read_picks(args.pick), roster)
        rows = collect(args.submissions, args.assignment, args.one_submission, names, pick, skip, skipped)
        seed_file, key = bookkeeping.seed_file(args), class_key(args.submissions, args.assignment)
        seed, how = choose_seed(seed_file, key, args.seed, args.new_seed, new_seed)
    except (FileNotFoundError, ValueError, KeyError, OSError) as exc:
        message = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
        print(f"error: {message}", file=sys.stderr)
        fail_json(f"Could not grade: {message}")
        return 2
    if not rows or all(r.problem and r.path is None for r in rows) and not args.assignment:
        print(f"error: no notebook in {' '.join(args.submissions)}", file=sys.stderr)
        fail_json("No notebook was found in the submission.")
        return 2
    missing = identify(rows, roster)
    rows = one_per_student(rows, names)
    if skipped:
        print(f"skipped the instructor's folder(s): {clean(', '.join(skipped))}")
    limits = Limits(
        case_timeout=args.case_timeout,
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_mb=args.memory_mb,
        submission_timeout=args.submission_timeout,
        batch_timeout=args.batch_timeout,
        strict_definitions=args.strict_definitions,
    )
    try:
        isolator = Isolator(unsafe_no_isolation=args.unsafe_no_isolation, min_isolation=args.min_isolation)
    except IsolationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        fail_json(f"The grader could not isolate submissions on this machine; ask your instructor. {exc}")
        return 3
    _announce(args, isolator)
    try:
        with executor_for(args.dask, args.workers) as executor:
            results = grade_many(
                rows,
                limits,
                progress=not args.quiet and len(rows) > 1,
                seed=seed,
                unsafe_no_isolation=args.unsafe_no_isolation,
                isolator=isolator,
                on_tamper=args.on_tamper,
                executor=executor,
                min_isolation=args.min_isolation,
            )
    except ClusterError as exc:  # nothing graded: --dask names no cluster that can grade this run
        print(f"error: {exc}", file=sys.stderr)
        fail_json(f"Could not grade: {exc}")
        return 3 if exc.isolation else 2
    finally:
        isolator.close()
    apply_policy(args, results, rows, overrides, roster)
    failed = _write_outputs(args, results, roster, missing)
    if seed_file is not None:
        try:
            record_seed(seed_file, key, seed, write_atomic)
        except OSError as exc:
            failed += 1
            print(f"error: could not record the seed in {seed_file} ({clean(exc)})", file=sys.stderr)
    where = f"; kept in {seed_file}" if seed_file is not None else ""
    print(f"fresh inputs drawn with --seed {seed} ({how}{where})")  # also with --quiet: it reproduces the run
    return 1 if failed else 0


def _write_grades(args, results: list[SubmissionResult], roster: Roster) -> None:
    """``--grades-out``: the roster with a grade column per assignment (and feedback comments)."""
    grades = bookkeeping.grades(results)
    excused = bookkeeping.excused(results)
    if len(grades) > 1:  # several assignments: a column each, never one summed grade
        columns: dict[str, dict[str, float | None]] = {key: dict(grades[key]) for key in sorted(grades)}
        note = (
            f"one column per assignment: {', '.join(columns)}; a platform's worksheet takes one "
            "assignment: grade it with --assignment KEY"
        )
    else:
        column = grade_column(args, roster)
        columns = {column: dict(next(iter(grades.values()), {}))}
        excused = {column: set().union(*excused.values())}
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
    write_grade_columns(args.grades_out, roster, columns, write_atomic, comments, excused)
    print(f"grades for import: {args.grades_out} ({note})")


def _write_outputs(args, results: list[SubmissionResult], roster: Roster | None, missing: list[str]) -> int:
    """Print the summary and write every output asked for; returns how many outputs failed.

    Each output is written on its own: one that fails (a full disk, a bug) is reported on stderr
    and the others are still written.
    """
    failed = 0

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
        step("the feedback", lambda: _feedback(results, args.feedback_dir))
        print(f"feedback: {args.feedback_dir}/")
    if args.csv:
        step("the gradebook", lambda: write_csv(args.csv, results))
        print(f"gradebook: {args.csv}")
    if args.report:
        step(
            "the class report",
            lambda: write_report(args.report, results, missing, write_atomic, write_atomic, args.anonymise),
        )
        print(f"class report: {args.report} (and {args.report.with_suffix('.md')})")
    if args.grades_out and roster is not None:
        step("the grades for import", lambda: _write_grades(args, results, roster))
    elif args.grades_out:
        print("--grades-out needs --roster (the platform's class list, written back with the grades)", file=sys.stderr)
    if args.summary:
        step("the class summary", lambda: write_atomic(args.summary, class_summary(results) + "\n"))
        print(f"class summary: {args.summary}")
    if args.json:  # last: nothing a submission wrote can replace it (none of its processes is left)
        step("results.json", lambda: write_json(args.json, merged_gradescope(results)))
        print(f"results.json: {args.json}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
