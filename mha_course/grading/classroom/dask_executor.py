"""Grade a class on a Dask distributed cluster: each submission one task on a worker (``grade --dask ADDRESS``).

Dask (``dask.distributed``) schedules the tasks; each worker runs :func:`.batch.grade_item` with
its own isolator (:func:`.executors.worker_isolator`), and the results come back to the grader's
process in the class's order, where the same code as on one machine applies the policy and writes
every output. Before the first task, every worker is asked what it holds (:func:`worker_facts`): a
worker with another version of the course (its code's digest differs) or one that cannot isolate
submissions stops the run before anything is graded.

A worker reads each notebook at the path the grader collected it from, so the class folder must be
at the same path on every worker (a shared file system). The run's seed travels inside each task,
never on a command line; give the scheduler a ``tls://`` address where the network is not trusted.

``ADDRESS`` is a scheduler's (``tcp://host:8786``), or ``local:N`` for a ``LocalCluster`` of N worker
processes on this machine (one submission at a time each), for tests and for one machine.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .executors import Executor, GradeItem, ThreadExecutor, close_worker_isolators, worker_isolator

if TYPE_CHECKING:
    from ..engine.process import Isolator
    from ..verdicts import SubmissionResult
    from .batch import Batch

LOCAL_PREFIX = "local:"


class ClusterError(RuntimeError):
    """The Dask cluster cannot grade this run (unreachable, no workers, another course, no isolation); nothing was graded.

    ``isolation`` is True when a worker cannot isolate submissions (the grader's exit status 3).
    """

    def __init__(self, message: str, isolation: bool = False) -> None:
        super().__init__(message)
        self.isolation = isolation


def parse_address(address: str) -> tuple[str, int | None]:
    """(scheduler address, None) or ("", N) for ``local:N``; ValueError for anything else."""
    if not isinstance(address, str):
        raise TypeError(f"the Dask address must be a str; got {type(address).__name__}")
    if address.startswith(LOCAL_PREFIX):
        count = address[len(LOCAL_PREFIX) :]
        if not count.isdigit() or not 1 <= int(count) <= 256:
            raise ValueError(f"--dask local:N needs N workers, 1 to 256; got {address!r}")
        return "", int(count)
    if "://" not in address and ":" not in address:
        raise ValueError(
            f"--dask needs a scheduler address (tcp://HOST:PORT, tls://HOST:PORT) or local:N; got {address!r}"
        )
    return address, None


@functools.lru_cache(maxsize=1)
def course_digest() -> str:
    """SHA-256 of the course package's Python files (path and bytes): equal on two machines iff the grader is."""
    root = Path(__file__).resolve().parents[2]  # the mha_course package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def worker_facts(unsafe_no_isolation: bool, min_isolation: str) -> dict[str, str]:
    """What this worker grades with: the course's version and digest, and its walls (or why it has none)."""
    import mha_course

    facts = {"version": mha_course.__version__, "digest": course_digest()}
    try:
        facts["walls"] = worker_isolator(unsafe_no_isolation, min_isolation).walls.summary()
    except Exception as exc:  # IsolationError, or anything else that keeps it from grading
        facts["error"] = f"{type(exc).__name__}: {exc}"
    return facts


class DaskExecutor:
    """Runs each submission as a task on a Dask cluster (a context manager: closes its client and any local cluster).

    Raises :class:`ClusterError` when ``dask.distributed`` is not installed or the scheduler cannot be
    reached within ``timeout`` seconds, or for an address that is neither a scheduler's nor ``local:N``.
    """

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        try:
            scheduler, local_workers = parse_address(address)
        except ValueError as exc:
            raise ClusterError(str(exc)) from exc
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise ClusterError(
                f"--dask needs the packages dask and distributed (pip install -r requirements.txt, or -e .[cluster]); {exc}"
            ) from exc
        self.cluster = None
        if local_workers is not None:
            import logging

            self.cluster = LocalCluster(
                n_workers=local_workers,
                threads_per_worker=1,  # one submission at a time per worker process, as a real worker runs
                processes=True,
                dashboard_address=None,
                memory_limit=0,  # the sandboxes' own limits bound the submissions; Dask's would restart a worker
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster, timeout=timeout)
        else:
            try:
                self.client = Client(scheduler, timeout=timeout)
            except OSError as exc:  # TimeoutError, refused: say where it looked
                raise ClusterError(f"could not reach the Dask scheduler at {scheduler} ({exc})") from exc
        self.address = address

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.cluster is not None:  # our own workers: their views go now (a shared cluster's stay for the next run)
            with contextlib.suppress(Exception):
                self.client.run(close_worker_isolators)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def check_workers(self, batch: Batch) -> list[str]:
        """One line per worker (its walls); :class:`ClusterError` when there is none, or one holds another course or cannot isolate."""
        facts = self.client.run(worker_facts, batch.unsafe_no_isolation, batch.min_isolation)
        if not facts:
            raise ClusterError(f"the Dask scheduler at {self.address} has no workers")
        mine = {"version": _version(), "digest": course_digest()}
        problems, lines, isolation = [], [], False
        for worker, fact in sorted(facts.items()):
            if fact.get("error"):
                isolation = True
                problems.append(f"{worker} cannot grade: {fact['error']}")
            elif (fact["version"], fact["digest"]) != (mine["version"], mine["digest"]):
                problems.append(
                    f"{worker} holds course {fact['version']} (digest {fact['digest'][:12]}), this grader "
                    f"{mine['version']} (digest {mine['digest'][:12]}): install the same course on every worker"
                )
            else:
                lines.append(f"{worker}: {fact['walls']}")
        if problems:
            raise ClusterError("; ".join(problems), isolation)
        return lines

    def map(
        self, grade: GradeItem, items: Sequence[Any], batch: Batch, isolator: Isolator, done: Callable[[], None]
    ) -> list[SubmissionResult]:
        from distributed import as_completed

        from .batch import failed_item

        self.check_workers(batch)
        futures = self.client.map(grade, list(items), batch=batch, isolator=None, pure=False)
        for _ in as_completed(futures):
            done()
        results = []
        for item, future in zip(items, futures, strict=True):
            if future.status == "finished":
                results.append(future.result())
            else:  # the worker died under it (KilledWorker) or the task could not run: its row says so
                why = type(
                    future.exception()
                ).__name__  # Dask's own message names its internals, not the student's work
                error = f"the grader's worker failed on this submission ({why}); it was not graded: grade it again"
                results.append(failed_item(item, batch, isolator, error))
        return results


def _version() -> str:
    import mha_course

    return mha_course.__version__


def executor_for(dask: str | None, workers: int) -> contextlib.AbstractContextManager[Executor]:
    """The executor of ``grade --dask ADDRESS`` (a :class:`DaskExecutor`), else of ``--workers N`` threads."""
    if dask:
        return DaskExecutor(dask)
    return contextlib.nullcontext(ThreadExecutor(workers))
