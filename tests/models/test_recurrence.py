"""Recurrence against attention: the paper's table, the GRU tagger, matched sizes, and input sensitivity."""

import math

import pytest
import torch

from mha_course.models.model import TinyTransformer
from mha_course.models.recurrence import GRUTagger, input_sensitivity, matched_gru, path_table
from mha_course.models.tasks import get_task
from mha_course.models.train import train
from mha_course.testing import assert_close


def test_path_table_is_the_papers_table():
    table = path_table(64, 32, kernel=4, window=8)
    assert table["self-attention"] == {"work": 64 * 64 * 32, "sequential": 1, "path": 1}
    assert table["recurrent"] == {"work": 64 * 32 * 32, "sequential": 64, "path": 64}
    assert table["dilated convolutional (k=4)"]["path"] == 3 and table["self-attention, window 8"]["path"] == 8
    assert table["convolutional (k=4)"]["path"] == 21  # each plain layer reaches k - 1 = 3 positions further: 63 / 3
    assert (
        path_table(1, 1)["convolutional (k=3)"]["path"] == 1 == path_table(1, 1)["dilated convolutional (k=3)"]["path"]
    )


def test_gru_tagger_is_causal_and_trains_with_the_course_loop():
    torch.manual_seed(0)
    model = GRUTagger(12, 16).eval()
    tokens = torch.randint(12, (2, 7))
    logits, weights = model(tokens)
    assert logits.shape == (2, 7, 12) and weights is None
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 12
    assert torch.equal(model(changed)[0][:, :5], logits[:, :5])  # step t sees tokens 0..t only
    result = train(GRUTagger(12, 16), get_task("copy", length=2), steps=5, eval_every=5, eval_size=20, progress=False)
    assert result.steps == 5


def test_matched_gru_is_the_largest_that_fits():
    for budget in (2000, 13548):
        gru = matched_gru(12, budget)
        n = sum(p.numel() for p in gru.parameters())
        bigger = GRUTagger(12, gru.gru.hidden_size + 1)
        assert n <= budget < sum(p.numel() for p in bigger.parameters())
    with pytest.raises(ValueError, match="no GRU fits"):
        matched_gru(100, 50)


def test_input_sensitivity_matches_a_finite_difference_and_sees_the_path():
    torch.manual_seed(1)
    gru = GRUTagger(10, 8).double()
    tokens = torch.randint(10, (1, 6))
    sens = input_sensitivity(gru, tokens, position=3)
    assert sens.shape == (6,) and torch.all(sens[4:] == 0)  # the future cannot matter to a GRU
    # finite difference along the gradient's direction at position 1
    emb = gru.embed(tokens).detach().requires_grad_(True)
    out = gru.head(gru.gru(emb)[0])[:, 3]
    (out**2).sum().backward()
    direction = emb.grad[0, 1] / emb.grad[0, 1].norm()
    eps = 1e-6
    bumped = emb.detach().clone()
    bumped[0, 1] += eps * direction
    slope = ((gru.head(gru.gru(bumped)[0])[:, 3] ** 2).sum() - (out.detach() ** 2).sum()) / eps
    assert math.isclose(float(slope.detach()), float(sens[1]), rel_tol=1e-4)
    transformer = TinyTransformer(10, 6, embed_dim=16, num_heads=2, num_layers=1, positions="rotary")
    assert torch.all(input_sensitivity(transformer, tokens, -1) > 0)  # every token reaches the last output


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="positive"):
        path_table(0, 4)
    with pytest.raises(ValueError, match=">= 2"):
        path_table(4, 4, kernel=1)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        GRUTagger(5, 4)(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="embed"):
        input_sensitivity(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="position"):
        input_sensitivity(GRUTagger(5, 4), torch.zeros(1, 3, dtype=torch.long), position=3)


def test_a_plain_convolution_stack_reaches_k_minus_1_positions_per_layer():
    # position T-1 depends on position 0 after exactly path layers of kernel-k causal convolutions
    T, k = 20, 3
    reach = torch.eye(T)
    band = sum(torch.diag(torch.ones(T - i), -i) for i in range(k))  # (T, T): out t reads t-k+1 .. t
    layers = 0
    while reach[-1, 0] == 0:
        reach, layers = (band @ reach).clamp(max=1), layers + 1
    assert layers == path_table(T, 4, kernel=k)[f"convolutional (k={k})"]["path"]


def test_linear_attention_recurrence_equals_its_parallel_form_with_a_constant_state():
    from mha_course.models.recurrence import LinearAttentionState, linear_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, d, dtype=torch.float64) for d in (4, 4, 5))
    expected = linear_attention(q, k, v)
    # a float64 loop straight from the definition
    fq, fk = (torch.nn.functional.elu(x) + 1 for x in (q, k))
    for t in range(9):
        w = (fq[..., t : t + 1, :] * fk[..., : t + 1, :]).sum(-1)  # (2, 3, t+1)
        assert_close(expected[..., t, :], (w.unsqueeze(-1) * v[..., : t + 1, :]).sum(-2) / w.sum(-1, keepdim=True))
    state, sizes = LinearAttentionState(), []
    steps = []
    for t in range(9):
        steps.append(state.step(q[..., t, :], k[..., t, :], v[..., t, :]))
        sizes.append(state.nbytes())
    assert_close(torch.stack(steps, dim=-2), expected)
    assert len(set(sizes)) == 1 and sizes[0] == 2 * 3 * (4 * 5 + 4) * 8
    with pytest.raises(ValueError, match="same"):
        state.step(q[..., 0, :], k[..., 0, :2], v[..., 0, :])
    with pytest.raises(ValueError, match="as many queries"):
        linear_attention(q, k[..., :4, :], v[..., :4, :])


def test_training_step_seconds_times_a_real_step_of_either_model():
    from mha_course.models.recurrence import training_step_seconds

    torch.manual_seed(0)
    gru = GRUTagger(7, 8)
    tokens = torch.randint(7, (4, 10))
    before = [p.detach().clone() for p in gru.parameters()]
    seconds = training_step_seconds(gru, tokens, tokens, repeats=2)
    assert 0 < seconds < 10
    assert any(not torch.equal(a, b) for a, b in zip(before, gru.parameters(), strict=True))  # it trained
    with pytest.raises(ValueError, match="share"):
        training_step_seconds(gru, tokens, tokens[:, :5])


def test_forward_flops_counts_the_grus_gates_and_the_transformers_products():
    from mha_course.models.recurrence import forward_flops

    gru, tokens = GRUTagger(12, 32), torch.randint(12, (4, 10))
    # per token: 3 gates, each (E + h) x h multiply-adds, 2 FLOPs each; then the (h, V) head
    assert forward_flops(gru, tokens) == 4 * 10 * (2 * 3 * 32 * (32 + 32) + 2 * 32 * 12)
    task = get_task("copy", length=4)
    model = TinyTransformer(task.vocab_size, task.seq_len, embed_dim=16, num_heads=2, num_layers=1)
    x = task.sample(2, 0).inputs
    T = x.shape[1]
    projections = 2 * T * (4 * 16 * 16 + 2 * 16 * 64 + 16 * task.vocab_size)  # q, k, v, out; MLP; head
    assert forward_flops(model, x) == 2 * (projections + 2 * 2 * T * T * 16)  # + scores and weighted sum
