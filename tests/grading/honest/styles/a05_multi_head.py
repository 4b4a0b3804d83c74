"""a05_multi_head: split_heads, merge_heads and the MultiHeadAttention module, six learners."""

from __future__ import annotations

from corpus_spec import (
    CLASS_EXPORT,
    EINSUM,
    GRAD_DISABLED,
    JIT_SCRIPT,
    MODULE_INSTANCE,
    SUBCLASS,
    TORCH_COMPILE,
    TRY_IMPORT,
    Honest,
)

A = "a05_multi_head"

SPLIT = """
    def split_heads(x, num_heads):
        B, T, E = x.shape
        return x.view(B, T, num_heads, E // num_heads).transpose(1, 2)  # (B, H, T, D)
"""
MERGE = """
    def merge_heads(x):
        B, H, T, D = x.shape
        return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, E)
"""
MHA = '''
    class MultiHeadAttention(nn.Module):
        """Multi-head attention with q_proj, k_proj, v_proj, out_proj = nn.Linear(E, E)."""

        def __init__(self, embed_dim, num_heads):
            super().__init__()
            self.num_heads = num_heads
            self.q_proj = nn.Linear(embed_dim, embed_dim)
            self.k_proj = nn.Linear(embed_dim, embed_dim)
            self.v_proj = nn.Linear(embed_dim, embed_dim)
            self.out_proj = nn.Linear(embed_dim, embed_dim)

        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            q = split_heads(self.q_proj(query), self.num_heads)
            k = split_heads(self.k_proj(key), self.num_heads)
            v = split_heads(self.v_proj(value), self.num_heads)
            heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
            return self.out_proj(merge_heads(heads)), weights
'''

NOTEBOOKS = [
    Honest(
        A,
        "staticmethod_class",
        (CLASS_EXPORT,),
        answers={
            "split_heads": '''
                def _split(x, num_heads):
                    B, T, E = x.shape
                    return x.reshape(B, T, num_heads, E // num_heads).permute(0, 2, 1, 3)  # (B, H, T, D)


                class Heads:
                    """The two reshapes, kept together."""

                    split = staticmethod(_split)


                split_heads = Heads.split
            ''',
            "merge_heads": """
                def _merge(x):
                    B, H, T, D = x.shape
                    return x.permute(0, 2, 1, 3).reshape(B, T, H * D)  # (B, T, E)


                Heads.merge = staticmethod(_merge)
                merge_heads = Heads.merge
            """,
            "MultiHeadAttention": MHA.replace("split_heads(", "Heads.split(").replace("merge_heads(", "Heads.merge("),
        },
    ),
    Honest(
        A,
        "subclass",
        (SUBCLASS,),
        answers={"split_heads": SPLIT, "merge_heads": MERGE, "MultiHeadAttention": MHA},
        after={
            "MultiHeadAttention": [
                '''
                class MultiHeadAttention(MultiHeadAttention):
                    """The same module; it also keeps the last weights, for the plots below."""

                    def forward(self, query, key=None, value=None, mask=None):
                        out, weights = super().forward(query, key, value, mask=mask)
                        self.last_weights = weights.detach()
                        return out, weights


                check("multi_head_attention", MultiHeadAttention)
                '''
            ]
        },
    ),
    Honest(
        A,
        "grad_off_subclass",
        (GRAD_DISABLED, SUBCLASS),
        setup_after="torch.set_grad_enabled(False)  # no training in this notebook",
        answers={
            "split_heads": SPLIT,
            "merge_heads": MERGE,
            "MultiHeadAttention": '''
                class MultiHeadAttention(nn.Module):
                    """First version: self- and cross-attention, no mask yet."""

                    def __init__(self, embed_dim, num_heads):
                        super().__init__()
                        self.num_heads = num_heads
                        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                            setattr(self, name, nn.Linear(embed_dim, embed_dim))

                    def project(self, query, key, value):
                        H = self.num_heads
                        return (split_heads(self.q_proj(query), H), split_heads(self.k_proj(key), H),
                                split_heads(self.v_proj(value), H))

                    def forward(self, query, key=None, value=None):
                        key = query if key is None else key
                        value = key if value is None else value
                        heads, weights = scaled_dot_product_attention(*self.project(query, key, value))
                        return self.out_proj(merge_heads(heads)), weights
            ''',
        },
        after={
            "MultiHeadAttention": [
                '''
                class MultiHeadAttention(MultiHeadAttention):
                    """Second version: the mask too (the check above showed the mask cases failing)."""

                    def forward(self, query, key=None, value=None, mask=None):
                        key = query if key is None else key
                        value = key if value is None else value
                        q, k, v = self.project(query, key, value)
                        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
                        return self.out_proj(merge_heads(heads)), weights


                check("multi_head_attention", MultiHeadAttention)
                '''
            ]
        },
    ),
    Honest(
        A,
        "einsum_try_import",
        (EINSUM, TRY_IMPORT),
        imports="""
            import math

            import numpy as np

            try:
                import torch
                from torch import nn
            except ImportError as error:
                raise SystemExit("this assignment needs PyTorch: pip install torch") from error
            import matplotlib.pyplot as plt

            from mha_course import check
            from mha_course.core.attention import scaled_dot_product_attention

            torch.manual_seed(0)
        """,
        answers={
            "split_heads": """
                def split_heads(x, num_heads):
                    B, T, E = x.shape
                    return torch.einsum("bthd->bhtd", x.reshape(B, T, num_heads, E // num_heads))
            """,
            "merge_heads": """
                def merge_heads(x):
                    B, H, T, D = x.shape
                    return torch.einsum("bhtd->bthd", x).reshape(B, T, H * D)
            """,
            "MultiHeadAttention": """
                class MultiHeadAttention(nn.Module):
                    def __init__(self, embed_dim, num_heads):
                        super().__init__()
                        self.num_heads = num_heads
                        self.q_proj, self.k_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
                        self.v_proj, self.out_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)

                    def forward(self, query, key=None, value=None, mask=None):
                        key = query if key is None else key
                        value = key if value is None else value
                        q = split_heads(self.q_proj(query), self.num_heads)
                        k = split_heads(self.k_proj(key), self.num_heads)
                        v = split_heads(self.v_proj(value), self.num_heads)
                        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
                        if mask is not None:
                            scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
                        m = scores.amax(-1, keepdim=True)
                        e = torch.exp(scores - torch.where(torch.isneginf(m), torch.zeros_like(m), m))
                        s = e.sum(-1, keepdim=True)
                        weights = e / torch.where(s == 0, torch.ones_like(s), s)  # fully masked row: zeros
                        heads = torch.einsum("bhts,bhsd->bhtd", weights, v)
                        return self.out_proj(merge_heads(heads)), weights
            """,
        },
    ),
    Honest(
        A,
        "module_instance",
        (MODULE_INSTANCE,),
        answers={
            "split_heads": '''
                class SplitHeads(nn.Module):
                    """(B, T, E) -> (B, H, T, D), as a layer I can put in nn.Sequential later."""

                    def forward(self, x, num_heads):
                        B, T, E = x.shape
                        return x.unflatten(-1, (num_heads, E // num_heads)).transpose(1, 2)


                split_heads = SplitHeads()
            ''',
            "merge_heads": """
                class MergeHeads(nn.Module):
                    def forward(self, x):
                        return x.transpose(1, 2).flatten(2)  # (B, T, H * D)


                merge_heads = MergeHeads()
            """,
            "MultiHeadAttention": MHA,
        },
    ),
    Honest(
        A,
        "jit_compile",
        (JIT_SCRIPT, TORCH_COMPILE),
        answers={
            "split_heads": """
                @torch.jit.script
                def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
                    B, T, E = x.shape
                    return x.view(B, T, num_heads, E // num_heads).transpose(1, 2)
            """,
            "merge_heads": """
                @torch.compile(backend="eager")  # inductor's C++ build is slow on my laptop; eager still traces
                def merge_heads(x):
                    B, H, T, D = x.shape
                    return x.transpose(1, 2).reshape(B, T, H * D)
            """,
            "MultiHeadAttention": MHA.replace(
                "return self.out_proj(merge_heads(heads)), weights",
                "B, H, T, D = heads.shape\n"
                "            return self.out_proj(heads.transpose(1, 2).reshape(B, T, H * D)), weights",
            ),
        },
    ),
]
