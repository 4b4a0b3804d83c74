"""The course's Triton kernels: FlashAttention forward and backward, one package.

    runtime    GPU or Triton's interpreter, the ``triton`` import, shared constants (a leaf)
    registry   each kernel by name: configs per GPU, launch arguments (read by launchers and gpu_report)
    forward    the forward kernel and its launcher
    backward   the dK/dV kernel and the launcher of both backward kernels (``flash_backward``)
    dq         the dQ kernel;  rows: the tile loads and stores both backward kernels use
    function   ``triton_attention``: checks, layouts, and the autograd Function joining the two

Importing this package imports Triton (in its interpreter when there is no GPU).
"""

from .backward import flash_backward
from .function import triton_attention
from .runtime import INTERPRETED, ON_GPU

__all__ = ["INTERPRETED", "ON_GPU", "flash_backward", "triton_attention"]
