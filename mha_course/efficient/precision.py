"""Mixed precision, measured: what float16, bfloat16 and float32 keep of attention, against float64.

A floating-point format trades *range* (the largest and smallest normal numbers) against *precision*
(machine epsilon, the gap after 1.0)::

    float16   5 exponent bits, 10 mantissa bits: eps 9.8e-4, max 65504        (overflows easily)
    bfloat16  8 exponent bits,  7 mantissa bits: eps 7.8e-3, max 3.4e38       (float32's range)
    float32   8 exponent bits, 23 mantissa bits: eps 1.2e-7, max 3.4e38

GPU attention kernels read and write 16-bit tensors but keep their *intermediates* in float32: a sum
*stored* in bfloat16 after every addition loses its small terms once the total is 2**8 times larger.
Torch's CPU matmul and ``sum`` on 16-bit tensors already accumulate in float32 internally, so what the
rows below vary is the format each intermediate tensor (scores, exponentials, sums, weights) is *stored* in.
:func:`attention_errors` measures this on the CPU: the same inputs through

    intermediates16  every intermediate tensor stored in the 16-bit dtype (no upcast between operations)
    intermediates32  16-bit inputs, float32 intermediates, 16-bit output (what the kernels do)
    autocast         float32 code under ``torch.autocast("cpu", dtype)``: autocast's choice per operation
    ieee             float32 inputs, float32 arithmetic (``input_precision="ieee"`` in the Triton kernel)
    tf32             float32 inputs whose matmul *inputs* are rounded to TF32 (:func:`round_to_tf32`,
                     as cuBLAS converts them), float32 accumulation
    tf32_truncated   the same with the 13 low mantissa bits cut off (:func:`truncate_to_tf32`): Triton's
                     ``input_precision="tf32"`` hands float32 registers to the tensor cores, which ignore
                     those bits (triton-lang/triton#4574)

and reports the largest error against a float64 computation of the same inputs. With inputs 64 times
larger, float16's intermediates16 row overflows: scores of ~10^5 *stored* in float16 give inf, then NaN.
TF32 is what NVIDIA tensor cores (sm_80 and later) do to float32 matmuls: keep float32's 8-bit exponent,
round the mantissa to 10 bits, multiply, accumulate in float32; the ``tf32`` rows *emulate* that rounding.
"""

from __future__ import annotations

import math

import torch

FORMATS = (torch.float16, torch.bfloat16, torch.float32)


def format_table() -> list[dict[str, object]]:
    """Range and precision of each format, from ``torch.finfo``: name, bits, eps, max, smallest normal."""
    rows = []
    for dtype in FORMATS:
        info = torch.finfo(dtype)
        rows.append(
            {
                "dtype": str(dtype).removeprefix("torch."),
                "bits": info.bits,
                "eps": info.eps,
                "max": info.max,
                "smallest_normal": info.smallest_normal,
                "decimal_digits": round(-math.log10(info.eps), 1),
            }
        )
    return rows


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32, any shape) rounded to TF32: float32's sign and 8-bit exponent, 10 mantissa bits.

    Rounds to nearest, ties away from zero (PTX's ``cvt.rna.tf32.f32``), by adding half of the 13 dropped
    bits' range to the bit pattern and clearing them. The result is float32 again (TF32 values are
    float32 values with the low 13 mantissa bits zero). Infinities stay infinite.

    Raises:
        TypeError: ``x`` is not a float32 tensor.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"round_to_tf32 takes a float32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    bits = x.contiguous().view(torch.int32)
    rounded = torch.where(torch.isfinite(x).reshape(bits.shape), (bits + 0x1000) & ~0x1FFF, bits)
    return rounded.view(torch.float32).reshape(x.shape)


def truncate_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32, any shape) with its 13 low mantissa bits cleared: TF32 by truncation (towards zero).

    This is what a tensor core does with float32 registers it is handed as TF32 operands, as Triton's
    ``tl.dot(..., input_precision="tf32")`` does without an explicit conversion: the error is up to one
    TF32 gap (2**-10 relative), twice :func:`round_to_tf32`'s, and always towards zero.

    Raises:
        TypeError: ``x`` is not a float32 tensor.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"truncate_to_tf32 takes a float32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    bits = x.contiguous().view(torch.int32)
    return (bits & ~0x1FFF).view(torch.float32).reshape(x.shape)


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, compute: torch.dtype, matmul_inputs=None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with every operation in ``compute`` (stable: max subtracted).

    ``matmul_inputs``, if given, is applied to both operands of each matmul (e.g. :func:`round_to_tf32`).
    """
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    r = matmul_inputs or (lambda x: x)
    scores = r(q) @ r(k).transpose(-2, -1) * (q.shape[-1] ** -0.5)  # (..., T, S)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return r(weights) @ r(v)  # (..., T, Dv)


def attention_errors(T: int = 512, D: int = 64, magnitude: float = 1.0, seed: int = 0) -> list[dict[str, object]]:
    """Max |error| against float64 for each dtype and each way of computing (see the module docstring).

    q, k, v are (1, 1, T, D) standard normal times ``magnitude``, rounded to each row's dtype first, so
    every row compares arithmetic only, never the rounding of the inputs. Rows: dtype float16 and
    bfloat16 with variants intermediates16, intermediates32, autocast; dtype float32 with ieee, tf32 and
    tf32_truncated.
    Each row: dtype, variant, max_error, finite (no inf or NaN in the output).

    Raises:
        ValueError: T or D is not a positive int.
    """
    if not (isinstance(T, int) and isinstance(D, int)) or T < 1 or D < 1:
        raise ValueError(f"T and D must be positive ints, got T={T!r}, D={D!r}")
    generator = torch.Generator().manual_seed(seed)
    base = [torch.randn(1, 1, T, D, generator=generator, dtype=torch.float64) * magnitude for _ in range(3)]
    rows = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        q, k, v = (x.to(dtype) for x in base)  # the inputs every variant gets
        exact = _attention(q, k, v, torch.float64)
        if dtype == torch.float32:
            variants = {
                "ieee": _attention(q, k, v, torch.float32),
                "tf32": _attention(q, k, v, torch.float32, matmul_inputs=round_to_tf32),
                "tf32_truncated": _attention(q, k, v, torch.float32, matmul_inputs=truncate_to_tf32),
            }
        else:
            variants = {
                "intermediates16": _attention(q, k, v, dtype),
                "intermediates32": _attention(q, k, v, torch.float32).to(dtype),
            }
            with torch.autocast("cpu", dtype=dtype):
                variants["autocast"] = _attention(q.float(), k.float(), v.float(), torch.float32)
        for name, out in variants.items():
            error = (out.double() - exact).abs()
            rows.append(
                {
                    "dtype": str(dtype).removeprefix("torch."),
                    "variant": name,
                    "max_error": float(error.nan_to_num(float("inf")).max()),
                    "finite": bool(torch.isfinite(out).all()),
                }
            )
    return rows
