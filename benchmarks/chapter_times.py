"""How long does each chapter and assignment take? Execution time (nbclient) and reading time (words).

    python benchmarks/chapter_times.py [--only 03 04] [--json out.json]

For every notebook of ``notebooks/`` and every assignment of ``exercises/`` (run as its solution,
``solutions/``, so that every cell completes): the words of its Markdown cells, the reading time
at 200 words per minute, and the wall time of executing all its cells once with nbclient in a
fresh kernel (kernel start included). Prints a Markdown table; the workshop plan of
docs/INSTRUCTORS.md is timed from it. Figures depend on the machine and on what else runs on it:
the header line gives the core count and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 200


def words(nb: nbformat.NotebookNode) -> int:
    """Words of the Markdown cells (code fences and LaTeX commands count as they read: roughly)."""
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return len(re.findall(r"[A-Za-z0-9][\w'’-]*", text))


def cell_seconds(cell: nbformat.NotebookNode) -> float:
    """Seconds one executed code cell ran, from the timing nbclient records in its metadata."""
    timing = cell.metadata.get("execution", {})
    started, replied = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (started and replied):
        return 0.0
    return (datetime.fromisoformat(replied) - datetime.fromisoformat(started)).total_seconds()


def run_time(path: Path, timeout: int) -> tuple[float, float, int]:
    """Seconds to execute every cell of ``path`` in a fresh kernel (started in the notebook's folder),
    the longest cell's seconds and that cell's index among all cells."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    total = time.perf_counter() - start
    per_cell = [(cell_seconds(cell), index) for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    longest, index = max(per_cell, default=(0.0, -1))
    return total, longest, index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="name prefixes to measure (default: all)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    os.environ.setdefault("MHA_COURSE_PROGRESS", "off")  # a timing run is no learner's progress

    chapters = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assignments = sorted((ROOT / "exercises").glob("a*.ipynb"))
    items = [("chapter", p, p) for p in chapters] + [
        ("assignment", p, ROOT / "solutions" / p.name) for p in assignments
    ]
    if args.only:
        items = [i for i in items if any(i[1].name.startswith(o) for o in args.only)]
    print(f"{os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    print("| notebook | words | reading (min) | execution (s) | longest cell (s) | its index |")
    print("|---|---|---|---|---|---|")
    rows = []
    for kind, shown, executed in items:
        count = words(nbformat.read(shown, as_version=4))
        seconds = longest = index = None
        try:
            total, slowest, index = run_time(executed, args.timeout)
            seconds, longest = round(total, 1), round(slowest, 1)
        except Exception as exc:  # noqa: BLE001 - a failing notebook is reported, the others still run
            print(f"<!-- {shown.name}: {type(exc).__name__}: {str(exc)[:200]} -->", flush=True)
        row = {
            "kind": kind,
            "notebook": shown.name,
            "words": count,
            "seconds": seconds,
            "longest_cell_seconds": longest,
            "longest_cell_index": index,
        }
        rows.append(row)
        print(
            f"| {shown.stem} | {count} | {count / WORDS_PER_MINUTE:.0f} | {'failed' if seconds is None else seconds} "
            f"| {'' if longest is None else longest} | {'' if index is None else index} |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
