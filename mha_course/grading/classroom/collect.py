"""Find the submissions in what a learning platform hands out: one row per student, nothing lost.

Platforms download a class as a folder tree. Moodle and Gradescope give one folder per student
(``Alice Martin_1234_assignsubmission_file_/a02_softmax.ipynb``), Canvas one flat folder of files
prefixed with the student (``martinalice_1234_5678_a02_softmax.ipynb``). Every student of the tree
becomes one :class:`Submission` keyed by its path relative to the folder given, so two students'
``a02_softmax.ipynb`` never collide. What cannot be graded gets a row of its own saying why
(a wrong assignment, no notebook, a broken link), never a silent skip or an aborted batch::

    root/                                  student (folder name, or the Canvas prefix)
      Alice Martin_1234_.../a02.ipynb  ->  "Alice Martin_1234_..."  graded
      Bob_99_.../a01_dot.ipynb         ->  "Bob_99_..."             wrong assignment a01, expected a02
      Carol_7_.../report.pdf           ->  "Carol_7_..."            no notebook submitted (found: report.pdf)

Moodle's flat download (``Alice Martin_1234_assignsubmission_file_a02.ipynb``) is grouped by that
prefix, as its folders are. Checkpoints (``.ipynb_checkpoints/``) and copies (``-Copy1.ipynb``,
``Copy of ...``; not ``name (1).ipynb``, a second download) are used only when nothing else was submitted.

**One notebook per student and assignment.** Among several, the newest is graded: by the time the
platform recorded (:mod:`.submitted_at`, set before :func:`one_per_student`), then by the file's
time (whole seconds), then by its name (``_final``, ``(1)``), then the assignment's own name; each other one is named in a
note of the row (``also submitted ...``), never graded or added. :func:`one_per_student` applies the same
rule across rows that the roster says are one student.

**Only regular files are read, and links are never followed** (a link to a classmate's notebook or
to ``solutions/`` must not be graded as the student's work): a link, a FIFO or a device named like a
notebook becomes a note of the row (a notebook that is one file with a classmate's, a hard link, is
graded and noted on both rows for review). File names that are not UTF-8 are kept as Python decodes them
(``os.fsdecode``), so the student keeps their identity; outputs show them escaped.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.notebook import AssignmentMeta
from .class_files import NOISE, File, FileKind, classify, shared_files, walk
from .lms import INSTRUCTOR_FOLDERS, flat_name, nfc, original_name, student_of
from .picks import picked


@dataclass
class Submission:
    """One student's row: the notebook to grade, or why there is none.

    ``key`` is the path relative to the folder given (``Alice_1234/a02.ipynb``), unique in a run;
    ``student`` the folder (or Canvas prefix, or file) that identifies the student.
    """

    key: str
    student: str
    path: Path | None = None  # the notebook to grade; None when ``problem`` says why not
    assignment: str | None = None  # what its metadata says (None: no metadata)
    meta: AssignmentMeta | None = None  # its metadata (assignment and version), read once when collected
    grade_as: str | None = None  # grade as this assignment although the metadata is missing
    problem: str | None = None  # the reason nothing is graded
    notes: list[str] = field(default_factory=list)
    student_id: str = ""
    student_name: str = ""
    late_marked: bool = False  # the platform's file name says late (Canvas's ``_LATE_``)
    file_time: float | None = None  # the graded file's modification time (for a due date)
    submitted_at: float | None = None  # the time the platform recorded (see .submitted_at); None: not found
    time_source: str = ""  # where submitted_at came from ("Moodle's worksheet", ...)
    closeness: int = 0  # how closely the folder matched its roster row (roster.Roster.find_closeness; 0 exact)


_LATER = re.compile(r"(?:\((\d+)\)|[ _-]v(\d+)|[ _-](final))\.ipynb$", re.IGNORECASE)


def later_by_name(name: str) -> tuple[int, int]:
    """How much later a file name says it is: ``final`` first, then the number of ``(2)`` or ``_v2`` (0: plain).

    Used only when the times tie (``cp -r`` gives every file the same second).
    """
    match = _LATER.search(name)
    if not match:
        return (0, 0)
    return (1 if match[3] else 0, int(match[1] or match[2] or 0))


def _rank(rel: str, path: Path, notebook_name: str | None, platform_time: float | None = None) -> tuple:
    """The order of :func:`_pick`: the newest by the platform's time, then by the file's (whole seconds: a copy
    made in one go differs by less), then by what the name says (``_final``, ``(1)``, ``_v2``), then the
    assignment's own file name, then by path."""
    named = notebook_name is not None and original_name(rel) == notebook_name
    mtime = float(int(os.lstat(path).st_mtime)) if os.path.lexists(path) else 0.0
    final, number = later_by_name(original_name(rel))
    return (-(platform_time or 0.0), -mtime, -final, -number, not named, rel)


def _pick(candidates: list[File], notebook_name: str | None) -> tuple[File, list[File]]:
    """The notebook graded among several of one assignment: the expected file name, else the newest."""
    ordered = sorted(candidates, key=lambda f: _rank(f.rel, f.path, notebook_name, _time_in_name(f.rel)))
    return ordered[0], ordered[1:]


def _time_in_name(rel: str) -> float | None:
    """The time a platform wrote in a flat download's file name (:class:`.lms.FlatName`), or None."""
    named = flat_name(Path(rel).name)
    return named.submitted_at if named else None


def _also(other: str, key: str, chosen: str, notebook_name: str | None, exact: bool = False) -> str:
    """The note on a notebook that is not graded because another one of the same assignment is."""
    rule = "the newest"
    rule = "its folder names the student exactly: check who submitted the other" if exact else rule
    return f"also submitted {other} for {key}: not graded (one notebook per student and assignment; graded {chosen}, {rule})"


def one_per_student(rows: list[Submission], notebook_names: dict[str, str] | None = None) -> list[Submission]:
    """At most one row per student and assignment, by the rule of :func:`_pick`; the others become notes.

    A student is their roster id once :func:`mha_course.grading.grade` has matched one (two uploads of one
    Moodle participant, or a folder and a flat file of one student), else their folder or prefix.
    A row that can be graded wins over one that cannot; rows without an assignment are kept as they are.
    """
    notebook_names = notebook_names or {}
    groups: dict[tuple[str, str], list[Submission]] = {}
    for row in rows:
        key = row.assignment or row.grade_as
        if key:
            groups.setdefault((row.student_id or row.student, key), []).append(row)
    dropped: set[int] = set()
    for (_, key), group in groups.items():
        if len(group) < 2:
            continue
        gradable = [r for r in group if r.path is not None and not r.problem]
        paths = {id(r): r.path for r in gradable if r.path is not None}  # the same rows, typed as having a path
        if gradable:
            # the folder naming the student most exactly first: ALICE/ cannot displace alice/ by being newer
            ordered = sorted(
                gradable,
                key=lambda r: (r.closeness, *_rank(r.key, paths[id(r)], notebook_names.get(key), r.submitted_at)),
            )
            chosen = ordered[0]
            for other in ordered[1:]:
                exact = other.closeness > chosen.closeness
                chosen.notes.append(_also(other.key, key, chosen.key, notebook_names.get(key), exact))
        else:
            chosen = group[0]
        for other in group:
            if other is not chosen and other not in gradable:
                chosen.notes.append(f"also found {other.key} for {key}: {other.problem}")
            if other is not chosen:
                dropped.add(id(other))
    return [r for r in rows if id(r) not in dropped]


def _rows_for(
    student: str, files: list[File], expected: str | None, notebook_names: dict[str, str], pick: str | None = None
) -> list[Submission]:
    """One student's rows: one per assignment found (only ``expected`` when given); ``pick`` names the file."""
    if pick:
        files, problem = picked(student, files, pick)
        if problem:
            return [Submission(key=student, student=student, assignment=expected, problem=problem)]
    notes = _ignored(files, pick)
    readable = [f for f in files if f.kind in (FileKind.NOTEBOOK, FileKind.FALLBACK) and not f.unreadable]
    regular = [f for f in readable if f.kind == FileKind.NOTEBOOK]
    fallback = [f for f in readable if f.kind == FileKind.FALLBACK]
    keys = [expected] if expected else sorted({f.assignment for f in readable if f.assignment})
    rows = []
    for key in keys:
        pool, ignored = _candidates(key, regular, fallback, expected)
        if pool:
            chosen, others = _pick(pool, notebook_names.get(key))
            extra = [f"ignored {f.rel} (a checkpoint or copy)" for f in ignored if f is not chosen]
            row = _row(student, chosen, key, notes + extra, pick)
            row.notes += [_also(other.rel, key, chosen.rel, notebook_names.get(key)) for other in others]
            rows.append(row)
    if expected and not rows:
        rows.append(_nothing_for(student, expected, readable, notes))
    elif not expected:
        rows += _without_metadata(student, regular, notes)
        if not rows:
            rows.append(_nothing_graded(student, files, notes))
    return rows


def _ignored(files: list[File], pick: str | None) -> list[str]:
    """The notes on a student's files that are not graded at all (other files, folders, unreadable ones)."""
    notes = []
    for f in files:
        if f.kind == FileKind.OTHER:
            why = f"you picked {pick}" if pick and f.rel.lower().endswith(".ipynb") else "not a notebook"
            notes.append(f"ignored {f.rel} ({why})")
        elif f.kind == FileKind.FOLDER:
            notes.append(f"ignored {f.rel} (a folder, not a notebook)")
        elif f.unreadable:
            notes.append(f"ignored {f.rel} ({f.unreadable})")
    return notes


def _candidates(
    key: str, regular: list[File], fallback: list[File], expected: str | None
) -> tuple[list[File], list[File]]:
    """(the notebooks that may be graded for ``key``, the checkpoints and copies passed over for them).

    Regular notebooks of the assignment first (without metadata too, when the assignment is expected);
    only when there are none, a checkpoint or copy.
    """
    pool = [f for f in regular if f.assignment == key]
    if not pool and expected:
        pool = [f for f in regular if f.assignment is None]
    if pool:
        return pool, [f for f in fallback if f.assignment in (key, None)]
    pool = [f for f in fallback if f.assignment == key]
    if not pool and expected:
        pool = [f for f in fallback if f.assignment is None]
    return pool, []


def _row(student: str, chosen: File, key: str, notes: list[str], pick: str | None) -> Submission:
    """The row that grades ``chosen`` for assignment ``key``, with what the grader should say about the choice."""
    sub = Submission(key=chosen.rel, student=student, path=chosen.path, assignment=chosen.assignment, notes=notes)
    sub.meta = chosen.meta
    named = flat_name(Path(chosen.rel).name)
    sub.late_marked = bool(named and named.late)
    with contextlib.suppress(OSError):
        sub.file_time = os.lstat(chosen.path).st_mtime
    if pick:
        sub.notes.append(f"graded {chosen.rel}, the notebook you picked")
    if chosen.assignment is None:
        sub.grade_as = key
        sub.notes.append(f"{chosen.rel} has no assignment metadata; graded as {key}, as asked")
    if chosen.kind == FileKind.FALLBACK:
        sub.notes.append(f"graded {chosen.rel}, a checkpoint or copy: nothing else was submitted for {key}")
    return sub


def _nothing_for(student: str, expected: str, readable: list[File], notes: list[str]) -> Submission:
    """The row of a student with no notebook of the expected assignment: why (another one, nothing readable)."""
    wrong = sorted({f.assignment for f in readable if f.assignment and f.assignment != expected})
    if wrong:
        problem = (
            f"wrong assignment {', '.join(wrong)}, expected {expected} "
            f"({', '.join(f.rel for f in readable if f.assignment in wrong)})"
        )
    elif notes:
        problem = f"no notebook for {expected} could be graded: {'; '.join(notes)}"
        notes = []  # said in the problem already
    else:
        problem = "no notebook submitted (empty folder)"
    return Submission(key=student, student=student, assignment=expected, problem=problem, notes=notes)


def _without_metadata(student: str, regular: list[File], notes: list[str]) -> list[Submission]:
    """Rows for notebooks that name no assignment, when none was given to grade them as."""
    return [
        Submission(
            key=f.rel,
            student=student,
            path=f.path,
            notes=list(notes),
            problem=f"{f.rel} has no assignment metadata (pass --assignment KEY to grade it as one)",
        )
        for f in regular
        if f.assignment is None
    ]


def _nothing_graded(student: str, files: list[File], notes: list[str]) -> Submission:
    """The row of a student none of whose files could be graded, when no assignment was given."""
    if notes:
        problem, notes = f"no notebook could be graded: {'; '.join(notes)}", []
    elif files:
        problem = f"no notebook submitted (found: {', '.join(f.rel for f in files)})"
    else:
        problem = "no notebook submitted (empty folder)"
    return Submission(key=student, student=student, problem=problem, notes=notes)


def _students_under(
    raw: str | Path, one_submission: bool, skip: tuple[str, ...], skipped: list[str] | None
) -> dict[str, list[File]]:
    """Student -> their files, for one path given to :func:`collect` (a class folder, or a notebook)."""
    root = Path(raw)
    if not root.exists() and not root.is_symlink():
        raise FileNotFoundError(f"no file or folder at {raw}")
    if not root.is_dir():
        if root.is_symlink():  # a file named on the command line: the instructor chose the link
            root = root.resolve()
        entry = classify(root.parent, root, root.name)
        entry.rel = str(raw)
        return {root.parent.name if one_submission else root.name: [entry]}
    entries = walk(root, root)
    if one_submission:
        return {root.name or str(root): entries}
    by_student: dict[str, list[File]] = {}
    for entry in entries:
        by_student.setdefault(student_of(entry.rel), []).append(entry)
    for child in sorted(root.iterdir()):  # empty student folders still get a row
        if child.is_dir() and not child.is_symlink() and child.name not in NOISE:
            by_student.setdefault(nfc(child.name), [])
    for name in [s for s in by_student if s in skip]:
        del by_student[name]
        if skipped is not None:
            skipped.append(name)
    return by_student


def collect(
    paths: list[str | Path],
    assignment: str | None = None,
    one_submission: bool = False,
    notebook_names: dict[str, str] | None = None,
    pick=None,
    skip: tuple[str, ...] = INSTRUCTOR_FOLDERS,
    skipped: list[str] | None = None,
) -> list[Submission]:
    """The submissions under ``paths``, one row per student (and per assignment without ``assignment``).

    Args:
        paths: folders (a class: each first-level folder or flat file is a student) or notebook files.
        assignment: the assignment key expected; other assignments become "wrong assignment" rows.
        one_submission: all of ``paths`` is one student's submission (a Gradescope upload).
        notebook_names: assignment key -> its usual file name, preferred among several candidates.
        pick: student -> the file to grade (a path below the student or a file name), or None: the rule above.
        skip: first-level folders that are no student's (the instructor's own); they get no row.
        skipped: the names of the folders skipped are appended here.

    Raises:
        FileNotFoundError: a path given does not exist (a usage error, not a submission's fault).
    """
    notebook_names = notebook_names or {}
    groups: dict[str, list[File]] = {}
    order: list[str] = []
    for raw in paths:
        by_student = _students_under(raw, one_submission, skip, skipped)
        for student, entries in by_student.items():
            if student not in groups:
                order.append(student)
            groups.setdefault(student, []).extend(entries)
    if one_submission:
        merged = [f for s in order for f in groups[s]]
        order, groups = [order[0] if order else "submission"], {}
        groups[order[0]] = merged
    shared = shared_files(groups)
    rows = []
    for student in order:
        mine = _rows_for(student, groups[student], assignment, notebook_names, pick(student) if pick else None)
        for row in mine:
            row.notes += shared.get(student, [])
        rows += mine
    return rows
