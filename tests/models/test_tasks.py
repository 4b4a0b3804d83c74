"""The synthetic tasks: seeded, well-formed, and their source positions really hold the answers."""

import pytest
import torch

from mha_course.models.tasks import IGNORE, TASKS, get_task


@pytest.mark.parametrize("name", sorted(TASKS))
def test_same_seed_same_data_and_shapes(name):
    task = get_task(name)
    a, b, c = task.sample(64, 5), task.sample(64, 5), task.sample(64, 6)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    N, T = a.inputs.shape
    assert (N, T) == (64, task.seq_len)
    assert a.targets.shape == (N, T) and a.source_pos.shape == (N, T, len(task.relation_names))
    assert a.inputs.min() >= 0 and a.inputs.max() < task.vocab_size
    scored = a.targets != IGNORE
    assert scored.any() and a.targets[scored].max() < task.vocab_size
    # every scored position carries at least one relation, unscored ones none
    has_relation = (a.source_pos >= 0).any(-1)
    assert torch.equal(has_relation, scored)


@pytest.mark.parametrize("name", ["copy", "reverse", "sort", "grammar", "recall"])
def test_targets_are_copies_of_source_positions(name):
    task = get_task(name)
    data = task.sample(200, 0)
    n, t, r = torch.nonzero(data.source_pos >= 0, as_tuple=True)
    copied = data.inputs[n, data.source_pos[n, t, r]]
    assert torch.equal(copied, data.targets[n, t])


def test_sequence_ops_follow_their_rules():
    for name in ("copy", "reverse", "sort"):
        task = get_task(name, length=4)
        sample = task.sample(50, 1)
        xs = sample.inputs[:, :4]
        want = {"copy": xs, "reverse": xs.flip(1), "sort": xs.sort(1).values}[name]
        assert torch.equal(sample.targets[:, 5:], want)
        assert (sample.targets[:, :5] == IGNORE).all()
        assert task.decode(sample.inputs[0])[4:] == ["|", "_", "_", "_", "_"]


def test_two_relations_answer_combines_previous_and_next_letter():
    task = get_task("two_relations")
    data = task.sample(100, 3)
    K, V = task.num_keys, task.num_values
    for b in range(5):
        words = task.decode(data.inputs[b])
        assert sorted(w[0] for w in words) == [chr(ord("a") + k) for k in range(K)]
        for t in range(1, K):
            answer = task.vocab[data.targets[b, t]]
            following = chr(ord("a") + (ord(words[t][0]) - ord("a") + 1) % K)
            partner = next(w for w in words if w[0] == following)
            assert answer == f"{words[t - 1][1]}/{partner[1]}"
            assert words[data.source_pos[b, t, 1]] == partner
            assert data.source_pos[b, t, 0] == t - 1
    # each half of the answer is scored separately
    prediction = data.targets.clone()
    prediction[:, 1:] = (
        task.items + ((data.targets[:, 1:] - task.items) // V) * V + (data.targets[:, 1:] - task.items + 1) % V
    )
    right = task.relation_correct(prediction, data)
    assert right[:, 1:, 0].all() and not right[:, 1:, 1].any()


def test_grammar_relations_point_at_the_right_words():
    task = get_task("grammar")
    data = task.sample(50, 0)
    for b in range(50):
        words = task.decode(data.inputs[b])
        for r, (at_kind, to_kind) in enumerate(
            ((task.NOUNS, task.NOUNS), (task.VERBS, task.NOUNS), (task.TIMES, task.VERBS))
        ):
            (t,) = torch.nonzero(data.source_pos[b, :, r] >= 0)[0].tolist()
            assert words[t] in at_kind and words[data.source_pos[b, t, r]] in to_kind
        subject = int(torch.nonzero(data.source_pos[b, :, 0] >= 0)[0])
        verb = int(torch.nonzero(data.source_pos[b, :, 1] >= 0)[0])
        time_word = int(torch.nonzero(data.source_pos[b, :, 2] >= 0)[0])
        assert subject < verb < int(data.source_pos[b, subject, 0])  # object after the verb
        assert int(data.source_pos[b, verb, 1]) == subject == verb - 1  # the verb names its subject, just before it
        assert int(data.source_pos[b, time_word, 2]) == verb


def test_translate_reverses_and_capitalises_with_padding():
    task = get_task("translate")
    data = task.sample(40, 0)
    for b in range(40):
        n = int(data.source_lengths[b])
        source = task.decode(data.source[b])
        target = [task.vocab[i] for i in data.targets[b, :n].tolist()]
        assert target == [w.upper() for w in source[:n][::-1]]
        assert source[n:] == ["<pad>"] * (task.max_len - n)
        assert (data.targets[b, n:] == IGNORE).all()
        assert data.inputs[b, 0] == task.bos and torch.equal(data.inputs[b, 1:n], data.targets[b, : n - 1])
        copied = data.source[b, data.source_pos[b, :n, 0]]
        assert [task.vocab[i].upper() for i in copied.tolist()] == target


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown task"):
        get_task("nope")
    with pytest.raises(ValueError):
        get_task("reverse").sample(0)
    with pytest.raises(ValueError):
        get_task("two_relations", num_keys=1)


def test_recent_digit_answers_the_latest_digit_of_the_last_three_tokens_at_any_length():
    task = get_task("recent_digit", length=12)
    for data in (task.sample(40, 2), task.sample_length(10, 50, 3)):
        assert task.length == 12  # sample_length leaves the task as it was
        for b in range(len(data)):
            words = task.decode(data.inputs[b])
            assert words[0] == "<s>" and data.targets[b, 0] == IGNORE
            for t in range(1, len(words)):
                recent = [w for w in words[max(1, t - 2) : t + 1] if w.isdigit()]
                assert task.vocab[data.targets[b, t]] == (recent[-1] if recent else "-")
                assert data.inputs[b, data.source_pos[b, t, 0]] == (data.targets[b, t] if recent else task.bos)


def test_recall_asks_every_stored_key_once_and_answers_the_value_stored_after_it():
    task = get_task("recall", num_pairs=5, num_keys=7)
    data = task.sample(50, 4)
    assert task.seq_len == 16 and data.inputs.shape == (50, 16)
    for b in range(len(data)):
        words = task.decode(data.inputs[b])
        stored = dict(zip(words[0:10:2], words[1:10:2], strict=True))
        assert len(stored) == 5 and words[10] == "|"  # five different keys, then the separator
        assert sorted(words[11:]) == sorted(stored)  # every stored key is asked once
        assert all(task.vocab[data.targets[b, t]] == stored[words[t]] for t in range(11, 16))
        assert (data.targets[b, :11] == IGNORE).all()
    with pytest.raises(ValueError):
        get_task("recall", num_pairs=9, num_keys=8)  # more pairs than different keys
