"""``python -m mha_course.assign``: write the student notebooks (exercises/) from solutions/.

For every ``solutions/*.ipynb`` whose metadata names an assignment (``metadata["mha_course"]``),
writes ``exercises/<same name>`` with answers replaced by ``# YOUR CODE HERE`` /
``raise NotImplementedError()``, hidden tests removed and outputs cleared (see
:mod:`mha_course.grading.notebook`). The output is deterministic, so ``--check`` can tell whether
exercises/ is stale (exit status 1) without writing anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .grading.notebook import MarkerError, generate, stale_exercises


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 stale with --check, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.assign",
        description="Generate the student notebooks (exercises/) from the solution notebooks (solutions/). "
                    "Answers between '### BEGIN SOLUTION' and '### END SOLUTION' become '# YOUR CODE HERE' + "
                    "'raise NotImplementedError()'; '### BEGIN HIDDEN TESTS' .. '### END HIDDEN TESTS' regions are "
                    "removed; outputs are cleared; the assignment metadata is kept.")
    parser.add_argument("--solutions", default="solutions", type=Path, help="folder of solution notebooks (default: solutions)")
    parser.add_argument("--exercises", default="exercises", type=Path, help="folder to write (default: exercises)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if exercises/ differs from what would be written")
    args = parser.parse_args(argv)
    if not args.solutions.is_dir():
        print(f"error: {args.solutions} is not a folder", file=sys.stderr)
        return 2
    try:
        if args.check:
            problems = stale_exercises(args.solutions, args.exercises)
            for problem in problems:
                print(f"stale: {problem}")
            if problems:
                print("run `python -m mha_course.assign` to regenerate exercises/")
                return 1
            print(f"{args.exercises} is up to date with {args.solutions}")
            return 0
        planned = generate(args.solutions, args.exercises)
    except (MarkerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for g in planned:
        print(f"{g.solution} -> {g.exercise}")
    print(f"{len(planned)} exercise notebook(s) in {args.exercises}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
