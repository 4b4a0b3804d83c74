"""A busy machine on demand, and how busy it was: background load for benchmarks.

:func:`background_load` keeps N busy processes (one core's worth each, like ``python -c "while True:
pass"``) running while a ``with`` block runs, so anyone can reproduce a shared machine, e.g. a
laptop with a browser and a Jupyter server beside the kernel. :func:`cpu_seconds` and
:func:`other_load` say how many cores *other* work kept busy while something was timed, from
/proc/stat, so a figure can say how quiet the machine was. Used by :mod:`mha_course.timing.bench`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

# One busy process: pure Python spinning, like `python -c "while True: pass"`. It checks every few
# milliseconds that the benchmark that started it is still its parent, so it ends by itself even if
# the benchmark is killed (SIGKILL) before it can stop it. It ignores Ctrl-C (SIGINT reaches the
# whole terminal's process group): the benchmark stops it, without a traceback from each helper.
_SPIN = """import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
parent = int(sys.argv[1])
sys.stdout.write("r")
sys.stdout.flush()
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextlib.contextmanager
def background_load(n: int) -> Iterator[list[int]]:
    """Keep ``n`` busy processes running (one core's worth each) while the ``with`` block runs; yields their pids.

    They stop when the block ends, on Ctrl-C and on any exception too. They are started from the
    benchmark's own terminal, so the scheduler shares the cores among all runnable threads alike
    (as on macOS, Windows, and Linux without autogroup); Linux with autogroup shares them among
    terminals (autogroups) first, so a busy program started from another terminal takes a whole
    core (benchmarks/RESULTS.md measures both).

    Raises:
        TypeError: n is not an int. ValueError: n < 0.
    """
    check_load(n)
    helpers = []
    try:
        for _ in range(n):
            helpers.append(
                subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(os.getpid())], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
                )
            )
        for helper in helpers:
            helper.stdout.read(1)  # spinning from now on (b"" if it died, which the timing then shows)
        yield [helper.pid for helper in helpers]
    finally:
        for helper in helpers:
            helper.kill()
        for helper in helpers:
            helper.wait()
            helper.stdout.close()


def check_load(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"a background load is a number of busy processes (int), got {type(n).__name__} {n!r}")
    if n < 0:
        raise ValueError(f"a background load must be >= 0 busy processes, got {n}")


def cpu_seconds(helpers: list[int]) -> tuple[float, float, float] | None:
    """(CPU seconds the whole machine was busy, those of this process and its helpers, wall clock), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        ours = sum(os.times()[:2])  # this process, all its threads
        for pid in helpers:
            with open(f"/proc/{pid}/stat") as f:
                ours += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    busy = (
        sum(fields[:8]) - fields[3] - fields[4]
    )  # all but idle and iowait (user nice system idle iowait irq softirq steal)
    return busy / os.sysconf("SC_CLK_TCK"), ours, time.monotonic()


def other_load(before, after) -> float | None:
    """Cores kept busy by other work between two :func:`cpu_seconds` snapshots."""
    if before is None or after is None or after[2] <= before[2]:
        return None
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / (after[2] - before[2]))


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not on every platform
        return "n/a"
