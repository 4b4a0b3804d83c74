"""What does a case process cost? Times fork + definitions + one case, as the sandbox's broker runs it.

    python benchmarks/case_process_cost.py [--notebook solutions/a02_softmax.ipynb] [-n 20]

Outside any sandbox (the walls add nothing per case: the sandbox is started once per submission),
this process plays the broker: it imports what the broker imports (:func:`sandbox.preload`), then
for each of the assignment's cases forks a case process with :func:`sandbox.answer` and waits for
its reply. Prints the median and the spread of the time from fork to reply, and the same case run
in this process on an already loaded namespace (the old design's cost of a case), so the ratio
is the price of one fresh process per case. Report it with the core count and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "solutions" / "a02_softmax.ipynb")
    parser.add_argument("-n", type=int, default=20, help="rounds over the assignment's cases")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="mhag-cases-")
    os.environ["MHA_COURSE_SCRATCH"] = scratch

    from mha_course.grading.engine import notebook, registry
    from mha_course.grading.engine.process import call_modules, call_name
    from mha_course.grading.inside import broker, wire
    from mha_course.grading.inside import runner as sandbox

    nb = json.loads(args.notebook.read_text())
    assignment = registry.get_assignment(nb["metadata"]["mha_course"]["assignment"])
    cells = notebook.code_cells(nb)
    config = {
        "memory_mb": 1024,
        "provided": list(assignment.provided),
        "extra_modules": sorted(m for m in call_modules(assignment) if not m.startswith("mha_course.grading.calls.")),
        "forbidden": sorted({n for e in assignment.exercises for n in e.forbidden}),
    }
    start = time.perf_counter()
    sandbox.preload(config, cells)
    print(
        f"notebook {args.notebook.name}; {os.cpu_count()} CPU cores; python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.2f}; broker preload {time.perf_counter() - start:.2f} s"
    )
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
            requests.append((request, blob))
    forked, failed = [], 0
    for _ in range(args.n):
        for request, blob in requests:
            t = time.perf_counter()
            pid, channel = broker._fork(
                _Stub(), lambda s, r=request, b=blob: sandbox.answer(s, config, cells, set(), r, b)
            )
            reply, _ = wire.recv(channel)
            forked.append(time.perf_counter() - t)
            failed += not reply.get("ok")
            channel.close()
            os.waitpid(pid, 0)
    print(f"{len(forked)} cases, {failed} not ok; fork + definitions + case + reply:")
    q = statistics.quantiles(forked, n=10)
    print(f"  median {statistics.median(forked) * 1e3:.1f} ms, p10 {q[0] * 1e3:.1f} ms, p90 {q[-1] * 1e3:.1f} ms")
    print(
        f"  {len(requests)} cases x 2 runs (published + fresh inputs): {2 * len(requests) * statistics.median(forked):.2f} s"
    )
    # the old design: every case in one process whose namespace is already loaded (no fork, no load)
    from mha_course.grading.inside.guard import Tripwire

    tripwire = Tripwire()
    tripwire.install(set(config["forbidden"]))
    namespace = sandbox._namespace()
    found = sandbox.load_definitions(cells, set(), namespace)
    extra = frozenset(config["extra_modules"])
    inline = []
    for _ in range(args.n):
        for request, blob in requests:
            t = time.perf_counter()
            sandbox._run_case(request, namespace, wire.unpack(request["inputs"], blob), tripwire, extra, found)
            inline.append(time.perf_counter() - t)
    ratio = statistics.median(forked) / statistics.median(inline)
    print(f"  the same case in a loaded process: median {statistics.median(inline) * 1e3:.2f} ms ({ratio:.0f}x less)")


class _Stub:
    """Stands for the grader's socket, which the case process closes first."""

    def close(self) -> None:
        pass


if __name__ == "__main__":
    main()
