"""The tiny ViT: the generated shapes, patches against a loop, the model's shapes and a short training run."""

import pytest
import torch

from mha_course.models.vit import SHAPES, TinyViT, cls_attention, fit_vit, patchify, shapes


def test_shapes_draw_the_labelled_shape():
    images, labels = shapes(30, size=16, noise=0.0, generator=torch.Generator().manual_seed(0))
    assert images.shape == (30, 1, 16, 16) and labels.shape == (30,)
    for image, label in zip(images[:, 0], labels.tolist(), strict=True):
        rows, cols = torch.nonzero(image > 0.5, as_tuple=True)
        height, width = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
        assert (height, width) == {"square": (4, 4), "horizontal bar": (2, 8), "vertical bar": (8, 2)}[SHAPES[label]]
        assert int((image > 0.5).sum()) == height * width


def test_patchify_against_a_loop():
    images = torch.randn(2, 3, 8, 8)
    patches = patchify(images, 4)
    assert patches.shape == (2, 4, 48)
    for b in range(2):
        for r in range(2):
            for c in range(2):
                block = images[b, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4]  # (C, P, P)
                assert torch.equal(patches[b, 2 * r + c], block.permute(1, 2, 0).reshape(-1))


def test_vit_shapes_and_a_short_training_run_learns():
    torch.manual_seed(0)
    model = TinyViT(num_layers=1)
    logits, attention = model(torch.randn(5, 1, 16, 16))
    assert logits.shape == (5, 3) and attention.shape == (1, 5, 4, 17, 17)
    assert torch.allclose(attention.sum(-1), torch.ones(1, 5, 4, 17))
    assert cls_attention(attention, 4).shape == (5, 4, 4)
    curve = fit_vit(model, steps=60, eval_every=60)
    assert curve[-1] > 0.45  # three classes: guessing is 1/3


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="multiple of the patch size"):
        patchify(torch.randn(1, 1, 10, 10), 4)
    with pytest.raises(ValueError, match=r"\(B, C, size, size\)"):
        patchify(torch.randn(10, 10), 2)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        TinyViT(image_size=10, patch_size=4)
    with pytest.raises(ValueError, match=">= 9"):
        shapes(2, size=8)
    with pytest.raises(ValueError, match="does not match"):
        cls_attention(torch.rand(1, 2, 2, 10, 10), 4)
