"""How learning platforms name a student's files, and which folders are no student's.

Moodle and Gradescope give one folder per student (``Alice Martin_1234_assignsubmission_file_/``),
Canvas one flat folder of files prefixed with the student (``martinalice_1234_5678_a02.ipynb``,
``núñezjosé_LATE_77_78_a02.ipynb`` when handed in after the due date). Names are kept in Unicode
(NFC), whatever the zip tool wrote.
"""

from __future__ import annotations

import re
import unicodedata

#: Canvas's bulk download: ``lastfirst[_LATE]_USERID_SUBMISSIONID_original name``; the name is any
#: letters (``núñezjosé``), ``LATE`` marks a submission after the due date.
_CANVAS = re.compile(r"^(?P<who>[^\W\d_]+)_(?P<late>LATE_)?(?P<id>\d+)_\d+_(?P<name>.+)$")
#: Folders of a JupyterHub collection that are the instructor's own, not a student's (``--skip``).
INSTRUCTOR_FOLDERS = ("jupyter-admin",)
#: Moodle's flat download: ``Full Name_PARTICIPANT_assignsubmission_file_original name`` (its
#: folder download names each folder with the same prefix).
_MOODLE = re.compile(r"^(?P<who>.+?_\d+_assign(?:submission|feedback)_[a-z]+_)(?P<name>.+)$")


def student_of(rel: str) -> str:
    """The student a path belongs to: its first folder, or for a flat file its Moodle or Canvas prefix, or its name."""
    parts = nfc(rel).split("/")
    if len(parts) > 1:
        return parts[0]
    moodle = _MOODLE.match(parts[0])
    if moodle:
        return moodle["who"]
    match = _CANVAS.match(parts[0])
    return f"{match['who']}_{match['id']}" if match else parts[0]


def nfc(name: str) -> str:
    """One spelling per name: a zip tool may write ``é`` as e + accent (NFD), which must not split a student."""
    return unicodedata.normalize("NFC", name)


def original_name(rel: str) -> str:
    """The file name the student gave, without a flat download's Moodle or Canvas prefix."""
    name = nfc(rel).rsplit("/", 1)[-1]
    match = _MOODLE.match(name) or _CANVAS.match(name)
    return match["name"] if match else name


def canvas_late(file_name: str) -> bool:
    """Whether a Canvas file name carries its ``_LATE_`` marker."""
    match = _CANVAS.match(nfc(file_name))
    return bool(match and match["late"])
