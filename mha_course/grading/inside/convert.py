"""Conversions that run inside the submission process (the sandbox): learner's objects <-> plain NumPy.

The call functions in :mod:`mha_course.grading.calls` use these to turn the grader's plain inputs
into what a target expects (tensors, a module holding the grader's weights) and its result back
into NumPy arrays, which is all that travels back to the grader.

Only NumPy is imported at module top: torch is imported inside the functions that need it (the
submission process has it), and nothing here imports the course's reference implementations,
the hints or the exercise modules, which the sandbox does not contain.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np


def to_numpy(x: Any, what: str = "the result") -> np.ndarray:
    """A torch tensor or NumPy array (or number) -> NumPy array; anything else raises TypeError."""
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy"):
        return np.array(x.detach().cpu().numpy())  # a copy: the caller may keep mutating its tensor
    if isinstance(x, np.ndarray):
        return np.array(x)
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return np.asarray(x)
    if isinstance(x, (tuple, list)):
        raise TypeError(f"{what} should be one array/tensor, got {count_of(x)}: return a single array/tensor")
    raise TypeError(f"{what} should be an array/tensor, got {type(x).__name__}")


def count_of(result: Any) -> str:
    """``"3 values"``, ``"1 value"`` for a tuple or list; ``"one Tensor"`` for anything else."""
    if isinstance(result, (tuple, list)):
        return f"{len(result)} value" + ("" if len(result) == 1 else "s")
    return f"one {type(result).__name__}"


def arity_problem(result: Any, names: Sequence[str], who: str = "your function") -> str | None:
    """None when ``result`` is a tuple (or list) of ``len(names)`` items, else one sentence naming both counts.

    ``"online_softmax_update returned 2 values; it must return 3: return m_new, l_new, correction"``
    """
    if isinstance(result, (tuple, list)) and len(result) == len(names):
        return None
    return f"{who} returned {count_of(result)}; it must return {len(names)}: return {', '.join(names)}"


def returned(result: Any, names: Sequence[str], who: str = "your function") -> tuple:
    """``result`` as a tuple of ``len(names)`` items; TypeError(:func:`arity_problem`'s sentence) otherwise.

    Every call whose target returns several values unpacks them here, so a learner who returns two where
    three are asked (or one tensor where a pair is) reads the same sentence on every case, never a crash
    further on or a half-right score from the first items.
    """
    problem = arity_problem(result, names, who)
    if problem:
        raise TypeError(problem)
    return tuple(result)


def tensor_to_numpy(x: Any, what: str = "the result") -> np.ndarray:
    """:func:`to_numpy` for exercises whose answer must be a torch tensor (a NumPy array raises TypeError)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} should be a torch tensor, got {type(x).__module__}.{type(x).__qualname__}")
    return to_numpy(x, what)


def to_numpy_pair(
    result: Any, names: tuple[str, str] = ("out", "weights"), who: str = "your function"
) -> tuple[np.ndarray, np.ndarray]:
    """A returned ``(a, b)`` tuple -> two NumPy arrays; TypeError naming both counts otherwise (:func:`returned`)."""
    a, b = returned(result, names, who)
    return to_numpy(a, names[0]), to_numpy(b, names[1])


def linear_layer(module: Any, name: str, missing: str) -> Any:
    """``module.<name>`` when it has a ``weight`` (an nn.Linear or alike); else AttributeError(missing).

    ``missing`` may use ``{name}`` and ``{found}`` (the type name of what is there instead).
    """
    layer = getattr(module, name, None)
    if layer is None or not hasattr(layer, "weight"):
        raise AttributeError(missing.format(name=repr(name), found=type(layer).__name__))
    return layer


def load_linear(module: Any, name: str, weight: np.ndarray, bias: np.ndarray) -> None:
    """Copy a grader-supplied weight (out, in) and bias (out,) into ``module.<name>`` (an nn.Linear).

    Raises AttributeError / ValueError in the learner's terms when the layer is missing, has no
    bias, or has the wrong shape.
    """
    import torch  # the submission process has torch; importing here keeps this module NumPy-only

    layer = linear_layer(module, name, "the module needs a linear layer named {name} (an nn.Linear), found {found}")
    if getattr(layer, "bias", None) is None:
        raise ValueError(f"{name} has no bias: create it as nn.Linear(..., bias=True)")
    for param, value, what in ((layer.weight, weight, "weight"), (layer.bias, bias, "bias")):
        if tuple(param.shape) != tuple(value.shape):
            raise ValueError(f"{name}.{what} must have shape {tuple(value.shape)}, got {tuple(param.shape)}")
        with torch.no_grad():
            param.copy_(torch.as_tensor(value, dtype=param.dtype))


def build_module(target: Any, inputs: dict, layers: Sequence[str], sample: str) -> Any:
    """The learner's module ``target(E, H)`` in eval mode with the grader's weights in ``layers``.

    Runs in either process (the grader builds its reference modules with it too). The module is cast to float64 when ``inputs[sample]`` is
    float64, else float32; ``inputs`` holds ``"E"``, ``"H"`` and ``"<layer>.weight"`` (out, in) /
    ``"<layer>.bias"`` (out,) for every layer (see :func:`load_linear` for what it raises).
    """
    import torch  # the submission process has torch; importing here keeps this module NumPy-only

    module = target(inputs["E"], inputs["H"])
    module = module.to(torch.float64 if inputs[sample].dtype == np.float64 else torch.float32)
    for name in layers:
        load_linear(module, name, inputs[name + ".weight"], inputs[name + ".bias"])
    return module.eval()


def with_inputs_after(result: Any, after: Sequence[Any]) -> tuple[Any, tuple[np.ndarray, ...]]:
    """``call`` side of an "inputs unchanged" case: (the result, the inputs as they are after the call).

    ``after`` are the objects passed to the target (arrays or tensors), read back once it returned.
    Whether they changed is judged in the grader (:func:`mha_course.grading.engine.case_inputs.unchanged_case`
    compares them with the inputs it sent), never decided here.
    """
    return result, tuple(to_numpy(a) for a in after)


def exception_line(exc: BaseException) -> str:
    """``"TypeError: message"``: the last line of a traceback, without the traceback.

    Used in the submission process too, where an exception may be hostile: if its ``str`` raises,
    only its type is named.
    """
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): the code called sys.exit() / exit()"
    try:
        text = str(exc).strip().splitlines()
    except BaseException:
        text = []
    name = type(exc).__name__
    return f"{name}: {text[-1]}" if text else name
