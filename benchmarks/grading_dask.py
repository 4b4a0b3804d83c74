"""Throughput of a class graded on 1 and 2 workers: threads of the grader (``--workers``) and Dask (``--dask local:N``).

    python benchmarks/grading_dask.py [--notebook solutions/a01_dot_products.ipynb] [-n 12] [--rounds 1]

Grades a class of N copies of a solution notebook (each in a student's folder) with each executor in
turn: 1 thread, 1 Dask worker, 2 threads, 2 Dask workers (a ``LocalCluster`` of worker processes, one
submission at a time each), ``--rounds`` times in that order, and prints submissions per minute for
each, counted from the first submission handed over to the last result back (the Dask cluster's start
is printed apart), with the 1-minute load average before and after. Every copy must get full marks
and every run the same scores. Figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from mha_course.grading.classroom.batch import grade_many
from mha_course.grading.classroom.dask_executor import DaskExecutor
from mha_course.grading.classroom.executors import ThreadExecutor
from mha_course.grading.engine.process import Isolator

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261129


def run(kind: str, workers: int, paths: list[Path], isolator: Isolator) -> tuple[float, float, list[tuple]]:
    """(seconds to start the executor, seconds to grade, (score, maximum) per submission) for one executor."""
    start = time.perf_counter()
    executor = DaskExecutor(f"local:{workers}") if kind == "dask" else contextlib.nullcontext(ThreadExecutor(workers))
    with executor as ready:
        started = time.perf_counter()
        results = grade_many(paths, progress=False, seed=SEED, isolator=isolator, executor=ready)
        graded = time.perf_counter()
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"{kind} x{workers}: {errors[0]}")
    return started - start, graded - started, [(r.score, r.max_score) for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "solutions" / "a01_dot_products.ipynb")
    parser.add_argument("-n", type=int, default=12, help="class size")
    parser.add_argument("--rounds", type=int, default=1, help="times each executor grades the class")
    args = parser.parse_args()

    print(f"notebook {args.notebook.name}; class of {args.n}; {os.cpu_count()} CPU cores visible")
    folder = Path(tempfile.mkdtemp(prefix="mhag-bench-dask-"))
    isolator = Isolator()
    try:
        paths = []
        for i in range(args.n):
            (folder / f"student_{i:03d}").mkdir()
            paths.append(folder / f"student_{i:03d}" / args.notebook.name)
            shutil.copy(args.notebook, paths[-1])
        print(f"isolation: {isolator.walls.summary()}")
        scores = None
        for round_ in range(1, args.rounds + 1):
            for kind, workers in (("threads", 1), ("dask", 1), ("threads", 2), ("dask", 2)):
                before = os.getloadavg()[0]
                start_s, grade_s, got = run(kind, workers, paths, isolator)
                after = os.getloadavg()[0]
                full = sum(score == top > 0 for score, top in got)
                if full != args.n or (scores is not None and got != scores):
                    raise RuntimeError(f"{kind} x{workers}: scores {got}, expected {args.n} full marks as before")
                scores = got
                print(
                    f"round {round_}: {kind:7s} x{workers}: {args.n / grade_s * 60:5.1f} submissions/min "
                    f"({grade_s:.1f} s for {args.n}; executor started in {start_s:.1f} s); "
                    f"load average {before:.1f} before, {after:.1f} after"
                )
    finally:
        isolator.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
