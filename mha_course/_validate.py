"""Input checks shared by the public functions: each raises with the expected and the actual shape."""

from __future__ import annotations

import torch


def require_tensor(x, name: str) -> torch.Tensor:
    """Raise TypeError unless ``x`` is a torch.Tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_min_rank(x: torch.Tensor, rank: int, name: str, legend: str) -> None:
    """Raise ValueError unless ``x`` has at least ``rank`` dims; ``legend`` names them, e.g. '(..., T, D)'."""
    if x.dim() < rank:
        raise ValueError(f"{name} must have shape {legend} (at least {rank} dims), got {tuple(x.shape)}")


def require_rank(x: torch.Tensor, rank: int, name: str, legend: str) -> None:
    """Raise ValueError unless ``x`` has exactly ``rank`` dims; ``legend`` names them, e.g. '(B, T, E)'."""
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape {legend} ({rank} dims), got {tuple(x.shape)}")


def require_floating(x: torch.Tensor, name: str) -> None:
    """Raise TypeError unless ``x`` holds floating-point numbers."""
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def broadcast_leading(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast the named leading (batch) shapes together; raise ValueError naming them if impossible."""
    try:
        return tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError:
        described = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"leading (batch) dims must broadcast together, got {described}") from None
