"""Memory-efficient attention: online softmax, tiled attention, gradients by hand, cost models.

``tiled_attention`` and ``attention_backward`` are exported from ``mha_course`` itself. Names are
imported when first used."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "attention_flops": "cost",
    "attention_memory_bytes": "cost",
    "cpu_peak_memory_supported": "cost",
    "loglog_slope": "cost",
    "peak_memory_mib": "cost",
    "time_ms": "cost",
    "manual_attention": "gradients",
    "softmax_jacobian": "gradients",
    "online_softmax": "online_softmax",
    "online_softmax_attention": "online_softmax",
    "online_softmax_update": "online_softmax",
    "GPUS": "roofline",
    "causal_pairs": "sparse_cost",
    "sparse_attention_cost": "sparse_cost",
}
# modules a chapter reads as a namespace (``roofline.GPUS``) or shows the source of
_MODULES = ("precision", "roofline")

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
