"""What does a case process cost, and what does it import that the broker has not? As the sandbox's broker runs it.

    python benchmarks/case_process_cost.py [--notebook solutions/a02_softmax.ipynb] [-n 20]
    python benchmarks/case_process_cost.py --imports solutions/*.ipynb

Outside any sandbox (the walls add nothing per case: the sandbox is started once per submission),
a fresh interpreter plays the broker: it imports what the broker imports (:func:`runner.preload`),
then for each of the assignment's cases forks a case process with :func:`runner.answer` and waits
for its reply. Prints the median and the spread of the time from fork to reply, and the same case
run in one already loaded process (the old design's cost of a case), so the ratio is the price of
one fresh process per case. Report it with the core count and the load average.

``--imports`` prints, per notebook, the modules its case processes imported that the broker had not
(each one is paid again by every case: torch's lazy sympy import was half a second a case). It
exits 1 when a notebook's cases import any.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def jobs_for(notebook_path: Path) -> dict:
    """The broker's config, the cells and one request per case of the notebook's assignment (JSON-able)."""
    from mha_course.grading.engine import notebook, registry
    from mha_course.grading.engine.notebook_run import broker_config
    from mha_course.grading.engine.process import call_name
    from mha_course.grading.inside import wire

    nb = json.loads(notebook_path.read_text())
    assignment = registry.get_assignment(nb["metadata"]["mha_course"]["assignment"])
    cells = notebook.code_cells(nb)
    requests = []
    for exercise in assignment.exercises:
        for case in exercise.cases:
            structure, blob = wire.pack(case.make_inputs())
            request = {
                "event": "case",
                "call": call_name(case),
                "target": exercise.target,
                "forbidden": list(exercise.forbidden),
                "inputs": structure,
            }
            requests.append((request, base64.b64encode(blob).decode("ascii")))
    config = dict(broker_config(assignment, cells, set(), 1024))
    return {"notebook": notebook_path.name, "config": config, "cells": cells, "requests": requests}


def play_broker(jobs_file: str, rounds: int) -> None:
    """In a fresh interpreter: what every broker imports, then per notebook (forked) its own preload and its cases."""
    from mha_course.grading.inside import runner, wire

    runner.preload({}, [])  # the part of the preload every submission gets
    for job in json.loads(Path(jobs_file).read_text()):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                print(json.dumps(_one_notebook(job, rounds, runner, wire)), flush=True)
                code = 0
            finally:
                os._exit(code)
        os.waitpid(pid, 0)


def _one_notebook(job: dict, rounds: int, runner, wire) -> dict:
    from mha_course.grading.inside import broker

    config, cells = job["config"], [tuple(c) for c in job["cells"]]
    start = time.perf_counter()
    runner.preload(config, cells)
    preload_s = time.perf_counter() - start
    loaded = set(sys.modules)
    send = wire.send

    def send_and_report(sock, reply, out=b""):  # runs in the case process, just before its reply
        send(sock, dict(reply, imported=sorted(set(sys.modules) - loaded)), out)

    wire.send = send_and_report
    times, imported, failed = [], set(), 0
    for _ in range(rounds):
        for request, blob in job["requests"]:
            raw = base64.b64decode(blob)
            t = time.perf_counter()
            pid, channel = broker._fork(
                _Stub(), lambda s, r=request, b=raw: runner.answer(s, config, cells, set(), r, b)
            )
            reply, _ = wire.recv(channel)
            times.append(time.perf_counter() - t)
            failed += not reply.get("ok")
            imported |= set(reply.get("imported", ()))
            channel.close()
            os.waitpid(pid, 0)
    wire.send = send
    inline = _inline_times(config, cells, job["requests"], rounds, runner, wire)
    return {
        "notebook": job["notebook"],
        "preload_s": preload_s,
        "cases": len(times),
        "not_ok": failed,
        "times": times,
        "inline": inline,
        "imported": sorted(imported),
    }


def _inline_times(config: dict, cells: list, requests: list, rounds: int, runner, wire) -> list[float]:
    """The old design: every case in one process whose namespace is already loaded (no fork, no load)."""
    from mha_course.grading.inside.guard import Tripwire

    tripwire = Tripwire()
    tripwire.install(set(config["forbidden"]))
    namespace = runner._namespace()
    found = runner.load_definitions(cells, set(), namespace)
    extra = frozenset(config["extra_modules"])
    inline = []
    for _ in range(rounds):
        for request, blob in requests:
            inputs = wire.unpack(request["inputs"], base64.b64decode(blob))
            t = time.perf_counter()
            runner._run_case(request, namespace, inputs, tripwire, extra, found)
            inline.append(time.perf_counter() - t)
    return inline


class _Stub:
    """Stands for the grader's socket, which the case process closes first."""

    def close(self) -> None:
        pass


def run(notebooks: list[Path], rounds: int) -> list[dict]:
    """One fresh interpreter plays the broker for every notebook; one result per notebook."""
    with tempfile.TemporaryDirectory(prefix="mhag-cases-") as scratch:
        jobs_file = Path(scratch) / "jobs.json"
        jobs_file.write_text(json.dumps([jobs_for(path) for path in notebooks]))
        env = dict(os.environ, MHA_COURSE_SCRATCH=str(Path(scratch) / "scratch"))
        (Path(scratch) / "scratch").mkdir()
        done = subprocess.run(
            [sys.executable, __file__, "--play-broker", str(jobs_file), "-n", str(rounds)],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            timeout=1800,
        )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(results) != len(notebooks):
        raise RuntimeError(f"the broker's stand-in failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "solutions" / "a02_softmax.ipynb")
    parser.add_argument("-n", type=int, default=20, help="rounds over the assignment's cases")
    parser.add_argument("--imports", type=Path, nargs="+", help="notebooks whose case processes' new imports to list")
    parser.add_argument("--play-broker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.play_broker:
        play_broker(args.play_broker, args.n)
        return
    if args.imports:
        results = run(args.imports, 1)
        for result in results:
            listed = ", ".join(result["imported"]) or "nothing"
            print(f"{result['notebook']}: {result['cases']} cases ({result['not_ok']} not ok) imported {listed}")
        sys.exit(1 if any(r["imported"] for r in results) else 0)
    print(f"notebook {args.notebook.name}; {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.2f}")
    (result,) = run([args.notebook], args.n)
    forked, inline = result["times"], result["inline"]
    print(f"broker preload {result['preload_s']:.2f} s; {len(forked)} cases, {result['not_ok']} not ok")
    q = statistics.quantiles(forked, n=10)
    print("fork + definitions + case + reply:")
    print(f"  median {statistics.median(forked) * 1e3:.1f} ms, p10 {q[0] * 1e3:.1f} ms, p90 {q[-1] * 1e3:.1f} ms")
    cases = len(forked) // args.n
    print(f"  {cases} cases x 2 runs (published + fresh inputs): {2 * cases * statistics.median(forked):.2f} s")
    ratio = statistics.median(forked) / statistics.median(inline)
    print(f"  the same case in a loaded process: median {statistics.median(inline) * 1e3:.2f} ms ({ratio:.0f}x less)")
    print(f"  modules a case process imported anew: {', '.join(result['imported']) or 'none'}")


if __name__ == "__main__":
    main()
