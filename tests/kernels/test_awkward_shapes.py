"""Awkward shapes for the efficient paths, a seeded table: attention_backward, tiled_attention, triton_attention.

Shapes where T is not a multiple of the block, T != S both ways, block size 1, causal, float16; the
references are torch in float64 (autograd for gradients) on the same rounded inputs, held to the
dtype's row of ``TOLERANCES``. Triton runs under its interpreter here (set by conftest.py).
"""

import importlib
import math
import random

import pytest
import torch
import torch.nn.functional as F

from mha_course import attention_backward, scaled_dot_product_attention, tiled_attention
from mha_course.core.masks import causal_mask
from mha_course.efficient.gradients import manual_attention
from mha_course.testing import assert_close

LOW = [torch.float16, torch.bfloat16]


def _ids(configs):
    return [",".join(f"{k}={v}" for k, v in c.items() if k != "seed") for c in configs]


def _causal(T, S):
    return torch.ones(T, S, dtype=torch.bool).tril()


# ----------------------------------------------------------------------------- attention_backward


def _backward_configs(n=32):
    rng = random.Random(4004)
    configs = []
    for i in range(n):
        lead = tuple(rng.randint(1, 3) for _ in range(i % 3))
        configs.append(
            dict(
                lead=lead,
                kv_broadcast=bool(lead) and i % 4 == 1,
                T=rng.choice([1, 3, 5]),
                S=rng.choice([1, 2, 6]),
                D=rng.choice([1, 4, 8]),
                Dv=rng.choice([1, 3, 5]),
                dtype=[torch.float64, torch.float32, torch.float16, torch.bfloat16][i % 4],
                mask=["none", "bool", "float", "key"][(i // 4) % 4],
                causal=i % 2 == 1,
                scale=rng.choice([None, 0.5, 2.0]),
                seed=i,
            )
        )
    return configs


BACKWARD_CONFIGS = _backward_configs()


@pytest.mark.parametrize("c", BACKWARD_CONFIGS, ids=_ids(BACKWARD_CONFIGS))
def test_attention_backward_matches_autograd(c):
    gen = torch.Generator().manual_seed(c["seed"])
    dtype, T, S = c["dtype"], c["T"], c["S"]
    kv_lead = tuple(1 for _ in c["lead"]) if c["kv_broadcast"] else c["lead"]
    q = torch.randn(*c["lead"], T, c["D"], generator=gen).to(dtype)
    k = torch.randn(*kv_lead, S, c["D"], generator=gen).to(dtype)
    v = torch.randn(*kv_lead, S, c["Dv"], generator=gen).to(dtype)
    mask = {
        "none": None,
        "bool": torch.rand(T, S, generator=gen) < 0.6,
        "float": torch.randn(T, S, generator=gen).to(dtype),
        "key": torch.rand(S, generator=gen) < 0.7,
    }[c["mask"]]
    grad_out = torch.randn(*c["lead"], T, c["Dv"], generator=gen).to(dtype)

    # reference: autograd through torch's SDPA in float64, with the causal mask folded in
    full = mask
    if c["causal"]:
        blocked = torch.zeros(T, S, dtype=torch.float64).masked_fill(~_causal(T, S), float("-inf"))
        full = (
            blocked if mask is None else (mask & _causal(T, S) if mask.dtype == torch.bool else mask.double() + blocked)
        )
    elif mask is not None and mask.is_floating_point():
        full = mask.double()
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    full4 = None if full is None else (full if full.dim() > 1 else full.expand(T, S))
    if full4 is not None and full4.dtype == torch.bool and not full4.any(-1).all():
        ref_out = scaled_dot_product_attention(q64, k64, v64, full4, c["scale"])[0]  # zero rows, no NaN
    else:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        ref_out = F.scaled_dot_product_attention(
            q64, k64.expand(*lead, S, c["D"]), v64.expand(*lead, S, c["Dv"]), attn_mask=full4, scale=c["scale"]
        )
    ref_out.backward(grad_out.double())

    dq, dk, dv = attention_backward(q, k, v, grad_out, mask=mask, scale=c["scale"], causal=c["causal"])
    for name, got, ref, x in (("dq", dq, q64.grad, q), ("dk", dk, k64.grad, k), ("dv", dv, v64.grad, v)):
        assert got.shape == x.shape and got.dtype == dtype, name
        assert_close(got, ref.to(dtype), dtype=dtype, what=name)


@pytest.mark.parametrize(
    "T,S,causal,mask_kind,scale",
    [
        (3, 5, True, None, None),
        (4, 2, False, "bool", 0.7),
        (2, 3, True, "float", 1.3),
        (1, 1, False, None, None),
        (5, 3, True, "bool", None),
        (4, 4, True, "float", 0.2),
    ],
)
def test_gradcheck_float64(T, S, causal, mask_kind, scale):
    gen = torch.Generator().manual_seed(T * 7 + S)
    q = torch.randn(2, T, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, S, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, S, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(T, S, generator=gen) < 0.6
        mask[0] = False  # one fully masked row: its gradient is 0, not NaN
    elif mask_kind == "float":
        mask = torch.randn(T, S, generator=gen, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b, c: manual_attention(a, b, c, mask, scale, causal), (q, k, v))


def test_mask_that_widens_the_batch_needs_the_widened_grad_out():
    """q (T, D) with a (2, T, S) mask gives out (2, T, Dv); the gradients sum over that new dim."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n, d in ((4, 8), (5, 8), (5, 3)))
    mask = torch.rand(2, 4, 5, generator=gen) < 0.7
    mask[..., 0] = True
    grad_out = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    q6, k6, v6 = (x.clone().requires_grad_() for x in (q, k, v))
    scaled_dot_product_attention(q6, k6, v6, mask)[0].backward(grad_out)
    for got, ref in zip(attention_backward(q, k, v, grad_out, mask=mask), (q6.grad, k6.grad, v6.grad), strict=True):
        assert_close(got, ref)
    with pytest.raises(ValueError, match=r"grad_out must have the output's shape .* \(2, 4, 3\), got \(4, 3\)"):
        attention_backward(q, k, v, grad_out[0], mask=mask)


# ----------------------------------------------------------------------------- tiled_attention


def _tiled_configs(n=40):
    rng = random.Random(5005)
    configs = []
    for i in range(n):
        T = rng.choice([1, 5, 7, 13, 16])
        configs.append(
            dict(
                lead=tuple(rng.randint(1, 2) for _ in range(i % 3)),
                T=T,
                S=T if i % 5 == 0 else rng.choice([1, 4, 9, 17]),
                D=rng.choice([1, 8, 16]),
                Dv=rng.choice([2, 8]),
                block=[1, 2, 3, 4, 8, (1, 5), (6, 1), None][i % 8],
                causal=i % 2 == 0,
                dtype=[torch.float32, torch.float16, torch.float64, torch.bfloat16][i % 4],
                scale=rng.choice([None, 0.3, 5.0]),
                seed=i,
            )
        )
    return configs


TILED_CONFIGS = _tiled_configs()


@pytest.mark.parametrize("c", TILED_CONFIGS, ids=_ids(TILED_CONFIGS))
def test_tiled_attention_matches_torch(c):
    gen = torch.Generator().manual_seed(c["seed"])
    dtype, T, S = c["dtype"], c["T"], c["S"]
    q = torch.randn(*c["lead"], T, c["D"], generator=gen).to(dtype)
    k = torch.randn(*c["lead"], S, c["D"], generator=gen).to(dtype)
    v = torch.randn(*c["lead"], S, c["Dv"], generator=gen).to(dtype)
    out, lse = tiled_attention(q, k, v, block_size=c["block"], causal=c["causal"], scale=c["scale"], return_lse=True)
    mask = _causal(T, S) if c["causal"] else None
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=c["scale"])
    assert out.dtype == dtype
    assert_close(out, ref.to(dtype), dtype=dtype, what="out")
    scores = q.double() @ k.double().mT * (c["scale"] or 1 / math.sqrt(c["D"]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert_close(lse, torch.logsumexp(scores, -1).to(lse.dtype), what="lse")


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_gradients_with_block_one(causal):
    gen = torch.Generator().manual_seed(12)
    q = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 7, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: tiled_attention(a, b, c, block_size=1, causal=causal), (q, k, v))


def test_tiled_attention_float16_logits_beyond_float16_range():
    gen = torch.Generator().manual_seed(13)
    q = (torch.randn(1, 2, 9, 64, generator=gen) * 60).half()
    k = (torch.randn(1, 2, 11, 64, generator=gen) * 60).half()
    v = torch.randn(1, 2, 11, 16, generator=gen).half()
    out = tiled_attention(q, k, v, block_size=(4, 3), causal=True)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=_causal(9, 11))
    assert torch.isfinite(out).all()
    assert_close(out, ref.half(), what="out")


# ----------------------------------------------------------------------------- triton_attention


def _triton_configs():
    rng = random.Random(6006)
    configs = []
    for i, D in enumerate([16, 32, 64, 128] * 4):
        T, S = rng.choice([(1, 1), (17, 17), (33, 20), (5, 40), (40, 5), (31, 47), (16, 16)])
        configs.append(
            dict(
                B=rng.choice([1, 2]),
                H=rng.choice([1, 2]),
                T=T,
                S=S,
                D=D,
                Dv=D if D == 128 else rng.choice([D, 16, 40]),
                dtype=torch.float32 if i % 2 == 0 else torch.float16,
                causal=(i // 2) % 2 == 1,
                blocks=[(None, None), (16, 16), (32, 16), (64, 32)][i % 4],
                scale=rng.choice([None, 0.2]),
                seed=i,
            )
        )
    return configs


TRITON_CONFIGS = _triton_configs()


@pytest.fixture(scope="module")
def flash():
    pytest.importorskip("triton")
    return importlib.import_module("mha_course.kernels.function")


@pytest.mark.parametrize("c", TRITON_CONFIGS, ids=_ids(TRITON_CONFIGS))
def test_triton_attention_matches_torch(c, flash):
    gen = torch.Generator().manual_seed(c["seed"])
    dtype, T, S = c["dtype"], c["T"], c["S"]
    device = "cuda" if flash.ON_GPU else "cpu"
    q = torch.randn(c["B"], c["H"], T, c["D"], generator=gen).to(dtype)
    k = torch.randn(c["B"], c["H"], S, c["D"], generator=gen).to(dtype)
    v = torch.randn(c["B"], c["H"], S, c["Dv"], generator=gen).to(dtype)
    block_m, block_n = c["blocks"]
    out, lse = flash.triton_attention(
        q.to(device),
        k.to(device),
        v.to(device),
        causal=c["causal"],
        scale=c["scale"],
        block_m=block_m,
        block_n=block_n,
        return_lse=True,
    )
    mask = _causal(T, S) if c["causal"] else None
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=c["scale"])
    assert out.dtype == dtype and out.shape == (c["B"], c["H"], T, c["Dv"])
    # On a GPU float32 dots may use TF32 inside tl.dot only when asked; the kernel asks for IEEE.
    assert_close(out.cpu(), ref.to(dtype), dtype=dtype, what="out")
    scores = q.double() @ k.double().mT * (c["scale"] or 1 / math.sqrt(c["D"]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert_close(
        lse.cpu(),
        torch.logsumexp(scores, -1).float(),
        dtype=torch.float32 if dtype == torch.float32 else torch.float16,
        what="lse",
    )


@pytest.mark.parametrize("causal", [False, True])
def test_triton_bfloat16_is_right_not_silently_wrong(causal, flash):
    """bfloat16 is wrong inside Triton's interpreter; the wrapper upcasts there. Either way the result
    must agree with torch at bfloat16 tolerance (on a GPU the kernel runs natively in bfloat16)."""
    gen = torch.Generator().manual_seed(21 + causal)
    device = "cuda" if flash.ON_GPU else "cpu"
    q, k, v = (torch.randn(1, 2, n, 32, generator=gen).bfloat16() for n in (19, 37, 37))
    out = flash.triton_attention(q.to(device), k.to(device), v.to(device), causal=causal, block_m=32, block_n=16)
    ref = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=_causal(19, 37) if causal else None
    )
    assert out.dtype == torch.bfloat16
    assert_close(out.cpu(), ref.bfloat16(), what="bfloat16 out")


def test_triton_matches_the_library_on_its_own_causal_mask(flash):
    gen = torch.Generator().manual_seed(31)
    device = "cuda" if flash.ON_GPU else "cpu"
    q, k, v = (torch.randn(2, 1, n, 24, generator=gen) for n in (23, 9, 9))  # T > S: later rows see all keys
    out = flash.triton_attention(q.to(device), k.to(device), v.to(device), causal=True, block_m=16, block_n=16)
    expected, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(23, 9))
    assert_close(out.cpu(), expected)
