"""Run corpus notebooks the way Jupyter does, then ask the self-check about every exercise.

    python tests/grading/honest/run_corpus.py [--hidden] [--json OUT] NOTEBOOK [...]

All notebooks run in this one process, each in a fresh IPython namespace (``InteractiveShell.run_cell``:
the same cell transformation, magics and linecache registration as a Jupyter kernel), with torch's
global state (default dtype, grad mode, compiled code) and matplotlib's figures reset in between. After a
notebook's last cell, ``check(key, obj, include_hidden=..., show=False)`` runs for every exercise of its
assignment on what the notebook bound to the exercise's target. Prints one line per notebook and writes
``{notebook stem: {"cell_errors": [...], "exercises": {key: {"score", "max_score", "rows"}}}}`` as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")  # this process only: no window opens


def _reset_globals() -> None:
    import matplotlib.pyplot as plt
    import numpy as np
    import torch

    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    torch._dynamo.reset()  # compiled frames of the previous notebook
    np.seterr(all="warn")
    plt.close("all")


def run_notebook(shell, path: Path, hidden: bool) -> dict:
    """Run ``path``'s code cells in order in a fresh namespace, then check() every exercise."""
    from mha_course.grading.engine import notebook, registry
    from mha_course.grading.learner.selfcheck import check

    nb = json.loads(path.read_text(encoding="utf-8"))
    assignment = registry.identify(nb)
    with contextlib.redirect_stderr(io.StringIO()):  # dynamo's weak references of the last namespace
        shell.reset(new_session=False)
        _reset_globals()
        gc.collect()
    # What survives is torch, the library and their caches: frozen, no later collection walks it again
    # (each full collection over it took a quarter of a second, two per notebook and more while cells run)
    gc.freeze()
    errors = []
    start = time.monotonic()
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = notebook._source(cell)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = shell.run_cell(source, store_history=True)
        failure = result.error_before_exec or result.error_in_exec
        if failure is not None:
            errors.append(f"cell {index + 1}: {type(failure).__name__}: {failure}")
    exercises = {}
    for exercise in assignment.exercises:
        target = shell.user_ns.get(exercise.target)
        with contextlib.redirect_stderr(io.StringIO()):  # NumPy's underflow warnings of the cases
            res = check(exercise.key, target, include_hidden=hidden, show=False)
        exercises[exercise.key] = {
            "score": res.score,
            "max_score": res.max_score,
            "rows": [[r.case, str(r.status), r.hint, r.hidden] for r in res.rows],
        }
    return {
        "assignment": assignment.key,
        "cell_errors": errors,
        "exercises": exercises,
        "seconds": round(time.monotonic() - start, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--hidden", action="store_true", help="run the hidden cases too")
    parser.add_argument("--json", type=Path, help="write the verdicts here")
    args = parser.parse_args(argv)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.colors = "nocolor"
    shell.showtraceback = lambda *a, **k: None  # errors are collected from run_cell's result
    shell.enable_gui = lambda gui=None: None  # as in a kernel: `%matplotlib inline` needs no event loop
    # Figures are shown as text, not drawn into PNG images (a third of the run): a kernel reports a
    # drawing error as output, never as the cell's error, and no state a check sees depends on the image
    for mime in ("image/png", "image/jpeg", "image/svg+xml", "application/pdf"):
        shell.display_formatter.formatters[mime].enabled = False
    results, full = {}, 0
    for path in args.notebooks:
        r = run_notebook(shell, path, args.hidden)
        results[path.stem] = r
        ok = not r["cell_errors"] and all(e["score"] == e["max_score"] for e in r["exercises"].values())
        full += ok
        lost = [
            f"{k} {e['score']:g}/{e['max_score']:g}" for k, e in r["exercises"].items() if e["score"] != e["max_score"]
        ]
        print(f"{'OK  ' if ok else 'LOST'} {path.stem} ({r['seconds']:.1f} s) {'; '.join(lost)} {r['cell_errors']}")
        sys.stdout.flush()
    print(f"{full}/{len(results)} notebooks: no cell error and full marks from check()")
    gc.unfreeze()  # the interpreter's exit collects them as usual (else nanobind reports triton's as leaked)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if full == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
