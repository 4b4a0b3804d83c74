"""Shared pytest set-up: a headless matplotlib backend for this process only, Triton's interpreter on CPU.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.
"""

import matplotlib

matplotlib.use("Agg")

# Without a GPU, Triton kernels run in Triton's interpreter; it must be chosen before Triton is
# first imported, so before any test module imports it: mha_course decides it in one place.
from mha_course.device import choose_triton_backend  # noqa: E402

choose_triton_backend()
