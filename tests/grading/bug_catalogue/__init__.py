"""The bug catalogue: realistic buggy implementations of the assignments, one module per assignment.

Each bug is a source edit of a solution notebook (old -> new, checked to apply), in the module named like the
assignment's exercise module (mha_course/grading/exercises/). The tests that make every bug lose points are
tests/grading/exercises/test_bug_catalogue.py; tests/grading/engine/test_fresh_draws.py and
benchmarks/fresh_draws.py use the same bugs.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from bug_catalogue.bug import ROOT, Bug, mutated, targets

# every aNN_*.py beside this file, in assignment order: a new assignment's module needs no line here
_MODULES = sorted(p.stem for p in Path(__file__).parent.glob("a[0-9][0-9]_*.py"))
BUGS: list[Bug] = [bug for name in _MODULES for bug in importlib.import_module(f"bug_catalogue.{name}").BUGS]

__all__ = ["BUGS", "ROOT", "Bug", "mutated", "targets"]
