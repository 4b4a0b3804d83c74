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
prefix, as its folders are. Within a student's files, checkpoint files (``.ipynb_checkpoints/``,
``-checkpoint.ipynb``) and copies (``-Copy1.ipynb``, ``Copy of ...``, ``name (1).ipynb``) are used
only when nothing else was submitted; other files are listed in a note.

**One notebook per student and assignment.** Among several, the one named as the assignment's
notebook (after the platform's prefix) is graded, else the newest (modification time); each other
one is named in a note of the row, never graded or added. :func:`one_per_student` applies the same
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
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.notebook import MAX_FILE_BYTES, parse_json, read_regular
from .lms_names import INSTRUCTOR_FOLDERS, canvas_late, nfc, original_name, student_of
from .picks import picked

#: Files a platform or an OS adds that no student chose to submit; skipped without a note.
_NOISE = {".DS_Store", "Thumbs.db", "desktop.ini", "__MACOSX"}
#: Jupyter's and file managers' copies: graded only when the student submitted nothing else.
_COPY = re.compile(r"(-Copy\d*|[ _-]copy\d*| \(\d+\))\.ipynb$|^Copy of ", re.IGNORECASE)
#: A notebook larger than this is not opened to find its assignment (the grader refuses it anyway).
PEEK_LIMIT = MAX_FILE_BYTES


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
    grade_as: str | None = None  # grade as this assignment although the metadata is missing
    problem: str | None = None  # the reason nothing is graded
    notes: list[str] = field(default_factory=list)
    student_id: str = ""
    student_name: str = ""
    late_marked: bool = False  # the platform's file name says late (Canvas's ``_LATE_``)
    file_time: float | None = None  # the graded file's modification time (for a due date)
    closeness: int = 0  # how closely the folder matched its roster row (roster.Roster.find_closeness; 0 exact)


@dataclass
class _File:
    rel: str  # relative to the root, POSIX
    path: Path
    kind: str  # notebook | fallback | other | link | special | folder
    assignment: str | None = None
    unreadable: str | None = None
    inode: tuple[int, int] | None = None  # (device, inode) of a file with several hard links


def peek_assignment(path: Path) -> tuple[str | None, str | None]:
    """(assignment key from the notebook's metadata or None, error text or None); never raises.

    Reads only a regular file (:func:`.notebook.read_regular`: a FIFO never blocks it); JSON nested
    too deeply to parse is "not a readable notebook", like any other broken file.
    """
    try:
        nb = parse_json(read_regular(path, PEEK_LIMIT))
    except ValueError as exc:
        return None, f"not a readable notebook ({str(exc).split(':')[0]})"
    except Exception as exc:  # anything else a file can do to a parser: a row, never an aborted class
        return None, f"not a readable notebook ({type(exc).__name__})"
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    meta = meta.get("mha_course") if isinstance(meta, dict) else None
    key = meta.get("assignment") if isinstance(meta, dict) else None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "not a notebook (no list of cells)"
    return (key if isinstance(key, str) else None), None


def _link(root: Path, path: Path, rel: str) -> _File:
    """A link, never followed; its note says where it points (broken, outside, another student's file)."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return _File(rel, path, "link", unreadable="a broken link")
    base = root.resolve()
    if not target.is_relative_to(base):
        return _File(rel, path, "link", unreadable="a link to outside the submissions folder; links are not followed")
    inside = target.relative_to(base).as_posix()
    if student_of(inside) != student_of(rel):
        return _File(
            rel, path, "link", unreadable=f"a link to {inside}, another student's file; links are not followed"
        )
    return _File(rel, path, "link", unreadable=f"a link to {inside}; links are not followed, submit the file itself")


def _classify(root: Path, path: Path, rel: str) -> _File:
    """What one entry of a student's files is; links are never followed, only regular files are read."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return _File(rel, path, "special", unreadable=f"cannot be read ({exc.strerror})")
    if stat.S_ISLNK(info.st_mode):
        return _link(root, path, rel)
    if stat.S_ISDIR(info.st_mode):
        return _File(rel, path, "folder")
    name = Path(rel).name
    if not name.lower().endswith(".ipynb"):
        return _File(rel, path, "other")
    if not stat.S_ISREG(info.st_mode):
        return _File(rel, path, "special", unreadable="not a regular file (a pipe, device or socket)")
    checkpoint = ".ipynb_checkpoints" in Path(rel).parts or name.endswith("-checkpoint.ipynb")
    entry = _File(rel, path, "fallback" if checkpoint or _COPY.search(name) else "notebook")
    entry.assignment, entry.unreadable = peek_assignment(path)
    if info.st_nlink > 1:
        entry.inode = (info.st_dev, info.st_ino)
    return entry


def _shared_files(groups: dict[str, list[_File]]) -> dict[str, list[str]]:
    """Student -> notes on notebooks that are one file (hard links) with another student's."""
    owners: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for student, files in groups.items():
        for f in files:
            if f.inode is not None:
                owners.setdefault(f.inode, []).append((student, f.rel))
    notes: dict[str, list[str]] = {}
    for holders in owners.values():
        if len({student for student, _ in holders}) < 2:
            continue
        for student, rel in holders:
            others = ", ".join(r for s, r in holders if s != student)
            notes.setdefault(student, []).append(
                f"{rel} is the same file as {others} (a hard link): two students hand in one notebook; for your review"
            )
    return notes


#: Folders deeper than this below the class folder are not entered (a tar can hold thousands of
#: levels; a walk that recursed through them would stop the whole class).
MAX_DEPTH = 32


def _walk(root: Path, start: Path) -> list[_File]:
    """Every entry under ``start``, depth first and sorted; links are listed, never entered.

    Iterative (no recursion, whatever the depth); a folder that cannot be read, or lies deeper than
    :data:`MAX_DEPTH`, is an entry with the reason.
    """
    found = []
    stack = [(start, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            rel = here.relative_to(root).as_posix()
            found.append(_File(rel, here, "special", unreadable=f"a folder that cannot be read ({exc.strerror})"))
            continue
        folders = []
        for entry in entries:
            if entry.name in _NOISE:
                continue
            path = here / entry.name
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                folders.append(path)
            if not is_folder or entry.name.lower().endswith(".ipynb"):  # files, links, a folder named x.ipynb
                found.append(_classify(root, path, path.relative_to(root).as_posix()))
        for folder in reversed(folders):
            if depth + 1 > MAX_DEPTH:
                rel = folder.relative_to(root).as_posix()
                found.append(_File(rel, folder, "special", unreadable=f"folders nested deeper than {MAX_DEPTH} levels"))
            else:
                stack.append((folder, depth + 1))
    return found


def _rank(rel: str, path: Path, notebook_name: str | None) -> tuple:
    """The order of :func:`_pick`: the assignment's own file name first, then the newest, then by path."""
    named = notebook_name is not None and original_name(rel) == notebook_name
    return (not named, -os.lstat(path).st_mtime if os.path.lexists(path) else 0.0, rel)


def _pick(candidates: list[_File], notebook_name: str | None) -> tuple[_File, list[_File]]:
    """The notebook graded among several of one assignment: the expected file name, else the newest."""
    ordered = sorted(candidates, key=lambda f: _rank(f.rel, f.path, notebook_name))
    return ordered[0], ordered[1:]


def _also(other: str, key: str, chosen: str, notebook_name: str | None, exact: bool = False) -> str:
    """The note on a notebook that is not graded because another one of the same assignment is."""
    rule = f"named {notebook_name}" if notebook_name and original_name(chosen) == notebook_name else "the newest"
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
        if gradable:
            # the folder naming the student most exactly first: ALICE/ cannot displace alice/ by being newer
            ordered = sorted(gradable, key=lambda r: (r.closeness, *_rank(r.key, r.path, notebook_names.get(key))))
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
    student: str, files: list[_File], expected: str | None, notebook_names: dict[str, str], pick: str | None = None
) -> list[Submission]:
    """One student's rows: one per assignment found (only ``expected`` when given); ``pick`` names the file."""
    if pick:
        files, problem = picked(student, files, pick)
        if problem:
            return [Submission(key=student, student=student, assignment=expected, problem=problem)]
    notes = []
    for f in files:
        if f.kind == "other":
            not_picked = pick and f.rel.lower().endswith(".ipynb")
            notes.append(f"ignored {f.rel} ({'you picked ' + pick if not_picked else 'not a notebook'})")
        elif f.kind == "folder":
            notes.append(f"ignored {f.rel} (a folder, not a notebook)")
        elif f.unreadable:
            notes.append(f"ignored {f.rel} ({f.unreadable})")
    readable = [f for f in files if f.kind in ("notebook", "fallback") and not f.unreadable]
    regular = [f for f in readable if f.kind == "notebook"]
    fallback = [f for f in readable if f.kind == "fallback"]

    def row(chosen: _File, key: str, others: list[_File], extra: list[str]) -> Submission:
        sub = Submission(
            key=chosen.rel, student=student, path=chosen.path, assignment=chosen.assignment, notes=list(notes) + extra
        )
        sub.late_marked = canvas_late(Path(chosen.rel).name)
        with contextlib.suppress(OSError):
            sub.file_time = os.lstat(chosen.path).st_mtime
        if pick:
            sub.notes.append(f"graded {chosen.rel}, the notebook you picked")
        if chosen.assignment is None:
            sub.grade_as = key
            sub.notes.append(f"{chosen.rel} has no assignment metadata; graded as {key}, as asked")
        if chosen.kind == "fallback":
            sub.notes.append(f"graded {chosen.rel}, a checkpoint or copy: nothing else was submitted for {key}")
        for other in others:
            sub.notes.append(_also(other.rel, key, chosen.rel, notebook_names.get(key)))
        return sub

    keys = [expected] if expected else sorted({f.assignment for f in readable if f.assignment})
    rows = []
    for key in keys:
        pool = [f for f in regular if f.assignment == key]
        if not pool and expected:
            pool = [f for f in regular if f.assignment is None]
        ignored = [f for f in fallback if f.assignment in (key, None)]
        if not pool:
            pool = [f for f in fallback if f.assignment == key] or (
                [f for f in fallback if f.assignment is None] if expected else []
            )
            ignored = []
        if pool:
            chosen, others = _pick(pool, notebook_names.get(key))
            extra = [f"ignored {f.rel} (a checkpoint or copy)" for f in ignored if f is not chosen]
            rows.append(row(chosen, key, others, extra))
    if expected and not rows:
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
        rows.append(Submission(key=student, student=student, assignment=expected, problem=problem, notes=notes))
    elif not expected:
        unknown = [f for f in regular if f.assignment is None]
        for f in unknown:
            rows.append(
                Submission(
                    key=f.rel,
                    student=student,
                    path=f.path,
                    notes=list(notes),
                    problem=f"{f.rel} has no assignment metadata (pass --assignment KEY to grade it as one)",
                )
            )
        if not rows:
            if notes:
                problem, notes = f"no notebook could be graded: {'; '.join(notes)}", []
            elif files:
                problem = f"no notebook submitted (found: {', '.join(f.rel for f in files)})"
            else:
                problem = "no notebook submitted (empty folder)"
            rows.append(Submission(key=student, student=student, problem=problem, notes=notes))
    return rows


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
    groups: dict[str, list[_File]] = {}
    order: list[str] = []
    for raw in paths:
        root = Path(raw)
        if not root.exists() and not root.is_symlink():
            raise FileNotFoundError(f"no file or folder at {raw}")
        if root.is_dir():
            entries = _walk(root, root)
            if one_submission:
                by_student = {root.name or str(root): entries}
            else:
                by_student = {}
                for entry in entries:
                    by_student.setdefault(student_of(entry.rel), []).append(entry)
                for child in sorted(root.iterdir()):  # empty student folders still get a row
                    if child.is_dir() and not child.is_symlink() and child.name not in _NOISE:
                        by_student.setdefault(nfc(child.name), [])
                for name in [s for s in by_student if s in skip]:
                    del by_student[name]
                    if skipped is not None:
                        skipped.append(name)
        else:
            if root.is_symlink():  # a file named on the command line: the instructor chose the link
                root = root.resolve()
            entry = _classify(root.parent, root, root.name)
            entry.rel = str(raw)
            by_student = {root.parent.name if one_submission else root.name: [entry]}
        for student, entries in by_student.items():
            if student not in groups:
                order.append(student)
            groups.setdefault(student, []).extend(entries)
    if one_submission:
        merged = [f for s in order for f in groups[s]]
        order, groups = [order[0] if order else "submission"], {}
        groups[order[0]] = merged
    shared = _shared_files(groups)
    rows = []
    for student in order:
        mine = _rows_for(student, groups[student], assignment, notebook_names, pick(student) if pick else None)
        for row in mine:
            row.notes += shared.get(student, [])
        rows += mine
    return rows
