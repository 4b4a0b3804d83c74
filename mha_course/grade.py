"""``python -m mha_course.grade SUBMISSION.ipynb [MORE ...]``: grade notebooks, each in its own sandbox.

Each submission runs inside bubblewrap's sandbox (own namespaces, uid nobody, no network, a
read-only view without the grader, the hidden tests or the answers; time, memory and process
limits); results come back as plain arrays and are compared here. Where bubblewrap cannot run,
grading is refused unless ``--unsafe-no-isolation`` is given; the output says which isolation ran. The assignment is read from the notebook's metadata, so a renamed
copy grades the same. Folders are searched for ``*.ipynb`` (recursively, checkpoints skipped).

Every test that passes is run again on fresh random inputs of the same kind (``--seed`` fixes
them), so memorised answers gain nothing.

Outputs: a table per submission (one submission) or a progress bar and a class summary (many);
``--json`` writes Gradescope's results.json (several notebooks are merged into one result);
``--csv`` a gradebook with a column per exercise; ``--summary`` what the class gets wrong;
``--results-dir`` one results.json per submission. The exit status is 0 whenever grading ran,
however the submissions scored; 2 for a usage error (e.g. no notebook found); 3 when submissions
cannot be isolated here (bubblewrap missing or refused) and ``--unsafe-no-isolation`` was not given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .grading.grader import Isolator, Limits, grade_many
from .grading.isolation import IsolationError
from .grading.results import (
    class_summary,
    gradescope,
    merged_gradescope,
    text_report,
    write_csv,
    write_json,
)


def find_notebooks(paths: list[str]) -> list[Path]:
    """Expand folders into their ``*.ipynb`` files (sorted, checkpoints skipped); keep files as given."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.grade",
        description="Grade submission notebooks, each in its own sandboxed process; the assignment is read from "
                    "the notebook's metadata, so any file name works. Exit status 0 whenever grading ran (failing "
                    "tests are not an error), 2 when no notebook was found.")
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched for *.ipynb (recursively)")
    parser.add_argument("--json", type=Path,
                        help="write Gradescope's results.json here (several notebooks: one merged result)")
    parser.add_argument("--csv", type=Path, help="write the gradebook (one row per submission) here")
    parser.add_argument("--summary", type=Path, help="write the per-test class summary here")
    parser.add_argument("--results-dir", type=Path, help="write <notebook>.results.json per submission here")
    parser.add_argument("--workers", type=int, default=2, help="submissions graded in parallel (default 2)")
    parser.add_argument("--case-timeout", type=float, default=Limits.case_timeout,
                        help=f"seconds per test case (default {Limits.case_timeout:g})")
    parser.add_argument("--cell-timeout", type=float, default=Limits.cell_timeout,
                        help=f"seconds per notebook cell (default {Limits.cell_timeout:g})")
    parser.add_argument("--notebook-timeout", type=float, default=Limits.notebook_timeout,
                        help=f"seconds for all cells of a notebook (default {Limits.notebook_timeout:g})")
    parser.add_argument("--submission-timeout", type=float, default=Limits.submission_timeout,
                        help=f"seconds for everything of one submission (default {Limits.submission_timeout:g})")
    parser.add_argument("--batch-timeout", type=float, default=None,
                        help="seconds for the whole run; submissions not started by then are reported as not "
                             "graded (default: no limit)")
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb,
                        help=f"memory a submission may allocate beyond the grader's own, MiB (default "
                             f"{Limits.memory_mb})")
    parser.add_argument("--seed", type=int, default=None,
                        help="salt of the fresh random inputs every passing test is run on again (default: a new "
                             "one each run, printed at the end; pass it to reproduce a run)")
    parser.add_argument("--unsafe-no-isolation", action="store_true",
                        help="grade even where bubblewrap's sandbox cannot run: submissions then run as plain "
                             "processes that can read and change this machine's files (only for code you trust)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar, no per-test table and no line per notebook (the class summary of a "
                             "folder is still printed)")
    args = parser.parse_args(argv)

    paths = find_notebooks(args.submissions)
    missing = [p for p in paths if not p.is_file()]
    if missing or not paths:
        print(f"error: no notebook at {', '.join(map(str, missing)) or ' '.join(args.submissions)}", file=sys.stderr)
        if args.json:  # Gradescope still gets a result it can show
            write_json(args.json, {"score": 0, "max_score": 0, "output": "No notebook was found in the submission.",
                                   "tests": []})
        return 2
    limits = Limits(case_timeout=args.case_timeout, cell_timeout=args.cell_timeout,
                    notebook_timeout=args.notebook_timeout, memory_mb=args.memory_mb,
                    submission_timeout=args.submission_timeout, batch_timeout=args.batch_timeout)
    try:
        isolator = Isolator(unsafe_no_isolation=args.unsafe_no_isolation)
    except IsolationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.json:
            write_json(args.json, {"score": 0, "max_score": 0, "tests": [],
                                   "output": "The grader could not isolate submissions on this machine; ask your "
                                             "instructor (" + str(exc)[:300] + ")"})
        return 3
    if not args.quiet or not isolator.walls.isolated:
        print(f"isolation: {isolator.walls.summary()}", file=sys.stderr if not isolator.walls.isolated else sys.stdout)
    try:
        results = grade_many(paths, limits, workers=args.workers, progress=not args.quiet and len(paths) > 1,
                             seed=-1 if args.seed is None else args.seed, isolator=isolator)
    finally:
        isolator.close()

    if len(results) == 1 and not args.quiet:
        print(text_report(results[0]))
    elif len(results) > 1:
        for r in results:
            status = f"error: {r.error}" if r.error else f"{r.score:g} / {r.max_score:g}"
            if not args.quiet:
                print(f"{r.path}: {status}")
        print(class_summary(results))
    if args.results_dir:
        for r in results:
            write_json(args.results_dir / f"{Path(r.path).stem}.results.json", gradescope(r))
    if args.csv:
        write_csv(args.csv, results)
        print(f"gradebook: {args.csv}")
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(class_summary(results) + "\n", encoding="utf-8")
        print(f"class summary: {args.summary}")
    if args.json:  # last: nothing a submission wrote can replace it (none of its processes is left)
        write_json(args.json, merged_gradescope(results))
        print(f"results.json: {args.json}")
    if results:  # also with --quiet: the seed reproduces this run
        print(f"fresh inputs drawn with --seed {results[0].seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
