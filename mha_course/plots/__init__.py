"""The course's pictures: heatmaps, vector plots, interactive widgets.

Names are imported when first used, so ``import mha_course.plots`` does not import matplotlib."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "plot_attention": "figures",
    "plot_attention_grid": "figures",
    "plot_mask": "figures",
    "plot_side_by_side": "figures",
    "interactive": "sliders",
    "plot_vectors_2d": "vectors",
}
# modules a chapter reads as a namespace (``roofline.GPUS``) or shows the source of
_MODULES = ("figures", "sliders")

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
