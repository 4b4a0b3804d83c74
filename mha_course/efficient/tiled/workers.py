"""Long-lived CPU worker threads that share out work items, each running torch on one thread.

Why: every torch call over many heads is a parallel region of its own, whose intra-op threads wait
for one another at its end. On a core shared with another process a thread is off the CPU for
milliseconds at a time and every region waits for it. Here each worker is one thread that runs
its torch calls alone (``torch.set_num_threads(1)`` in that thread) and takes the next item when
it is done: a worker that shares its core simply takes fewer items. torch releases the GIL inside
its kernels, so the workers compute in parallel. Used by :mod:`mha_course.efficient.tiled.forward` and
:mod:`mha_course.efficient.tiled.backward`.
"""

from __future__ import annotations

import os
import queue
import threading

import torch


def run_items(worker, items: list, workers: int) -> None:
    """worker(next_item, index) in ``workers`` threads of the pool, or in the calling thread when 1.

    next_item() hands out ``items`` one at a time (None when none is left), so a worker that runs
    slower, sharing its core with another process, simply takes fewer. The first error of any
    worker is raised here; after an error or an interrupt no worker takes a new item.
    """
    lock, pending, stopped = threading.Lock(), iter(items), []
    inference = torch.is_inference_mode_enabled()  # grad and inference modes are per thread: pass them on

    def next_item():
        with lock:
            return None if stopped else next(pending, None)

    def task(index):
        try:
            with torch.inference_mode() if inference else torch.no_grad():
                worker(next_item, index)
        except BaseException:
            stopped.append(True)
            raise

    if workers < 2 or POOL.grow(workers) < 2:
        task(0)
        return
    try:
        POOL.run(task, min(workers, POOL.size))
    finally:
        stopped.append(True)  # an interrupt (Ctrl-C) while waiting: the workers take no further item


class WorkerPool:
    """Long-lived worker threads with one intra-op thread each, started on first use and shared by all calls.

    ``torch.set_num_threads(1)`` in a worker limits that thread only (OpenMP's and MKL's thread counts
    are per thread) but also the count that threads started later begin with, which :meth:`grow`
    restores. A forked child starts a pool of its own: threads do not survive a fork.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._reset()

    def _reset(self):
        self._tasks, self.size, self._pid = queue.SimpleQueue(), 0, os.getpid()

    def grow(self, n: int) -> int:
        """Start workers until there are ``n``; returns how many there are (fewer where the OS refuses threads)."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            if self.size < n:
                default = torch.get_num_threads()
                try:
                    while self.size < n:
                        ready = threading.Event()
                        threading.Thread(
                            target=self._serve,
                            args=(self._tasks, ready),
                            daemon=True,
                            name=f"mha_course.efficient.tiled.forward-{self.size}",
                        ).start()
                        ready.wait()
                        self.size += 1
                except RuntimeError:  # "can't start new thread" (a process limit): work with those there are
                    pass
                finally:
                    torch.set_num_threads(default)  # what threads started from now on begin with
            return self.size

    def run(self, task, n: int) -> None:
        """task(i) for i in range(n), each in a worker; waits for all of them, then raises the first error."""
        done = queue.SimpleQueue()
        for i in range(n):
            self._tasks.put((task, i, done))
        errors = [done.get() for _ in range(n)]
        first = next((err for err in errors if err is not None), None)
        if first is not None:
            raise first

    @staticmethod
    def _serve(tasks, ready) -> None:
        torch.set_num_threads(1)  # this thread's own ops run on this thread alone
        # torch reads the shared thread count once per thread, at its first parallel op: read it now, while
        # it is 1 (grow restores it as soon as ``ready`` is set), or this worker would run on every core.
        torch.get_num_threads()  # reads it
        ready.set()
        while True:
            task, i, done = tasks.get()
            try:
                task(i)
            except BaseException as err:  # handed to the caller, which raises it
                done.put(err)
            else:
                done.put(None)


POOL = WorkerPool()
