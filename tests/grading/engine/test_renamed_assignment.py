"""An assignment renumbered keeps its old key: a05_debug_mha is a06_debug_mha.

A notebook handed out before the renumbering carries the old key in its metadata, and an instructor may
still type it after ``--assignment``; both must reach the assignment, never "unknown assignment".
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from mha_course.grading.classroom.class_files import peek_metadata
from mha_course.grading.engine import registry
from mha_course.grading.engine.notebook import RENAMED_ASSIGNMENTS, current_key, metadata
from mha_course.grading.grade_options import parser

ROOT = Path(__file__).resolve().parents[3]


def _old_notebook():
    nb = nbformat.read(ROOT / "exercises" / "a06_debug_mha.ipynb", as_version=4)
    old = copy.deepcopy(nb)
    old.metadata["mha_course"]["assignment"] = "a05_debug_mha"
    return old


def test_every_old_key_names_an_assignment_of_today():
    known = {a.key for a in registry.assignments()}
    for old, new in RENAMED_ASSIGNMENTS.items():
        assert new in known and old not in known, (old, new)
        assert current_key(old) == new and current_key(new) == new


def test_the_old_key_reaches_the_assignment():
    assert registry.get_assignment("a05_debug_mha").key == "a06_debug_mha"
    assert registry.module_name("a05_debug_mha") == registry.module_name("a06_debug_mha")


def test_a_notebook_with_the_old_key_is_read_as_the_new_one(tmp_path):
    old = _old_notebook()
    assert metadata(old).assignment == "a06_debug_mha"
    assert registry.identify(old).key == "a06_debug_mha"
    path = tmp_path / "alice.ipynb"
    nbformat.write(old, path)
    meta, error = peek_metadata(path)
    assert (meta.assignment if meta else None, error) == ("a06_debug_mha", None)


def test_the_old_key_on_the_command_line_is_the_new_one():
    args = parser().parse_args(["submissions/", "--assignment", "a05_debug_mha"])
    assert args.assignment == "a06_debug_mha"
    assert parser().parse_args(["submissions/", "--assignment", "a04_masks"]).assignment == "a04_masks"
