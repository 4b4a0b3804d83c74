"""The course's Triton kernels: FlashAttention forward and backward, one package.

    runtime       GPU or Triton's interpreter, the ``triton`` import, shared constants (a leaf)
    config_table  the configs a kernel ships per GPU, head-dim range and mask (data, checked when built)
    registry      each kernel by name: its config table, example launch (read by launchers, gpu_report)
    forward       the forward kernel, its configs and its launcher
    backward      the dK/dV kernel and the launcher of both backward kernels (``flash_backward``)
    dq            the dQ kernel;  rows: the tile loads and stores both backward kernels use
    function      ``triton_attention``: checks, layouts, and the autograd Function joining the two

Importing this package imports Triton (in its interpreter when there is no GPU).
"""

from .backward import flash_backward
from .function import triton_attention
from .runtime import INTERPRETED, ON_GPU

__all__ = ["INTERPRETED", "ON_GPU", "flash_backward", "triton_attention"]
