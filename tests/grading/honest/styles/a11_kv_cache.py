"""a11_kv_cache: kv_decode_step (grouped-query bonus included), six learners."""

from __future__ import annotations

from corpus_spec import (
    CUDA_BRANCH,
    EINSUM,
    GLOBALS_LOOP,
    GRAD_DISABLED,
    MODULE_INSTANCE,
    MODULE_VALUES,
    PARTIAL,
    TYPE_HINTS,
    WRAPPER,
    Honest,
)

A = "a11_kv_cache"

NOTEBOOKS = [
    Honest(
        A,
        "grad_off_typed",
        (GRAD_DISABLED, TYPE_HINTS),
        setup_after="""
            torch.set_grad_enabled(False)  # decoding is inference: no graph
        """,
        answers={
            "kv_decode_step": '''
                def kv_decode_step(
                    q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
                    """One decoding step; returns (out, k_cache, v_cache)."""
                    k_cache = torch.cat((k_cache, k_new), dim=-2)  # (B, G, S + 1, D)
                    v_cache = torch.cat((v_cache, v_new), dim=-2)
                    B, H, _, D = q.shape
                    G = k_cache.shape[1]
                    qg = q.view(B, G, H // G, 1, D)  # query heads grouped by the kv head they read
                    scores = qg @ k_cache.unsqueeze(2).transpose(-2, -1) / D**0.5  # (B, G, H/G, 1, S + 1)
                    out = torch.softmax(scores, dim=-1) @ v_cache.unsqueeze(2)  # (B, G, H/G, 1, D)
                    return out.reshape(B, H, 1, D), k_cache, v_cache
            ''',
        },
    ),
    Honest(
        A,
        "wrapper",
        (WRAPPER, MODULE_VALUES),
        answers={
            "kv_decode_step": '''
                def count_calls(fn):
                    """Count the steps (the plot below decodes 48 tokens)."""

                    def counted(*args, **kwargs):
                        counted.calls += 1
                        return fn(*args, **kwargs)

                    counted.calls = 0
                    return counted


                INV_SQRT = {d: 1 / math.sqrt(d) for d in range(1, 1025)}  # the score scale of every head size


                def kv_decode_step(q, k_new, v_new, k_cache, v_cache):
                    k_cache = torch.cat([k_cache, k_new], dim=2)
                    v_cache = torch.cat([v_cache, v_new], dim=2)
                    group = q.shape[1] // k_cache.shape[1]
                    keys = k_cache.repeat_interleave(group, dim=1)
                    values = v_cache.repeat_interleave(group, dim=1)
                    D = q.shape[-1]
                    scale = INV_SQRT[D] if D in INV_SQRT else 1 / math.sqrt(D)
                    weights = torch.softmax(q @ keys.transpose(-2, -1) * scale, dim=-1)
                    return weights @ values, k_cache, v_cache


                kv_decode_step = count_calls(kv_decode_step)
            ''',
        },
        end=['print("steps decoded:", kv_decode_step.calls)'],
    ),
    Honest(
        A,
        "module_instance",
        (MODULE_INSTANCE,),
        setup_after="from torch import nn",
        answers={
            "kv_decode_step": '''
                class DecodeStep(nn.Module):
                    """A decoding step as a layer (no parameters: the projections live elsewhere)."""

                    def forward(self, q, k_new, v_new, k_cache, v_cache):
                        k_cache = torch.cat([k_cache, k_new], dim=2)
                        v_cache = torch.cat([v_cache, v_new], dim=2)
                        rep = q.size(1) // k_cache.size(1)
                        k = k_cache.repeat_interleave(rep, dim=1)
                        v = v_cache.repeat_interleave(rep, dim=1)
                        return F.scaled_dot_product_attention(q, k, v), k_cache, v_cache


                kv_decode_step = DecodeStep()
            ''',
        },
    ),
    Honest(
        A,
        "partial",
        (PARTIAL,),
        setup_after="from functools import partial",
        answers={
            "kv_decode_step": """
                def decode(q, k_new, v_new, k_cache, v_cache, *, seq_dim, head_dim):
                    k_cache = torch.cat([k_cache, k_new], dim=seq_dim)
                    v_cache = torch.cat([v_cache, v_new], dim=seq_dim)
                    group = q.shape[head_dim] // k_cache.shape[head_dim]
                    keys = k_cache.repeat_interleave(group, dim=head_dim)
                    values = v_cache.repeat_interleave(group, dim=head_dim)
                    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
                    return torch.softmax(scores, dim=-1) @ values, k_cache, v_cache


                kv_decode_step = partial(decode, seq_dim=2, head_dim=1)  # the layout (B, H, S, D)
            """,
        },
    ),
    Honest(
        A,
        "cuda_branch",
        (CUDA_BRANCH,),
        answers={
            "kv_decode_step": """
                def attend(q, keys, values):
                    group = q.shape[1] // keys.shape[1]
                    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
                    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ values


                if torch.cuda.is_available():
                    def kv_decode_step(q, k_new, v_new, k_cache, v_cache):
                        # the cache lives on the GPU; the answer comes back to the CPU for plotting
                        k_cache = torch.cat([k_cache.cuda(), k_new.cuda()], dim=2)
                        v_cache = torch.cat([v_cache.cuda(), v_new.cuda()], dim=2)
                        out = attend(q.cuda(), k_cache, v_cache)
                        return out.cpu(), k_cache.cpu(), v_cache.cpu()
                else:
                    def kv_decode_step(q, k_new, v_new, k_cache, v_cache):
                        k_cache = torch.cat([k_cache, k_new], dim=2)
                        v_cache = torch.cat([v_cache, v_new], dim=2)
                        return attend(q, k_cache, v_cache), k_cache, v_cache
            """,
        },
    ),
    Honest(
        A,
        "globals_loop_einsum",
        (GLOBALS_LOOP, EINSUM),
        answers={
            "kv_decode_step": """
                def kv_decode_step(q, k_new, v_new, k_cache, v_cache):
                    k_cache, v_cache = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
                    B, H, _, D = q.shape
                    G = k_cache.shape[1]
                    qg = q.reshape(B, G, H // G, D)  # (B, G, H/G, D): one new token
                    scores = torch.einsum("bgrd,bgsd->bgrs", qg, k_cache) / math.sqrt(D)
                    out = torch.einsum("bgrs,bgsd->bgrd", torch.softmax(scores, -1), v_cache)
                    return out.reshape(B, H, 1, D), k_cache, v_cache
            """,
        },
        end=[
            """
            for name in ("kv_decode_step",):
                check(name, globals()[name])
            """
        ],
    ),
]
