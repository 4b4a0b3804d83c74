"""Where to run: the best available device, and a one-line report of the environment."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch


def get_device(prefer: str | None = None) -> torch.device:
    """Return ``prefer`` if given, else the first available of cuda, mps, cpu.

    Raises:
        RuntimeError (from torch.device): ``prefer`` is not a device string such as "cpu" or "cuda:0".
    """
    if prefer is not None:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def choose_triton_backend() -> None:
    """Without a GPU, make Triton run kernels in its interpreter: the one place the course decides it.

    Sets ``TRITON_INTERPRET=1`` unless the environment already says otherwise. It only takes effect
    before Triton is first imported (Triton decorates its own library then), so ``import mha_course``
    calls it, and so does :mod:`mha_course.kernels.runtime` before importing Triton.
    """
    import os
    import sys

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def triton_available() -> bool:
    """True when Triton is installed (Linux wheels only); the course runs without it elsewhere.

    Looks the package up without importing it: on a CPU-only machine Triton must not be imported
    before ``TRITON_INTERPRET=1`` is set (see :func:`choose_triton_backend`).
    """
    return importlib.util.find_spec("triton") is not None


def environment_report() -> dict[str, str]:
    """Versions and hardware, for notebooks' start cells and benchmark headers.

    Returns:
        {"python", "torch", "numpy", "device", "cpu threads"} plus "gpu"/"cuda" on a GPU and
        "triton" when installed, all as strings. Raises nothing.
    """
    import numpy as np

    device = get_device()
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "device": str(device),
        "cpu threads": str(torch.get_num_threads()),
    }
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
        report["cuda"] = str(torch.version.cuda)
    if triton_available():
        report["triton"] = importlib.metadata.version("triton")
    return report
