"""a12_tiled_attention: online_softmax_update and tiled_attention, six learners."""

from __future__ import annotations

from corpus_spec import (
    DEFAULT_DTYPE,
    FACTORY,
    HELPER_CELL,
    MAGICS,
    OWN_DECORATOR,
    PRINTS_PLOTS,
    TRY_IMPORT,
    Honest,
)

A = "a12_tiled_attention"

UPDATE = """
    def online_softmax_update(m, l, x_block):
        m_new = torch.maximum(m, x_block.amax(dim=-1))
        shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        correction = torch.exp(m - shift)
        l_new = l * correction + torch.exp(x_block - shift.unsqueeze(-1)).sum(dim=-1)
        return m_new, l_new, correction
"""

TILED = """
    def tiled_attention(q, k, v, block_size, causal=False):
        T, S = q.shape[-2], k.shape[-2]
        scale = 1.0 / math.sqrt(q.shape[-1])
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
        for i0 in range(0, T, block_size):
            qb = q[..., i0:i0 + block_size, :]
            rows = torch.arange(i0, i0 + qb.shape[-2])
            m = torch.full(qb.shape[:-1], -math.inf, dtype=q.dtype)
            l = torch.zeros(qb.shape[:-1], dtype=q.dtype)
            acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
            for j0 in range(0, S, block_size):
                if causal and j0 > rows[-1]:
                    break
                s = qb @ k[..., j0:j0 + block_size, :].transpose(-2, -1) * scale
                if causal:
                    cols = torch.arange(j0, j0 + s.shape[-1])
                    s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
                m_new = torch.maximum(m, s.amax(dim=-1))
                shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                alpha = torch.exp(m - shift)
                p = torch.exp(s - shift.unsqueeze(-1))
                l = l * alpha + p.sum(dim=-1)
                acc = acc * alpha.unsqueeze(-1) + p @ v[..., j0:j0 + block_size, :]
                m = m_new
            out[..., i0:i0 + block_size, :] = acc / l.clamp(min=torch.finfo(l.dtype).tiny).unsqueeze(-1)
        return out
"""

NOTEBOOKS = [
    Honest(
        A,
        "helper_cell",
        (HELPER_CELL,),
        before={
            "online_softmax_update": [
                '''
                def fold(m, l, scores):
                    """Fold a block of scores (..., b) into the running (m, l); also return the rescale factor
                    of the old sums and the block's exponentials (tiled_attention needs both)."""
                    m_new = torch.maximum(m, scores.amax(dim=-1))
                    shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m - shift)
                    p = torch.exp(scores - shift.unsqueeze(-1))
                    return m_new, l * alpha + p.sum(dim=-1), alpha, p
                '''
            ]
        },
        answers={
            "online_softmax_update": """
                def online_softmax_update(m, l, x_block):
                    m_new, l_new, correction, _ = fold(m, l, x_block)
                    return m_new, l_new, correction
            """,
            "tiled_attention": """
                def tiled_attention(q, k, v, block_size, causal=False):
                    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
                    outs = []
                    for i0 in range(0, T, block_size):
                        qb = q[..., i0:i0 + block_size, :] / math.sqrt(D)
                        rows = torch.arange(i0, i0 + qb.shape[-2])
                        m = torch.full(qb.shape[:-1], -math.inf, dtype=q.dtype)
                        l = torch.zeros_like(m)
                        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
                        for j0 in range(0, S if not causal else min(S, i0 + qb.shape[-2]), block_size):
                            s = qb @ k[..., j0:j0 + block_size, :].transpose(-2, -1)
                            if causal:
                                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows[:, None], -math.inf)
                            m, l, alpha, p = fold(m, l, s)
                            acc = acc * alpha.unsqueeze(-1) + p @ v[..., j0:j0 + block_size, :]
                        outs.append(acc / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1))
                    return torch.cat(outs, dim=-2)
            """,
        },
    ),
    Honest(
        A,
        "factory",
        (FACTORY,),
        answers={
            "online_softmax_update": """
                def make_update(zero_shift_for_empty_rows=True):
                    def online_softmax_update(m, l, x_block):
                        m_new = torch.maximum(m, x_block.amax(dim=-1))
                        shift = m_new
                        if zero_shift_for_empty_rows:
                            shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                        correction = torch.exp(m - shift)
                        l_new = l * correction + torch.exp(x_block - shift[..., None]).sum(-1)
                        return m_new, l_new, correction

                    return online_softmax_update


                online_softmax_update = make_update()
            """,
            "tiled_attention": '''
                def make_tiled_attention(update):
                    """Tiled attention built on an update rule (the one above)."""

                    def tiled_attention(q, k, v, block_size, causal=False):
                        T, S = q.shape[-2], k.shape[-2]
                        scale = q.shape[-1] ** -0.5
                        out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
                        for i0 in range(0, T, block_size):
                            qb = q[..., i0:i0 + block_size, :]
                            rows = torch.arange(i0, i0 + qb.shape[-2])
                            m = torch.full(qb.shape[:-1], float("-inf"), dtype=q.dtype)
                            l = torch.zeros_like(m)
                            acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
                            for j0 in range(0, S, block_size):
                                if causal and j0 > i0 + qb.shape[-2] - 1:
                                    break
                                s = qb @ k[..., j0:j0 + block_size, :].mT * scale
                                if causal:
                                    s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1])[None] > rows[:, None], float("-inf"))
                                m_new, l, correction = update(m, l, s)
                                shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                                acc = acc * correction[..., None] + torch.exp(s - shift[..., None]) @ v[..., j0:j0 + block_size, :]
                                m = m_new
                            out[..., i0:i0 + block_size, :] = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
                        return out

                    return tiled_attention


                tiled_attention = make_tiled_attention(online_softmax_update)
            ''',
        },
    ),
    Honest(
        A,
        "try_import",
        (TRY_IMPORT,),
        imports="""
            import math

            import matplotlib.pyplot as plt

            try:
                import torch
                import torch.nn.functional as F
            except ImportError:
                print("PyTorch is missing: run `pip install torch` first")
                raise

            from mha_course import check

            torch.manual_seed(0)
        """,
        answers={"online_softmax_update": UPDATE, "tiled_attention": TILED},
    ),
    Honest(
        A,
        "magics_prints",
        (MAGICS, PRINTS_PLOTS),
        setup="%matplotlib inline",
        answers={
            "online_softmax_update": "%%time\n" + UPDATE.strip("\n").replace("\n    ", "\n")[4:],
            "tiled_attention": "%%time\n"
            + TILED.strip("\n").replace("\n    ", "\n")[4:]
            + """


q = torch.randn(1, 2, 9, 4, dtype=torch.float64)
for b in (1, 4, 9):
    print("block", b, "max error", float((tiled_attention(q, q, q, b) - F.scaled_dot_product_attention(q, q, q)).abs().max()))
""",
        },
        end=[
            """
            sizes = [1, 2, 4, 8, 16, 32]
            x = torch.randn(1, 1, 64, 8)
            errors = [float((tiled_attention(x, x, x, b, causal=True) - F.scaled_dot_product_attention(x, x, x, is_causal=True)).abs().max()) for b in sizes]
            plt.semilogy(sizes, [max(e, 1e-12) for e in errors], "o-")
            plt.xlabel("block size")
            plt.ylabel("max error")
            plt.show()
            print(errors)
            """
        ],
    ),
    Honest(
        A,
        "default_dtype",
        (DEFAULT_DTYPE,),
        setup_after="torch.set_default_dtype(torch.float64)",
        answers={
            "online_softmax_update": """
                def online_softmax_update(m, l, x_block):
                    m_new = torch.maximum(m, x_block.max(dim=-1).values)
                    shift = torch.where(torch.isneginf(m_new), torch.tensor(0.0, dtype=m_new.dtype), m_new)
                    correction = torch.exp(m - shift)
                    return m_new, l * correction + torch.exp(x_block - shift.unsqueeze(-1)).sum(-1), correction
            """,
            "tiled_attention": TILED,
        },
    ),
    Honest(
        A,
        "own_decorator",
        (OWN_DECORATOR,),
        setup_after="import functools",
        before={
            "online_softmax_update": [
                '''
                def positive_block(fn):
                    """Refuse a block size below 1 with a clear message (I kept passing 0)."""

                    @functools.wraps(fn)
                    def checked(q, k, v, block_size, *args, **kwargs):
                        if block_size < 1:
                            raise ValueError(f"block_size must be >= 1, got {block_size}")
                        return fn(q, k, v, block_size, *args, **kwargs)

                    return checked


                def same_shapes(fn):
                    @functools.wraps(fn)
                    def checked(m, l, x_block):
                        assert m.shape == l.shape == x_block.shape[:-1], (m.shape, l.shape, x_block.shape)
                        return fn(m, l, x_block)

                    return checked
                '''
            ]
        },
        answers={
            "online_softmax_update": "@same_shapes\n" + UPDATE.strip("\n").replace("\n    ", "\n")[4:],
            "tiled_attention": "@positive_block\n" + TILED.strip("\n").replace("\n    ", "\n")[4:],
        },
    ),
]
