"""Calls of assignment 09 (sinusoidal and rotary positions), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

from ..inside.convert import tensor_to_numpy, to_numpy, with_inputs_after


def sinusoidal_positions(target, inputs):
    """``sinusoidal_positions(T, E)``: a torch tensor."""
    return tensor_to_numpy(target(int(inputs["T"]), int(inputs["E"])), "the table")


def apply_rotary(target, inputs):
    """``apply_rotary(x)``: a torch tensor."""
    import torch

    return tensor_to_numpy(target(torch.from_numpy(inputs["x"].copy())), "the rotated tensor")


def apply_rotary_unchanged(target, inputs):
    """``apply_rotary(x)``, and x as it is after the call."""
    import torch

    x = torch.from_numpy(inputs["x"].copy())
    return with_inputs_after(tensor_to_numpy(target(x), "the rotated tensor"), [x])


def rotary_scores(target, inputs):
    """Scores of one rotated query against rotated keys: row m is query position m."""
    import torch

    x = torch.from_numpy(inputs["x"].copy())  # (T, D): the same vector q at every position
    rotated = target(x)
    rotated_keys = target(torch.from_numpy(inputs["x"][::-1].copy()))
    return to_numpy(rotated @ rotated_keys.transpose(-2, -1))
