"""Start W processes that form one torch.distributed group, run a function in each, and collect the results.

``run_ranks(fn, W, *args)`` is what ``torchrun`` does for a script, for a function instead, so that a
notebook, a test or the demo can run W ranks and get their results back as Python objects:

* processes come from ``torch.multiprocessing`` with the *forkserver* start method where the
  platform has it (Linux, macOS): one server process imports torch once and forks every rank from
  it, so a later launch starts in a fraction of a second instead of importing torch W times again
  (spawn, elsewhere). Either way each rank is a fresh process, safe to start from JupyterLab.
* ranks meet through a file (``init_method="file://..."``) in a new temporary folder: no TCP port
  to choose, so two launches at once (two test workers, two notebooks) cannot collide.
* ``fn`` runs as ``fn(rank, world_size, *args)`` after ``init_process_group``; it must be defined at
  module level in an importable module (a function typed into a notebook cell is not: the ranks
  could not find it). What it returns is pickled back; an exception in any rank stops all of them
  and is raised here with that rank's traceback.

In a script, call it under ``if __name__ == "__main__":`` (as with any ``multiprocessing`` start
method but fork): each rank imports the script that started it.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..validation import require_positive_int

BACKENDS = ("gloo", "nccl")


def run_ranks(
    fn, world_size: int, *args, backend: str | None = None, timeout_s: float = 300.0, threads: int | None = None
) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes of one process group.

    Args:
        fn: a module-level function of an importable module.
        world_size: W >= 1 processes.
        *args: picklable arguments passed to every rank.
        backend: "gloo" (CPU tensors) or "nccl" (one CUDA device per rank, ``cuda:rank``);
            default :func:`default_backend`.
        timeout_s: the whole launch, and any one collective, may take at most this long.
        threads: torch threads per rank (default: the CPU cores shared out, at least 1).

    Returns:
        the W return values, in rank order.

    Raises:
        TypeError: fn is not a module-level function; world_size not an int.
        ValueError: world_size < 1, an unknown backend, or nccl without W CUDA devices.
        TimeoutError: the ranks did not finish within ``timeout_s`` (they are stopped).
        torch.multiprocessing.ProcessRaisedException: a rank raised (its traceback is in the message).
    """
    world_size = require_positive_int(world_size, "world_size")
    backend = default_backend(world_size) if backend is None else backend
    _check_backend(backend, world_size)
    _check_importable(fn)
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    if method == "forkserver":
        # what the server imports once, before forking any rank (no effect once it is running); torch
        # imports sympy through symbolic_shapes on first use (autograd with explicit output gradients,
        # its own shape checks): seconds of CPU that every rank of every launch would otherwise pay again
        preload = ["torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes", __name__]
        preload += [fn.__module__] if fn.__module__ != "__main__" else []
        multiprocessing.set_forkserver_preload(preload)
    with tempfile.TemporaryDirectory(prefix="mha_course_ranks_") as folder:
        init = f"file://{Path(folder) / 'rendezvous'}"
        context = mp.start_processes(
            _rank_main,
            args=(fn, world_size, backend, init, folder, threads, timeout_s, args),
            nprocs=world_size,
            join=False,
            start_method=method,
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=0.2):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {world_size} ranks did not finish within {timeout_s:g} s; stopped them")
        finally:  # an error, a time-out or an interrupt here: no rank outlives the launch
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
        return [torch.load(Path(folder) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def default_backend(world_size: int) -> str:
    """ "nccl" when this machine has ``world_size`` CUDA devices (and NCCL), else "gloo"."""
    if dist.is_nccl_available() and torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def rank_device(backend: str, rank: int) -> torch.device:
    """Where a rank keeps its tensors: ``cuda:rank`` under NCCL, the CPU under gloo."""
    return torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")


def _rank_main(rank, fn, world_size, backend, init, folder, threads, timeout_s, args):
    """Inside rank ``rank``: join the group, run fn, save what it returns, leave the group."""
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
    )
    try:
        result = fn(rank, world_size, *args)
        torch.save(result, Path(folder) / f"rank{rank}.pt")
        dist.barrier()  # nobody leaves while another rank may still talk to it
    finally:
        dist.destroy_process_group()


def _check_backend(backend, world_size: int) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "nccl":
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not dist.is_nccl_available() or found < world_size:
            raise ValueError(
                f"backend 'nccl' needs one CUDA device per rank: {world_size} ranks, {found} devices "
                f"(NCCL {'available' if dist.is_nccl_available() else 'not built into this torch'}); use 'gloo'"
            )


def _check_importable(fn) -> None:
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or module is None or "<" in qualname or getattr(module, qualname, None) is not fn:
        raise TypeError(
            f"fn must be a function defined at module level in an importable module, got {fn!r}: the ranks "
            "import it by name (put it in a .py file; a function typed into a notebook cell cannot be found)"
        )
    if fn.__module__ == "__main__" and not hasattr(module, "__file__"):
        raise TypeError(f"fn {qualname} lives in an interactive __main__ (a notebook): move it into a .py module")
