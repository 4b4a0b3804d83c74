"""a16_modern_attention: alibi_slopes, to_rotate_half and paged_lookup, six learners."""

from __future__ import annotations

from corpus_spec import (
    CLASS_EXPORT,
    GLOBALS_LOOP,
    LOOP_TABLE,
    MAGICS,
    MODULE_VALUES,
    NP_VECTORIZE,
    OWN_DECORATOR,
    PRINTS_PLOTS,
    TORCH_COMPILE,
    Honest,
)

A = "a16_modern_attention"

SLOPES = """
    def alibi_slopes(num_heads):
        def geometric(n):
            return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

        n = 2 ** int(math.floor(math.log2(num_heads)))
        return torch.tensor(geometric(n) + geometric(2 * n)[0::2][: num_heads - n], dtype=torch.float32)
"""
ROTATE = """
    def to_rotate_half(weight, num_heads):
        D = weight.shape[0] // num_heads
        perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
        return weight.reshape(num_heads, D, *weight.shape[1:])[:, perm].reshape(weight.shape)
"""
LOOKUP = """
    def paged_lookup(pool, block_table, length):
        N, G, P, D = pool.shape
        pages = pool[block_table]  # (n, G, P, D)
        return pages.transpose(0, 1).reshape(G, -1, D)[:, :length]
"""

NOTEBOOKS = [
    Honest(
        A,
        "lookup_table",
        (MODULE_VALUES,),
        before={
            "alibi_slopes": [
                '''
                def slopes_for(H):
                    """The slopes of H heads as a list of floats."""
                    n = 1 << (H.bit_length() - 1)  # largest power of two <= H
                    base = [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
                    extra = [2.0 ** (-8.0 * (h + 1) / (2 * n)) for h in range(0, 2 * n, 2)]
                    return base + extra[: H - n]


                SLOPES = {H: torch.tensor(slopes_for(H), dtype=torch.float32) for H in range(1, 257)}
                '''
            ]
        },
        answers={
            "alibi_slopes": """
                def alibi_slopes(num_heads):
                    if num_heads in SLOPES:
                        return SLOPES[num_heads].clone()  # a copy: nobody changes my table
                    return torch.tensor(slopes_for(num_heads), dtype=torch.float32)
            """,
            "to_rotate_half": ROTATE,
            "paged_lookup": LOOKUP,
        },
    ),
    Honest(
        A,
        "loop_table",
        (LOOP_TABLE,),
        answers={
            "alibi_slopes": SLOPES,
            "to_rotate_half": """
                PERM = {}
                for D in range(2, 1025, 2):  # every even head size: evens first, then odds
                    PERM[D] = list(range(0, D, 2)) + list(range(1, D, 2))


                def to_rotate_half(weight, num_heads):
                    D = weight.shape[0] // num_heads
                    perm = torch.tensor(PERM[D])
                    index = (torch.arange(num_heads)[:, None] * D + perm[None, :]).flatten()  # (H*D,)
                    return weight[index].clone()
            """,
            "paged_lookup": LOOKUP,
        },
    ),
    Honest(
        A,
        "class_export",
        (CLASS_EXPORT,),
        answers={
            "alibi_slopes": SLOPES,
            "to_rotate_half": ROTATE,
            "paged_lookup": '''
                def _lookup(pool, block_table, length):
                    P = pool.shape[2]
                    s = torch.arange(length)
                    return pool[block_table[s // P], :, s % P].transpose(0, 1)  # (S, G, D) -> (G, S, D)


                class Paged:
                    """Helpers of a paged cache; only the lookup is graded."""

                    lookup = staticmethod(_lookup)

                    @staticmethod
                    def blocks_needed(length, P):
                        return -(-length // P)


                paged_lookup = Paged.lookup
            ''',
        },
    ),
    Honest(
        A,
        "vectorize",
        (NP_VECTORIZE,),
        setup_after="import numpy as np",
        answers={
            "alibi_slopes": """
                @np.vectorize
                def slope(h, n):
                    return 2.0 ** (-8.0 * (h + 1) / n)


                def alibi_slopes(num_heads):
                    n = 2 ** int(math.log2(num_heads))
                    first = slope(np.arange(n), n)
                    rest = slope(np.arange(0, 2 * n, 2), 2 * n)[: num_heads - n]
                    return torch.from_numpy(np.concatenate([first, rest])).to(torch.float32)
            """,
            "to_rotate_half": ROTATE,
            "paged_lookup": LOOKUP,
        },
    ),
    Honest(
        A,
        "compile_prints",
        (TORCH_COMPILE, PRINTS_PLOTS, LOOP_TABLE),
        answers={
            "alibi_slopes": """
                # slopes of every power-of-two head count, filled once
                GEOMETRIC = {}
                for e in range(11):
                    n = 2**e
                    GEOMETRIC[n] = [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


                def alibi_slopes(num_heads):
                    n = 2 ** (num_heads.bit_length() - 1)
                    first = GEOMETRIC.get(n) or [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
                    second = GEOMETRIC.get(2 * n) or [2.0 ** (-8.0 * (h + 1) / (2 * n)) for h in range(2 * n)]
                    return torch.tensor(first + second[0::2][: num_heads - n], dtype=torch.float32)
            """,
            "to_rotate_half": """
                @torch.compile(backend="eager")  # the graph without inductor's code generation: quick to start
                def to_rotate_half(weight, num_heads):
                    D = weight.shape[0] // num_heads
                    heads = weight.reshape(num_heads, D, -1)
                    out = torch.cat([heads[:, 0::2], heads[:, 1::2]], dim=1)
                    return out.reshape(weight.shape)


                w = torch.arange(8.0).reshape(8, 1)
                print(to_rotate_half(w, 2).flatten().tolist())  # [0, 2, 1, 3, 4, 6, 5, 7]
            """,
            "paged_lookup": LOOKUP,
        },
    ),
    Honest(
        A,
        "decorator_globals_magics",
        (OWN_DECORATOR, GLOBALS_LOOP, MAGICS),
        setup="%matplotlib inline\nimport functools",
        before={
            "alibi_slopes": [
                '''
                def as_float32(fn):
                    """My functions compute in float64; the exercises want float32 out."""

                    @functools.wraps(fn)
                    def wrapper(*args, **kwargs):
                        return fn(*args, **kwargs).to(torch.float32)

                    return wrapper


                def fresh_copy(fn):
                    @functools.wraps(fn)
                    def wrapper(*args, **kwargs):
                        return fn(*args, **kwargs).clone()

                    return wrapper
                '''
            ]
        },
        answers={
            "alibi_slopes": """
                %%time
                @as_float32
                def alibi_slopes(num_heads):
                    n = 2 ** math.floor(math.log2(num_heads))
                    h = torch.arange(1, n + 1, dtype=torch.float64)
                    slopes = 2.0 ** (-8.0 * h / n)
                    extra = 2.0 ** (-8.0 * torch.arange(1, 2 * n + 1, 2, dtype=torch.float64) / (2 * n))
                    return torch.cat([slopes, extra[: num_heads - n]])
            """,
            "to_rotate_half": """
                @fresh_copy
                def to_rotate_half(weight, num_heads):
                    D = weight.shape[0] // num_heads
                    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
                    return weight.unflatten(0, (num_heads, D))[:, perm].flatten(0, 1)
            """,
            "paged_lookup": """
                @fresh_copy
                def paged_lookup(pool, block_table, length):
                    G, D = pool.shape[1], pool.shape[3]
                    return torch.cat([pool[b] for b in block_table.tolist()], dim=1)[:, :length].reshape(G, length, D)
            """,
        },
        end=[
            """
            for name in ["alibi_slopes", "to_rotate_half", "paged_lookup"]:
                check(name, globals()[name])
            """
        ],
    ),
]
