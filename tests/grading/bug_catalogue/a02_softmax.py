"""Bugs of a02_softmax: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "softmax_no_max",
        "a02_softmax",
        "no max subtraction (NumPy)",
        [("    exps = np.exp(x - row_max)", "    exps = np.exp(x)")],
    ),
    Bug(
        "softmax_axis0",
        "a02_softmax",
        "softmax over axis 0",
        [
            (
                "    row_max = np.max(x, axis=axis, keepdims=True)\n    row_max = np.where(np.isneginf(row_max), 0.0, row_max)  # all -inf row: shift by 0, not -inf\n    exps = np.exp(x - row_max)\n    total = np.sum(exps, axis=axis, keepdims=True)",
                "    row_max = np.max(x, axis=0, keepdims=True)\n    row_max = np.where(np.isneginf(row_max), 0.0, row_max)\n    exps = np.exp(x - row_max)\n    total = np.sum(exps, axis=0, keepdims=True)",
            )
        ],
    ),
    Bug(
        "softmax_global_max",
        "a02_softmax",
        "global instead of per-row max",
        [("    row_max = np.max(x, axis=axis, keepdims=True)", "    row_max = np.max(x)")],
    ),
    Bug(
        "softmax_no_keepdims",
        "a02_softmax",
        "missing keepdims",
        [("    row_max = np.max(x, axis=axis, keepdims=True)", "    row_max = np.max(x, axis=axis)")],
    ),
    Bug(
        "softmax_inplace",
        "a02_softmax",
        "mutates its input",
        [("    exps = np.exp(x - row_max)\n", "    x -= row_max\n    exps = np.exp(x)\n")],
    ),
    Bug(
        "softmax_neginf_nan",
        "a02_softmax",
        "textbook stable softmax: NaN on all -inf rows",
        [("    row_max = np.where(np.isneginf(row_max), 0.0, row_max)  # all -inf row: shift by 0, not -inf\n", "")],
    ),
    Bug(
        "softmax_torch_no_max",
        "a02_softmax",
        "no max subtraction (torch)",
        [("    exps = torch.exp(work - row_max)", "    exps = torch.exp(work)")],
    ),
    Bug(
        "softmax_torch_downcast",
        "a02_softmax",
        "computes float64 input in float32",
        [("    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x", "    work = x.float()")],
    ),
    Bug(
        "softmax_torch_dtype",
        "a02_softmax",
        "float16 input returns float32",
        [
            (
                "    return (exps / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)",
                "    return exps / torch.where(total == 0, torch.ones_like(total), total)",
            )
        ],
    ),
    Bug(
        "softmax_torch_dim_ignored",
        "a02_softmax",
        "dim argument ignored",
        [
            ("    row_max = work.amax(dim=dim, keepdim=True)", "    row_max = work.amax(dim=-1, keepdim=True)"),
            ("    total = exps.sum(dim=dim, keepdim=True)", "    total = exps.sum(dim=-1, keepdim=True)"),
        ],
    ),
]
