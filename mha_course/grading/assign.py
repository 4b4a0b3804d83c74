"""``python -m mha_course.assign``: write the student notebooks (exercises/) from solutions/.

``python -m mha_course.assign new NAME`` starts a new assignment (see :mod:`mha_course.grading.authoring.scaffold`).

For every ``solutions/*.ipynb`` whose metadata names an assignment (``metadata["mha_course"]``),
writes ``exercises/<same name>`` with answers replaced by ``# YOUR CODE HERE`` /
``raise NotImplementedError()``, hidden tests removed and outputs cleared (see
:mod:`mha_course.grading.engine.notebook`). The output is deterministic, so ``--check`` can tell whether
exercises/ is stale (exit status 1) without writing anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .engine.notebook import MarkerError, generate, stale_exercises


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 stale with --check, 2 bad input)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["new"]:
        return _new(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.assign",
        description="Generate the student notebooks (exercises/) from the solution notebooks (solutions/). "
        "Answers between '### BEGIN SOLUTION' and '### END SOLUTION' become '# YOUR CODE HERE' + "
        "'raise NotImplementedError()'; '### BEGIN HIDDEN TESTS' .. '### END HIDDEN TESTS' regions are "
        "removed; outputs are cleared; the assignment metadata is kept.",
    )
    parser.add_argument(
        "--solutions", default="solutions", type=Path, help="folder of solution notebooks (default: solutions)"
    )
    parser.add_argument("--exercises", default="exercises", type=Path, help="folder to write (default: exercises)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if exercises/ differs from what would be written"
    )
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


def _new(argv: list[str]) -> int:
    from .authoring.scaffold import new_assignment

    parser = argparse.ArgumentParser(
        prog="python -m mha_course.assign new",
        description="Start a new assignment: a working example of a solution "
        "notebook, its exercise module and call module, the generated "
        "exercise notebook and a README line, all ready to edit.",
    )
    parser.add_argument("name", help="lowercase identifier, e.g. row_shift (the key becomes aNN_row_shift)")
    parser.add_argument("--title", help="the assignment's title (default: the name in words)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the course's folder (default: here)")
    parser.add_argument(
        "--no-measure",
        action="store_true",
        help="do not run the new solution to record its time (benchmarks/RESULTS.md, the workshop plan)",
    )
    args = parser.parse_args(argv)
    try:
        written = new_assignment(args.root, args.name, args.title, measure=not args.no_measure)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    key = written[0].stem
    if not any(path.name == "RESULTS.md" for path in written):
        print(
            f"NOTE: {key} was not measured; the tests want every notebook's time: run "
            f"python benchmarks/chapter_times.py --only {key}, add its row to benchmarks/RESULTS.md "
            "and give it a slot in the workshop plan of docs/INSTRUCTORS.md"
        )
    print(f"""
Next:
  1. the answer and the prose: solutions/{key}.ipynb (answers between the solution markers);
  2. cases, points and hints: mha_course/grading/exercises/{key}.py; the reference implementation
     belongs in the library module your lecture uses (e.g. mha_course/core/softmax.py), imported inside
     _reference, never at the module's top (the sandbox must not see it);
  3. how the sandbox calls the student's function: mha_course/grading/calls/{key}.py;
  4. python -m mha_course.assign   (regenerates exercises/), then make test;
  5. README.md lists it in the syllabus's last chapter row, and the workshop plan of docs/INSTRUCTORS.md
     gives it a slot after the last day: move both to your lecture's place, and after editing measure it
     again with python benchmarks/chapter_times.py --only {key} (its row in benchmarks/RESULTS.md).""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
