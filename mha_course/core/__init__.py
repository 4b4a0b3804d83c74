"""Attention itself: softmax, masks, scaled dot-product attention, heads, MultiHeadAttention, positions.

The names every chapter uses are exported from ``mha_course`` itself; this package exports the rest
of what the chapters call. Names are imported when first used."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "Scorer": "additive",
    "fit": "additive",
    "as_attention": "kernel_regression",
    "nadaraya_watson": "kernel_regression",
    "mask_to_bias": "masks",
    "apply_rotary": "positions",
    "sinusoidal_positions": "positions",
    "LOG2E": "softmax",
}
# modules a chapter reads as a namespace (``roofline.GPUS``) or shows the source of
_MODULES = ("toy",)

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
