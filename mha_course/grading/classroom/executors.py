"""Where a class's submissions are graded: the executor that runs each one's :func:`.batch.grade_item`.

Two implementations of one small interface (:class:`Executor`), so that the batch, its results and
every output written from them are the same code whichever runs it:

- :class:`ThreadExecutor`: threads of the grader's process, each driving one sandbox at a time (one machine);
- :class:`.dask_executor.DaskExecutor`: each submission a task on a Dask distributed worker that holds
  the course and bubblewrap (a class that outgrows one machine).

A remote worker has no isolator of the run: it builds one per process (:func:`worker_isolator`),
with the run's isolation settings, and keeps it for the next submissions.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..engine.process import Isolator
    from ..verdicts import SubmissionResult

#: What an executor runs per row: ``grade(item, batch, isolator)``, :func:`.batch.grade_item`.
GradeItem = Callable[[Any, Any, "Isolator | None"], "SubmissionResult"]  # (item, the pipeline's Batch, isolator)


class Executor(Protocol):
    """Runs ``grade`` on every item of a batch and returns the results in the items' order."""

    def map(
        self, grade: GradeItem, items: Sequence[Any], batch: Any, isolator: Isolator, done: Callable[[], None]
    ) -> list[SubmissionResult]:
        """``isolator``: the grader's own (its walls name a row the executor itself failed on); ``done()`` after each row."""
        ...


class ThreadExecutor:
    """``workers`` threads of this process, sharing the run's isolator (each thread drives one sandbox at a time)."""

    def __init__(self, workers: int = 2) -> None:
        if not isinstance(workers, int) or isinstance(workers, bool):
            raise TypeError(f"workers must be an int; got {type(workers).__name__}")
        self.workers = max(1, workers)

    def map(
        self, grade: GradeItem, items: Sequence[Any], batch: Any, isolator: Isolator, done: Callable[[], None]
    ) -> list[SubmissionResult]:
        def one(item: Any) -> SubmissionResult:
            result = grade(item, batch, isolator)
            done()
            return result

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, items))


_isolators: dict[tuple[bool, str], Isolator] = {}
_isolators_lock = threading.Lock()


def worker_isolator(unsafe_no_isolation: bool, min_isolation: str) -> Isolator:
    """This process's isolator for these settings, built on first use and closed when the process ends.

    Raises :class:`~mha_course.grading.walls.tier.IsolationError` when this machine cannot isolate at
    ``min_isolation`` (and ``unsafe_no_isolation`` is False), as the grader does on its own machine.
    """
    from ..engine.process import Isolator

    with _isolators_lock:
        key = (unsafe_no_isolation, min_isolation)
        if key not in _isolators:
            _isolators[key] = Isolator(unsafe_no_isolation, min_isolation)
            atexit.register(_isolators[key].close)
        return _isolators[key]


def close_worker_isolators() -> int:
    """Close this process's isolators (their views' temporary folders go); returns how many were open."""
    with _isolators_lock:
        closing = list(_isolators.values())
        _isolators.clear()
    for isolator in closing:
        isolator.close()
    return len(closing)
