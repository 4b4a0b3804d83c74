"""a14_attention_backward: softmax_jacobian and attention_backward by hand, six learners."""

from __future__ import annotations

from corpus_spec import (
    CLASS_EXPORT,
    DEFAULT_DTYPE,
    EINSUM,
    GLOBALS_LOOP,
    JIT_SCRIPT,
    LAMBDA,
    LOOP_TABLE,
    TORCH_COMPILE,
    Honest,
)

A = "a14_attention_backward"

JACOBIAN = """
    def softmax_jacobian(p):
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
"""
BACKWARD = """
    def attention_backward(q, k, v, grad_out):
        scale = 1.0 / math.sqrt(q.shape[-1])
        p = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
        o = p @ v
        dv = p.transpose(-2, -1) @ grad_out
        dp = grad_out @ v.transpose(-2, -1)
        ds = p * (dp - (grad_out * o).sum(dim=-1, keepdim=True))
        return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
"""

NOTEBOOKS = [
    Honest(
        A,
        "compile",
        (TORCH_COMPILE,),
        answers={
            "softmax_jacobian": """
                @torch.compile
                def softmax_jacobian(p):
                    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
            """,
            "attention_backward": BACKWARD,
        },
    ),
    Honest(
        A,
        "jit_script",
        (JIT_SCRIPT,),
        setup_after="from typing import Tuple",
        answers={
            "softmax_jacobian": """
                @torch.jit.script
                def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
                    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
            """,
            "attention_backward": """
                @torch.jit.script
                def attention_backward(
                    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
                    scale = 1.0 / math.sqrt(q.size(-1))
                    p = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)
                    o = torch.matmul(p, v)
                    dv = torch.matmul(p.transpose(-2, -1), grad_out)
                    dp = torch.matmul(grad_out, v.transpose(-2, -1))
                    ds = p * (dp - (grad_out * o).sum(dim=-1, keepdim=True))
                    return torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-2, -1), q) * scale, dv
            """,
        },
    ),
    Honest(
        A,
        "einsum_loop_table",
        (EINSUM, LOOP_TABLE),
        before={
            "softmax_jacobian": [
                """
                # identity matrices of every row length I expect, made once
                EYE = {}
                for n in range(1, 257):
                    EYE[n] = torch.eye(n, dtype=torch.float64)
                """
            ]
        },
        answers={
            "softmax_jacobian": """
                def softmax_jacobian(p):
                    S = p.shape[-1]
                    eye = (EYE[S] if S in EYE else torch.eye(S, dtype=torch.float64)).to(p.dtype)
                    return torch.einsum("...i,ij->...ij", p, eye) - torch.einsum("...i,...j->...ij", p, p)
            """,
            "attention_backward": """
                def attention_backward(q, k, v, grad_out):
                    scale = q.shape[-1] ** -0.5
                    p = torch.softmax(torch.einsum("...td,...sd->...ts", q, k) * scale, dim=-1)
                    o = torch.einsum("...ts,...se->...te", p, v)
                    dv = torch.einsum("...ts,...te->...se", p, grad_out)
                    dp = torch.einsum("...te,...se->...ts", grad_out, v)
                    ds = p * (dp - torch.einsum("...te,...te->...t", grad_out, o)[..., None])
                    dq = torch.einsum("...ts,...sd->...td", ds, k) * scale
                    dk = torch.einsum("...ts,...td->...sd", ds, q) * scale
                    return dq, dk, dv
            """,
        },
    ),
    Honest(
        A,
        "class_export",
        (CLASS_EXPORT,),
        answers={
            "softmax_jacobian": '''
                class ByHand:
                    """Everything I derive by hand in this assignment."""

                    @staticmethod
                    def jacobian(p):
                        return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]

                    @classmethod
                    def backward(cls, q, k, v, grad_out):
                        scale = 1 / math.sqrt(q.shape[-1])
                        p = torch.softmax(q @ k.mT * scale, dim=-1)
                        dv = p.mT @ grad_out
                        dp = grad_out @ v.mT
                        # row r of dS = J(p_r) dP_r, the Jacobian applied row by row
                        ds = (cls.jacobian(p) @ dp.unsqueeze(-1)).squeeze(-1)
                        return ds @ k * scale, ds.mT @ q * scale, dv


                softmax_jacobian = ByHand.jacobian
            ''',
            "attention_backward": "attention_backward = ByHand.backward",
        },
    ),
    Honest(
        A,
        "default_dtype",
        (DEFAULT_DTYPE,),
        setup_after="torch.set_default_dtype(torch.float64)  # gradcheck wants float64 anyway",
        answers={
            "softmax_jacobian": """
                def softmax_jacobian(p):
                    eye = torch.eye(p.shape[-1], dtype=p.dtype)  # not the default dtype: p's
                    return p.unsqueeze(-1) * (eye - p.unsqueeze(-2))
            """,
            "attention_backward": """
                def attention_backward(q, k, v, grad_out):
                    scale = torch.tensor(q.shape[-1], dtype=q.dtype).rsqrt()
                    p = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
                    o = p @ v
                    dv = p.transpose(-2, -1) @ grad_out
                    dp = grad_out @ v.transpose(-2, -1)
                    ds = p * (dp - (grad_out * o).sum(dim=-1, keepdim=True))
                    return (ds @ k * scale).to(q.dtype), (ds.transpose(-2, -1) @ q * scale).to(q.dtype), dv
            """,
        },
    ),
    Honest(
        A,
        "globals_loop_lambda",
        (GLOBALS_LOOP, LAMBDA),
        answers={
            "softmax_jacobian": "softmax_jacobian = lambda p: torch.diag_embed(p) - p[..., :, None] * p[..., None, :]",
            "attention_backward": BACKWARD,
        },
        end=[
            """
            results = {name: check(name, globals()[name], show=False) for name in ("softmax_jacobian", "attention_backward")}
            print({name: f"{r.score:g}/{r.max_score:g}" for name, r in results.items()})
            """
        ],
    ),
]
