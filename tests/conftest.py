"""Shared pytest set-up: a headless matplotlib backend for this process only, Triton's interpreter on CPU.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.
"""

import os

import matplotlib
import torch

matplotlib.use("Agg")

# Without a GPU, Triton kernels run in Triton's interpreter; it must be chosen before Triton is
# first imported (Triton decorates its own library then), so before any test module imports it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
