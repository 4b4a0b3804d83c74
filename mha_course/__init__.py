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

The course's API is the names below and those of the documented subpackages (``core``, ``efficient``,
``inference``, ``kernels``, ``models``, ``parallel``, ``plots``, ``timing``; docs/ARCHITECTURE.md, "The
course's API"). Every name is imported when first used, so ``import mha_course`` does not pull in
Triton, matplotlib or the grader until they are.
"""

from __future__ import annotations

import importlib
import sys
import types

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
    "triton_available": "device",
    "assert_close": "testing",
    "TOLERANCES": "testing",
    # efficient attention (chapters 10-14)
    "tiled_attention": "efficient.tiled.forward",
    "attention_backward": "efficient.gradients",
    "triton_attention": "kernels.function",
    # predict, then run (every chapter's predictions)
    "check_prediction": "predict",
    "check_choice": "predict",
    "check_exercise": "predict",
    "answer_digest": "predict",
    # self-check inside notebooks (assignments)
    "check": "grading.learner.selfcheck",
    # the learner's progress across chapters and assignments (the checks above record it)
    "progress": "grading.learner.progress",
}

__all__ = sorted(_EXPORTS)

# The subpackages whose export maps are API too (each an ``_EXPORTS`` and ``__all__`` like the above);
# the site's reference documents them, and the chapters import from nowhere else.
_API_PACKAGES = ("core", "efficient", "inference", "kernels", "models", "parallel", "plots", "timing")


class _LazyPackage(types.ModuleType):
    """A package whose public names (its ``_EXPORTS``) are looked up in their modules on every use.

    A submodule may share its name with the function it defines (``models.train.train``); the import
    system binds the package's attribute of that name to the submodule when it is first imported, so
    this package declines that binding and the name stays the function's. Not caching the value keeps
    one object behind every spelling: whatever the defining module holds now is what the package gives.
    """

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("_EXPORTS", ()):
            return  # the submodule stays reachable in sys.modules and by ``from .name import ...``
        super().__setattr__(name, value)


def _lazy_package(package: str, exports: dict[str, str], modules: tuple[str, ...] = ()):
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` (name -> submodule defining it) and
    ``modules`` (submodules that are API themselves, read as a namespace: ``roofline.GPUS``)."""
    sys.modules[package].__class__ = _LazyPackage

    def __getattr__(name: str):
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_name}"), name)

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(modules))

    return __getattr__, __dir__


# the documented subpackages are reachable as attributes too (``mha_course.inference.alibi_bias``), imported on first use
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _API_PACKAGES)

# Without a GPU, Triton kernels can only run in Triton's interpreter, which must be chosen before
# Triton is first imported, by anyone (torch itself imports it for some dispatch modes and
# torch.compile). Choosing it here, at `import mha_course`, keeps chapter 13 working however the
# learner got there. An explicit TRITON_INTERPRET in the environment is left alone.
from .device import choose_triton_backend  # noqa: E402

choose_triton_backend()
