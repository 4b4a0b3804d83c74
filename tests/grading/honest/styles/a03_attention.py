"""a03_attention: attention_np (NumPy) and scaled_dot_product_attention (torch), six learners."""

from __future__ import annotations

from corpus_spec import (
    EINSUM,
    GLOBALS_LOOP,
    JIT_SCRIPT,
    PARTIAL,
    PRINTS_PLOTS,
    PURE_NUMPY,
    TRY_IMPORT,
    WRAPPER,
    Honest,
)

A = "a03_attention"

NOTEBOOKS = [
    Honest(
        A,
        "einsum",
        (EINSUM,),
        answers={
            "attention_np": """
                def attention_np(q, k, v):
                    scores = np.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1])  # (..., T, S)
                    weights = softmax_np(scores, axis=-1)
                    return np.einsum("...ts,...sd->...td", weights, v), weights
            """,
            "scaled_dot_product_attention": """
                def scaled_dot_product_attention(q, k, v, scale=None):
                    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
                    weights = softmax(torch.einsum("...td,...sd->...ts", q, k) * scale, dim=-1)  # (..., T, S)
                    return torch.einsum("...ts,...sd->...td", weights, v), weights
            """,
        },
    ),
    Honest(
        A,
        "partial",
        (PARTIAL, GLOBALS_LOOP),
        setup_after="from functools import partial",
        answers={
            "attention_np": """
                def attention_with(q, k, v, scale=None, *, normalise, swap):
                    # one body for NumPy and torch: the caller says how to softmax and transpose
                    if scale is None:
                        scale = 1.0 / math.sqrt(q.shape[-1])
                    weights = normalise(q @ swap(k) * scale)
                    return weights @ v, weights


                attention_np = partial(attention_with, normalise=softmax_np, swap=lambda a: np.swapaxes(a, -1, -2))
            """,
            "scaled_dot_product_attention": """
                scaled_dot_product_attention = partial(
                    attention_with, normalise=softmax, swap=lambda t: t.transpose(-2, -1)
                )
            """,
        },
        end=[
            """
            for key, name in {"attention_np": "attention_np", "sdpa": "scaled_dot_product_attention"}.items():
                check(key, globals()[name])
            """
        ],
    ),
    Honest(
        A,
        "wrapper",
        (WRAPPER,),
        setup_after="import functools",
        before={
            "attention_np": [
                '''
                CALLS = []


                def log_calls(fn):
                    """Record the shapes each call sees (I used it to debug broadcasting)."""

                    @functools.wraps(fn)
                    def logged(*args, **kwargs):
                        CALLS.append((fn.__name__, [tuple(a.shape) for a in args if hasattr(a, "shape")]))
                        return fn(*args, **kwargs)

                    return logged
                '''
            ]
        },
        answers={
            "attention_np": """
                def attention_np(q, k, v):
                    weights = softmax_np(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]).astype(q.dtype))
                    return weights @ v, weights


                attention_np = log_calls(attention_np)
            """,
            "scaled_dot_product_attention": """
                def scaled_dot_product_attention(q, k, v, scale=None):
                    if scale is None:
                        scale = q.shape[-1] ** -0.5
                    weights = softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
                    return weights @ v, weights


                scaled_dot_product_attention = log_calls(scaled_dot_product_attention)
            """,
        },
        end=['print(len(CALLS), "calls; the last:", CALLS[-1])'],
    ),
    Honest(
        A,
        "try_import",
        (TRY_IMPORT,),
        imports="""
            import math

            import numpy as np

            try:
                import torch
            except ImportError:  # the NumPy half works without torch
                torch = None
            import matplotlib.pyplot as plt

            from mha_course import check
            from mha_course.core.softmax import softmax, softmax_np

            if torch is not None:
                torch.manual_seed(0)
            rng = np.random.default_rng(0)
        """,
        answers={
            "attention_np": """
                def attention_np(q, k, v):
                    d = q.shape[-1]
                    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(d)
                    weights = softmax_np(scores, axis=-1)
                    return np.matmul(weights, v), weights
            """,
            "scaled_dot_product_attention": """
                def scaled_dot_product_attention(q, k, v, scale=None):
                    if torch is None:
                        raise ImportError("this part needs torch")
                    scale = scale if scale is not None else 1 / math.sqrt(q.size(-1))
                    weights = softmax(torch.matmul(q, k.mT) * scale, dim=-1)
                    return torch.matmul(weights, v), weights
            """,
        },
    ),
    Honest(
        A,
        "jit_script",
        (JIT_SCRIPT,),
        setup_after="from typing import Optional, Tuple",
        answers={
            "attention_np": """
                def attention_np(q, k, v):
                    weights = softmax_np(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]))
                    return weights @ v, weights
            """,
            "scaled_dot_product_attention": """
                @torch.jit.script
                def stable_softmax(scores: torch.Tensor) -> torch.Tensor:
                    work = scores.float() if scores.dtype == torch.float16 or scores.dtype == torch.bfloat16 else scores
                    m = work.amax(dim=-1, keepdim=True)
                    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
                    e = torch.exp(work - m)
                    s = e.sum(dim=-1, keepdim=True)
                    return (e / torch.where(s == 0, torch.ones_like(s), s)).to(scores.dtype)


                @torch.jit.script
                def scaled_dot_product_attention(
                    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
                    s = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
                    weights = stable_softmax(torch.matmul(q, k.transpose(-2, -1)) * s)
                    return torch.matmul(weights, v), weights
            """,
        },
    ),
    Honest(
        A,
        "numpy_plots",
        (PURE_NUMPY, PRINTS_PLOTS),
        answers={
            "attention_np": """
                def attention_np(q, k, v):
                    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]).astype(q.dtype)
                    scores = scores - scores.max(axis=-1, keepdims=True)
                    weights = np.exp(scores)
                    weights /= weights.sum(axis=-1, keepdims=True)
                    return weights @ v, weights


                q = rng.standard_normal((4, 8))
                out, w = attention_np(q, q, q)
                print("out", out.shape, "weights", w.shape, "row sums", w.sum(-1).round(6))
                plt.imshow(w, cmap="viridis")
                plt.title("self-attention of 4 random vectors")
                plt.colorbar()
                plt.show()
            """,
            "scaled_dot_product_attention": """
                def scaled_dot_product_attention(q, k, v, scale=None):
                    if scale is None:
                        scale = 1 / math.sqrt(q.shape[-1])
                    weights = softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
                    out = weights @ v
                    return out, weights


                x = torch.randn(2, 3, 5, 4)
                out, w = scaled_dot_product_attention(x, x, x)
                print(out.shape, w.shape, out.dtype)
            """,
        },
    ),
]
