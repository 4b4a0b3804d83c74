"""Calls of assignment 13 (Triton kernels), run in the submission sandbox; see the package docstring.

What is graded is the learner's *kernel*, found in the namespace of the function passed to
``check``, launched here exactly as the notebook's wrapper launches it.
"""

from __future__ import annotations

import math

from ..inside.convert import to_numpy


def _kernel(target, name):
    """The learner's ``@triton.jit`` kernel ``name``, from the namespace ``target`` was defined in."""
    import inspect

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    function = inspect.unwrap(target)
    kernel = getattr(function, "__globals__", {}).get(name)
    # exactly triton's own kernel types: a look-alike class (or a subclass overriding the launch) is refused
    if type(kernel) not in (JITFunction, InterpretedFunction) or not callable(getattr(kernel, "fn", None)):
        raise NameError(
            f"no @triton.jit kernel named {name!r} next to {getattr(function, '__name__', target)!r}: "
            f"keep the notebook's kernel name and its @triton.jit decorator"
        )
    return kernel


def _device():
    import os

    import torch

    return "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


def softmax_kernel(target, inputs):
    """Launch the learner's softmax_kernel exactly as the notebook's triton_softmax does."""
    import torch
    import triton

    kernel = _kernel(target, "softmax_kernel")
    x = torch.from_numpy(inputs["x"].copy()).to(_device())
    y = torch.empty_like(x)
    block = max(16, triton.next_power_of_2(x.shape[1]))
    kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=block)
    return to_numpy(y)


def attention_kernel(target, inputs):
    """Launch the learner's attention_kernel exactly as the notebook's triton_single_head_attention does."""
    import torch
    import triton

    kernel = _kernel(target, "attention_kernel")
    q, k, v = (torch.from_numpy(inputs[n].copy()).to(_device()) for n in "qkv")
    T, D = q.shape
    out = torch.empty_like(q)
    block_m = block_n = 16
    kernel[(triton.cdiv(T, block_m),)](
        q, k, v, out, T, k.shape[0], math.log2(math.e) / math.sqrt(D), D=D, BLOCK_M=block_m, BLOCK_N=block_n
    )
    return to_numpy(out)
