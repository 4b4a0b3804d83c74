"""Recurrence against self-attention: the comparison that made the Transformer.

A recurrent network reads a sequence one token at a time, h_t = GRU(h_{t-1}, x_t): T steps that
must run in order, and information from token s reaches position t only through the t - s steps
in between. Self-attention connects every pair of positions in one step. Vaswani et al. (2017,
Table 1) put it as three numbers per layer, for T positions of width D:

    layer type                 work per layer    sequential steps    longest path between positions
    self-attention             T^2 D             1                   1
    recurrent                  T D^2             T                   T
    convolutional (kernel k)   k T D^2           1                   T / (k - 1)
    dilated convolutional      k T D^2           1                   log_k(T)
    self-attention, window r   r T D             1                   T / r

(log_k(T) assumes *dilated* convolutions; a plain stack of causal kernel-k convolutions needs T / (k - 1) layers.)
:func:`path_table` computes that table for given sizes; :class:`GRUTagger` is a GRU with the
course's model interface (it trains with :func:`mha_course.models.train.train`), and
:func:`input_sensitivity` measures how strongly one output depends on each input token;
:func:`training_step_seconds` times one optimiser step of either.

**Linear attention is a recurrence.** Replace softmax(q k^T) by a feature map phi with phi(q) . phi(k)
(Katharopoulos et al., 2020) and causal attention becomes

    S_t = S_{t-1} + phi(k_t) v_t^T   (D, Dv),   z_t = z_{t-1} + phi(k_t)   (D,)
    out_t = phi(q_t)^T S_t / (phi(q_t) . z_t)

a fixed-size state updated once per token, like an RNN's, in place of a KV cache that grows with T
(:func:`linear_attention` computes it all at once, :class:`LinearAttentionState` step by step).
State-space models (Mamba) keep such a fixed-size state too, with an input-dependent decay.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..validation import require_int, require_positive_int, require_positive_ints, require_rank, require_tensor


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
            "path": max(1, math.ceil((T - 1) / (kernel - 1))),
        },
        f"dilated convolutional (k={kernel})": {
            "work": kernel * T * D * D,
            "sequential": 1,
            "path": max(1, math.ceil(math.log(T, kernel))),
        },
        f"self-attention, window {window}": {"work": window * T * D, "sequential": 1, "path": math.ceil(T / window)},
    }


class GRUTagger(nn.Module):
    """A GRU that predicts one token per position: Embed -> GRU (L layers) -> Linear.

    forward(tokens (B, T) long) -> (logits (B, T, V), None): the same interface as the course's
    TinyTransformer (no attention weights to return), so :func:`mha_course.models.train.train` trains it.
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


def training_step_seconds(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, repeats: int = 5) -> float:
    """Median wall-clock seconds of one optimiser step (forward, loss, backward, AdamW) on one batch.

    Args:
        model: a TinyTransformer or GRUTagger (forward returns (logits (B, T, V), ...)).
        tokens, targets: (B, T) long; targets may hold -100 (ignored).
        repeats: timed steps after one untimed warm-up step.

    The model's parameters change (it trains on the batch); pass a copy to keep the original.

    Raises:
        TypeError / ValueError: tokens or targets not (B, T) tensors of the same shape; repeats < 1.
    """
    import statistics
    import time

    from .train import loss_fn

    for name, x in (("tokens", tokens), ("targets", targets)):
        require_tensor(x, name)
        require_rank(x, 2, name, "(B, T)")
    if tokens.shape != targets.shape:
        raise ValueError(f"tokens and targets must share (B, T), got {tuple(tokens.shape)} and {tuple(targets.shape)}")
    require_positive_int(repeats, "repeats")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        loss = loss_fn(model(tokens)[0], targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if i:  # the first step warms up allocations and is not counted
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def forward_flops(model: nn.Module, tokens: torch.Tensor) -> int:
    """FLOPs of one forward pass of ``model`` on ``tokens`` (B, T), counted by torch's FlopCounterMode.

    Counts the matrix products (linear layers, attention's two products, the GRU's gates: 2 FLOPs per
    multiply-add), the work that dominates; elementwise operations are left out.

    Raises:
        TypeError / ValueError: tokens is not a (B, T) tensor.
    """
    from torch.utils.flop_counter import FlopCounterMode

    require_tensor(tokens, "tokens")
    require_rank(tokens, 2, "tokens", "(B, T)")
    with FlopCounterMode(display=False) as counter:  # (its module hooks need autograd: no torch.no_grad here)
        model(tokens)
    return int(counter.get_total_flops())


def _feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al., 2020): positive features, so the normaliser is positive."""
    return nn.functional.elu(x) + 1


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention in its parallel form: out_t = sum_{s<=t} (phi(q_t).phi(k_s)) v_s / sum_{s<=t} phi(q_t).phi(k_s).

    Args:
        q, k: (..., T, D); v: (..., T, Dv).

    Returns:
        (..., T, Dv). The (T, T) matrix of phi(q) phi(k)^T is built here, to match the recurrence of
        :class:`LinearAttentionState` term by term.

    Raises:
        TypeError / ValueError: as the course's attention (shapes, dtypes); T of q and k differ.
    """
    from ..validation import check_qkv

    T, S, _ = check_qkv(q, k, v)
    if T != S:
        raise ValueError(f"causal linear attention needs as many queries as keys, got T={T}, S={S}")
    scores = _feature_map(q) @ _feature_map(k).transpose(-2, -1)  # (..., T, T), all positive
    scores = scores * torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # causal
    return (scores @ v) / scores.sum(-1, keepdim=True)  # (..., T, Dv)


class LinearAttentionState:
    """Causal linear attention decoded one token at a time with a fixed-size state.

    ``step(q, k, v)`` with q, k (..., D) and v (..., Dv) for one new position updates

        S <- S + phi(k) v^T  (..., D, Dv),    z <- z + phi(k)  (..., D)

    and returns phi(q)^T S / (phi(q) . z), (..., Dv): the same as :func:`linear_attention` at that
    position. ``nbytes()`` stays the same however many tokens were seen, where a KV cache grows by
    (D + Dv) numbers per token and head.

    Raises:
        TypeError / ValueError: q, k, v not tensors with matching leading dims and D.
    """

    def __init__(self):
        self.S: torch.Tensor | None = None
        self.z: torch.Tensor | None = None
        self.seen = 0

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        for name, x in (("q", q), ("k", k), ("v", v)):
            require_tensor(x, name)
        if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
            raise ValueError(
                f"q, k must be (..., D) and v (..., Dv) with the same (...), got {q.shape}, {k.shape}, {v.shape}"
            )
        fk = _feature_map(k)  # (..., D)
        update = fk.unsqueeze(-1) * v.unsqueeze(-2)  # (..., D, Dv)
        self.S = update if self.S is None else self.S + update
        self.z = fk if self.z is None else self.z + fk
        self.seen += 1
        fq = _feature_map(q)  # (..., D)
        return (fq.unsqueeze(-2) @ self.S).squeeze(-2) / (fq * self.z).sum(-1, keepdim=True)  # (..., Dv)

    def nbytes(self) -> int:
        """Bytes of the state (S and z): independent of the number of tokens seen."""
        return 0 if self.S is None else self.S.numel() * self.S.element_size() + self.z.numel() * self.z.element_size()


__all__ = [
    "path_table",
    "GRUTagger",
    "matched_gru",
    "input_sensitivity",
    "training_step_seconds",
    "forward_flops",
    "linear_attention",
    "LinearAttentionState",
]
