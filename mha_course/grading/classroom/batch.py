"""A class's submissions graded as one batch: each row in its own sandbox, by an executor, with a progress bar.

:func:`grade_many` takes notebook paths or :class:`~.collect.Submission` rows (from :mod:`.collect`),
salts each student's fresh inputs with the class's seed (:mod:`.seeds`), and hands every row to an
executor (:mod:`.executors`: worker threads here; :mod:`.dask_executor`: a Dask cluster's workers),
which runs :func:`grade_item`, that is one :func:`~mha_course.grading.engine.pipeline.grade_notebook`
with the row's identity copied into its result. Grading never raises for a bad submission.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..engine import registry
from ..engine.pipeline import check_policy, grade_notebook, new_seed, walls_seen
from ..engine.process import Isolator
from ..safe_text import clean_result
from ..verdicts import Limits, SubmissionResult
from ..walls.tiers import DEFAULT_MIN_ISOLATION
from .collect import Submission
from .executors import Executor, ThreadExecutor, worker_isolator
from .seeds import student_seed


@dataclass(frozen=True)
class Batch:
    """What every submission of one :func:`grade_many` run shares; sent with each task to a remote worker.

    ``deadline``: the wall-clock time (``time.time()``, comparable across machines) after which a
    submission is reported as not graded. ``unsafe_no_isolation`` and ``min_isolation``: how a worker
    that holds no isolator of this run builds its own (:func:`.executors.worker_isolator`).
    """

    limits: Limits
    seed: int | None
    on_tamper: str = "review"
    deadline: float = float("inf")
    unsafe_no_isolation: bool = False
    min_isolation: str = DEFAULT_MIN_ISOLATION


def grade_item(item: str | Path | Submission, batch: Batch, isolator: Isolator | None = None) -> SubmissionResult:
    """Grade one row of a batch (a notebook path or a :class:`Submission`): the unit an executor runs.

    ``isolator``: the run's, when the executor runs in the grader's process; None on a remote worker,
    which uses its own (:func:`.executors.worker_isolator`). Never raises for a bad submission.
    """
    if isolator is None:
        isolator = worker_isolator(batch.unsafe_no_isolation, batch.min_isolation)
    sub, path = _row(item)
    try:
        r = _grade_one(sub, path, batch, isolator)
    except Exception as exc:  # whatever one submission holds, the others are graded
        error = f"the grader failed on this submission ({type(exc).__name__}: {exc})"
        r = SubmissionResult(path=str(path), seed=batch.seed, isolation=walls_seen(isolator, batch.limits), error=error)
    return _finish(r, sub, batch)


def failed_item(item: str | Path | Submission, batch: Batch, isolator: Isolator, error: str) -> SubmissionResult:
    """The row of a submission the grader itself failed on (``error`` says how), as :func:`grade_item` returns it."""
    sub, path = _row(item)
    r = SubmissionResult(path=str(path), seed=batch.seed, isolation=walls_seen(isolator, batch.limits), error=error)
    return _finish(r, sub, batch)


def _row(item: str | Path | Submission) -> tuple[Submission | None, str | Path]:
    """(the row, if a :class:`Submission`; the path its result names)."""
    if isinstance(item, Submission):
        return item, item.path or item.key
    return None, item


def _finish(r: SubmissionResult, sub: Submission | None, batch: Batch) -> SubmissionResult:
    r.on_tamper = batch.on_tamper
    if sub is not None:
        r.key, r.student = sub.key, sub.student
        r.student_id, r.student_name = sub.student_id, sub.student_name
        r.notes[:0] = sub.notes
        if r.assignment is None:
            r.assignment = sub.assignment
    clean_result(r)
    return r


def _grade_one(sub: Submission | None, path: str | Path, batch: Batch, isolator: Isolator) -> SubmissionResult:
    seed, limits = batch.seed, batch.limits
    if sub is not None and sub.problem:
        r = SubmissionResult(
            path=str(path),
            seed=seed,
            isolation=walls_seen(isolator, limits),
            assignment=sub.assignment,
            error=sub.problem,
        )
        with contextlib.suppress(KeyError):  # the row still shows what it was out of
            r.max_points = float(registry.get_assignment(sub.assignment or "").max_points)
    elif time.time() > batch.deadline:
        r = SubmissionResult(
            path=str(path),
            seed=seed,
            isolation=walls_seen(isolator, limits),
            error=(f"not graded: the batch's time limit ({limits.batch_timeout:g} s) ran out first"),
        )
    else:
        own_seed = seed if sub is None or seed is None else student_seed(seed, sub.student_id or sub.student)
        r = grade_notebook(
            path,
            limits,
            isolator,
            own_seed,
            grade_as=sub.grade_as if sub else None,
            on_tamper=batch.on_tamper,
            meta=sub.meta if sub else None,
        )
        r.seed = seed
    return r


def grade_many(
    paths: Iterable[str | Path | Submission],
    limits: Limits | None = None,
    workers: int | None = None,
    progress: bool = True,
    seed: int | None = -1,
    unsafe_no_isolation: bool = False,
    isolator: Isolator | None = None,
    on_tamper: str = "review",
    executor: Executor | None = None,
    min_isolation: str = DEFAULT_MIN_ISOLATION,
) -> list[SubmissionResult]:
    """Grade many notebooks with ``workers`` threads (default 2; each drives one sandbox at a time) or an
    ``executor``, and a progress bar.

    ``paths`` holds notebook paths or :class:`~mha_course.grading.classroom.collect.Submission` rows (whose student, key and
    notes are copied into the result; a row with a ``problem`` is reported, not graded).

    ``seed`` as in :func:`grade_notebook`; one seed is drawn for the whole batch, and each
    :class:`~mha_course.grading.classroom.collect.Submission` row's fresh inputs are salted with :func:`~mha_course.grading.classroom.seeds.student_seed` of it
    and the student (roster id, else folder), recorded as the result's ``input_seed``. Raises
    :class:`~mha_course.grading.walls.tier.IsolationError` before grading anything when no tier holds here and
    ``unsafe_no_isolation`` is False; ValueError when given both ``workers`` and ``executor``. ``on_tamper`` as in :func:`grade_notebook` (every result records it).
    ``executor`` runs each row's :func:`grade_item` (default: :class:`.executors.ThreadExecutor` of ``workers``
    threads; :class:`.dask_executor.DaskExecutor` on a Dask cluster, whose workers build their isolator as
    ``Isolator(unsafe_no_isolation, min_isolation)``). The results are in the order of ``paths``.
    """
    check_policy(on_tamper)
    if executor is not None and workers is not None:
        raise ValueError(f"give grade_many workers or an executor, not both (workers={workers}, executor={executor!r})")
    from tqdm import tqdm

    paths = list(paths)
    limits = limits or Limits()
    seed = new_seed() if seed == -1 else seed
    deadline = time.time() + limits.batch_timeout if limits.batch_timeout else float("inf")
    batch = Batch(limits, seed, on_tamper, deadline, unsafe_no_isolation, min_isolation)
    executor = executor or ThreadExecutor(2 if workers is None else workers)
    own = isolator is None
    isolator = isolator or Isolator(unsafe_no_isolation, min_isolation)
    try:
        with tqdm(total=len(paths), desc="grading", unit="nb", disable=not progress) as bar:
            return executor.map(grade_item, paths, batch, isolator, lambda: bar.update(1))
    finally:
        if own:
            isolator.close()
