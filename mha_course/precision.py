"""Mixed precision, measured: what float16, bfloat16 and float32 keep of attention, against float64.

A floating-point format trades *range* (the largest and smallest normal numbers) against *precision*
(machine epsilon, the gap after 1.0)::

    float16   5 exponent bits, 10 mantissa bits: eps 9.8e-4, max 65504        (overflows easily)
    bfloat16  8 exponent bits,  7 mantissa bits: eps 7.8e-3, max 3.4e38       (float32's range)
    float32   8 exponent bits, 23 mantissa bits: eps 1.2e-7, max 3.4e38

GPU attention kernels read and write 16-bit tensors but *accumulate* in float32 (the running
max, sum and output of the online softmax, the dot products inside the tensor cores): a sum of
thousands of terms in bfloat16 loses its small terms entirely once the total is 2**8 times
larger. :func:`attention_errors` measures this on the CPU: the same inputs through

    accumulate16   every operation in the 16-bit dtype (no upcast)
    accumulate32   16-bit inputs, float32 arithmetic, 16-bit output (what the kernels do)
    autocast       torch.autocast's choice for the CPU (bfloat16 matmuls)

and reports the largest error against a float64 computation of the same 16-bit inputs.
TF32 (``input_precision="tf32"`` in the Triton kernel, ``torch.backends.cuda.matmul.allow_tf32``)
rounds matmul *inputs* to 10 mantissa bits on NVIDIA tensor cores; it exists on GPUs only, so here
it is described, not measured.
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
        rows.append({"dtype": str(dtype).removeprefix("torch."), "bits": info.bits, "eps": info.eps,
                     "max": info.max, "smallest_normal": info.smallest_normal,
                     "decimal_digits": round(-math.log10(info.eps), 1)})
    return rows


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with every operation in ``compute`` (stable: max subtracted)."""
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)  # (..., T, S)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v  # (..., T, Dv)


def attention_errors(T: int = 512, D: int = 64, magnitude: float = 1.0, seed: int = 0) -> list[dict[str, object]]:
    """Max |error| against float64 for each 16-bit dtype and each way of computing (see the module docstring).

    q, k, v are (1, 1, T, D) standard normal times ``magnitude``, rounded to the 16-bit dtype first, so
    every row compares arithmetic only, never the rounding of the inputs.
    """
    if not (isinstance(T, int) and isinstance(D, int)) or T < 1 or D < 1:
        raise ValueError(f"T and D must be positive ints, got T={T!r}, D={D!r}")
    generator = torch.Generator().manual_seed(seed)
    base = [torch.randn(1, 1, T, D, generator=generator, dtype=torch.float64) * magnitude for _ in range(3)]
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = (x.to(dtype) for x in base)  # the inputs every variant gets
        exact = _attention(q, k, v, torch.float64)
        variants = {
            "accumulate16": _attention(q, k, v, dtype),
            "accumulate32": _attention(q, k, v, torch.float32).to(dtype),
        }
        with torch.autocast("cpu", dtype=torch.bfloat16):
            variants["autocast"] = _attention(q.float(), k.float(), v.float(), torch.float32)
        for name, out in variants.items():
            error = (out.double() - exact).abs()
            rows.append({"dtype": str(dtype).removeprefix("torch."), "variant": name,
                         "max_error": float(error.nan_to_num(float("inf")).max()),
                         "finite": bool(torch.isfinite(out).all())})
    return rows
