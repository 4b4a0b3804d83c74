"""Stage 1 of grading a class, **collect**: what to grade, whose it is, and with which seed.

:func:`collect_class` turns the command's options into an :class:`Intake`, in this order: the options
checked (a usage error grades nothing), the roster, overrides and hand grades read, the class folder
collected (:mod:`.collect`: one row per student and assignment; each notebook's assignment metadata is
read here, once, and travels on its row to the engine), each row named from the roster
(:func:`identify`), timed as the platform recorded it (:mod:`.submitted_at`), one notebook kept per
student and assignment, the class's seed chosen (:mod:`.seeds`) and, for ``--only`` and ``--exercise``,
the rows to regrade and the kept results they join (:mod:`.kept`). Stages 2 and 3 run and judge ``to_grade``
(:mod:`.batch`), stage 4 records the results (:mod:`.record`), stage 5 writes them out (:mod:`.outputs`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..engine import registry
from ..engine.pipeline import new_seed
from ..safe_text import clean
from ..verdicts import SubmissionResult
from . import kept, late_days, manual, submitted_at
from .collect import Submission, collect, one_per_student
from .dask_executor import parse_address
from .lms import nfc
from .picks import read_picks
from .policy import Override, read_overrides
from .roster import Roster, read_roster
from .seeds import SEED_FILE, choose_seed, class_key, path_key


class CannotGrade(Exception):
    """Nothing is graded (exit status 2): ``message`` for the terminal, ``for_student`` for the results.json
    Gradescope shows (None: none is written)."""

    def __init__(self, message: str, for_student: str | None = None):
        super().__init__(message)
        self.message, self.for_student = message, for_student


@dataclass
class Intake:
    """A class collected: its rows, who they are, what is graded now, and the run's seed."""

    rows: list[Submission]  # one per student and assignment, in the class's order
    to_grade: list[Submission]  # the rows graded in this run: all, unless --only
    earlier: list[SubmissionResult] | None  # the kept results a part regrade (--only, --exercise) joins
    roster: Roster | None
    overrides: list[Override]
    written: list[manual.ManualGrade] | None  # the hand grades of written answers (--manual-grades)
    missing: list[str]  # the roster's students without a submission
    seed: int
    how: str  # how the seed was chosen ("new", "given with --seed", "recorded in ...")
    seed_file: Path | None
    key: str  # the class's key in the seed and results files
    old_key: str  # an earlier version's key of it


def seed_file(args) -> Path | None:
    """Where the class's seed is kept: ``--seed-file``, else beside the first output asked for (the gradebook's first)."""
    if args.seed_file:
        return args.seed_file
    for path in (args.csv, args.report, args.grades_out, args.summary, args.json):
        if path:
            return path.parent / SEED_FILE
    for folder in (args.feedback_dir, args.results_dir):
        if folder:
            return folder / SEED_FILE
    return None


def identify(rows: list[Submission], roster: Roster | None) -> list[str]:
    """Fill in the roster's id and name; returns the roster's students without a submission."""
    if roster is None:
        return []
    seen = set()
    for row in rows:
        student, row.closeness = roster.find_closeness(row.student)
        if student is None:
            row.notes.append(f"{row.student} is not in the roster")
            continue
        row.student_id, row.student_name = student.student_id, student.name
        seen.add(student.student_id)
    return [s.name or s.student_id for s in roster.students if s.student_id not in seen]


def picker(picks: dict[str, str], roster: Roster | None):
    """Student folder -> the file picked for it: by the folder's name, or any name the roster knows it by."""
    if not picks:
        return None

    def pick(folder: str) -> str | None:
        if nfc(folder) in picks:
            return picks[nfc(folder)]
        student = roster.find(folder) if roster else None
        hits = [picks[n] for n in (student.identities() if student else ()) if n in picks]
        return hits[0] if hits else None

    return pick


def _usage_errors(args) -> None:
    """Raise ValueError for options that cannot work together, before anything is graded."""
    late_days.check(args, seed_file(args))
    if args.dask:
        parse_address(args.dask)
    if args.lms_max is not None and not 0 < args.lms_max < float("inf"):
        raise ValueError(f"--lms-max must be a positive number; got {args.lms_max:g}")


def collect_class(args) -> Intake:
    """The class of ``args`` (the command's options) collected; raises :class:`CannotGrade` when nothing can be graded.

    Prints the warnings met (a platform time that does not parse) and the instructor's folders skipped.
    """
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
        seeds_at, key = seed_file(args), class_key(args.submissions, args.assignment, args.class_id)
        old_key = path_key(args.submissions, args.assignment)
        seed, how = choose_seed(seeds_at, key, args.seed, args.new_seed, new_seed, old_key)
    except (FileNotFoundError, ValueError, KeyError, OSError) as exc:
        message = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
        raise CannotGrade(message, f"Could not grade: {message}") from None
    if not rows or all(r.problem and r.path is None for r in rows) and not args.assignment:
        raise CannotGrade(f"no notebook in {' '.join(args.submissions)}", "No notebook was found in the submission.")
    missing = identify(rows, roster)
    for problem in submitted_at.stamp(rows, args.submissions, roster, late_days.zone(args)):
        print(f"warning: {clean(problem)}", file=sys.stderr)
    rows = one_per_student(rows, names)
    try:
        to_grade, earlier = _partial(args, rows, roster, seeds_at, key, seed)
    except ValueError as exc:
        raise CannotGrade(clean(exc)) from None
    if skipped:
        print(f"skipped the instructor's folder(s): {clean(', '.join(skipped))}")
    return Intake(rows, to_grade, earlier, roster, overrides, written, missing, seed, how, seeds_at, key, old_key)


def _partial(args, rows, roster, seeds_at, key, seed):
    """(the rows to grade, the kept results to merge them into or None): all rows, unless --only or --exercise."""
    if not args.only and not args.exercise:
        return rows, None
    if args.new_seed:
        raise ValueError("--only and --exercise regrade with the class's seed: drop --new-seed")
    known = {
        e.key for a in registry.assignments() if a.key == args.assignment or not args.assignment for e in a.exercises
    }
    kept.check_exercises(args.exercise, known)
    earlier = kept.read_kept(kept.results_file(seeds_at), key, kept.settings(args)) if seeds_at is not None else None
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
