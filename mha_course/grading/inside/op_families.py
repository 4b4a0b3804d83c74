"""Op families: every torch operator and library name that computes one thing an exercise asks you to write.

An exercise's ``forbidden`` list names callables (``torch.softmax``, ``F.scaled_dot_product_attention``).
The same computation has other spellings: ``torch.logsumexp`` then ``exp``, ``F.log_softmax(x).exp()``,
``F.cross_entropy`` tricks, ``torch.logcumsumexp``, ``np.logaddexp.reduce``, a TorchScript function
compiled from a string. A *family* groups them once:

* ``armed_by``: forbidden names that switch the family on for an exercise (any one of them);
* ``aten``: the ATen operators that compute it, as torch runs them (what
  :class:`~mha_course.grading.inside.guard.Tripwire`'s dispatch layer watches; TorchScript, traced and
  eagerly run compiled code dispatch the same operators, checked by ``tests/grading/inside/test_tripwire_dispatch.py``);
* ``aliases``: Python names that reach it (the static scan flags them in a target; the NumPy and
  SciPy ones are also wrapped while a case runs, since NumPy has no dispatch layer to watch).

A fused attention kernel computes a softmax inside it, so the attention operators belong to the
softmax family too. ``nll_loss`` alone does not (it picks and negates entries); ``cross_entropy`` is
caught by the ``_log_softmax`` it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One computation and all its spellings (see the module docstring)."""

    key: str
    what: str  # what its members compute, for the learner
    asks: str  # what an exercise forbidding it asks you to do
    armed_by: frozenset[str]
    aten: frozenset[str]
    aliases: frozenset[str]


# every ATen operator (torch 2.x) that runs an attention kernel: SDPA and its backends, the fused
# multi-head attention and transformer-layer fast paths (backward kernels too)
_ATTENTION_ATEN = frozenset(
    {
        "scaled_dot_product_attention",
        "_fused_sdp_choice",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_attention_math_for_mps",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_fused_attention_overrideable",
        "_scaled_dot_product_fused_attention_overrideable_backward",
        "_flash_attention_forward",
        "_flash_attention_forward_no_dropout_inplace",
        "_flash_attention_backward",
        "_efficient_attention_forward",
        "_efficient_attention_backward",
        "_cudnn_attention_forward",
        "_cudnn_attention_backward",
        "_triton_scaled_dot_attention",
        "_native_multi_head_attention",
        "_triton_multi_head_attention",
        "_transformer_encoder_layer_fwd",
        # SDPA's math path (float64, 3-D inputs, masks the flash kernel refuses) is a composite: it reaches
        # the dispatch layer as matmuls and this operator, which only that path runs
        "_safe_softmax",
    }
)
_MHA_ATEN = frozenset(
    {"_native_multi_head_attention", "_triton_multi_head_attention", "_transformer_encoder_layer_fwd"}
)

# torch.nn modules and functions that run multi-head attention (with their weights or through SDPA)
_MHA_NAMES = frozenset(
    {
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.Transformer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerDecoder",
        "torch.nn.TransformerDecoderLayer",
    }
)
_SDPA_NAMES = frozenset({"torch.nn.functional.scaled_dot_product_attention", *_MHA_NAMES})

#: torch's own softmax in every spelling (log_softmax(x).exp() and x - logsumexp(x) are the same shortcut):
#: what the softmax exercises forbid, and the torch half of the family's names
TORCH_SOFTMAX_NAMES = (
    "torch.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
    "torch.Tensor.softmax",
    "torch.log_softmax",
    "torch.nn.functional.log_softmax",
    "torch.special.log_softmax",
    "torch.Tensor.log_softmax",
    "torch.logsumexp",
    "torch.special.logsumexp",
    "torch.Tensor.logsumexp",
    "torch.nn.Softmax",
    "torch.nn.LogSoftmax",
)

_SOFTMAX_NAMES = frozenset(
    {*TORCH_SOFTMAX_NAMES, "scipy.special.softmax", "scipy.special.log_softmax", "scipy.special.logsumexp"}
)

# NumPy ufunc methods that are a log-sum-exp (wrapped while a case runs: see guard.WatchedUfunc)
NUMPY_UFUNC_ALIASES = {"numpy.logaddexp": ("reduce", "accumulate", "reduceat")}

FAMILIES: tuple[Family, ...] = (
    Family(
        key="softmax",
        what="a softmax, its log, or the log-sum-exp a softmax is built from",
        asks="the softmax, from exp, max and sum",
        armed_by=_SOFTMAX_NAMES,
        aten=frozenset(
            {
                "softmax",
                "_softmax",
                "_safe_softmax",
                "_masked_softmax",
                "special_softmax",
                "_sparse_softmax",
                "_nested_tensor_softmax_with_shape",
                "log_softmax",
                "_log_softmax",
                "special_log_softmax",
                "_sparse_log_softmax",
                "logsumexp",
                "special_logsumexp",
                "logcumsumexp",
                "_logcumsumexp",
                "cross_entropy_loss",
                "_softmax_backward_data",
                "_log_softmax_backward_data",
                "_masked_softmax_backward",
                "_sparse_softmax_backward_data",
                "_sparse_log_softmax_backward_data",
                *_ATTENTION_ATEN,  # a fused attention kernel holds a softmax
            }
        ),
        aliases=frozenset(
            {
                *_SOFTMAX_NAMES,
                *_SDPA_NAMES,
                "torch.logcumsumexp",
                "torch.Tensor.logcumsumexp",
                "torch.sparse.softmax",
                "torch.sparse.log_softmax",
                "torch.nn.functional.softmin",
                "torch.nn.Softmin",
                "torch.nn.Softmax2d",
                "torch.nn.functional.gumbel_softmax",
                "torch.nn.functional.cross_entropy",
                "torch.nn.CrossEntropyLoss",
                "numpy.logaddexp.reduce",
                "numpy.logaddexp.accumulate",
                "numpy.logaddexp.reduceat",
            }
        ),
    ),
    Family(
        key="attention",
        what="a fused attention kernel (scaled dot-product or multi-head attention)",
        asks="the attention: scores, mask, softmax and weighted sum",
        armed_by=frozenset({"torch.nn.functional.scaled_dot_product_attention"}),
        aten=_ATTENTION_ATEN,
        aliases=_SDPA_NAMES,
    ),
    Family(
        key="multi-head attention",
        what="torch's own multi-head attention",
        asks="the multi-head attention module, from its projections and attention",
        armed_by=frozenset({"torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward"}),
        aten=_MHA_ATEN,
        aliases=_MHA_NAMES,
    ),
)


def armed(forbidden: Iterable[str]) -> tuple[Family, ...]:
    """The families an exercise's ``forbidden`` names switch on."""
    names = set(forbidden)
    return tuple(f for f in FAMILIES if f.armed_by & names)


def scan_names(forbidden: Iterable[str]) -> tuple[str, ...]:
    """``forbidden`` plus every alias of the families it arms (for the static scan), sorted, no repeats."""
    names = set(forbidden)
    for family in armed(names):
        names |= family.aliases
    return tuple(sorted(names))


def label(family: Family, op: str) -> str:
    """How a member seen while a case runs is reported: ``"aten._softmax (softmax family)"``.

    The family rides with the operator because one operator can belong to several (a fused attention
    kernel is in the softmax and the attention families) and the sentence says what the exercise asks.
    """
    return f"{op} ({family.key} family)"


def parse_label(text: str) -> tuple[Family | None, str]:
    """(family, member) from a :func:`label`; (None, text) for any other text (an older reply's op name)."""
    for family in FAMILIES:
        suffix = f" ({family.key} family)"
        if text.endswith(suffix):
            return family, text[: -len(suffix)]
    return None, text
