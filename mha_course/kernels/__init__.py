"""The course's Triton kernels: FlashAttention forward and backward, one package.

    runtime       GPU or Triton's interpreter, the ``triton`` import, shared constants (a leaf)
    config_table  the configs a kernel ships per GPU, head-dim range and mask (data, checked when built)
    registry      each kernel by name: its config table, example launch (read by launchers, gpu_report)
    forward       the forward kernel, its configs and its launcher
    backward      the dK/dV kernel and the launcher of both backward kernels (``flash_backward``)
    dq            the dQ kernel;  rows: the tile loads and stores both backward kernels use
    function      ``triton_attention``: checks, layouts, and the autograd Function joining the two

    gpu_report ``python -m mha_course.gpu_report``: the autotuner's pick per shape, the compiled kernel's resources
    ptx        what the compiled kernels use of each GPU (``TARGETS``)

Importing this package imports Triton (in its interpreter when there is no GPU) and registers the
kernels. Chapters 12 and 13 read ``forward``, ``registry``, ``rows``, ``ptx`` and ``gpu_report`` as
namespaces (the kernel's source, its configs, the GPUs' limits); they are part of the course's API.
"""

from mha_course import _lazy_package

from .backward import flash_backward  # noqa: F401  (exported below)
from .function import triton_attention  # noqa: F401  (exported below)
from .registry import REGISTRY  # noqa: F401  (exported below)
from .runtime import INTERPRETED, ON_GPU  # noqa: F401  (exported below)

# public name -> module that defines it (bound above: importing the package registers the kernels)
_EXPORTS = {
    "INTERPRETED": "runtime",
    "ON_GPU": "runtime",
    "REGISTRY": "registry",
    "flash_backward": "backward",
}  # triton_attention, bound above too, is exported from mha_course itself: one home per name
# modules a chapter reads as a namespace or shows the source of (imported when named)
_MODULES = ("forward", "gpu_report", "ptx", "registry", "rows")

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
