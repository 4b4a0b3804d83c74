"""The bug catalogue: realistic buggy implementations of the assignments, one module per assignment.

Each bug is a source edit of a solution notebook (old -> new, checked to apply), in the module named like the
assignment's exercise module (mha_course/grading/exercises/). The tests that make every bug lose points are
tests/grading/exercises/test_bug_catalogue.py; tests/grading/engine/test_fresh_draws.py and
benchmarks/fresh_draws.py use the same bugs.
"""

from __future__ import annotations

from bug_catalogue import (
    a01_dot_products,
    a02_softmax,
    a03_attention,
    a04_masks,
    a05_multi_head,
    a06_debug_mha,
    a08_cross_attention,
    a11_kv_cache,
    a12_tiled_attention,
    a15_ring_attention,
    a16_modern_attention,
    a17_newest_attention,
)
from bug_catalogue.bug import ROOT, Bug, mutated, targets

BUGS: list[Bug] = [
    bug
    for module in (
        a01_dot_products,
        a02_softmax,
        a03_attention,
        a04_masks,
        a05_multi_head,
        a06_debug_mha,
        a08_cross_attention,
        a11_kv_cache,
        a12_tiled_attention,
        a15_ring_attention,
        a16_modern_attention,
        a17_newest_attention,
    )
    for bug in module.BUGS
]

__all__ = ["BUGS", "ROOT", "Bug", "mutated", "targets"]
