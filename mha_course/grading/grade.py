"""``python -m mha_course.grade SUBMISSIONS ... [--assignment KEY]``: grade a class, each in a sandbox.

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
for each output (:mod:`.safe_text`). Exit status 0 whenever grading ran, however the
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

from . import grade_options
from .classroom.batch import grade_many
from .classroom.dask_executor import ClusterError, executor_for
from .classroom.intake import CannotGrade, Intake, collect_class
from .classroom.outputs import write_outputs
from .classroom.record import record
from .classroom.results import write_json
from .classroom.review_flags import policy_line
from .classroom.seeds import class_identity
from .engine.process import Isolator
from .hidden_argv import hide_command_line, taken
from .safe_text import clean
from .verdicts import CASES_SEE, Limits, SubmissionResult
from .walls.tier import IsolationError

_parser = grade_options.parser  # the option table lives in its own module


def main(argv: list[str] | None = None) -> int:
    """Run the command line (``argv``, else this process's, moved off it by :func:`.hidden_argv.hide_command_line`); returns the exit status.

    The way of every submission, one stage each::

        collect   classroom/intake.py   rows: roster, picks, platform times, the assignment's metadata (read once)
        run       classroom/batch.py    each row behind the walls -> engine/pipeline.py grade_notebook
        judge                           engine: every case compared with its reference, again on fresh inputs
        record    classroom/record.py   kept results, hand grades, overrides, late penalty, the seed
        report    classroom/outputs.py  summary, results.json, feedback, gradebook, report, grade export
    """
    args = _parser().parse_args(_own_arguments() if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints escaped, never aborts
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        intake = collect_class(args)  # 1 collect
    except CannotGrade as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.for_student is not None:
            _fail_json(args, exc.for_student)
        return 2
    results = _run(args, intake)  # 2 run, 3 judge
    if isinstance(results, int):  # nothing graded: the exit status
        return results
    results, failed = record(args, intake, results)  # 4 record
    failed += write_outputs(args, results, intake.roster, intake.missing)  # 5 report
    where = f"; kept in {intake.seed_file}" if intake.seed_file is not None else ""
    identity, source = class_identity(args.submissions, args.class_id)
    # also with --quiet: it reproduces the run
    print(
        f"fresh inputs drawn with --seed {intake.seed} ({intake.how}{where}) for class {clean(identity)!r} ({source})"
    )
    return 1 if failed else 0


def _run(args: argparse.Namespace, intake: Intake) -> list[SubmissionResult] | int:
    """Stages run and judge: the rows to grade, each in its sandbox (:func:`.classroom.batch.grade_many`);
    an exit status when nothing could be graded (3: no isolation here, 2: no cluster)."""
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
        _fail_json(args, f"The grader could not isolate submissions on this machine; ask your instructor. {exc}")
        return 3
    _announce(args, isolator)
    try:
        with executor_for(args.dask, args.workers) as executor:
            return grade_many(
                intake.to_grade,
                limits,
                progress=not args.quiet and len(intake.rows) > 1,
                seed=intake.seed,
                unsafe_no_isolation=args.unsafe_no_isolation,
                isolator=isolator,
                on_tamper=args.on_tamper,
                executor=executor,
                min_isolation=args.min_isolation,
            )
    except ClusterError as exc:  # nothing graded: --dask names no cluster that can grade this run
        print(f"error: {exc}", file=sys.stderr)
        _fail_json(args, f"Could not grade: {exc}")
        return 3 if exc.isolation else 2
    finally:
        isolator.close()


def _fail_json(args: argparse.Namespace, text: str) -> None:
    """With ``--json``, a results.json that says why nothing was graded: Gradescope still shows the student a result."""
    if args.json:
        write_json(args.json, {"score": 0, "output": text, "tests": []})


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


if __name__ == "__main__":
    sys.exit(main())
