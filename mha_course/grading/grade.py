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
from .classroom import bookkeeping, kept, late_days, manual, submitted_at
from .classroom.batch import grade_many
from .classroom.bookkeeping import apply_policy, grade_column, identify, picker
from .classroom.collect import collect, one_per_student
from .classroom.dask_executor import ClusterError, executor_for, parse_address
from .classroom.feedback import feedback_markdown
from .classroom.feedback import summary as feedback_summary
from .classroom.picks import read_picks
from .classroom.policy import read_overrides
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
from .classroom.seeds import choose_seed, class_identity, class_key, path_key, record_seed
from .engine import notebook, registry
from .engine.pipeline import MAX_CODE_BYTES, new_seed
from .engine.process import Isolator
from .hidden_argv import hide_command_line, taken
from .safe_text import clean
from .verdicts import CASES_SEE, Limits, SubmissionResult
from .walls.tier import IsolationError


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


def _as_graded(args, rows, to_grade, earlier, seed_file, key, results, written):
    """The class's results before its policy: a partial regrade merged into the kept ones, kept again
    (the policy is applied again on every run), then the hand-graded written answers; and the failures."""
    if earlier is not None and seed_file is not None:  # (--only needs a seed file)
        results = kept.merge(rows, earlier, results, args.exercise)
        print(
            f"regraded {', '.join(clean(r.key) for r in to_grade)}; the others as kept in {kept.results_file(seed_file)}"
        )
    failed = _keep(args, seed_file, key, results)
    if written is not None:  # before the overrides and the penalty: they apply to the whole score
        for warning in manual.merge(results, written):
            print(f"warning: {warning}", file=sys.stderr)
    return results, failed


def _usage_errors(args) -> None:
    """Raise ValueError for options that cannot work together, before anything is graded."""
    late_days.check(args, bookkeeping.seed_file(args))
    if args.dask:
        parse_address(args.dask)
    if args.lms_max is not None and not 0 < args.lms_max < float("inf"):
        raise ValueError(f"--lms-max must be a positive number; got {args.lms_max:g}")


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
        written = manual.read_manual(args.manual_grades) if getattr(args, "manual_grades", None) else None
        _usage_errors(args)
        names = {a.key: a.notebook for a in registry.assignments()}
        skip = tuple(f for f in args.skip_folders.split(",") if f)
        skipped: list[str] = []
        pick = picker(read_picks(args.pick), roster)
        rows = collect(args.submissions, args.assignment, args.one_submission, names, pick, skip, skipped)
        seed_file, key = bookkeeping.seed_file(args), class_key(args.submissions, args.assignment, args.class_id)
        old_key = path_key(args.submissions, args.assignment)
        seed, how = choose_seed(seed_file, key, args.seed, args.new_seed, new_seed, old_key)
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
    for problem in submitted_at.stamp(rows, args.submissions, roster, late_days.zone(args)):
        print(f"warning: {clean(problem)}", file=sys.stderr)
    rows = one_per_student(rows, names)
    try:
        to_grade, earlier = _partial(args, rows, roster, seed_file, key, seed)
    except ValueError as exc:
        print(f"error: {clean(exc)}", file=sys.stderr)
        return 2
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
                to_grade,
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
    results, failed = _as_graded(args, rows, to_grade, earlier, seed_file, key, results, written)
    apply_policy(args, results, rows, overrides, roster, write_atomic)
    if args.late_penalty and not args.quiet:
        print(f"late penalty: {late_days.describe(args)}")
    failed += _write_outputs(args, results, roster, missing)
    sys.stdout.writelines(f"{clean(line)}\n" for line in late_days.summary_lines(results))
    if seed_file is not None:
        try:
            record_seed(seed_file, key, seed, write_atomic, old_key)
        except OSError as exc:
            failed += 1
            print(f"error: could not record the seed in {seed_file} ({clean(exc)})", file=sys.stderr)
    where = f"; kept in {seed_file}" if seed_file is not None else ""
    identity, source = class_identity(args.submissions, args.class_id)
    # also with --quiet: it reproduces the run
    print(f"fresh inputs drawn with --seed {seed} ({how}{where}) for class {clean(identity)!r} ({source})")
    return 1 if failed else 0


def _partial(args, rows, roster, seed_file, key, seed):
    """(the rows to grade, the kept results to merge them into or None): all rows, unless --only or --exercise."""
    if not args.only and not args.exercise:
        return rows, None
    if args.new_seed:
        raise ValueError("--only and --exercise regrade with the class's seed: drop --new-seed")
    known = {
        e.key for a in registry.assignments() if a.key == args.assignment or not args.assignment for e in a.exercises
    }
    kept.check_exercises(args.exercise, known)
    settings = _settings(args)
    earlier = kept.read_kept(kept.results_file(seed_file), key, settings) if seed_file is not None else None
    if earlier is None:
        raise ValueError(
            f"no kept results of class {key!r}: grade the whole class (without --only and --exercise) first"
        )
    if {r.seed for r in earlier if r.seed is not None} - {seed}:
        raise ValueError(
            f"the kept results were graded with another seed than {seed}: drop --seed or grade the whole class"
        )
    to_grade = kept.select(rows, args.only, roster) if args.only else rows
    kept.check_complete(rows, earlier, {row.key for row in to_grade})
    return to_grade, earlier


def _settings(args) -> dict:
    """What a part regrade must share with the class's run: the limits and the scan's policy."""
    names = ("case_timeout", "cell_timeout", "notebook_timeout", "memory_mb", "submission_timeout")
    return {
        **{n: getattr(args, n) for n in names},
        "strict_definitions": args.strict_definitions,
        "on_tamper": args.on_tamper,
    }


def _keep(args, seed_file: Path | None, key: str, results: list[SubmissionResult]) -> int:
    """Keep the class's results beside its seed (for --only); 1 when they could not be written."""
    if seed_file is None or args.one_submission:  # one upload is no class to regrade in part
        return 0
    try:
        kept.keep(kept.results_file(seed_file), key, results, write_atomic, _settings(args))
    except OSError as exc:
        print(f"error: could not keep the results in {kept.results_file(seed_file)} ({clean(exc)})", file=sys.stderr)
        return 1
    return 0


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
        print(
            f"class report: {args.report} (and {args.report.with_suffix('.md')}, {args.report.stem}-similarity.md/.json)"
        )
    if args.grades_out and roster is not None:
        step("the grades for import", lambda: _write_grades(args, results, roster))
    elif args.grades_out:
        print("--grades-out needs --roster (the platform's class list, written back with the grades)", file=sys.stderr)
    if args.summary:
        tail = "".join(f"\n{line}" for line in late_days.summary_lines(results))  # several notebooks, file times
        step("the class summary", lambda: write_atomic(args.summary, class_summary(results) + tail + "\n"))
        print(f"class summary: {args.summary}")
    if args.json:  # last: nothing a submission wrote can replace it (none of its processes is left)
        step("results.json", lambda: write_json(args.json, merged_gradescope(results)))
        print(f"results.json: {args.json}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
