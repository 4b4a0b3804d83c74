"""MultiHeadAttention against torch.nn.MultiheadAttention over a seeded table of configurations.

Each seeded configuration converts weights one way (``from_torch`` of a module built with
``batch_first`` True or False, or ``to_torch``), picks self- or cross-attention (S != T), bias on or
off, and a mask combination (causal attn_mask, key_padding_mask, both, a float attn_mask, a per-batch
3-D mask), then compares outputs and per-head weights (``average_attn_weights=False``) at float32
tolerance. Masks never block a whole row here; fully masked rows are checked separately.
"""

import random

import pytest
import torch
from torch import nn

from mha_course import MultiHeadAttention, causal_mask, padding_mask
from mha_course.core.masks import to_key_padding_mask, to_torch_attn_mask
from mha_course.testing import assert_close

MASKS = ["none", "causal", "padding", "causal+padding", "float", "per_batch", "per_batch+padding"]


def _configs(n=42):
    rng = random.Random(3003)
    configs = []
    for i in range(n):
        H, D = rng.choice([1, 2, 4]), rng.choice([1, 3, 8])
        cross = i % 3 != 0
        T = rng.choice([1, 4, 6])
        configs.append(
            dict(
                B=rng.choice([1, 2, 3]),
                T=T,
                S=rng.choice([1, 3, 7]) if cross else T,
                H=H,
                D=D,
                bias=i % 2 == 0,
                convert=["from_bf", "from_seq", "to"][i % 3],
                cross=cross,
                mask=MASKS[i % len(MASKS)],
                seed=i,
            )
        )
    return configs


CONFIGS = _configs()


def _ids(configs):
    return [",".join(f"{k}={v}" for k, v in c.items() if k != "seed") for c in configs]


def _build(c):
    torch.manual_seed(c["seed"])
    E = c["H"] * c["D"]
    if c["convert"] == "to":
        ours = MultiHeadAttention(E, c["H"], bias=c["bias"]).eval()
        theirs, batch_first = ours.to_torch().eval(), True
        assert theirs.batch_first
    else:
        batch_first = c["convert"] == "from_bf"
        theirs = nn.MultiheadAttention(E, c["H"], bias=c["bias"], batch_first=batch_first).eval()
        ours = MultiHeadAttention.from_torch(theirs).eval()
    return ours, theirs, batch_first


def _masks(c, gen):
    """(our mask, torch attn_mask, torch key_padding_mask); no query loses every key."""
    B, T, S, H = c["B"], c["T"], c["S"], c["H"]
    ours, attn_mask, kpm = None, None, None
    kinds = c["mask"].split("+")
    if "causal" in kinds:
        ours = causal_mask(T, S)
        attn_mask = to_torch_attn_mask(ours)
    if "float" in kinds:
        ours = torch.randn(T, S, generator=gen)
        attn_mask = ours
    if "per_batch" in kinds:
        ours = torch.rand(B, T, S, generator=gen) < 0.6
        ours[..., 0] = True
        attn_mask = to_torch_attn_mask(ours).repeat_interleave(H, dim=0)  # (B*H, T, S), batch-major
    if "padding" in kinds:
        lengths = [int(n) for n in torch.randint(1, S + 1, (B,), generator=gen)]
        real = padding_mask(lengths, S)  # (B, 1, 1, S)
        kpm = to_key_padding_mask(real)
        if ours is None:
            ours = real
        elif ours.dim() == 3:
            ours = ours & real[:, 0]
        else:
            ours = ours & real
    return ours, attn_mask, kpm


@pytest.mark.parametrize("c", CONFIGS, ids=_ids(CONFIGS))
def test_matches_nn_multiheadattention(c):
    ours, theirs, batch_first = _build(c)
    gen = torch.Generator().manual_seed(1000 + c["seed"])
    E = c["H"] * c["D"]
    query = torch.randn(c["B"], c["T"], E, generator=gen)
    key = torch.randn(c["B"], c["S"], E, generator=gen) if c["cross"] else query
    value = torch.randn(c["B"], c["S"], E, generator=gen) if c["cross"] else query
    mask, attn_mask, kpm = _masks(c, gen)

    def layout(x):  # (B, T, E) -> torch's layout
        return x if batch_first else x.transpose(0, 1)

    with torch.no_grad():
        out, weights = ours(query, key, value, mask=mask)
        ref_out, ref_weights = theirs(
            layout(query),
            layout(key),
            layout(value),
            key_padding_mask=kpm,
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=False,
        )
    assert out.shape == (c["B"], c["T"], E) and weights.shape == (c["B"], c["H"], c["T"], c["S"])
    assert_close(out, layout(ref_out), what="out")
    assert_close(weights, ref_weights, what="weights (B, H, T, S)")
    assert_close(
        weights.mean(dim=1),
        theirs(layout(query), layout(key), layout(value), key_padding_mask=kpm, attn_mask=attn_mask)[1].detach(),
        what="head-averaged weights",
    )


def test_float64_module_and_round_trip():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64).eval()
    ours = MultiHeadAttention.from_torch(theirs)
    assert ours.q_proj.weight.dtype == torch.float64
    back = ours.to_torch()
    for name, p in theirs.state_dict().items():
        assert torch.equal(p, back.state_dict()[name]), name
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = causal_mask(5)
    with torch.no_grad():
        assert_close(ours(x, mask=mask)[0], theirs(x, x, x, attn_mask=~mask)[0])


def test_fully_padded_batch_element_gives_bias_only_output():
    """Every key of batch 1 is padding: torch may give NaN; ours gives zero weights, so the output is
    out_proj's bias alone (the documented zero-row convention)."""
    torch.manual_seed(1)
    ours = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    mask = padding_mask([3, 0], 3)
    with torch.no_grad():
        out, weights = ours(x, mask=mask)
    assert torch.isfinite(out).all()
    assert not weights[1].any()
    assert_close(out[1], ours.out_proj.bias.detach().expand(3, 8))
    with torch.no_grad():
        theirs = ours.to_torch().eval()(x[:1], x[:1], x[:1], average_attn_weights=False)
    assert_close(weights[:1], theirs[1])


def test_unsupported_torch_options_are_refused_not_ignored():
    with pytest.raises(ValueError, match=r"kdim.*vdim.*embed_dim=8.*kdim=4.*vdim=6"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=6))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(8, 8))
