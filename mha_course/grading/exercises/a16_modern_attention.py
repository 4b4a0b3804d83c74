"""Assignment 16 (chapter 16): three pieces of the attention in today's models.

    alibi_slopes(H)                      -> (H,) slopes m_h = 2^(-8 (h + 1) / H) (H a power of two;
                                            otherwise n = largest power of two <= H: n slopes, then
                                            every other slope of 2n heads)
    to_rotate_half(weight, num_heads)    -> W_Q or W_K (H*D, E), or a bias (H*D,), with each head's
                                            rows reordered from the interleaved RoPE layout to rotate-half
    paged_lookup(pool, block_table, S)   -> (G, S, D): a request's entries read out of a block pool

The cases catch the usual slips: slopes counted from h = 0, in reverse, or from the plain formula
for a head count that is not a power of two; the conversion done the other way, across all rows
instead of head by head, or not at all; the block table ignored, the pages merged without moving
the head axis first, the last block not cut to the request's length.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a16_modern_attention as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- 1. ALiBi slopes -------------------------------------------------------------------------------

_POWERS = (2, 4, 8, 16, 32, 64)
_OTHERS = (3, 5, 6, 7, 10, 12, 20, 24)


def _heads(H):
    def make():
        if case_inputs.salting():  # a fresh head count of the same kind (power of two or not)
            choices = _POWERS if H in _POWERS else _OTHERS
            return {"H": int(case_inputs.rng(H).choice(choices))}
        return {"H": H}

    return make


def _geometric(n):
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def _reference_slopes(inputs):
    from mha_course.inference.alibi import alibi_slopes

    return alibi_slopes(int(inputs["H"])).numpy()


def _diagnose_slopes(got, expected, inputs):
    H = int(inputs["H"])
    n = 2 ** int(math.floor(math.log2(H)))
    right = np.asarray(expected, dtype=np.float64)
    alternatives = [
        (
            lambda: np.array([2.0 ** (-8.0 * h / H) for h in range(H)]),
            "the first slope is 1: h counts from 0, so the slope of head h is 2^(-8 (h + 1) / H)",
        ),
        (lambda: right[::-1], "the slopes are in reverse order: head 0 has the steepest slope, 2^(-8/H)"),
        (
            lambda: np.array([2.0 ** -(h + 1) for h in range(H)]),
            "the slopes ignore H: they are 2^(-8 (h + 1) / H), so that they always run from 2^(-8/H) down to 2^-8",
        ),
        (
            lambda: np.array([(2.0 ** (-8.0 / H)) for _ in range(H)]),
            "every head got the same slope 2^(-8/H): raise it to the power h + 1 for head h",
        ),
    ]
    if n != H:
        alternatives += [
            (
                lambda: np.array(_geometric(H)),
                f"H = {H} is not a power of two: take the {n} slopes of {n} heads, then "
                f"every other slope of {2 * n} heads (the first {H - n} of them), not 2^(-8 (h + 1) / H)",
            ),
            (
                lambda: np.array(_geometric(2 * n)[:H]),
                f"H = {H}: the first {H} slopes of {2 * n} heads are not it; take "
                f"the {n} slopes of {n} heads, then every other slope of {2 * n} heads",
            ),
            (
                lambda: np.array(_geometric(n) + _geometric(2 * n)[1::2][: H - n]),
                f"the extra slopes are every other "
                f"slope of {2 * n} heads starting from the first (positions 0, 2, 4, ...), not from the second",
            ),
            (lambda: np.sort(right)[::-1], "the slopes are sorted: keep the order n slopes first, then the extra ones"),
        ]
    return hints.compare(got, expected, "slopes", "[H]", alternatives=alternatives, dtype=np.float32)


def _slopes_case(name, points, *, H, hidden=False):
    """An alibi_slopes(H) case."""
    return Case(name, points, _heads(H), calls.alibi_slopes, _reference_slopes, _diagnose_slopes, hidden)


SLOPES = Exercise(
    key="alibi_slopes",
    target="alibi_slopes",
    title="ALiBi's slopes",
    cases=(
        _slopes_case("8 heads: 1/2, 1/4, ..., 1/256", 2, H=8),
        _slopes_case("4 heads", 1, H=4),
        _slopes_case("6 heads (not a power of two)", 1, H=6),
        _slopes_case("12 heads, hidden", 1, H=12, hidden=True),
    ),
    forbidden=("mha_course.inference.alibi.alibi_slopes", "mha_course.inference.alibi.alibi_bias"),
)

# --- 2. RoPE layout conversion ---------------------------------------------------------------------


def _weight(*, H, D, E, seed, bias=False):
    def make():
        rng = case_inputs.rng(seed)
        shape = (H * D,) if bias else (H * D, E)
        return {"weight": rng.standard_normal(shape), "H": H}

    return make


def _projections(*, H, D, E, T, seed):
    def make():
        rng = case_inputs.rng(seed)
        return {
            "w_q": rng.standard_normal((H * D, E)) / math.sqrt(E),
            "w_k": rng.standard_normal((H * D, E)) / math.sqrt(E),
            "x": rng.standard_normal((T, E)),
            "H": H,
        }

    return make


def _permutation(D):
    return np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])


def _per_head(weight, H, perm):
    rows = weight.shape[0]
    heads = weight.reshape(H, rows // H, *weight.shape[1:])
    return heads[:, perm].reshape(weight.shape)


def _reference_rows(inputs):
    import torch

    from mha_course.inference.rope_layouts import convert_rope_rows

    return convert_rope_rows(torch.from_numpy(inputs["weight"]), int(inputs["H"]), to="half").numpy()


def _diagnose_rows(got, expected, inputs):
    w, H = inputs["weight"], int(inputs["H"])
    D = w.shape[0] // H
    perm = _permutation(D)
    alternatives = [
        (
            lambda: _per_head(w, H, np.argsort(perm)),
            "you converted the other way (rotate-half -> interleaved): row j of "
            "each head must be the original row P[j], P = [0, 2, 4, ..., 1, 3, 5, ...]",
        ),
        (
            lambda: w[_permutation(w.shape[0])],
            "you reordered all H*D rows at once (evens, then odds): reorder within each head's own D rows",
        ),
        (
            lambda: _per_head(w, H, np.concatenate([np.arange(1, D, 2), np.arange(0, D, 2)])),
            "you put the odd rows first: P = [0, 2, 4, ..., 1, 3, 5, ...] takes the even rows first, then the odd ones",
        ),
        (lambda: w, "the weight is unchanged: reorder each head's rows, evens first, then odds"),
    ]
    return hints.compare(
        got, expected, "converted weight", "[H*D, E]" if w.ndim == 2 else "[H*D]", alternatives=alternatives
    )


def _reference_scores(inputs):
    import torch

    from mha_course.core.positions import apply_rotary

    H = int(inputs["H"])
    x = torch.from_numpy(inputs["x"])
    D = inputs["w_q"].shape[0] // H
    q, k = (x @ torch.from_numpy(inputs[n][:D]).T for n in ("w_q", "w_k"))  # head 0, original weights
    return (apply_rotary(q) @ apply_rotary(k).T).numpy()  # (T, T): interleaved layout


def _diagnose_scores(got, expected, inputs):
    hint = hints.compare(got, expected, "scores", "[T, T]")
    if hint:
        return hint + (
            " (head 0's scores, your converted W_Q and W_K in the rotate-half layout, should equal the "
            "original weights' in the interleaved layout)"
        )
    return None


_ROWS_UNCHANGED = case_inputs.unchanged_case(
    _reference_rows,
    _diagnose_rows,
    "your function changed the weight it was given (a checkpoint's tensor): build the reordered weight as a new tensor",
    ("weight",),
)

_rows_heat = hints.single_heatmaps("converted weight", value_name="value", axis_names=("row (head, feature)", "column"))


def _rows_case(name, points, *, H, D, E=0, seed, bias=False, hidden=False, heatmap=False):
    """A to_rotate_half case on a weight (H*D, E), or on a bias (H*D,) (no E)."""
    inputs = _weight(H=H, D=D, E=E, seed=seed, bias=bias)
    visualize = _rows_heat if heatmap else None
    return Case(name, points, inputs, calls.to_rotate_half, _reference_rows, _diagnose_rows, hidden, visualize)


ROTATE_HALF = Exercise(
    key="to_rotate_half",
    target="to_rotate_half",
    title="From interleaved RoPE to rotate-half",
    cases=(
        _rows_case("W_Q of 2 heads, D = 8, E = 5", 2, H=2, D=8, E=5, seed=0, heatmap=True),
        _rows_case("a bias (H*D,) = (3*6,)", 1, H=3, D=6, seed=1, bias=True),
        Case(
            "scores survive: converted weights, rotate-half RoPE",
            1,
            _projections(H=2, D=8, E=12, T=7, seed=2),
            calls.rotated_scores,
            _reference_scores,
            _diagnose_scores,
        ),
        Case(
            "does not change the weight it is given",
            1,
            _weight(H=2, D=4, E=3, seed=4),
            calls.to_rotate_half_unchanged,
            *_ROWS_UNCHANGED,
        ),
        _rows_case("one head, D = 16, hidden", 1, H=1, D=16, E=4, seed=3, hidden=True),
    ),
    forbidden=(
        "mha_course.inference.rope_layouts.convert_rope_rows",
        "mha_course.inference.rope_layouts.interleaved_to_half_permutation",
        "mha_course.inference.rope_layouts.with_rope_layout",
    ),
)

# --- 3. paged-cache lookup -------------------------------------------------------------------------


def _pool(*, N, G, P, D, table, length, seed):
    def make():
        rng = case_inputs.rng(seed)
        order, n = list(table), length
        if case_inputs.salting():  # another table of as many blocks, in another order, and another length
            order = [int(b) for b in rng.permutation(N)[: len(table)]]
            if order == list(range(len(order))):  # the blocks in pool order would hide an ignored table
                order = [(b + 1) % N for b in order]
            if 1 < length < len(table) * P:  # a partly written last block stays partly written
                n = int(rng.integers((len(table) - 1) * P + 1, len(table) * P))
        return {"pool": rng.standard_normal((N, G, P, D)), "table": np.array(order, dtype=np.int64), "length": n}

    return make


def _reference_lookup(inputs):
    import torch

    from mha_course.inference.paged_kv import gather_pages

    return gather_pages(
        torch.from_numpy(inputs["pool"]), torch.from_numpy(inputs["table"]), int(inputs["length"])
    ).numpy()


def _diagnose_lookup(got, expected, inputs):
    pool, table, length = inputs["pool"], inputs["table"], int(inputs["length"])
    N, G, P, D = pool.shape
    n = len(table)
    arr, hint = hints.as_array(got, "the entries")
    if hint:
        return hint
    if arr.shape == (G, n * P, D) and n * P != length:
        return (
            f"the entries have shape {arr.shape}: the last block is only partly written, so keep the first "
            f"length = {length} positions"
        )
    alternatives = [
        (
            lambda: pool[:n].transpose(1, 0, 2, 3).reshape(G, n * P, D)[:, :length],
            f"you read blocks 0 .. {n - 1} of the pool in order: logical block b lives in physical block block_table[b]",
        ),
        (
            lambda: pool[table].reshape(G, n * P, D)[:, :length],
            "the gathered blocks are (n, G, P, D): merging n and P needs G in front first (look at the axis order)",
        ),
        (
            lambda: np.stack([pool[table[s % n], :, s // n] for s in range(length)], axis=1) if length else expected,
            "position s lives in physical block block_table[s // P], at slot s % P (P = block size)",
        ),
        (
            lambda: pool[table[::-1]].transpose(1, 0, 2, 3).reshape(G, n * P, D)[:, :length],
            "the blocks come out in reverse order: logical block 0 is block_table[0]",
        ),
    ]
    return hints.compare(arr, expected, "entries", "[G, S, D]", alternatives=alternatives)


def _lookup_case(name, points, *, hidden=False, **pool):
    """A paged_lookup case; pool: _pool's keywords (a pool (N, G, P, D), the block table, length, seed)."""
    return Case(name, points, _pool(**pool), calls.paged_lookup, _reference_lookup, _diagnose_lookup, hidden)


PAGED = Exercise(
    key="paged_lookup",
    target="paged_lookup",
    title="Reading a request out of a paged KV cache",
    cases=(
        _lookup_case(
            "3 blocks in shuffled order, 10 positions of 12", 2, N=8, G=2, P=4, D=3, table=(5, 0, 3), length=10, seed=0
        ),
        _lookup_case("a full last block (8 positions of 8)", 1, N=6, G=1, P=4, D=2, table=(2, 4), length=8, seed=1),
        _lookup_case("one block, 1 position", 1, N=4, G=2, P=4, D=3, table=(3,), length=1, seed=2),
        _lookup_case(
            "a long request, 9 blocks of 4, hidden",
            1,
            N=16,
            G=2,
            P=4,
            D=5,
            table=(9, 1, 14, 3, 0, 7, 12, 5, 2),
            length=33,
            seed=3,
            hidden=True,
        ),
    ),
    forbidden=(
        "mha_course.inference.paged_kv.gather_pages",
        "mha_course.inference.paged_kv.physical_slot",
        "mha_course.inference.paged_kv.PagedKVCache.keys",
        "mha_course.inference.paged_kv.PagedKVCache.values",
    ),
)

ASSIGNMENT = Assignment(
    key="a16_modern_attention",
    version=1,
    title="Assignment 16: ALiBi, RoPE layouts and a paged KV cache",
    notebook="a16_modern_attention.ipynb",
    exercises=(SLOPES, ROTATE_HALF, PAGED),
)
