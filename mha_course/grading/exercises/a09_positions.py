"""Assignment 09 (chapter 09): sinusoidal positions and rotary positions (RoPE).

    PE[p, 2i] = sin(p / 10000^(2i/E)),   PE[p, 2i+1] = cos(p / 10000^(2i/E))
    RoPE: (x[2i], x[2i+1]) at position p is rotated by the angle p * theta_i, theta_i = 10000^(-2i/D)

The cases catch the usual slips: sin and cos swapped, the exponent i/E instead of 2i/E, sin in the
first half and cos in the second half (a different but common layout), positions counted from 1,
rotating the wrong way, and the "rotate half" pairing (x[i], x[i + D/2]) of some libraries.
"""

from __future__ import annotations

import numpy as np

from ..calls import a09_positions as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- inputs ---------------------------------------------------------------------------------------


def _sizes(T, E):
    def make():
        if case_inputs.salting():  # fresh sizes: more positions, a wider (still even) table
            rng = case_inputs.rng(T * E)
            return {"T": T + int(rng.integers(1, 9)), "E": E + 2 * int(rng.integers(1, 4))}
        return {"T": T, "E": E}

    return make


def _vectors(shape, seed, dtype=np.float64):
    def make():
        rng = case_inputs.rng(seed)
        return {"x": rng.standard_normal(shape).astype(dtype)}

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _table(T, E, base=10000.0, exponent=2.0, swap=False, halves=False, start=0):
    position = np.arange(start, start + T, dtype=np.float64)[:, None]
    i = np.arange(E // 2, dtype=np.float64)
    angle = position / base ** (exponent * i / E)
    first, second = (np.cos(angle), np.sin(angle)) if swap else (np.sin(angle), np.cos(angle))
    if halves:
        return np.concatenate([first, second], axis=1)
    table = np.empty((T, E))
    table[:, 0::2], table[:, 1::2] = first, second
    return table


def _reference_sinusoidal(inputs):
    from mha_course.core.positions import sinusoidal_positions

    return sinusoidal_positions(int(inputs["T"]), int(inputs["E"]), dtype=__import__("torch").float64).numpy()


def _diagnose_sinusoidal(got, expected, inputs):
    T, E = int(inputs["T"]), int(inputs["E"])
    alternatives = [
        (
            lambda: _table(T, E, swap=True),
            "sin and cos are swapped: even coordinates 2i get sin, odd ones 2i+1 get cos",
        ),
        (lambda: _table(T, E, exponent=1.0), "the exponent should be 2i/E (i counts pairs), you used i/E"),
        (
            lambda: _table(T, E, halves=True),
            "you put all the sines first and all the cosines second; interleave "
            "them: PE[p, 2i] = sin, PE[p, 2i+1] = cos",
        ),
        (
            lambda: _table(T, E, start=1),
            "positions start at 0 (the first row is sin 0 = 0, cos 0 = 1), you started at 1",
        ),
        (lambda: _table(T, E).T, "the result should be (T, E): one row per position"),
    ]
    return hints.compare(got, expected, "positions", "[T, E]", alternatives=alternatives, dtype=np.float32)


def _rotate(x, sign=1.0, start=0, half=False):
    T, D = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-np.arange(0, D, 2) / D)
    angle = np.arange(start, start + T)[:, None] * theta[None, :]  # (T, D/2)
    cos, sin = np.cos(angle), sign * np.sin(angle)
    if half:
        a, b = x[..., : D // 2], x[..., D // 2 :]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def _reference_rotary(inputs):
    import torch

    from mha_course.core.positions import apply_rotary

    return apply_rotary(torch.from_numpy(inputs["x"])).numpy()


def _reference_offsets(inputs):
    import torch

    from mha_course.core.positions import apply_rotary

    x = torch.from_numpy(inputs["x"])
    return (apply_rotary(x) @ apply_rotary(torch.from_numpy(inputs["x"][::-1].copy())).transpose(-2, -1)).numpy()


def _diagnose_rotary(got, expected, inputs):
    x = inputs["x"]
    alternatives = [
        (
            lambda: _rotate(x, sign=-1.0),
            "you rotate the wrong way: y[2i] = x[2i] cos - x[2i+1] sin, y[2i+1] = x[2i] sin + x[2i+1] cos",
        ),
        (lambda: _rotate(x, start=1), "positions start at 0 (the first row is not rotated), you started at 1"),
        (
            lambda: _rotate(x, half=True),
            "you paired x[i] with x[i + D/2] ('rotate half'); this exercise pairs neighbours x[2i], x[2i+1]",
        ),
        (lambda: x, "the output equals the input: nothing was rotated"),
    ]
    return hints.compare(got, expected, "rotated", "[..., T, D]", alternatives=alternatives)


def _diagnose_sinusoidal_dtype(got, expected, inputs):
    hint = _diagnose_sinusoidal(got, expected, inputs)
    dtype = np.asarray(got).dtype
    if hint is None and dtype != np.float32:
        hint = (
            f"positions: dtype expected float32 (torch's usual default float), got {dtype}: compute in float64 "
            "if you like, then return table.float()"
        )
        if dtype == np.float64:  # the learner's own default, not the course's
            hint += " (tensors made without dtype= are float64 once torch's default dtype is set to float64)"
    return hint


def _diagnose_rotary_dtype(got, expected, inputs):
    return _diagnose_rotary(got, expected, inputs) or hints.dtype_hint(np.asarray(got), np.asarray(expected), "rotated")


_ROTARY_UNCHANGED = case_inputs.unchanged_case(
    _reference_rotary,
    _diagnose_rotary,
    "your function changed its input x in place (x[..., 0::2] = ...): build the rotated tensor as a new one",
    ("x",),
)


def _diagnose_offsets(got, expected, inputs):
    hint = hints.compare(got, expected, "scores", "[T, T]")
    if hint:
        return hint + " (scores of rotated queries against rotated keys)"
    return None


# --- cases ----------------------------------------------------------------------------------------

_table_heat = hints.single_heatmaps("sinusoidal positions", value_name="value", axis_names=("position", "coordinate"))


def _table_case(name, points, *, T, E, judge_dtype=False, hidden=False, heatmap=False):
    """A sinusoidal_positions(T, E) case; judge_dtype: the case is about the table being float32."""
    judge = _diagnose_sinusoidal_dtype if judge_dtype else _diagnose_sinusoidal
    visualize = _table_heat if heatmap else None
    return Case(name, points, _sizes(T, E), calls.sinusoidal_positions, _reference_sinusoidal, judge, hidden, visualize)


def _rotary_case(name, points, *, shape, seed, dtype=np.float64, hidden=False):
    """An apply_rotary case on x of ``shape`` (..., T, D); a dtype other than float64 is judged too."""
    judge = _diagnose_rotary if dtype == np.float64 else _diagnose_rotary_dtype
    return Case(name, points, _vectors(shape, seed, dtype), calls.apply_rotary, _reference_rotary, judge, hidden)


SINUSOIDAL = Exercise(
    key="sinusoidal_positions",
    target="sinusoidal_positions",
    title="Sinusoidal positions",
    cases=(
        _table_case("a (6, 8) table matches the formula", 2, T=6, E=8, heatmap=True),
        _table_case("a single position (1, 4)", 1, T=1, E=4),
        _table_case("long and wide (64, 32)", 2, T=64, E=32),
        _table_case("a float32 tensor (torch's default float)", 1, T=5, E=6, judge_dtype=True),
        _table_case("(7, 12), hidden", 1, T=7, E=12, hidden=True),
        _table_case("(100, 2), hidden", 1, T=100, E=2, hidden=True),
    ),
    forbidden=("mha_course.core.positions.sinusoidal_positions",),
)

ROTARY = Exercise(
    key="apply_rotary",
    target="apply_rotary",
    title="Rotary positions (RoPE)",
    cases=(
        _rotary_case("(T, D) = (5, 4) matches the formula", 2, shape=(5, 4), seed=0),
        _rotary_case("leading batch and head dims (2, 3, 6, 8)", 2, shape=(2, 3, 6, 8), seed=1),
        Case(
            "rotated scores match (query vs reversed keys)",
            1,
            _vectors((6, 8), seed=2),
            calls.rotary_scores,
            _reference_offsets,
            _diagnose_offsets,
        ),
        _rotary_case("float32 in, float32 out", 1, shape=(2, 5, 6), seed=5, dtype=np.float32),
        Case(
            "does not change its input", 1, _vectors((3, 4), seed=6), calls.apply_rotary_unchanged, *_ROTARY_UNCHANGED
        ),
        _rotary_case("long sequence (40, 16), hidden", 1, shape=(40, 16), seed=3, hidden=True),
        _rotary_case("(1, 2, 3, 2), hidden", 1, shape=(1, 2, 3, 2), seed=4, hidden=True),
    ),
    forbidden=("mha_course.core.positions.apply_rotary",),
)

ASSIGNMENT = Assignment(
    key="a09_positions",
    version=1,
    title="Assignment 09: sinusoidal and rotary positions",
    notebook="a09_positions.ipynb",
    exercises=(SINUSOIDAL, ROTARY),
)
