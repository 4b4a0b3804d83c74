"""How fast does the grader go? Grades N copies of a solution notebook and prints the timings.

    python benchmarks/grading_speed.py [--notebook solutions/a03_attention.ipynb] [-n 100] [--workers 2]

Prints the time for one submission from a cold start (a fresh `python -m mha_course.grading.grade`
process: the grader's torch import, a bubblewrap sandbox, the submission's torch import, its
notebook and every case) and for a class of N copies graded
in one batch with the given number of workers, with the mean time per submission. The copies get
different file names (a renamed copy must grade the same), and every one must get full marks.
Figures depend on the machine and on what else runs on it: report them with the core count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mha_course.grading.classroom.batch import grade_many

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "solutions" / "a03_attention.ipynb")
    parser.add_argument("-n", type=int, default=100, help="class size (copies graded in one batch)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    print(
        f"notebook {args.notebook.name}; {os.cpu_count()} CPU cores visible; python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="mhag-bench-") as scratch:
        start = time.perf_counter()
        # results.json goes to a scratch file, as on Gradescope (never to a device such as /dev/null)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mha_course.grading.grade",
                str(args.notebook),
                "--quiet",
                "--json",
                str(Path(scratch) / "results.json"),
            ],
            check=True,
        )
        single = time.perf_counter() - start
    print(f"one submission, cold start (python -m mha_course.grading.grade): {single:.1f} s")

    folder = Path(tempfile.mkdtemp(prefix="mhag-bench-"))
    try:
        paths = []
        for i in range(args.n):
            path = folder / f"student_{i:03d}.ipynb"
            shutil.copy(args.notebook, path)
            paths.append(path)
        start = time.perf_counter()
        results = grade_many(paths, workers=args.workers, progress=True)
        total = time.perf_counter() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    full = sum(r.score == r.max_score > 0 for r in results)
    per = sorted(r.execution_time for r in results)
    print(f"isolation: {results[0].isolation.get('summary', '?')}")
    print(
        f"class of {args.n} with {args.workers} workers: {total:.1f} s in all, {total / args.n:.2f} s per "
        f"submission; each submission took {per[len(per) // 2]:.2f} s median, {per[-1]:.2f} s max (wall, in its "
        f"worker); full marks: {full}/{args.n}"
    )


if __name__ == "__main__":
    main()
