"""What every Triton module of the course shares: whether kernels run on a GPU or in Triton's interpreter.

Without CUDA, kernels run under Triton's interpreter (NumPy on the CPU), slowly, so tests and
chapter 13 can execute them at small sizes. The interpreter is chosen when a kernel is
*decorated*, and Triton decorates its own library functions when it is first imported, so the
choice must be made before ``import triton``: :func:`mha_course.device.choose_triton_backend`
makes it (``import mha_course`` calls it too). If Triton was imported earlier by someone else,
:data:`IMPORTED_TOO_EARLY` is True and the kernels explain instead of failing obscurely. Without
Triton at all (macOS, Windows) this module still imports, with ``triton = tl = None``.
"""

from __future__ import annotations

import os
import sys

import torch

from ..core.softmax import LOG2E
from ..device import choose_triton_backend

# True when a CUDA GPU is there to launch the compiled kernels on.
ON_GPU = torch.cuda.is_available()
IMPORTED_TOO_EARLY = not ON_GPU and "triton" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
choose_triton_backend()

try:
    import triton
    import triton.language as tl
except ImportError:  # no wheel for this platform
    triton = None
    tl = None

# True when the kernels run in Triton's interpreter (on the CPU, slowly), not compiled for a GPU.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and not IMPORTED_TOO_EARLY
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 128
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Kernels may read module globals only as constexpr: LOG2E as the kernels see it.
LOG2E_K = tl.constexpr(LOG2E) if tl is not None else None
