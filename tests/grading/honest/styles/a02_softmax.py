"""a02_softmax: softmax_np (NumPy) and softmax (torch), six learners."""

from __future__ import annotations

from corpus_spec import (
    DEFAULT_DTYPE,
    FACTORY,
    GLOBALS_LOOP,
    HELPER_CELL,
    LAMBDA,
    MAGICS,
    NP_VECTORIZE,
    OWN_ASSERTS,
    OWN_DECORATOR,
    TYPE_HINTS,
    Honest,
)

A = "a02_softmax"

NOTEBOOKS = [
    Honest(
        A,
        "factory",
        (FACTORY, DEFAULT_DTYPE),
        setup_after="torch.set_default_dtype(torch.float64)",
        answers={
            "softmax_np": '''
                def make_softmax_np(zero_for_empty_rows=True):
                    """Build the softmax; the flag decides what an all -inf row gives."""

                    def softmax_np(x, axis=-1):
                        m = np.max(x, axis=axis, keepdims=True)
                        if zero_for_empty_rows:
                            m = np.where(np.isneginf(m), 0.0, m)
                        e = np.exp(x - m)
                        s = e.sum(axis=axis, keepdims=True)
                        return e / np.where(s == 0, 1.0, s)

                    return softmax_np


                softmax_np = make_softmax_np()
            ''',
            "softmax": """
                def make_softmax(upcast=(torch.float16, torch.bfloat16)):
                    def softmax(x, dim=-1):
                        work = x.float() if x.dtype in upcast else x
                        m = work.amax(dim=dim, keepdim=True)
                        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
                        e = torch.exp(work - m)
                        s = e.sum(dim=dim, keepdim=True)
                        return (e / torch.where(s == 0, torch.ones_like(s), s)).to(x.dtype)

                    return softmax


                softmax = make_softmax()
            """,
        },
    ),
    Honest(
        A,
        "own_decorator",
        (OWN_DECORATOR,),
        setup_after="import functools",
        before={
            "softmax_np": [
                '''
                def same_dtype(fn):
                    """My decorator: whatever fn computes, hand back the input's dtype."""

                    @functools.wraps(fn)
                    def wrapper(x, *args, **kwargs):
                        out = fn(x, *args, **kwargs)
                        return out.astype(x.dtype) if isinstance(x, np.ndarray) else out.to(x.dtype)

                    return wrapper


                def in_float32(fn):
                    """Half precision overflows: compute in float32, the caller's dtype comes back via same_dtype."""

                    @functools.wraps(fn)
                    def wrapper(x, *args, **kwargs):
                        if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16):
                            x = x.float()
                        return fn(x, *args, **kwargs)

                    return wrapper
                '''
            ]
        },
        answers={
            "softmax_np": '''
                @same_dtype
                def softmax_np(x, axis=-1):
                    """Numerically stable softmax along one axis."""
                    m = np.max(x, axis=axis, keepdims=True)
                    m[np.isneginf(m)] = 0.0  # m is a new array: the input stays as it was
                    e = np.exp(x - m)
                    total = e.sum(axis=axis, keepdims=True)
                    total[total == 0] = 1.0
                    return e / total
            ''',
            "softmax": '''
                @same_dtype
                @in_float32
                def softmax(x, dim=-1):
                    """Numerically stable softmax of a tensor along ``dim``."""
                    m = x.amax(dim=dim, keepdim=True)
                    m = m.masked_fill(torch.isneginf(m), 0.0)
                    e = (x - m).exp()
                    total = e.sum(dim=dim, keepdim=True)
                    return e / total.masked_fill(total == 0, 1.0)
            ''',
        },
    ),
    Honest(
        A,
        "magics_typed",
        (MAGICS, TYPE_HINTS, OWN_ASSERTS),
        setup="%matplotlib inline",
        answers={
            "softmax_np": '''
                %%time
                def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
                    """Stable softmax: shift each row by its own max (0 for an all -inf row)."""
                    row_max = x.max(axis=axis, keepdims=True)
                    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
                    exps = np.exp(x - row_max)
                    sums = exps.sum(axis=axis, keepdims=True)
                    return exps / np.maximum(sums, np.finfo(x.dtype).tiny)


                # my own quick tests before check()
                assert np.allclose(softmax_np(np.zeros((2, 4))), 0.25)
                assert softmax_np(np.array([1000.0, 1000.0])).tolist() == [0.5, 0.5]
                assert softmax_np(np.full(3, -np.inf)).tolist() == [0.0, 0.0, 0.0]
                assert softmax_np(np.ones(3, dtype=np.float32)).dtype == np.float32
            ''',
            "softmax": '''
                %%time
                def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
                    """Stable softmax in torch; float16/bfloat16 are computed in float32."""
                    half = x.dtype in (torch.float16, torch.bfloat16)
                    work = x.to(torch.float32) if half else x
                    row_max = work.amax(dim=dim, keepdim=True)
                    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
                    exps = torch.exp(work - row_max)
                    sums = exps.sum(dim=dim, keepdim=True)
                    out = exps / sums.clamp_min(torch.finfo(work.dtype).tiny)
                    return out.to(x.dtype)


                assert softmax(torch.tensor([12.0, 0.0], dtype=torch.float16)).dtype == torch.float16
                assert torch.equal(softmax(torch.full((2,), float("-inf"))), torch.zeros(2))
            ''',
        },
    ),
    Honest(
        A,
        "globals_loop",
        (GLOBALS_LOOP, HELPER_CELL),
        before={
            "softmax_np": [
                '''
                def shift_for(row_max):
                    """The shift of each row: its max, or 0 where the row is all -inf."""
                    return np.where(np.isneginf(row_max), 0.0, row_max)


                def safe_divisor(total):
                    return np.where(total == 0, 1.0, total)
                '''
            ]
        },
        answers={
            "softmax_np": """
                def softmax_np(x, axis=-1):
                    e = np.exp(x - shift_for(np.max(x, axis=axis, keepdims=True)))
                    return e / safe_divisor(e.sum(axis=axis, keepdims=True))
            """,
            "softmax": """
                def softmax(x, dim=-1):
                    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                    m = work.amax(dim=dim, keepdim=True)
                    e = torch.exp(work - torch.where(torch.isneginf(m), torch.zeros_like(m), m))
                    s = e.sum(dim=dim, keepdim=True)
                    return (e / torch.where(s == 0, torch.ones_like(s), s)).to(x.dtype)
            """,
        },
        end=[
            """
            # check everything once more at the end
            for name in ["softmax_np", "softmax"]:
                result = check(name, globals()[name])
            """
        ],
    ),
    Honest(
        A,
        "vectorize",
        (NP_VECTORIZE, LAMBDA),
        answers={
            "softmax_np": """
                @np.vectorize
                def finite_or_zero(m):
                    # one row maximum at a time: -inf (a fully masked row) becomes 0
                    return 0.0 if m == -np.inf else m


                def softmax_np(x, axis=-1):
                    m = finite_or_zero(np.max(x, axis=axis, keepdims=True))
                    e = np.exp(x - m)
                    s = e.sum(axis=axis, keepdims=True)
                    s[s == 0] = 1.0
                    return (e / s).astype(x.dtype)
            """,
            "softmax": """
                upcast = lambda t: t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
                finite_max = lambda t, d: torch.nan_to_num(t.amax(dim=d, keepdim=True), neginf=0.0)
                nonzero = lambda s: s + (s == 0).to(s.dtype)


                def softmax(x, dim=-1):
                    work = upcast(x)
                    e = torch.exp(work - finite_max(work, dim))
                    return (e / nonzero(e.sum(dim=dim, keepdim=True))).to(x.dtype)
            """,
        },
    ),
    Honest(
        A,
        "default_dtype",
        (DEFAULT_DTYPE,),
        setup_after="""
            torch.set_default_dtype(torch.float64)  # I like double precision for experiments
        """,
        answers={
            "softmax_np": """
                def softmax_np(x, axis=-1):
                    m = np.max(x, axis=axis, keepdims=True)
                    m = np.where(np.isneginf(m), 0, m).astype(x.dtype)
                    e = np.exp(x - m)
                    s = np.sum(e, axis=axis, keepdims=True)
                    return e / np.where(s == 0, 1, s).astype(x.dtype)
            """,
            "softmax": """
                def softmax(x, dim=-1):
                    # new tensors take x's dtype, never the default one
                    work_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
                    work = x.to(work_dtype)
                    zero = torch.zeros((), dtype=work_dtype)
                    one = torch.ones((), dtype=work_dtype)
                    m = work.amax(dim=dim, keepdim=True)
                    e = torch.exp(work - torch.where(torch.isneginf(m), zero, m))
                    s = e.sum(dim=dim, keepdim=True)
                    return (e / torch.where(s == 0, one, s)).to(x.dtype)
            """,
        },
    ),
]
