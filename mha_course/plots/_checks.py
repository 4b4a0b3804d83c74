"""Input checks shared by the plotting modules: tensors or arrays in, NumPy out, labels that fit."""

from __future__ import annotations

import numpy as np


def _to_numpy(x, name: str) -> np.ndarray:
    """Tensor, array or nested list -> float64 (or bool) NumPy array; TypeError otherwise."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            x = x.numpy() if x.dtype == torch.bool else x.to(torch.float64).numpy()
    except ImportError:  # viz works on NumPy arrays alone
        pass
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if x.dtype == bool:
        return x
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"{name} must hold numbers or bools, got dtype {x.dtype}")
    return x.astype(np.float64)


def _squeeze_leading(x: np.ndarray, rank: int, name: str, legend: str) -> np.ndarray:
    """Drop leading size-1 dims (a batch of one, a single head) until ``x`` has ``rank`` dims.

    Only *leading* dims go, so a single query (1, S) stays a 1-row matrix.
    """
    original = tuple(x.shape)
    while x.ndim > rank and x.shape[0] == 1:
        x = x[0]
    if x.ndim != rank:
        raise ValueError(
            f"{name} must have shape {legend} ({rank} dims after dropping leading size-1 dims), got {original}"
        )
    return x


def _check_labels(labels, n: int, name: str, axis: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the {axis} axis has {n} entries")
    return labels
