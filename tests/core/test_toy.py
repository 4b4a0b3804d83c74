"""The toy word vectors: lookup rules, shapes, and the relations chapter 01 relies on."""

import numpy as np
import pytest

from mha_course.core import toy


def _cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_whole_vocabulary_and_shapes():
    words, vectors = toy.word_vectors()
    assert words == toy.vocabulary()
    assert vectors.shape == (len(words), len(toy.FEATURES))
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors)) and np.all(np.linalg.norm(vectors, axis=1) > 0)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_fewer_dims_keep_the_leading_features(dims):
    _, full = toy.word_vectors(["bank", "river"])
    _, short = toy.word_vectors(["bank", "river"], dims=dims)
    np.testing.assert_array_equal(short, full[:, :dims])


def test_lookup_is_case_insensitive_and_covers_the_sentence():
    words, vectors = toy.word_vectors(toy.TOY_SENTENCE)
    assert words[0] == "the"
    np.testing.assert_array_equal(vectors[0], vectors[3])  # "The" and "the" are one word


def test_returned_vectors_are_a_copy():
    _, first = toy.word_vectors(["bank"])
    first[:] = 0
    _, again = toy.word_vectors(["bank"])
    assert np.any(again != 0)


def test_bad_lookups_raise():
    with pytest.raises(KeyError, match="zebra"):
        toy.word_vectors(["bank", "zebra"])
    with pytest.raises(TypeError, match="list of words"):
        toy.word_vectors("bank")
    with pytest.raises(ValueError, match="1..4"):
        toy.word_vectors(dims=5)
    with pytest.raises(TypeError, match="int"):
        toy.word_vectors(dims=2.0)


def test_bank_is_ambiguous_and_topics_cluster():
    words, vectors = toy.word_vectors()
    table = dict(zip(words, vectors, strict=True))
    finance, nature = ["money", "loan", "cash"], ["river", "water", "shore"]
    # each topic word is closer (cosine) to its own topic than to the other topic
    for own, other in ((finance, nature), (nature, finance)):
        for word in own:
            inside = min(_cosine(table[word], table[w]) for w in own if w != word)
            outside = max(_cosine(table[word], table[w]) for w in other)
            assert inside > outside, word
    # "bank" sits between the two topics: similar to both, more than to time words
    for word in finance + nature:
        assert _cosine(table["bank"], table[word]) > _cosine(table["bank"], table["yesterday"])
    # "the" is the shortest vector: small dot products with everything
    norms = np.linalg.norm(vectors, axis=1)
    assert words[int(norms.argmin())] == "the"
