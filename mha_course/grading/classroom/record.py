"""Stage 4 of grading a class, **record**: the class's results made final and kept.

:func:`record` takes the results of the batch (:mod:`.batch`) and, in this order: merges a part regrade
into the kept results (:mod:`.kept`), keeps the class's results beside its seed (for a later ``--only``),
merges the hand-graded written answers (:mod:`.manual`), applies the instructor's policy (overrides, the
late penalty with extensions and tokens, the platform's maximum: :mod:`.policy`, :mod:`.late_days`) and
records the class's seed (:mod:`.seeds`). Stage 5 writes every output from what it returns (:mod:`.outputs`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..safe_text import clean
from ..verdicts import SubmissionResult
from . import kept, late_days, manual
from .intake import Intake
from .late_days import apply_late
from .policy import apply_overrides
from .results import write_atomic
from .roster import Roster
from .seeds import record_seed


def record(args, intake: Intake, results: list[SubmissionResult]) -> tuple[list[SubmissionResult], int]:
    """(the class's final results, how many records could not be written); ``args``: the command's options."""
    if intake.earlier is not None and intake.seed_file is not None:  # (--only needs a seed file)
        results = kept.merge(intake.rows, intake.earlier, results, args.exercise)
        regraded = ", ".join(clean(r.key) for r in intake.to_grade)
        print(f"regraded {regraded}; the others as kept in {kept.results_file(intake.seed_file)}")
    failed = _keep(args, intake.seed_file, intake.key, results)
    if intake.written is not None:  # before the overrides and the penalty: they apply to the whole score
        for warning in manual.merge(results, intake.written):
            print(f"warning: {warning}", file=sys.stderr)
    apply_policy(args, results, intake.rows, intake.overrides, intake.roster, write_atomic)
    if args.late_penalty and not args.quiet:
        print(f"late penalty: {late_days.describe(args)}")
    if intake.seed_file is not None:
        try:
            record_seed(intake.seed_file, intake.key, intake.seed, write_atomic, intake.old_key)
        except OSError as exc:
            failed += 1
            print(f"error: could not record the seed in {intake.seed_file} ({clean(exc)})", file=sys.stderr)
    return results, failed


def _keep(args, seed_file: Path | None, key: str, results: list[SubmissionResult]) -> int:
    """Keep the class's results beside its seed (for --only); 1 when they could not be written."""
    if seed_file is None or args.one_submission:  # one upload is no class to regrade in part
        return 0
    try:
        kept.keep(kept.results_file(seed_file), key, results, write_atomic, kept.settings(args))
    except OSError as exc:
        print(f"error: could not keep the results in {kept.results_file(seed_file)} ({clean(exc)})", file=sys.stderr)
        return 1
    return 0


def grade_column(args, roster: Roster | None) -> str:
    """The roster's column the grade goes in: ``--grade-column``, else its "Grade", else the assignment key."""
    return args.grade_column or ("Grade" if roster and "Grade" in roster.columns else (args.assignment or "grade"))


def apply_policy(args, results, rows, overrides, roster: Roster | None, write=None) -> list[str]:
    """Overrides, then the late penalty (:mod:`.late_days`), then the platform's maximum, on every result
    (see :mod:`.policy`); returns the warnings to print (submissions timed by their files)."""
    by_id = {s.student_id: s for s in roster.students} if roster else {}
    apply_overrides(results, overrides, lambda r: by_id[r.student_id].identities() if r.student_id in by_id else set())
    warnings = apply_late(args, results, rows, roster, write) if args.late_penalty else []
    lms_max = args.lms_max
    if lms_max is None and roster is not None:
        lms_max = roster.max_for(grade_column(args, roster))
    for r in results:
        r.lms_max = lms_max
    return warnings
