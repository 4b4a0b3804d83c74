"""Attention beyond text: a tiny Vision Transformer (ViT, Dosovitskiy et al., 2021) on generated images.

An image is cut into an N = (size / P)^2 grid of P x P patches; each patch, flattened, is one
"token". A linear map embeds it, a learned vector per grid cell says where it sits, and a learned
[CLS] token is put in front. Then the very blocks of the course's tiny transformer (the same
:class:`mha_course.MultiHeadAttention`) run over the N + 1 tokens, and the [CLS] token's final
state is classified:

    tokens = [CLS; patches W_patch] + positions          (B, N + 1, E)
    logits = W_out LN(Blocks(tokens)[:, 0])                (B, classes)

The task (:func:`shapes`) is generated in code: one shape per image (a square, a horizontal bar or
a vertical bar) at a random place, on a noisy background. The label depends only on the shape, so
the [CLS] token must find the patches that hold it: its attention row shows where it looked.
"""

from __future__ import annotations

import torch
from torch import nn

from ..validation import require_positive_int, require_positive_ints, require_rank, require_tensor
from .model import Block

# The classes of the toy image task, in label order.
SHAPES = ("square", "horizontal bar", "vertical bar")


def shapes(n: int, size: int = 16, noise: float = 0.3, generator: torch.Generator | None = None):
    """n images (n, 1, size, size) with one shape each, and their labels (n,) indexing :data:`SHAPES`.

    A square is 4 x 4 pixels, a bar 2 x 8 or 8 x 2; brightness 1 on Gaussian noise of std ``noise``.

    Raises:
        ValueError: n < 1 or size < 9 (a bar must fit).
    """
    require_positive_int(n, "n")
    require_positive_int(size, "size")
    if size < 9:
        raise ValueError(f"size must be >= 9 so that a bar of 8 fits with a margin, got {size}")
    labels = torch.randint(len(SHAPES), (n,), generator=generator)  # (n,)
    images = noise * torch.randn(n, 1, size, size, generator=generator)  # (n, 1, size, size)
    extent = {0: (4, 4), 1: (2, 8), 2: (8, 2)}  # label -> (height, width)
    corner = torch.rand(n, 2, generator=generator)  # (n, 2): where the shape starts, as a fraction
    for i, label in enumerate(labels.tolist()):
        h, w = extent[label]
        top = int(corner[i, 0] * (size - h + 1))
        left = int(corner[i, 1] * (size - w + 1))
        images[i, 0, top : top + h, left : left + w] += 1.0
    return images, labels


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, size, size) -> (B, N, P*P*C): the image cut into N = (size/P)^2 patches, row by row.

    Raises:
        TypeError / ValueError: images not a 4-D tensor, or size not a multiple of P.
    """
    require_tensor(images, "images")
    require_rank(images, 4, "images", "(B, C, size, size)")
    require_positive_int(patch, "patch")
    B, C, Hs, Ws = images.shape
    if Hs % patch or Ws % patch:
        raise ValueError(f"image size {Hs} x {Ws} must be a multiple of the patch size {patch}")
    grid = images.reshape(B, C, Hs // patch, patch, Ws // patch, patch)  # (B, C, gh, P, gw, P)
    grid = grid.permute(0, 2, 4, 3, 5, 1)  # (B, gh, gw, P, P, C): one patch per grid cell
    return grid.reshape(B, (Hs // patch) * (Ws // patch), patch * patch * C)  # (B, N, P*P*C)


class TinyViT(nn.Module):
    """A Vision Transformer built from the course's transformer blocks.

    Args:
        image_size, patch_size, channels: the images (square, size a multiple of the patch).
        num_classes, embed_dim (E), num_heads (H), num_layers (L).

    forward(images (B, C, size, size)) -> (logits (B, classes), attention (L, B, H, N+1, N+1)); token 0
    is [CLS], token 1 + r * grid + c the patch in grid row r, column c.

    Raises:
        ValueError: the image size is not a multiple of the patch size, or sizes are not positive.
    """

    def __init__(
        self,
        image_size: int = 16,
        patch_size: int = 4,
        channels: int = 1,
        num_classes: int = len(SHAPES),
        embed_dim: int = 32,
        num_heads: int = 4,
        num_layers: int = 2,
    ):
        super().__init__()
        require_positive_ints(image_size=image_size, patch_size=patch_size, channels=channels, num_classes=num_classes)
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} must be a multiple of patch_size {patch_size}")
        self.patch_size, self.grid = patch_size, image_size // patch_size
        num_patches = self.grid * self.grid
        self.patch_embed = nn.Linear(patch_size * patch_size * channels, embed_dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.positions = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)  # one per grid cell + CLS
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(num_layers))
        self.ln_out = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        patches = self.patch_embed(patchify(images, self.patch_size))  # (B, N, E)
        cls = self.cls.expand(patches.shape[0], -1, -1)  # (B, 1, E)
        x = torch.cat([cls, patches], dim=1) + self.positions  # (B, N + 1, E)
        weights = []
        for block in self.blocks:
            x, w, _ = block(x)  # every token sees every token: no mask
            weights.append(w)
        return self.head(self.ln_out(x[:, 0])), torch.stack(weights)  # (B, classes), (L, B, H, N+1, N+1)


def fit_vit(
    model: TinyViT, steps: int = 300, batch_size: int = 64, lr: float = 3e-3, seed: int = 0, eval_every: int = 50
) -> list[float]:
    """Train on fresh batches of :func:`shapes`; returns held-out accuracy (1000 images) every ``eval_every`` steps.

    Raises:
        ValueError: non-positive steps, batch_size or eval_every.
    """
    require_positive_ints(steps=steps, batch_size=batch_size, eval_every=eval_every)
    size = model.grid * model.patch_size
    generator = torch.Generator().manual_seed(seed)
    held_images, held_labels = shapes(1000, size, generator=torch.Generator().manual_seed(seed + 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    curve = []
    model.train()
    for step in range(1, steps + 1):
        images, labels = shapes(batch_size, size, generator=generator)
        loss = nn.functional.cross_entropy(model(images)[0], labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                curve.append(float((model(held_images)[0].argmax(-1) == held_labels).float().mean()))
            model.train()
    model.eval()
    return curve


def cls_attention(attention: torch.Tensor, grid: int, layer: int = -1) -> torch.Tensor:
    """Where [CLS] looked: its attention row over the patches in ``layer``, averaged over heads, as (B, grid, grid).

    Args:
        attention: (L, B, H, N+1, N+1) from :meth:`TinyViT.forward`.
    """
    require_tensor(attention, "attention")
    require_rank(attention, 5, "attention", "(L, B, H, N+1, N+1)")
    if attention.shape[-1] != grid * grid + 1:
        raise ValueError(f"attention over {attention.shape[-1]} tokens does not match a {grid} x {grid} grid + [CLS]")
    row = attention[layer, :, :, 0, 1:].mean(dim=1)  # (B, N): [CLS]'s weight on each patch, mean over heads
    return row.reshape(-1, grid, grid)  # (B, grid, grid)


__all__ = ["SHAPES", "shapes", "patchify", "TinyViT", "fit_vit", "cls_attention"]
