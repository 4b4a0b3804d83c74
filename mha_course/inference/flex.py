"""FlexAttention: the course's masks and biases as ``score_mod`` / ``mask_mod`` functions.

``torch.nn.attention.flex_attention`` (PyTorch >= 2.5) computes attention with two small Python
functions of the indices instead of a materialised (T, S) mask:

    score_mod(score, b, h, q_idx, kv_idx) -> new score      (a bias: ALiBi, relative positions, ...)
    mask_mod(b, h, q_idx, kv_idx)         -> bool           (True = may attend, the course's meaning)

``torch.compile`` turns them into one fused kernel, and a *block mask* (``create_block_mask``)
lists which (query block, key block) tiles hold any allowed pair, so fully masked tiles are
skipped. Without compiling, the same call runs in eager mode: it materialises the scores, which
is slow but exact, and is what this module uses by default (compiling needs a C++ compiler on a
CPU and takes tens of seconds the first time; see :func:`compile_support`).

Every builder here has a twin in the course: :func:`mask_from_mod` evaluates a ``mask_mod`` on
all index pairs and gives the boolean mask that :func:`mha_course.scaled_dot_product_attention`
takes, and :func:`bias_from_score_mod` does the same for an additive ``score_mod``.

Causal alignment when T != S: ``causal_mask(T, S)`` and ``is_causal=True`` are aligned top-left
(query i sees keys j <= i); flash-attn's ``causal=True`` (since 2.1) and torch's
``causal_lower_right`` are aligned bottom-right (query i sees keys j <= i + S - T), which is
``causal_mask(T, S, diagonal=S - T)``, the one that decoding with a KV cache needs.
"""

from __future__ import annotations

import functools
import os
import shutil
import warnings
from collections.abc import Callable

import torch

from ..core.masks import causal_mask
from ..validation import (
    check_qkv,
    require_int,
    require_positive_int,
    require_positive_ints,
    require_rank,
    require_tensor,
)

MaskMod = Callable[..., torch.Tensor]
ScoreMod = Callable[..., torch.Tensor]


def flex_available() -> tuple[bool, str]:
    """(True, "") when ``torch.nn.attention.flex_attention`` can be imported, else (False, why)."""
    try:
        import torch.nn.attention.flex_attention
    except ImportError as exc:  # torch < 2.5
        return False, f"torch {torch.__version__} has no FlexAttention ({exc}); it needs torch >= 2.5"
    return True, ""


def compile_support() -> tuple[bool, str]:
    """Whether ``torch.compile(flex_attention)`` can run here, and what it needs.

    On a GPU it compiles to Triton. On a CPU, TorchInductor writes C++ and needs a C++ compiler
    (``$CXX``, ``g++``, ``c++`` or ``clang++``) plus OpenMP; the first call then compiles for
    tens of seconds. Returns (True, the compiler found) or (False, the reason).
    """
    ok, why = flex_available()
    if not ok:
        return False, why
    if torch.cuda.is_available():
        return True, "CUDA: Triton kernels"
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return True, f"CPU: C++ code compiled with {shutil.which(name)}"
    return False, "no C++ compiler found (set CXX or install g++): TorchInductor cannot build the CPU kernel"


# --- mask_mod and score_mod builders --------------------------------------------------------------


def causal_mod(diagonal: int = 0) -> MaskMod:
    """mask_mod of ``causal_mask(T, S, diagonal=diagonal)``: kv_idx <= q_idx + diagonal.

    ``diagonal=S - T`` is the bottom-right alignment (torch's ``causal_lower_right``, flash-attn).
    """
    require_int(diagonal, "diagonal")

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + diagonal

    return mask_mod


def padding_mod(lengths) -> MaskMod:
    """mask_mod of ``padding_mask(lengths, S)``: key kv_idx of sequence b is real when kv_idx < lengths[b].

    Raises:
        TypeError / ValueError: lengths is not a 1-D sequence of non-negative ints.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    require_rank(lengths, 1, "lengths", "(B,)")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < lengths.to(kv_idx.device)[b]

    return mask_mod


def sliding_window_mod(window: int, causal: bool = True) -> MaskMod:
    """mask_mod of ``sliding_window_mask(T, window, causal=causal)``: 0 <= q - kv <= window (or |q - kv| <= window)."""
    require_int(window, "window", 0)

    def mask_mod(b, h, q_idx, kv_idx):
        offset = q_idx - kv_idx
        if causal:
            return (offset >= 0) & (offset <= window)
        return offset.abs() <= window

    return mask_mod


def document_mod(document_ids, causal: bool = True) -> MaskMod:
    """mask_mod for packed sequences: a token sees only tokens of its own document (and, if causal, its past).

    Several documents are packed into one row of T tokens to avoid padding; ``document_ids`` (T,)
    says which document each position belongs to. Attention must not cross a document boundary.

    Raises:
        TypeError / ValueError: document_ids is not a 1-D integer sequence.
    """
    ids = torch.as_tensor(document_ids)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"document_ids must hold integers, got dtype {ids.dtype}")
    require_rank(ids, 1, "document_ids", "(T,)")

    def mask_mod(b, h, q_idx, kv_idx):
        ids_here = ids.to(q_idx.device)
        same = ids_here[q_idx] == ids_here[kv_idx]
        return same & (kv_idx <= q_idx) if causal else same

    return mask_mod


def alibi_score_mod(slopes: torch.Tensor, offset: int = 0) -> ScoreMod:
    """score_mod of ALiBi: score - slopes[h] * |q_idx + offset - kv_idx| (``alibi_bias(..., causal=False)``).

    ``offset`` = S - T places the T queries at the end of the S keys, as :func:`mha_course.inference.alibi.alibi_bias`.

    Raises:
        TypeError / ValueError: slopes is not a 1-D tensor (H,), or offset not an int.
    """
    require_tensor(slopes, "slopes")
    require_rank(slopes, 1, "slopes", "(H,)")
    require_int(offset, "offset")

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes.to(score.device, score.dtype)[h] * (q_idx + offset - kv_idx).abs()

    return score_mod


def and_mods(*mask_mods: MaskMod) -> MaskMod:
    """One mask_mod that allows a pair only when every given mask_mod does (like ``&`` of the masks)."""
    if not mask_mods or not all(callable(m) for m in mask_mods):
        raise TypeError("and_mods needs one or more mask_mod functions")

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = mask_mods[0](b, h, q_idx, kv_idx)
        for other in mask_mods[1:]:
            allowed = allowed & other(b, h, q_idx, kv_idx)
        return allowed

    return mask_mod


# --- the course's twins: materialised masks --------------------------------------------------------


def _grid(B: int, H: int, T: int, S: int, device=None):
    require_positive_ints(B=B, H=H, T=T, S=S)
    b = torch.arange(B, device=device)[:, None, None, None]  # (B, 1, 1, 1)
    h = torch.arange(H, device=device)[None, :, None, None]  # (1, H, 1, 1)
    q = torch.arange(T, device=device)[None, None, :, None]  # (1, 1, T, 1)
    kv = torch.arange(S, device=device)[None, None, None, :]  # (1, 1, 1, S)
    return b, h, q, kv


def mask_from_mod(mask_mod: MaskMod, B: int, H: int, T: int, S: int, device=None) -> torch.Tensor:
    """Evaluate ``mask_mod`` on every (b, h, q, kv) at once: the course's bool mask (B, H, T, S).

    The builders above use only broadcasting tensor operations, so one call on index grids gives
    the whole mask (FlexAttention's own ``create_mask`` gets there with vmap).
    """
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, got {type(mask_mod).__name__}")
    b, h, q, kv = _grid(B, H, T, S, device)
    return mask_mod(b, h, q, kv).expand(B, H, T, S).to(torch.bool)  # (B, H, T, S)


def bias_from_score_mod(
    score_mod: ScoreMod, B: int, H: int, T: int, S: int, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """The float mask (B, H, T, S) of an additive ``score_mod``: score_mod(0, b, h, q, kv).

    Only for score_mods of the form score + bias(b, h, q, kv) (ALiBi, relative biases); a
    score_mod that scales or clips the score is not a mask.
    """
    if not callable(score_mod):
        raise TypeError(
            f"score_mod must be a function (score, b, h, q_idx, kv_idx) -> score, got {type(score_mod).__name__}"
        )
    b, h, q, kv = _grid(B, H, T, S, device)
    zero = torch.zeros((), dtype=dtype, device=device)
    return score_mod(zero, b, h, q, kv).expand(B, H, T, S).to(dtype)  # (B, H, T, S)


# --- running it --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def make_block_mask(mask_mod: MaskMod, B: int, H: int, T: int, S: int, block_size: int = 128, device=None):
    """FlexAttention's block mask for ``mask_mod``: which (query block, key block) tiles hold any
    allowed pair, so that a compiled kernel skips the others. Build it once and reuse it (every
    layer of a model shares it); ``.sparsity()`` is the percentage of tiles skipped.

    Raises:
        RuntimeError: FlexAttention is missing.
        TypeError / ValueError: mask_mod is not callable, or a size is not a positive int.
    """
    ok, why = flex_available()
    if not ok:
        raise RuntimeError(why)
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, got {type(mask_mod).__name__}")
    require_positive_ints(B=B, H=H, T=T, S=S, block_size=block_size)
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(
        mask_mod, B, H, T, S, device=device if device is not None else "cpu", BLOCK_SIZE=block_size
    )


def flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    block_mask=None,
    compiled: bool = False,
    block_size: int = 128,
) -> torch.Tensor:
    """Run torch's FlexAttention with an optional ``score_mod`` and a mask; returns out (B, H, T, Dv).

    Args:
        q: (B, H, T, D); k: (B, H, S, D); v: (B, H, S, Dv) (FlexAttention wants 4-D inputs).
        score_mod: (score, b, h, q_idx, kv_idx) -> score, or None.
        mask_mod: (b, h, q_idx, kv_idx) -> bool (True = may attend), or None; turned into a block
            mask with tiles of ``block_size`` (see :func:`make_block_mask`).
        block_mask: a block mask built already (instead of ``mask_mod``).
        compiled: call ``torch.compile(flex_attention)`` (see :func:`compile_support`); eager otherwise.

    A query whose every key is masked gets a zero output, as in the course.

    Raises:
        RuntimeError: FlexAttention is missing (torch < 2.5), or compiled=True where it cannot compile.
        TypeError / ValueError: as :func:`mha_course.scaled_dot_product_attention`; inputs not 4-D;
            both mask_mod and block_mask given.
    """
    ok, why = flex_available()
    if not ok:
        raise RuntimeError(why)
    check_qkv(q, k, v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_rank(x, 4, name, "(B, H, T, D)")
    if mask_mod is not None and block_mask is not None:
        raise ValueError("give mask_mod or block_mask, not both")
    from torch.nn.attention.flex_attention import flex_attention as torch_flex

    if mask_mod is not None:
        block_mask = make_block_mask(mask_mod, q.shape[0], q.shape[1], q.shape[2], k.shape[2], block_size, q.device)
    if compiled:
        can, why = compile_support()
        if not can:
            raise RuntimeError(f"cannot compile FlexAttention here: {why}")
        return _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return torch_flex(q, k, v, score_mod=score_mod, block_mask=block_mask)


def causal_conventions(T: int, S: int) -> dict[str, torch.Tensor]:
    """The (T, S) causal masks in use, side by side, as bool (True = may attend).

    ``top-left``: ``causal_mask(T, S)``, torch's ``is_causal=True`` / ``causal_upper_left``;
    ``bottom-right``: ``causal_mask(T, S, diagonal=S - T)``, torch's ``causal_lower_right`` and
    flash-attn's ``causal=True``. With T > S, bottom-right leaves the first T - S queries no key.
    """
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    require_positive_int(T, "T")
    require_positive_int(S, "S")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that lower-right with T > S gives NaN rows
        lower_right = causal_lower_right(T, S)._materialize()
        upper_left = causal_upper_left(T, S)._materialize()
    return {
        "top-left (course default)": causal_mask(T, S),
        "bottom-right (course, diagonal=S-T)": causal_mask(T, S, diagonal=S - T),
        "torch causal_upper_left": upper_left,
        "torch causal_lower_right": lower_right,
    }


__all__ = [
    "flex_available",
    "compile_support",
    "causal_mod",
    "padding_mod",
    "sliding_window_mod",
    "document_mod",
    "alibi_score_mod",
    "and_mods",
    "mask_from_mod",
    "bias_from_score_mod",
    "make_block_mask",
    "flex_attention",
    "causal_conventions",
]
