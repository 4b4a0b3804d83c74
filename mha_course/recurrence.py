"""Recurrence against self-attention: the comparison that made the Transformer.

A recurrent network reads a sequence one token at a time, h_t = GRU(h_{t-1}, x_t): T steps that
must run in order, and information from token s reaches position t only through the t - s steps
in between. Self-attention connects every pair of positions in one step. Vaswani et al. (2017,
Table 1) put it as three numbers per layer, for T positions of width D:

    layer type                 work per layer    sequential steps    longest path between positions
    self-attention             T^2 D             1                   1
    recurrent                  T D^2             T                   T
    convolutional (kernel k)   k T D^2           1                   log_k(T)
    self-attention, window r   r T D             1                   T / r

:func:`path_table` computes that table for given sizes; :class:`GRUTagger` is a GRU with the
course's model interface (it trains with :func:`mha_course.train.train`), and
:func:`input_sensitivity` measures how strongly one output depends on each input token.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .validation import require_int, require_positive_int, require_positive_ints, require_rank, require_tensor


def path_table(T: int, D: int, kernel: int = 3, window: int = 4) -> dict[str, dict[str, float]]:
    """Vaswani et al.'s Table 1 for sequence length T and width D, as numbers.

    Returns:
        {layer type: {"work": multiply-adds per layer (up to a constant), "sequential": steps that
        must run one after another, "path": the longest path between two positions}}.

    Raises:
        TypeError / ValueError: sizes that are not positive ints (kernel >= 2).
    """
    require_positive_ints(T=T, D=D, window=window)
    require_int(kernel, "kernel", 2)
    return {
        "self-attention": {"work": T * T * D, "sequential": 1, "path": 1},
        "recurrent": {"work": T * D * D, "sequential": T, "path": T},
        f"convolutional (k={kernel})": {
            "work": kernel * T * D * D,
            "sequential": 1,
            "path": max(1, math.ceil(math.log(T, kernel))),
        },
        f"self-attention, window {window}": {"work": window * T * D, "sequential": 1, "path": math.ceil(T / window)},
    }


class GRUTagger(nn.Module):
    """A GRU that predicts one token per position: Embed -> GRU (L layers) -> Linear.

    forward(tokens (B, T) long) -> (logits (B, T, V), None): the same interface as the course's
    TinyTransformer (no attention weights to return), so :func:`mha_course.train.train` trains it.
    The embedding is the submodule ``embed`` (as in the transformer), for :func:`input_sensitivity`.

    Raises:
        TypeError / ValueError: sizes that are not positive ints.
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_layers: int = 1):
        super().__init__()
        require_positive_ints(vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers)
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, None]:
        require_tensor(tokens, "tokens")
        require_rank(tokens, 2, "tokens", "(B, T)")
        states, _ = self.gru(self.embed(tokens))  # (B, T, hidden): step t sees tokens 0..t only
        return self.head(states), None  # (B, T, V)


def matched_gru(vocab_size: int, parameters: int, num_layers: int = 1) -> GRUTagger:
    """The largest GRUTagger with at most ``parameters`` parameters (for a comparison at equal size).

    Raises:
        ValueError: not even a GRU of width 1 fits.
    """
    require_positive_int(parameters, "parameters")

    def count(hidden: int) -> int:  # embedding V*h, GRU 3 gates: layer 1 has 3(h*h + h*h + 2h), head h*V + V
        return (
            vocab_size * hidden + num_layers * 3 * (2 * hidden * hidden + 2 * hidden) + hidden * vocab_size + vocab_size
        )

    if count(1) > parameters:
        raise ValueError(f"no GRU fits in {parameters} parameters (width 1 needs {count(1)})")
    hidden = 1
    while count(hidden + 1) <= parameters:
        hidden += 1
    return GRUTagger(vocab_size, hidden, num_layers)


def input_sensitivity(model: nn.Module, tokens: torch.Tensor, position: int = -1) -> torch.Tensor:
    """How much the output at ``position`` depends on each input token: ||d logits_t / d x_s|| per s.

    The gradient of the logits at ``position`` (summed over the batch and the vocabulary, squared)
    with respect to the output of ``model.embed`` (what each token becomes before the first layer).

    Args:
        model: a TinyTransformer or GRUTagger (any module with an ``embed`` submodule whose output
            is (B, T, E) and a forward returning (logits, ...)).
        tokens: (B, T) long.
        position: the output position t (negative counts from the end).

    Returns:
        (T,) gradient norms, one per input position.

    Raises:
        TypeError: the model has no ``embed`` submodule.
        ValueError: position outside [-T, T).
    """
    embed = getattr(model, "embed", None)
    if not isinstance(embed, nn.Module):
        raise TypeError("input_sensitivity needs a model with an `embed` submodule (TinyTransformer, GRUTagger)")
    require_tensor(tokens, "tokens")
    require_rank(tokens, 2, "tokens", "(B, T)")
    T = tokens.shape[1]
    require_int(position, "position")
    if not -T <= position < T:
        raise ValueError(f"position must be in [-{T}, {T}), got {position}")
    captured = {}

    def keep(module, args, output):
        output.retain_grad()
        captured["x"] = output

    handle = embed.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(tokens)[0]  # (B, T, V)
            (logits[:, position] ** 2).sum().backward()
    finally:
        handle.remove()
    model.zero_grad(set_to_none=True)
    return captured["x"].grad.norm(dim=-1).pow(2).sum(0).sqrt()  # (T,): over features, then batch


__all__ = ["path_table", "GRUTagger", "matched_gru", "input_sensitivity"]
