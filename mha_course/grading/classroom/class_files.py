"""A class folder's files as the grader reads them: regular notebooks, copies, links, folders, noise.

:func:`walk` lists every file under a folder without following a link (a link, a FIFO or a device
is a file of its own kind, with a note); :func:`peek_metadata` reads a notebook's assignment and version
from its metadata without running anything (the one read of it: the row carries it to the engine); :func:`shared_files` finds one notebook under two students
(a hard link). :mod:`.collect` turns these files into one row per student.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..engine.notebook import MAX_FILE_BYTES, AssignmentMeta, metadata, parse_json, read_regular
from .lms import student_of

#: Files a platform or an OS adds that no student chose to submit; skipped without a note.
NOISE = {".DS_Store", "Thumbs.db", "desktop.ini", "__MACOSX"}
#: Jupyter's and file managers' copies: graded only when the student submitted nothing else.
# a browser's second download ``name (1).ipynb`` is often the newer upload: a notebook, not a copy
_COPY = re.compile(r"(-Copy\d*|[ _-]copy\d*)\.ipynb$|^Copy of ", re.IGNORECASE)
#: A notebook larger than this is not opened to find its assignment (the grader refuses it anyway).
PEEK_LIMIT = MAX_FILE_BYTES


class FileKind(StrEnum):
    """What a file of a submission is to the grader."""

    NOTEBOOK = "notebook"  # a notebook the student submitted
    FALLBACK = "fallback"  # a checkpoint or a copy: graded only when nothing else was submitted
    OTHER = "other"  # not a notebook (or not the one picked): named in a note
    LINK = "link"  # a symbolic link: never followed
    SPECIAL = "special"  # unreadable: a pipe, a device, a folder nested too deep
    FOLDER = "folder"  # a folder where a file was expected (e.g. named on the command line)


@dataclass
class File:
    rel: str  # relative to the root, POSIX
    path: Path
    kind: FileKind
    assignment: str | None = None  # the assignment key its metadata names (``meta.assignment``)
    unreadable: str | None = None
    meta: AssignmentMeta | None = None  # its metadata, read once here
    inode: tuple[int, int] | None = None  # (device, inode) of a file with several hard links


def peek_metadata(path: Path) -> tuple[AssignmentMeta | None, str | None]:
    """(the notebook's metadata, :func:`~mha_course.grading.engine.notebook.metadata`, or None; error text or None);
    never raises.

    Reads only a regular file (:func:`~mha_course.grading.engine.notebook.read_regular`: a FIFO never blocks it); JSON nested
    too deeply to parse is "not a readable notebook", like any other broken file.
    """
    try:
        nb = parse_json(read_regular(path, PEEK_LIMIT))
    except ValueError as exc:
        return None, f"not a readable notebook ({str(exc).split(':')[0]})"
    except Exception as exc:  # anything else a file can do to a parser: a row, never an aborted class
        return None, f"not a readable notebook ({type(exc).__name__})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "not a notebook (no list of cells)"
    return metadata(nb), None


def _link(root: Path, path: Path, rel: str) -> File:
    """A link, never followed; its note says where it points (broken, outside, another student's file)."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return File(rel, path, FileKind.LINK, unreadable="a broken link")
    base = root.resolve()
    if not target.is_relative_to(base):
        return File(
            rel, path, FileKind.LINK, unreadable="a link to outside the submissions folder; links are not followed"
        )
    inside = target.relative_to(base).as_posix()
    if student_of(inside) != student_of(rel):
        return File(
            rel, path, FileKind.LINK, unreadable=f"a link to {inside}, another student's file; links are not followed"
        )
    return File(
        rel, path, FileKind.LINK, unreadable=f"a link to {inside}; links are not followed, submit the file itself"
    )


def classify(root: Path, path: Path, rel: str) -> File:
    """What one entry of a student's files is; links are never followed, only regular files are read."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return File(rel, path, FileKind.SPECIAL, unreadable=f"cannot be read ({exc.strerror})")
    if stat.S_ISLNK(info.st_mode):
        return _link(root, path, rel)
    if stat.S_ISDIR(info.st_mode):
        return File(rel, path, FileKind.FOLDER)
    name = Path(rel).name
    if not name.lower().endswith(".ipynb"):
        return File(rel, path, FileKind.OTHER)
    if not stat.S_ISREG(info.st_mode):
        return File(rel, path, FileKind.SPECIAL, unreadable="not a regular file (a pipe, device or socket)")
    checkpoint = ".ipynb_checkpoints" in Path(rel).parts or name.endswith("-checkpoint.ipynb")
    entry = File(rel, path, FileKind.FALLBACK if checkpoint or _COPY.search(name) else FileKind.NOTEBOOK)
    entry.meta, entry.unreadable = peek_metadata(path)
    entry.assignment = entry.meta.assignment if entry.meta else None
    if info.st_nlink > 1:
        entry.inode = (info.st_dev, info.st_ino)
    return entry


def shared_files(groups: dict[str, list[File]]) -> dict[str, list[str]]:
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


def walk(root: Path, start: Path) -> list[File]:
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
            found.append(File(rel, here, FileKind.SPECIAL, unreadable=f"a folder that cannot be read ({exc.strerror})"))
            continue
        folders = []
        for entry in entries:
            if entry.name in NOISE:
                continue
            path = here / entry.name
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                folders.append(path)
            if not is_folder or entry.name.lower().endswith(".ipynb"):  # files, links, a folder named x.ipynb
                found.append(classify(root, path, path.relative_to(root).as_posix()))
        for folder in reversed(folders):
            if depth + 1 > MAX_DEPTH:
                rel = folder.relative_to(root).as_posix()
                found.append(
                    File(rel, folder, FileKind.SPECIAL, unreadable=f"folders nested deeper than {MAX_DEPTH} levels")
                )
            else:
                stack.append((folder, depth + 1))
    return found
