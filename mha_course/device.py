"""Where to run: the best available device, and a one-line report of the environment."""

from __future__ import annotations

import platform

import torch


def get_device(prefer: str | None = None) -> torch.device:
    """Return ``prefer`` if given, else the first available of cuda, mps, cpu."""
    if prefer is not None:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def triton_available() -> bool:
    """True when Triton imports (Linux wheels only); the course runs without it elsewhere."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def environment_report() -> dict[str, str]:
    """Versions and hardware, for notebooks' start cells and benchmark headers."""
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
        import triton

        report["triton"] = triton.__version__
    return report
