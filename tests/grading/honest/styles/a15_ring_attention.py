"""a15_ring_attention: merge_partial_attention and ring_step, six learners."""

from __future__ import annotations

from corpus_spec import (
    CUDA_BRANCH,
    GRAD_DISABLED,
    HELPER_CELL,
    LAMBDA,
    MODULE_INSTANCE,
    OWN_ASSERTS,
    PARTIAL,
    WRAPPER,
    Honest,
)

A = "a15_ring_attention"

MERGE = """
    def merge_partial_attention(outs, lses):
        lse_blocks = torch.stack(list(lses))
        lse = torch.logsumexp(lse_blocks, dim=0)
        shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
        weights = torch.exp(lse_blocks - shift)
        return (weights.unsqueeze(-1) * torch.stack(list(outs))).sum(dim=0), lse
"""
RING = """
    def ring_step(q, k, v, out, lse, q_offset, k_offset, causal=False):
        T, S = q.shape[-2], k.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            visible = torch.arange(k_offset, k_offset + S)[None, :] <= torch.arange(q_offset, q_offset + T)[:, None]
            scores = scores.masked_fill(~visible, -math.inf)
        lse_b = torch.logsumexp(scores, dim=-1)
        shift = torch.where(torch.isneginf(lse_b), torch.zeros_like(lse_b), lse_b)
        out_b = torch.exp(scores - shift.unsqueeze(-1)) @ v
        return merge_partial_attention([out, out_b], [lse, lse_b])
"""

NOTEBOOKS = [
    Honest(
        A,
        "partial",
        (PARTIAL,),
        setup_after="import functools",
        answers={
            "merge_partial_attention": MERGE,
            "ring_step": """
                def step_with(q, k, v, out, lse, q_offset, k_offset, causal=False, *, merge, neg_inf=-math.inf):
                    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                    if causal:
                        qpos = torch.arange(q.shape[-2]) + q_offset
                        kpos = torch.arange(k.shape[-2]) + k_offset
                        scores = scores.masked_fill(kpos[None, :] > qpos[:, None], neg_inf)
                    lse_b = torch.logsumexp(scores, dim=-1)
                    safe = torch.where(torch.isneginf(lse_b), torch.zeros_like(lse_b), lse_b)
                    return merge([out, torch.exp(scores - safe[..., None]) @ v], [lse, lse_b])


                ring_step = functools.partial(step_with, merge=merge_partial_attention)
            """,
        },
    ),
    Honest(
        A,
        "wrapper",
        (WRAPPER,),
        before={
            "merge_partial_attention": [
                '''
                TRACE = []


                def traced(fn):
                    """Keep (function name, number of inputs) of every call: I watch the ring turn with it."""

                    def inner(*args, **kwargs):
                        TRACE.append((fn.__name__, len(args)))
                        return fn(*args, **kwargs)

                    inner.__doc__ = fn.__doc__
                    return inner
                '''
            ]
        },
        answers={
            "merge_partial_attention": MERGE + "\n\n    merge_partial_attention = traced(merge_partial_attention)\n",
            "ring_step": RING + "\n\n    ring_step = traced(ring_step)\n",
        },
        end=["print(len(TRACE), TRACE[-3:])"],
    ),
    Honest(
        A,
        "module_instance",
        (MODULE_INSTANCE,),
        setup_after="from torch import nn",
        answers={
            "merge_partial_attention": '''
                class Merge(nn.Module):
                    """Merging partial attention as a (parameter-free) layer."""

                    def forward(self, outs, lses):
                        lse_blocks = torch.stack([*lses])  # (n, ..., T)
                        lse = torch.logsumexp(lse_blocks, dim=0)
                        w = torch.exp(lse_blocks - lse.nan_to_num(neginf=0.0))
                        return torch.einsum("n...t,n...td->...td", w, torch.stack([*outs])), lse


                merge_partial_attention = Merge()
            ''',
            "ring_step": """
                class RingStep(nn.Module):
                    def __init__(self, merge):
                        super().__init__()
                        self.merge = merge

                    def forward(self, q, k, v, out, lse, q_offset, k_offset, causal=False):
                        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                        if causal:
                            i = torch.arange(q.shape[-2])[:, None] + q_offset
                            j = torch.arange(k.shape[-2])[None, :] + k_offset
                            scores = scores.masked_fill(j > i, -math.inf)
                        lse_b = torch.logsumexp(scores, dim=-1)
                        out_b = torch.exp(scores - lse_b.nan_to_num(neginf=0.0)[..., None]) @ v
                        return self.merge([out, out_b], [lse, lse_b])


                ring_step = RingStep(merge_partial_attention)
            """,
        },
    ),
    Honest(
        A,
        "cuda_branch",
        (CUDA_BRANCH,),
        answers={
            "merge_partial_attention": """
                if torch.cuda.is_available():
                    def merge_partial_attention(outs, lses):
                        lse_blocks = torch.stack([t.cuda() for t in lses])
                        lse = torch.logsumexp(lse_blocks, dim=0)
                        w = torch.exp(lse_blocks - torch.where(torch.isneginf(lse), 0.0, lse))
                        out = (w.unsqueeze(-1) * torch.stack([t.cuda() for t in outs])).sum(0)
                        return out.cpu(), lse.cpu()
                else:
                    def merge_partial_attention(outs, lses):
                        lse_blocks = torch.stack(list(lses))
                        lse = torch.logsumexp(lse_blocks, dim=0)
                        w = torch.exp(lse_blocks - torch.where(torch.isneginf(lse), 0.0, lse))
                        return (w.unsqueeze(-1) * torch.stack(list(outs))).sum(0), lse
            """,
            "ring_step": RING,
        },
    ),
    Honest(
        A,
        "grad_off",
        (GRAD_DISABLED,),
        setup_after="torch.set_grad_enabled(False)",
        answers={"merge_partial_attention": MERGE, "ring_step": RING},
    ),
    Honest(
        A,
        "lambda_helpers",
        (LAMBDA, HELPER_CELL, OWN_ASSERTS),
        before={
            "merge_partial_attention": [
                """
                finite_or_zero = lambda t: torch.where(torch.isneginf(t), torch.zeros_like(t), t)
                scores_of = lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                """
            ]
        },
        answers={
            "merge_partial_attention": """
                def merge_partial_attention(outs, lses):
                    lse_b = torch.stack(list(lses))
                    lse = torch.logsumexp(lse_b, 0)
                    w = torch.exp(lse_b - finite_or_zero(lse))
                    out = (w[..., None] * torch.stack(list(outs))).sum(0)
                    return out, lse


                # my checks: two halves merge into the whole, an empty block counts for nothing
                s = torch.randn(3, 10)
                v = torch.randn(10, 4)
                halves = [(torch.softmax(s[:, i:i + 5], -1) @ v[i:i + 5], torch.logsumexp(s[:, i:i + 5], -1)) for i in (0, 5)]
                merged, lse = merge_partial_attention(*zip(*halves))
                assert torch.allclose(merged, torch.softmax(s, -1) @ v, atol=1e-6)
                empty = merge_partial_attention([torch.zeros(3, 4)], [torch.full((3,), -math.inf)])
                assert not empty[0].isnan().any() and torch.isneginf(empty[1]).all()
            """,
            "ring_step": """
                def ring_step(q, k, v, out, lse, q_offset, k_offset, causal=False):
                    s = scores_of(q, k)
                    if causal:
                        keep = (torch.arange(k.shape[-2]) + k_offset)[None, :] <= (torch.arange(q.shape[-2]) + q_offset)[:, None]
                        s = s.masked_fill(~keep, -math.inf)
                    lse_b = torch.logsumexp(s, -1)
                    out_b = torch.exp(s - finite_or_zero(lse_b)[..., None]) @ v
                    return merge_partial_attention([out, out_b], [lse, lse_b])
            """,
        },
    ),
]
