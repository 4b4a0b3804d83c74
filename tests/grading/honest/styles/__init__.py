"""The corpus's style tables, one module per assignment; ``ALL`` is every entry in build order."""

from __future__ import annotations

from . import (
    a02_softmax,
    a03_attention,
    a04_masks,
    a05_multi_head,
    a09_positions,
    a11_kv_cache,
    a12_tiled_attention,
    a14_attention_backward,
    a15_ring_attention,
    a16_modern_attention,
)

ALL = [
    entry
    for module in (
        a02_softmax,
        a03_attention,
        a04_masks,
        a05_multi_head,
        a09_positions,
        a11_kv_cache,
        a12_tiled_attention,
        a14_attention_backward,
        a15_ring_attention,
        a16_modern_attention,
    )
    for entry in module.NOTEBOOKS
]
