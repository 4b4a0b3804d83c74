"""Attention across devices with ``torch.distributed``: heads split by tensor parallelism, sequences by ring attention.

All of it rests on two facts the course has shown: heads are independent until the output
projection, and partial softmaxes over disjoint blocks of keys merge exactly through their
log-sum-exp. One module per concept:

=================== =======================================================================================
``merge``           ``attention_with_lse`` (one block of keys -> out, lse) and ``merge_partial_attention``
``split_kv``        ``split_kv_decode``: flash-decoding's split of one long cache, in one process
``layout``          which rank holds which positions (contiguous, zigzag), ``shard_sequence``, causal work per step
``ring``            ``ring_step`` and ``ring_attention``: K/V blocks round a ring, transfers overlapping compute
``ulysses``         ``ulysses_attention``: DeepSpeed-Ulysses, all-to-all from a sequence split to a head split and back
``tensor_parallel`` ``TensorParallelMultiHeadAttention``: H / W heads per rank, one all-reduce
``comm``            the process group, and the bytes a process really wrote to its sockets
``comm_cost``       bytes per scheme, the alpha-beta time model, when communication hides behind compute
``launch``          ``run_ranks``: W processes of one group (gloo on CPUs, NCCL on GPUs), results returned
``workloads``       the seeded problems and the rank functions the demo and chapter 15 run
``demo``            ``python -m mha_course.parallel.demo --world-size 4``
=================== =======================================================================================

Names are imported lazily, so ``import mha_course.parallel`` costs nothing until one is used.
"""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "attention_with_lse": "merge",
    "merge_partial_attention": "merge",
    "split_kv_decode": "split_kv",
    "shard_sequence": "layout",
    "unshard_sequence": "layout",
    "rank_chunks": "layout",
    "causal_work": "layout",
    "ring_step": "ring",
    "ring_attention": "ring",
    "ulysses_attention": "ulysses",
    "TensorParallelMultiHeadAttention": "tensor_parallel",
    "run_ranks": "launch",
    "LINKS": "comm_cost",
    "Problem": "workloads",
    "link_rank": "workloads",
    "ring_rank": "workloads",
    "ring_sweep_rank": "workloads",
    "ulysses_rank": "workloads",
    "run_demo": "demo",
}
# modules a chapter reads as a namespace (``comm_cost.ring_bytes``)
_MODULES = ("comm_cost",)

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
