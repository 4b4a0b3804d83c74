"""The hybrid stack: Qwen3-Next's 3 : 1 layout, causal linear layers, and the course's training loop runs it."""

import pytest
import torch

from mha_course.inference.rope_layouts import RotaryMultiHeadAttention
from mha_course.models.hybrid import GatedDeltaNet, HybridTransformer
from mha_course.models.tasks import get_task
from mha_course.models.train import train


def test_three_linear_layers_then_one_full_as_qwen3_next():
    model = HybridTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=8)
    assert model.full_layers == (3, 7)
    kinds = [type(block.attn) for block in model.blocks]
    assert kinds == [GatedDeltaNet] * 3 + [RotaryMultiHeadAttention] + [GatedDeltaNet] * 3 + [RotaryMultiHeadAttention]
    assert HybridTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=3).full_layers == ()  # all linear


def test_hybrid_is_causal_and_returns_the_full_layers_attention():
    torch.manual_seed(0)
    model = HybridTransformer(12, 20, embed_dim=16, num_heads=2, num_layers=4, chunk_size=4).eval()
    tokens = torch.randint(12, (2, 11))  # not a multiple of the chunk size
    logits, weights = model(tokens)
    assert logits.shape == (2, 11, 12) and weights.shape == (1, 2, 2, 11, 11)
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 12
    later = model(changed)[0]
    torch.testing.assert_close(later[:, :7], logits[:, :7], atol=1e-6, rtol=1e-5)  # t sees tokens 0..t only
    assert not torch.allclose(later[:, 7:], logits[:, 7:])
    only_linear = HybridTransformer(12, 20, embed_dim=16, num_heads=2, num_layers=2, chunk_size=4)
    assert only_linear(tokens)[1] is None


def test_gated_delta_net_on_a_prefix_equals_its_output_on_the_whole():
    torch.manual_seed(1)
    layer = GatedDeltaNet(16, 4, chunk_size=3).double()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    whole, none = layer(x)
    assert whole.shape == (2, 10, 16) and none is None
    torch.testing.assert_close(layer(x[:, :7])[0], whole[:, :7], atol=1e-12, rtol=1e-10)


def test_the_linear_layers_can_drop_the_delta_rule_or_the_gate_for_comparison():
    torch.manual_seed(2)
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    layers = {
        (d, g): GatedDeltaNet(16, 2, chunk_size=4, delta=d, gate=g).double()
        for d in (True, False)
        for g in (True, False)
    }
    for layer in list(layers.values())[1:]:
        layer.load_state_dict(layers[True, True].state_dict(), strict=False)  # the same weights where shared
    outputs = {key: layer(x)[0] for key, layer in layers.items()}
    assert not hasattr(layers[True, False], "A_log") and hasattr(layers[False, True], "A_log")
    keys = list(outputs)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            assert not torch.allclose(outputs[a], outputs[b]), (a, b)
    model = HybridTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=4, delta=False, gate=False)
    assert [block.attn.delta for block in model.blocks[:3]] == [False] * 3


def test_hybrid_trains_with_the_course_loop():
    torch.manual_seed(0)
    model = HybridTransformer(12, 16, embed_dim=16, num_heads=2, num_layers=4, chunk_size=4)
    result = train(model, get_task("copy", length=3), steps=2, eval_every=2, eval_size=8, progress=False)
    assert result.steps == 2
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_bad_sizes_and_uses_are_refused():
    with pytest.raises(ValueError, match="must divide"):
        GatedDeltaNet(10, 3)
    with pytest.raises(ValueError, match="chunk_size"):
        GatedDeltaNet(8, 2, chunk_size=0)
    with pytest.raises(TypeError, match="full_every"):
        HybridTransformer(12, 16, full_every=2.5)
    layer = GatedDeltaNet(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="self-attention only"):
        layer(x, torch.randn(1, 3, 8), None)
    with pytest.raises(ValueError, match="always causal"):
        layer(x, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="always causal"):
        HybridTransformer(12, 16, embed_dim=16, num_heads=2)(torch.zeros(1, 4, dtype=torch.long), torch.ones(4, 4))
