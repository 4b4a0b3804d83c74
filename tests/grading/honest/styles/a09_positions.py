"""a09_positions: sinusoidal_positions and apply_rotary, six learners."""

from __future__ import annotations

from corpus_spec import (
    EINSUM,
    GRAD_DISABLED,
    LOOP_TABLE,
    MAGICS,
    MODULE_VALUES,
    NP_VECTORIZE,
    OWN_DECORATOR,
    PURE_NUMPY,
    TRY_IMPORT,
    TYPE_HINTS,
    Honest,
)

A = "a09_positions"

ROTARY = """
    def apply_rotary(x):
        T, D = x.shape[-2:]
        theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * theta
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
"""

NOTEBOOKS = [
    Honest(
        A,
        "positions_table",
        (MODULE_VALUES,),
        setup_after='''
            def positions(n):
                """Positions 0 .. n-1 as float64 (exact up to 2**53)."""
                return torch.arange(n, dtype=torch.float64)


            POS = positions(8192)
            INV_FREQ = {E: 10000.0 ** (-torch.arange(0, E, 2, dtype=torch.float64) / E) for E in range(2, 1025, 2)}
        ''',
        answers={
            "sinusoidal_positions": """
                def sinusoidal_positions(T, E):
                    pos = POS[:T] if T <= len(POS) else positions(T)
                    inv = INV_FREQ[E] if E in INV_FREQ else 10000.0 ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
                    angle = pos[:, None] * inv[None, :]  # (T, E/2)
                    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, E).float()
            """,
            "apply_rotary": """
                def apply_rotary(x):
                    T, D = x.shape[-2:]
                    pos = POS[:T] if T <= len(POS) else positions(T)
                    inv = INV_FREQ[D] if D in INV_FREQ else 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
                    angle = pos[:, None] * inv
                    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
                    a, b = x[..., ::2], x[..., 1::2]
                    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
            """,
        },
    ),
    Honest(
        A,
        "loop_table",
        (LOOP_TABLE,),
        before={
            "sinusoidal_positions": [
                """
                # the rotation speeds of every even size I will need, filled once
                THETA = {}
                for D in range(2, 513, 2):
                    THETA[D] = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
                """
            ]
        },
        answers={
            "sinusoidal_positions": """
                def sinusoidal_positions(T, E):
                    theta = THETA[E]  # every even E up to 512 is in the table
                    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta
                    table = torch.empty(T, E, dtype=torch.float64)
                    table[:, 0::2], table[:, 1::2] = angle.sin(), angle.cos()
                    return table.to(torch.float32)
            """,
            "apply_rotary": """
                def apply_rotary(x):
                    T, D = x.shape[-2], x.shape[-1]
                    theta = THETA[D]
                    angle = torch.outer(torch.arange(T, dtype=torch.float64), theta)
                    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
                    out = torch.empty_like(x)
                    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
                    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
                    return out
            """,
        },
    ),
    Honest(
        A,
        "grad_off_typed",
        (GRAD_DISABLED, TYPE_HINTS),
        setup_after="torch.set_grad_enabled(False)  # tables only, no gradients anywhere here",
        answers={
            "sinusoidal_positions": '''
                def sinusoidal_positions(T: int, E: int) -> torch.Tensor:
                    """(T, E) float32 table; pair i of position p turns at p / 10000^(2i/E)."""
                    p = torch.arange(T).unsqueeze(1).to(torch.float64)
                    i2 = torch.arange(0, E, 2).to(torch.float64)
                    angle = p / torch.pow(10000.0, i2 / E)
                    pe = torch.zeros(T, E, dtype=torch.float64)
                    pe[:, 0::2] = torch.sin(angle)
                    pe[:, 1::2] = torch.cos(angle)
                    return pe.to(torch.float32)
            ''',
            "apply_rotary": ROTARY.replace(
                "def apply_rotary(x):", "def apply_rotary(x: torch.Tensor) -> torch.Tensor:"
            ),
        },
    ),
    Honest(
        A,
        "vectorize",
        (NP_VECTORIZE, PURE_NUMPY, TRY_IMPORT),
        imports="""
            import math

            import matplotlib.pyplot as plt
            import numpy as np

            try:
                import torch
            except ImportError:  # NumPy alone still draws the sinusoidal table
                torch = None

            from mha_course import check
        """,
        answers={
            "sinusoidal_positions": """
                @np.vectorize
                def pe_value(p, c, E):
                    # coordinate c of position p: sin for even c, cos for odd c, pair index c // 2
                    angle = p / 10000.0 ** (2 * (c // 2) / E)
                    return math.sin(angle) if c % 2 == 0 else math.cos(angle)


                def sinusoidal_positions(T, E):
                    p, c = np.meshgrid(np.arange(T), np.arange(E), indexing="ij")
                    return torch.from_numpy(pe_value(p, c, E)).float()
            """,
            "apply_rotary": """
                def rotation_angles(T, D):
                    # NumPy table of p * theta_i, shape (T, D/2)
                    return np.arange(T)[:, None] * 10000.0 ** (-np.arange(0, D, 2) / D)


                def apply_rotary(x):
                    angle = torch.from_numpy(rotation_angles(x.shape[-2], x.shape[-1]))
                    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
                    x1, x2 = x[..., 0::2], x[..., 1::2]
                    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)
            """,
        },
    ),
    Honest(
        A,
        "own_decorator",
        (OWN_DECORATOR,),
        setup_after="import functools",
        before={
            "sinusoidal_positions": [
                '''
                def returns_float32(fn):
                    """Compute in float64 inside, hand back float32."""

                    @functools.wraps(fn)
                    def inner(*args, **kwargs):
                        return fn(*args, **kwargs).to(torch.float32)

                    return inner


                def keeps_dtype(fn):
                    @functools.wraps(fn)
                    def inner(x, *args, **kwargs):
                        return fn(x.to(torch.float64), *args, **kwargs).to(x.dtype)

                    return inner
                '''
            ]
        },
        answers={
            "sinusoidal_positions": """
                @returns_float32
                def sinusoidal_positions(T, E):
                    angle = torch.arange(T, dtype=torch.float64)[:, None] / 10000 ** (
                        torch.arange(0, E, 2, dtype=torch.float64) / E
                    )
                    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)
            """,
            "apply_rotary": """
                @keeps_dtype
                def apply_rotary(x):
                    T, D = x.shape[-2:]
                    angle = torch.arange(T, dtype=x.dtype)[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=x.dtype) / D)
                    even, odd = x[..., 0::2], x[..., 1::2]
                    rotated = torch.stack([even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()], -1)
                    return rotated.flatten(-2)
            """,
        },
    ),
    Honest(
        A,
        "magics_einsum",
        (MAGICS, EINSUM),
        setup="%matplotlib inline",
        answers={
            "sinusoidal_positions": """
                %%time
                def sinusoidal_positions(T, E):
                    pos = torch.arange(T, dtype=torch.float64)
                    inv_freq = 1.0 / 10000 ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
                    angle = torch.einsum("t,f->tf", pos, inv_freq)  # outer product (T, E/2)
                    return torch.stack([angle.sin(), angle.cos()], dim=-1).view(T, E).float()
            """,
            "apply_rotary": """
                %%time
                def apply_rotary(x):
                    T, D = x.shape[-2:]
                    inv_freq = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
                    angle = torch.einsum("t,f->tf", torch.arange(T, dtype=torch.float64), inv_freq)
                    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
                    pairs = x.unflatten(-1, (D // 2, 2))  # (..., T, D/2, 2)
                    a, b = pairs[..., 0], pairs[..., 1]
                    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
            """,
        },
    ),
]
