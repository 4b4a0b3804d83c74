"""mha_course: multi-head attention from the first dot product to a fused GPU kernel.

Shape legend, used in every docstring and on every reshape line (``# (B, H, T, D)``):

    B  batch size
    H  number of heads
    T  query length (number of queries)
    S  key/value length (number of keys); S == T in self-attention
    D  per-head dimension (the d_k of the papers)
    Dv value dimension per head (Dv == D unless values are sized differently)
    E  model dimension, E = H * D

Mask convention: a boolean mask is True where a query MAY attend (as in
``torch.nn.functional.scaled_dot_product_attention`` and JAX); a float mask is added to the
scores. ``torch.nn.MultiheadAttention`` uses the opposite boolean meaning; see ``mha_course.core.masks``.
A query whose every key is masked gets all-zero weights and an all-zero output.

Names are imported lazily (except the softmax pair, see below), so ``import mha_course`` does not
pull in Triton, matplotlib or the grader until they are used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # core (chapters 01-05)
    "softmax": "core.softmax",
    "softmax_np": "core.softmax",
    "causal_mask": "core.masks",
    "padding_mask": "core.masks",
    "invert_bool_mask": "core.masks",
    "to_torch_attn_mask": "core.masks",
    "from_torch_attn_mask": "core.masks",
    "to_key_padding_mask": "core.masks",
    "from_key_padding_mask": "core.masks",
    "scaled_dot_product_attention": "core.attention",
    "scaled_dot_product_attention_np": "core.attention",
    "attention_loop_reference": "core.reference",
    "split_heads": "core.heads",
    "merge_heads": "core.heads",
    "MultiHeadAttention": "core.mha",
    "get_device": "device",
    "environment_report": "device",
    "assert_close": "testing",
    "TOLERANCES": "testing",
    # efficient attention (chapters 10-14)
    "tiled_attention": "efficient.tiled.forward",
    "attention_backward": "efficient.gradients",
    "triton_attention": "kernels.function",
    # predict, then run (every chapter's predictions)
    "check_prediction": "predict",
    "check_choice": "predict",
    "answer_digest": "predict",
    # self-check inside notebooks (assignments)
    "check": "grading.learner.selfcheck",
    # the learner's progress across chapters and assignments (the checks above record it)
    "progress": "grading.learner.progress",
}

__all__ = sorted(_EXPORTS)

# ``softmax`` is both a submodule and a function. Importing a submodule rebinds the package
# attribute of the same name to the module, so bind the function now, after the one and only
# first import of the submodule, or ``from mha_course import softmax`` could return the module.
# Without a GPU, Triton kernels can only run in Triton's interpreter, which must be chosen before
# Triton is first imported, by anyone (torch itself imports it for some dispatch modes and
# torch.compile). Choosing it here, at `import mha_course`, keeps chapter 13 working however the
# learner got there. An explicit TRITON_INTERPRET in the environment is left alone.
from .core.softmax import softmax, softmax_np  # noqa: E402, F401  (re-exported)
from .device import choose_triton_backend  # noqa: E402

choose_triton_backend()


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mha_course' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
