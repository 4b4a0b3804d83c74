"""A class run's bookkeeping between collecting and writing: who each student is, which notebook, the seed, the policy.

Used by :mod:`mha_course.grading.grade`: :func:`identify` matches folders to the roster, :func:`picker`
resolves ``--pick``, :func:`seed_file` says where the class's seed is kept, :func:`apply_policy`
applies overrides, the late penalty and the platform's maximum (:mod:`.policy`), :func:`grades`
gives the grade export's numbers.
"""

from __future__ import annotations

from pathlib import Path

from ..verdicts import SubmissionResult
from .collect import Submission
from .late_days import apply_late
from .lms_names import nfc
from .policy import apply_overrides
from .roster import Roster
from .seeds import SEED_FILE


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


def grade_column(args, roster: Roster | None) -> str:
    return args.grade_column or ("Grade" if roster and "Grade" in roster.columns else (args.assignment or "grade"))


def apply_policy(args, results, rows, overrides, roster: Roster | None, write=None) -> list[str]:
    """Overrides, then the late penalty (:mod:`.late_days`), then the platform's maximum, on every result
    (see grading.policy); returns the warnings to print (submissions timed by their files)."""
    by_id = {s.student_id: s for s in roster.students} if roster else {}
    apply_overrides(results, overrides, lambda r: by_id[r.student_id].identities() if r.student_id in by_id else set())
    warnings = apply_late(args, results, rows, roster, write) if args.late_penalty else []
    lms_max = args.lms_max
    if lms_max is None and roster is not None:
        lms_max = roster.max_for(grade_column(args, roster))
    for r in results:
        r.lms_max = lms_max
    return warnings


def grades(results: list[SubmissionResult]) -> dict[str, dict[str, float]]:
    """Assignment key -> student id -> final points on the platform's scale: one grade per student and assignment.

    Rows are one per student and assignment already (:func:`~.grading.collect.one_per_student`);
    should two remain, the first graded one counts.
    """
    grades: dict[str, dict[str, float]] = {}
    for r in results:
        if r.student_id and not r.error and r.assignment and r.lms_score is not None:
            grades.setdefault(r.assignment, {}).setdefault(r.student_id, round(r.lms_score, 2))
    return grades


def excused(results: list[SubmissionResult]) -> dict[str, set[str]]:
    """Assignment key -> ids of the students excused from it (an override waived the whole assignment)."""
    found: dict[str, set[str]] = {}
    for r in results:
        if r.student_id and not r.error and r.assignment and r.max_score <= 0:
            found.setdefault(r.assignment, set()).add(r.student_id)
    return found
