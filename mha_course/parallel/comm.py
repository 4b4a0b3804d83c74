"""The process group a parallel function runs in, and the bytes a process really writes to its sockets.

Every function of :mod:`mha_course.parallel` communicates through ``torch.distributed`` (gloo on CPUs,
NCCL on GPUs); :func:`group_rank_and_size` asks it who this process is. :func:`bytes_written` reads
the kernel's own count of the bytes this process has handed to ``write`` calls (``wchar`` in
``/proc/self/io``, Linux only): gloo sends over TCP sockets with such calls, so the difference around
a collective is what went on the wire, protocol headers included. NCCL moves GPU memory over
NVLink or InfiniBand without such calls; there, only the tensors' own sizes can be counted.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def group_rank_and_size(group=None) -> tuple[int, int]:
    """(rank, world_size) of this process in ``group`` (default: the whole world).

    Raises:
        RuntimeError: torch.distributed is not initialised (start the ranks with
            :func:`mha_course.parallel.launch.run_ranks`, or call ``init_process_group``).
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "torch.distributed is not initialised in this process: start the ranks with "
            "mha_course.parallel.launch.run_ranks (or call torch.distributed.init_process_group first)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def gather_ints(values: list[int], group=None, device: torch.device | str = "cpu") -> list[list[int]]:
    """Every rank's list of ints (all of the same length), in rank order: one small all_gather."""
    _, world_size = group_rank_and_size(group)
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine, group=group)
    return [t.tolist() for t in everyone]


def bytes_written() -> int | None:
    """Bytes this process has written through write-like system calls so far (Linux); None elsewhere."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
