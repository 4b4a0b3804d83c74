"""The command line of ``python -m mha_course.grade``: its options and their help (:mod:`.grade` runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .classroom.lms import INSTRUCTOR_FOLDERS
from .classroom.seeds import SEED_FILE
from .engine.notebook import current_key
from .verdicts import ON_TAMPER, Limits
from .walls import tiers

STRICT_HELP = (
    "an exam setting: each test loads only the notebook's definitions (imports, functions, classes, plain "
    "values) instead of the state its cells left, so no top-level statement runs while tests do; named in "
    "every output (default: each test starts from the notebook as it was after its cells ran, as in Jupyter "
    "and the self-check)"
)


def parser() -> argparse.ArgumentParser:
    """The grader's command line: every option, with the help a new instructor reads."""
    options = argparse.ArgumentParser(
        prog="python -m mha_course.grade",
        fromfile_prefix_chars="@",
        description="Grade submission notebooks, each in its own sandbox. A folder is a class: each first-level "
        "folder or file is one student. Exit status 0 whenever grading ran (failing tests are not an "
        "error), 1 when an output could not be written, 2 for a usage error, 3 when submissions cannot be "
        "isolated here. @FILE reads arguments from FILE, one a line. The arguments never stay on the grader's "
        "command line (which every user of the machine can read): it restarts itself with them in its environment.",
    )
    options.add_argument("submissions", nargs="+", help="notebooks, or folders of a class (searched recursively)")
    options.add_argument(
        "--assignment",
        type=current_key,
        metavar="KEY",
        help="grade this assignment only (e.g. a04_masks): other assignments' notebooks, missing "
        "notebooks and unreadable files get a row saying so",
    )
    options.add_argument(
        "--one-submission",
        action="store_true",
        help="everything given is one student's submission (a Gradescope upload)",
    )
    options.add_argument(
        "--roster",
        type=Path,
        help="class list CSV (id column, optional name and match columns; a Canvas or Moodle "
        "export works) to name each student",
    )
    options.add_argument(
        "--overrides",
        type=Path,
        help="CSV of student,exercise,points,reason rows applied to this run; points: N or 'set N', 'cap N', "
        "'+N', '-N', 'waive' (exercise '*': the total; 'late': excuse lateness; 'review': resolve the scan's "
        "flag with 'accept' or points, and a reason)",
    )
    options.add_argument(
        "--manual-grades",
        type=Path,
        help="CSV of student,question,points,max_points,comment rows: written answers graded by hand, merged as "
        "exercises 'written:<question>' (an empty points is pending); python -m "
        "mha_course.grading.classroom.manual rubric KEY writes the rubric and the sheet",
    )
    options.add_argument(
        "--on-tamper",
        choices=ON_TAMPER,
        default="review",
        help="what code that reaches into the grader or the interpreter (found by the static scan) does: "
        "'review' (default) flags the submission for review with the evidence and keeps the tests' score; "
        "'zero' (exams) flags it and scores it 0 until a 'review' override resolves it. Named in every output",
    )
    options.add_argument(
        "--late-penalty",
        metavar="P%[/day]",
        help="take P%% of the maximum points per day late ('10%%/day') or once ('20%%'), as Canvas and Moodle "
        "do; late: --due (or the student's extension) vs the time the platform recorded (Moodle's worksheet "
        "column 'Last modified (submission)', Gradescope's submission_metadata.json, nbgrader's timestamp.txt; "
        "else the file's time, with a warning), or the platform's late marker (Canvas's _LATE_: one day at least)",
    )
    options.add_argument("--due", metavar="ISO", help="the due date and time (UTC unless given), for --late-penalty")
    options.add_argument(
        "--late-penalty-of",
        choices=("max", "points"),
        default="max",
        help="the %% of --late-penalty is of the maximum points (default, as Canvas and Moodle) or of the points "
        "scored after overrides; printed in every output",
    )
    options.add_argument(
        "--extensions",
        type=Path,
        help="CSV of student,due[,assignment] rows: a student's own due date (a roster column 'Due' works too)",
    )
    options.add_argument(
        "--late-tokens",
        type=int,
        default=0,
        metavar="N",
        help="late-day tokens: each student's budget of days late without penalty over the term, spent "
        "automatically and kept in --tokens-file for the next assignment",
    )
    options.add_argument(
        "--tokens-file",
        type=Path,
        help="the CSV (student,assignment,days) of late-day tokens spent (default: late-tokens.csv beside the gradebook)",
    )
    options.add_argument(
        "--lms-max",
        type=float,
        help="the platform's maximum for this assignment: grades are rescaled to it (default: the grade "
        "sheet's Maximum Grade / Points Possible, else the grader's maximum)",
    )
    options.add_argument(
        "--pick",
        action="append",
        default=[],
        metavar="STUDENT=FILE",
        help="grade this notebook of this student (folder, id, username, email or name); or a CSV of "
        "student,file rows; repeatable",
    )
    options.add_argument(
        "--skip-folders",
        default=",".join(INSTRUCTOR_FOLDERS),
        help="comma-separated first-level folders that are no student's (default: %(default)s; '' for none)",
    )
    options.add_argument("--csv", type=Path, help="write the gradebook (one row per student and assignment)")
    options.add_argument(
        "--report", type=Path, help="write the class report here (HTML), with a Markdown twin and histograms beside it"
    )
    options.add_argument(
        "--anonymise",
        action="store_true",
        help="the class report without student names, ids or file names (to project to a class)",
    )
    options.add_argument("--feedback-dir", type=Path, help="write one Markdown feedback file per submission here")
    options.add_argument(
        "--grades-out",
        type=Path,
        help="write the roster back with a grade column filled in (for the platform's import)",
    )
    options.add_argument(
        "--grade-column",
        help="the grade column of --grades-out (default: 'Grade' when the "
        "roster has one, as Moodle's worksheet does, else the assignment key)",
    )
    options.add_argument("--summary", type=Path, help="write the per-test class summary (text) here")
    options.add_argument(
        "--results-dir",
        type=Path,
        help="write one Gradescope results.json per submission here (names unique per student)",
    )
    options.add_argument(
        "--json", type=Path, help="write Gradescope's results.json here (several notebooks: one merged result)"
    )
    options.add_argument("--workers", type=int, default=2, help="submissions graded in parallel (default 2)")
    options.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="grade each submission as a task on a Dask cluster: its scheduler's address (tcp://HOST:8786), or "
        "local:N for N worker processes here; every worker holds the same course and bubblewrap and sees the "
        "class folder at the same path (docs/INSTRUCTORS.md); --workers is then the workers' own (dask worker "
        "--nthreads). Outputs are those of grading here",
    )
    options.add_argument(
        "--case-timeout",
        type=float,
        default=Limits.case_timeout,
        help=f"seconds per test case (default {Limits.case_timeout:g})",
    )
    options.add_argument(
        "--cell-timeout",
        type=float,
        default=Limits.cell_timeout,
        help=f"seconds per notebook cell (default {Limits.cell_timeout:g})",
    )
    options.add_argument(
        "--notebook-timeout",
        type=float,
        default=Limits.notebook_timeout,
        help=f"seconds for all cells of a notebook (default {Limits.notebook_timeout:g})",
    )
    options.add_argument(
        "--submission-timeout",
        type=float,
        default=Limits.submission_timeout,
        help=f"seconds for everything of one submission (default {Limits.submission_timeout:g})",
    )
    options.add_argument(
        "--batch-timeout",
        type=float,
        default=None,
        help="seconds for the whole run; submissions not started by then are reported as not "
        "graded (default: no limit)",
    )
    options.add_argument(
        "--memory-mb",
        type=int,
        default=Limits.memory_mb,
        help=f"memory a submission may allocate beyond the grader's own, MiB (default {Limits.memory_mb})",
    )
    options.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the class's seed of the fresh random inputs every passing test is run on again (default: "
        "the one recorded in grading-seed.json beside the outputs, else a new one, recorded there)",
    )
    options.add_argument(
        "--new-seed", action="store_true", help="draw a new seed although one is recorded (and record it)"
    )
    options.add_argument(
        "--seed-file", type=Path, help=f"where the grading seed is kept (default: {SEED_FILE} beside the first output)"
    )
    options.add_argument(
        "--class-id",
        metavar="NAME",
        help="the class's name for its seed, e.g. ml101-fall26 (default: the class folder's name; never its path, "
        "so a copy or a new download of the class draws the same inputs)",
    )
    options.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="STUDENT",
        help="regrade this student (folder, id, username, email or name; repeatable) with the class's seed and "
        "merge into the class's outputs; everyone else keeps the result kept by the last full run",
    )
    options.add_argument(
        "--exercise",
        action="append",
        default=[],
        metavar="KEY",
        help="take only this exercise's cases from the regrade (repeatable); the others keep the kept result. "
        "With --only for one student, else for the whole class",
    )
    options.add_argument(
        "--min-isolation",
        choices=tiers.labels(),
        default=tiers.DEFAULT_MIN_ISOLATION,
        help=f"the weakest sandbox to grade in: {tiers.help_text()} (default {tiers.DEFAULT_MIN_ISOLATION}: what "
        "root in a default Docker container such as Gradescope's can build); the strongest that holds is used and "
        "named in every output",
    )
    options.add_argument(
        "--unsafe-no-isolation",
        action="store_true",
        help="grade even where bubblewrap's sandbox cannot run: submissions then run as plain "
        "processes that can read and change this machine's files (only for code you trust)",
    )
    options.add_argument("--strict-definitions", action="store_true", help=STRICT_HELP)
    options.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar, no per-test table and no line per notebook (the class summary "
        "and the --seed to reproduce the run are still printed)",
    )
    return options
