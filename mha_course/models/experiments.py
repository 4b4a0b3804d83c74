"""Why divide by sqrt(D)? Four small, seeded experiments that chapter 03 plots.

For random q, k in R^D with independent unit-variance components,

    Var(q . k) = D,      Var(q . k / sqrt(D)) = 1,

so without the scale the scores spread like sqrt(D). A softmax over widely spread scores is
nearly one-hot (it *saturates*), and its Jacobian

    d softmax(s) / d s = diag(p) - p p^T

goes to zero as p becomes one-hot: the gradient that should teach the model which key to pick
vanishes. The functions below measure each step of that argument, and ``train_retrieval``
checks the end claim ("scaling stabilises training") on a tiny model.

Every function takes ``seed`` and returns plain NumPy arrays / floats in a dict, so that a
notebook can plot them and a test can check the trend. :func:`single_thread` is the context
manager the tiny training runs (and chapter 05's timings) use so that a busy machine does not
slow them down twenty-fold.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from ..efficient.gradients import softmax_jacobian
from ..validation import require_positive_int, require_positive_ints


def _check_dims(dims: Sequence[int]) -> list[int]:
    """Raise TypeError/ValueError unless ``dims`` is a non-empty sequence of positive ints."""
    dims = list(dims)
    if not dims:
        raise ValueError("dims must hold at least one dimension, got an empty sequence")
    return [require_positive_int(d, "every dim") for d in dims]


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the ``with`` block, then restore the thread count.

    Tiny tensors gain nothing from several threads, and when the cores are shared (other
    programs, a parallel test run) torch's worker threads wait for each other: a training step of
    a few microseconds' arithmetic then takes milliseconds. Measured on a 2-core machine with two
    other busy processes: 11 s with 2 threads against 0.4 s with 1 for the same 200 steps.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _random_scores(D: int, num_keys: int, n_samples: int, generator: torch.Generator) -> torch.Tensor:
    """Unscaled scores q . k_s for n_samples random queries, each against num_keys random keys."""
    q = torch.randn(n_samples, 1, D, generator=generator, dtype=torch.float64)  # (N, 1, D)
    k = torch.randn(n_samples, num_keys, D, generator=generator, dtype=torch.float64)  # (N, S, D)
    return (q @ k.transpose(-2, -1))[:, 0]  # (N, S)


def _unscaled_and_scaled(
    dims: list[int], num_keys: int, n_samples: int, seed: int
) -> Iterator[tuple[str, torch.Tensor]]:
    """For each D in turn: ("unscaled", s), then ("scaled", s / sqrt(D)), s (N, S) random scores drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    for D in dims:
        scores = _random_scores(D, num_keys, n_samples, generator)  # (N, S)
        for tag, scale in (("unscaled", 1.0), ("scaled", 1.0 / math.sqrt(D))):
            yield tag, scores * scale  # (N, S)


def score_variance_vs_dim(dims: Sequence[int], n_samples: int = 10_000, seed: int = 0) -> dict:
    """Variance of q . k and of q . k / sqrt(D) for random q, k with N(0, 1) components.

    Theory: Var(q . k) = sum_i Var(q_i k_i) = D, and dividing by sqrt(D) brings it back to 1.

    Args:
        dims: the head dimensions D to try, e.g. [4, 16, 64, 256].
        n_samples: pairs (q, k) drawn per dimension.
        seed: seeds the torch generator.

    Returns:
        dict with ``dims`` (n,), ``unscaled`` (n,) and ``scaled`` (n,) sample variances.

    Raises:
        TypeError / ValueError: dims not positive ints, n_samples < 2.
    """
    dims = _check_dims(dims)
    require_positive_ints(n_samples=n_samples)
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2 to estimate a variance, got {n_samples}")
    generator = torch.Generator().manual_seed(seed)
    unscaled, scaled = [], []
    for D in dims:
        scores = _random_scores(D, 1, n_samples, generator)[:, 0]  # (N,)
        unscaled.append(float(scores.var()))
        scaled.append(float((scores / math.sqrt(D)).var()))
    return {"dims": np.array(dims), "unscaled": np.array(unscaled), "scaled": np.array(scaled)}


def softmax_saturation(dims: Sequence[int], num_keys: int = 16, n_samples: int = 2_000, seed: int = 0) -> dict:
    """How peaked softmax(q . K) is, with and without the 1/sqrt(D) scale.

    For each D, draws n_samples queries q (D,) and key sets K (S, D) with N(0, 1) entries and
    measures the weights p = softmax(q K^T * scale):

        max weight   max_s p_s                      (1/S = uniform, 1 = one-hot)
        entropy      -sum_s p_s log p_s             (log S = uniform, 0 = one-hot)

    Args:
        dims: head dimensions D.
        num_keys: S, the keys per query.
        n_samples: queries per dimension.
        seed: seeds the torch generator.

    Returns:
        dict with ``dims``, ``max_weight_unscaled``, ``max_weight_scaled``, ``entropy_unscaled``,
        ``entropy_scaled`` (each (n,), means over the samples) and ``max_entropy`` = log S.

    Raises:
        TypeError / ValueError: dims, num_keys or n_samples not positive ints.
    """
    dims = _check_dims(dims)
    require_positive_ints(num_keys=num_keys, n_samples=n_samples)
    result = {name: [] for name in ("max_weight_unscaled", "max_weight_scaled", "entropy_unscaled", "entropy_scaled")}
    for tag, scores in _unscaled_and_scaled(dims, num_keys, n_samples, seed):
        log_p = torch.log_softmax(scores, dim=-1)  # (N, S)
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)  # (N,); p log p -> 0 where p underflows to 0
        result[f"max_weight_{tag}"].append(float(p.amax(-1).mean()))
        result[f"entropy_{tag}"].append(float(entropy.mean()))
    out = {name: np.array(values) for name, values in result.items()}
    out["dims"] = np.array(dims)
    out["max_entropy"] = math.log(num_keys)
    return out


def softmax_gradient_norm(dims: Sequence[int], num_keys: int = 16, n_samples: int = 2_000, seed: int = 0) -> dict:
    """Size of the softmax's Jacobian ||d softmax(s) / d s||_F for random scores, scaled vs unscaled.

    J = diag(p) - p p^T is what every gradient flowing from the attention weights back to the
    scores (and on to W_Q, W_K) is multiplied by. Its Frobenius norm is largest for spread-out
    weights and tends to 0 as p becomes one-hot.

    Args:
        dims: head dimensions D.
        num_keys: S, keys per query.
        n_samples: queries per dimension.
        seed: seeds the torch generator.

    Returns:
        dict with ``dims``, ``unscaled`` and ``scaled`` (each (n,)): the mean norm over samples,
        and ``fraction_tiny_unscaled`` / ``fraction_tiny_scaled``: the share of samples whose
        norm is below 1e-3 (queries that can hardly learn at all).

    Raises:
        TypeError / ValueError: dims, num_keys or n_samples not positive ints.
    """
    dims = _check_dims(dims)
    require_positive_ints(num_keys=num_keys, n_samples=n_samples)
    result = {name: [] for name in ("unscaled", "scaled", "fraction_tiny_unscaled", "fraction_tiny_scaled")}
    for tag, scores in _unscaled_and_scaled(dims, num_keys, n_samples, seed):
        weights = torch.softmax(scores, dim=-1)  # (N, S)
        norms = torch.linalg.matrix_norm(softmax_jacobian(weights))  # (N,) Frobenius
        result[tag].append(float(norms.mean()))
        result[f"fraction_tiny_{tag}"].append(float((norms < 1e-3).double().mean()))
    out = {name: np.array(values) for name, values in result.items()}
    out["dims"] = np.array(dims)
    return out


def _retrieval_batch(
    batch: int, num_pairs: int, num_keys: int, num_values: int, generator: torch.Generator
) -> tuple[torch.Tensor, ...]:
    """One batch of the associative-recall task; see :func:`train_retrieval`.

    Returns keys (B, S), values (B, S), the query symbol (B,), its answer (B,) and which pair
    was asked (B,).
    """
    keys = torch.rand(batch, num_keys, generator=generator).argsort(dim=1)[:, :num_pairs]  # (B, S) distinct
    values = torch.randint(0, num_values, (batch, num_pairs), generator=generator)  # (B, S)
    target = torch.randint(0, num_pairs, (batch,), generator=generator)  # (B,) which pair is asked
    rows = torch.arange(batch)
    return keys, values, keys[rows, target], values[rows, target], target


def train_retrieval(
    scaled: bool = True,
    d_k: int = 256,
    steps: int = 300,
    seed: int = 0,
    *,
    d_model: int = 32,
    num_pairs: int = 16,
    num_keys: int = 32,
    num_values: int = 16,
    batch: int = 32,
    lr: float = 3e-3,
    qk_init_scale: float = 1.0,
) -> dict:
    """Train a one-layer attention model on associative recall, with or without the 1/sqrt(D) scale.

    Task: a sequence of ``num_pairs`` (key, value) symbol pairs with distinct keys, and a query
    symbol equal to one of the keys; the answer is that key's value. One attention layer with
    learned W_Q, W_K (d_model -> d_k), W_V (d_model -> d_model) and a linear read-out W_O:

        p = softmax(q K^T * scale),  out = p V,  logits = out W_O,  scale = 1/sqrt(d_k) or 1,

    trained with cross-entropy and Adam (written out, so no torch.optim import is paid). Symbol
    embeddings are fixed random N(0, 1) vectors and W_Q, W_K are initialised so that q and k have
    unit-variance components, the assumption of the variance argument; ``qk_init_scale``
    multiplies both at initialisation (``d_k ** -0.25`` gives unscaled scores unit variance at
    the start, the "just initialise smaller" alternative to the scale). Runs on one thread
    (:func:`single_thread`).

    Args:
        scaled: use scale = 1/sqrt(d_k) (True) or 1 (False).
        d_k: query/key dimension D.
        steps: optimisation steps, one fresh batch each.
        seed: seeds data and initialisation (the same for scaled and unscaled runs).
        d_model: embedding size of the symbols.
        num_pairs: S, pairs per sequence; num_keys / num_values: vocabulary sizes.
        batch: sequences per step.
        lr: Adam's learning rate.
        qk_init_scale: factor on the initial W_Q and W_K (> 0).

    Returns:
        dict of (steps,) arrays, one entry per step, measured on the step's batch before the
        update: ``loss``, ``accuracy``, ``max_weight`` (mean largest attention weight: how
        saturated the softmax is) and ``correct_weight`` (mean weight on the pair the query asks
        for: whether the attention looks at the right key).

    Raises:
        TypeError / ValueError: sizes not positive ints, num_pairs > num_keys, lr <= 0,
            qk_init_scale <= 0.
    """
    require_positive_ints(
        d_k=d_k,
        steps=steps,
        d_model=d_model,
        num_pairs=num_pairs,
        num_keys=num_keys,
        num_values=num_values,
        batch=batch,
    )
    if num_pairs > num_keys:
        raise ValueError(f"num_pairs={num_pairs} distinct keys need num_keys >= num_pairs, got {num_keys}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if not qk_init_scale > 0:
        raise ValueError(f"qk_init_scale must be > 0, got {qk_init_scale}")
    with single_thread():
        return _train_retrieval(
            scaled, d_k, steps, seed, d_model, num_pairs, num_keys, num_values, batch, lr, qk_init_scale
        )


def _train_retrieval(
    scaled, d_k, steps, seed, d_model, num_pairs, num_keys, num_values, batch, lr, qk_init_scale
) -> dict:
    generator = torch.Generator().manual_seed(seed)
    key_embedding = torch.randn(num_keys, d_model, generator=generator)  # (num_keys, d_model)
    value_embedding = torch.randn(num_values, d_model, generator=generator)  # (num_values, d_model)
    qk_std = qk_init_scale / math.sqrt(d_model)
    params = [
        torch.randn(d_model, d_k, generator=generator) * qk_std,  # W_Q
        torch.randn(d_model, d_k, generator=generator) * qk_std,  # W_K
        torch.randn(d_model, d_model, generator=generator) / math.sqrt(d_model),  # W_V
        torch.randn(d_model, num_values, generator=generator) / math.sqrt(d_model),
    ]  # W_O
    for p in params:
        p.requires_grad_(True)
    w_q, w_k, w_v, w_o = params
    first_moment = [torch.zeros_like(p) for p in params]
    second_moment = [torch.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    scale = 1.0 / math.sqrt(d_k) if scaled else 1.0
    losses, accuracies, max_weights, correct_weights = [], [], [], []
    for step in range(1, steps + 1):
        keys, values, query, answer, asked = _retrieval_batch(batch, num_pairs, num_keys, num_values, generator)
        # Score each query against every symbol of the (small) key vocabulary, then pick the
        # sequence's keys: the same numbers as projecting every token, without any (B, S, D) tensor.
        q = key_embedding[query] @ w_q  # (B, D)
        k_vocab = key_embedding @ w_k  # (num_keys, D)
        scores = (q @ k_vocab.T).gather(1, keys) * scale  # (B, num_keys) -> (B, S)
        v = (value_embedding @ w_v)[values]  # (B, S, d_model)
        weights = torch.softmax(scores, dim=-1)  # (B, S)
        out = (weights.unsqueeze(1) @ v).squeeze(1)  # (B, d_model)
        logits = out @ w_o  # (B, num_values)
        loss = torch.nn.functional.cross_entropy(logits, answer)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, m, s in zip(params, grads, first_moment, second_moment, strict=True):
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                s.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1**step)
                s_hat = s / (1 - beta2**step)
                p.sub_(lr * m_hat / (s_hat.sqrt() + eps))
        losses.append(loss.item())
        accuracies.append(float((logits.argmax(-1) == answer).float().mean()))
        max_weights.append(float(weights.detach().amax(-1).mean()))
        correct_weights.append(float(weights.detach().gather(1, asked[:, None]).mean()))
    return {
        "loss": np.array(losses),
        "accuracy": np.array(accuracies),
        "max_weight": np.array(max_weights),
        "correct_weight": np.array(correct_weights),
    }
