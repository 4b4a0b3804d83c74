"""Shared pytest set-up: a headless matplotlib backend for this process only.

MPLBACKEND is deliberately not set in the environment: notebook kernels inherit it and their
figures would vanish from the outputs.
"""

import matplotlib

matplotlib.use("Agg")
