"""Timing every implementation side by side (``python -m mha_course.bench``), and the course's measured GPU run.

Names are imported when first used."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "gpu_run": "measured",
}
_MODULES: tuple[str, ...] = ()

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
