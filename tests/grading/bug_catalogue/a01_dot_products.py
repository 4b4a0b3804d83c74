"""Bugs of a01_dot_products: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "dot_elementwise",
        "a01_dot_products",
        "element-wise products, not summed",
        [("return float(np.sum(a * b))", "return a * b")],
    ),
    Bug(
        "scores_kqT",
        "a01_dot_products",
        "k q^T instead of q k^T",
        [("    return q @ np.swapaxes(k, -1, -2)  # (..., T, S)", "    return k @ np.swapaxes(q, -1, -2)")],
    ),
    Bug(
        "scores_no_batch",
        "a01_dot_products",
        "k.T reverses all axes: no batch dims",
        [("    return q @ np.swapaxes(k, -1, -2)  # (..., T, S)", "    return q @ k.T")],
    ),
    Bug(
        "scale_by_D",
        "a01_dot_products",
        "1/D instead of 1/sqrt(D)",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ D  # (..., T, S)\n    ### END")],
    ),
    Bug(
        "scale_np_sqrt_dtype",
        "a01_dot_products",
        "np.sqrt promotes float32 to float64",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ np.sqrt(D)  # (..., T, S)\n    ### END")],
    ),
    Bug(
        "scale_hardcoded",
        "a01_dot_products",
        "hard-coded sqrt(16)",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ 4.0  # (..., T, S)\n    ### END")],
    ),
]
