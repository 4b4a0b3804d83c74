"""a04_masks: causal_mask, padding_mask and the masked scaled_dot_product_attention, six learners."""

from __future__ import annotations

from corpus_spec import (
    CLASS_EXPORT,
    CUDA_BRANCH,
    DEFAULT_DTYPE,
    FACTORY,
    GLOBALS_LOOP,
    HELPER_CELL,
    MAGICS,
    MODULE_VALUES,
    Honest,
)

A = "a04_masks"

SDPA = """
    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        work = torch.promote_types(q.dtype, torch.float32)
        scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        weights = softmax(scores, dim=-1)
        return (weights @ v.to(work)).to(q.dtype), weights.to(q.dtype)
"""

PADDING = """
    def padding_mask(lengths, S):
        lengths = torch.as_tensor(lengths).reshape(-1, 1)  # (B, 1)
        return (torch.arange(S) < lengths)[:, None, None, :]  # (B, 1, 1, S)
"""

NOTEBOOKS = [
    Honest(
        A,
        "class_export",
        (CLASS_EXPORT, CUDA_BRANCH),
        answers={
            "causal_mask": '''
                class Masks:
                    """Both masks of this assignment in one place."""

                    @staticmethod
                    def causal(T, S=None):
                        S = T if S is None else S
                        return torch.arange(S)[None, :] <= torch.arange(T)[:, None]  # (T, S)

                    @staticmethod
                    def padding(lengths, S):
                        lengths = torch.as_tensor(lengths)
                        return (torch.arange(S)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)


                causal_mask = Masks.causal
            ''',
            "padding_mask": "padding_mask = Masks.padding",
            "scaled_dot_product_attention": """
                if torch.cuda.is_available():
                    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
                        # on the GPU: move in, compute in float32 or better, move the answer back
                        dev = torch.device("cuda")
                        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
                        work = torch.promote_types(q.dtype, torch.float32)
                        scores = q.to(dev, work) @ k.to(dev, work).transpose(-2, -1) * scale
                        if mask is not None:
                            mask = mask.to(dev)
                            scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
                        weights = softmax(scores, dim=-1)
                        return (weights @ v.to(dev, work)).to("cpu", q.dtype), weights.to("cpu", q.dtype)
                else:
                    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
                        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
                        work = torch.promote_types(q.dtype, torch.float32)
                        scores = q.to(work) @ k.to(work).transpose(-2, -1) * scale
                        if mask is not None:
                            scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
                        weights = softmax(scores, dim=-1)
                        return (weights @ v.to(work)).to(q.dtype), weights.to(q.dtype)
            """,
        },
    ),
    Honest(
        A,
        "lookup_table",
        (MODULE_VALUES, HELPER_CELL),
        before={
            "causal_mask": [
                '''
                def lower_triangle(n):
                    """(n, n) bool, True on and below the diagonal."""
                    return torch.ones(n, n, dtype=torch.bool).tril()


                MAX_LEN = 1024
                CAUSAL = lower_triangle(MAX_LEN)  # built once, sliced for every call
                POSITIONS = torch.arange(4 * MAX_LEN)
                '''
            ]
        },
        answers={
            "causal_mask": """
                def causal_mask(T, S=None):
                    S = T if S is None else S
                    if T <= MAX_LEN and S <= MAX_LEN:
                        return CAUSAL[:T, :S].clone()
                    return torch.arange(S)[None, :] <= torch.arange(T)[:, None]
            """,
            "padding_mask": """
                def padding_mask(lengths, S):
                    positions = POSITIONS[:S] if S <= len(POSITIONS) else torch.arange(S)
                    return (positions[None, :] < torch.as_tensor(lengths)[:, None]).view(-1, 1, 1, S)
            """,
            "scaled_dot_product_attention": SDPA,
        },
    ),
    Honest(
        A,
        "cuda_branch",
        (CUDA_BRANCH,),
        answers={
            "causal_mask": """
                if torch.cuda.is_available():
                    def causal_mask(T, S=None):
                        S = T if S is None else S
                        return torch.ones(T, S, dtype=torch.bool, device="cuda").tril().cpu()
                else:
                    def causal_mask(T, S=None):
                        S = T if S is None else S
                        return torch.ones(T, S, dtype=torch.bool).tril()
            """,
            "padding_mask": PADDING,
            "scaled_dot_product_attention": """
                DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


                def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
                    scale = scale or 1.0 / math.sqrt(q.shape[-1])
                    qf, kf, vf = (t.to(DEVICE, torch.promote_types(t.dtype, torch.float32)) for t in (q, k, v))
                    scores = qf @ kf.transpose(-2, -1) * scale
                    if mask is not None:
                        mask = mask.to(DEVICE)
                        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
                    weights = softmax(scores, dim=-1)
                    return (weights @ vf).to("cpu", q.dtype), weights.to("cpu", q.dtype)
            """,
        },
    ),
    Honest(
        A,
        "factory",
        (FACTORY,),
        answers={
            "causal_mask": """
                def causal_mask(T, S=None):
                    S = S or T
                    return torch.tril(torch.ones(T, S)).bool()
            """,
            "padding_mask": PADDING,
            "scaled_dot_product_attention": '''
                def make_attention(blocked=float("-inf"), upcast=True):
                    """An attention function; blocked scores get ``blocked`` before the softmax."""

                    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
                        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
                        work = torch.promote_types(q.dtype, torch.float32) if upcast else q.dtype
                        scores = q.to(work) @ k.to(work).transpose(-2, -1) * scale
                        if mask is not None and mask.dtype == torch.bool:
                            scores = scores.masked_fill(mask.logical_not(), blocked)
                        elif mask is not None:
                            scores = scores + mask.to(work)
                        weights = softmax(scores, dim=-1)
                        return (weights @ v.to(work)).to(q.dtype), weights.to(q.dtype)

                    return scaled_dot_product_attention


                scaled_dot_product_attention = make_attention()
            ''',
        },
    ),
    Honest(
        A,
        "default_dtype",
        (DEFAULT_DTYPE,),
        setup_after="torch.set_default_dtype(torch.float64)",
        answers={
            "causal_mask": """
                def causal_mask(T, S=None):
                    S = T if S is None else S
                    i = torch.arange(T).unsqueeze(1)
                    j = torch.arange(S).unsqueeze(0)
                    return j <= i
            """,
            "padding_mask": PADDING,
            "scaled_dot_product_attention": """
                def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
                    # every new tensor takes the inputs' (working) dtype, never the default one
                    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
                    if scale is None:
                        scale = 1.0 / math.sqrt(q.shape[-1])
                    scores = torch.matmul(q.to(work), k.to(work).transpose(-2, -1)) * scale
                    if mask is not None:
                        if mask.dtype == torch.bool:
                            neg = torch.tensor(float("-inf"), dtype=work)
                            scores = torch.where(mask, scores, neg)
                        else:
                            scores = scores + mask.to(work)
                    weights = softmax(scores, dim=-1)
                    return torch.matmul(weights, v.to(work)).to(q.dtype), weights.to(q.dtype)
            """,
        },
    ),
    Honest(
        A,
        "globals_loop",
        (GLOBALS_LOOP, MAGICS),
        setup="%matplotlib inline",
        answers={
            "causal_mask": """
                %%time
                def causal_mask(T, S=None):
                    S = T if S is None else S
                    return torch.ones(T, S).tril().to(torch.bool)
            """,
            "padding_mask": PADDING,
            "scaled_dot_product_attention": SDPA,
        },
        end=[
            """
            for key, name in [("causal_mask", "causal_mask"), ("padding_mask", "padding_mask"),
                              ("masked_sdpa", "scaled_dot_product_attention")]:
                print(check(key, globals()[name], show=False))
            """
        ],
    ),
]
