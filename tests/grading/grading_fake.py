"""A tiny assignment used only by the grading-engine tests (so they do not depend on course content).

Exercises:
    add_arrays(a, b) -> a + b           (NumPy; one hidden case; forbids numpy.einsum)
    double(x) -> 2 * x                  (torch; forbids torch.softmax and torch's SDPA)
"""

from __future__ import annotations

import grading_fake_calls as calls
import numpy as np

from mha_course.grading.learner import hints
from mha_course.grading.spec import Assignment, Case, Exercise


def _pair(seed, shape=(3, 4)):
    def make():
        rng = np.random.default_rng(seed)
        return {"a": rng.standard_normal(shape), "b": rng.standard_normal(shape)}

    return make


def _ref_add(inputs):
    return inputs["a"] + inputs["b"]


def _diagnose(got, expected, inputs):
    arr, hint = hints.as_array(got, "the sum")
    if hint:
        return hint
    if arr.shape != expected.shape:
        return f"shape expected {expected.shape}, got {arr.shape}"
    # deliberately lenient (broadcasting allclose): the engine's safety net must still catch
    # an extra axis or NaN, so this is NOT how real exercises should diagnose
    if not np.allclose(arr, expected, equal_nan=True):
        return "values differ from a + b"
    return None


def _lenient(got, expected, inputs):
    with np.errstate(all="ignore"):
        ok = np.allclose(np.asarray(got, dtype=float), expected, equal_nan=True)
    return None if ok else "values differ from a + b"


def _vector(seed):
    return lambda: {"x": np.random.default_rng(seed).standard_normal(5).astype(np.float32)}


def _ref_double(inputs):
    return 2 * inputs["x"]


def _diagnose_double(got, expected, inputs):
    arr = np.asarray(got)
    if arr.shape != expected.shape:
        return f"shape expected {expected.shape}, got {arr.shape}"
    return None if np.allclose(arr, expected) else "values differ from 2 x"


ADD = Exercise(
    key="fake_add",
    target="add_arrays",
    title="Add two arrays",
    cases=(
        Case("a + b for (3, 4)", 2, _pair(0), calls.add, _ref_add, _diagnose),
        Case("a + b for (2, 5), lenient diagnose", 1, _pair(1, (2, 5)), calls.add, _ref_add, _lenient),
        Case("a + b for (4, 1), hidden", 1, _pair(2, (4, 1)), calls.add, _ref_add, _diagnose, hidden=True),
    ),
    forbidden=("numpy.einsum",),
)

DOUBLE = Exercise(
    key="fake_double",
    target="double",
    title="Double a tensor",
    cases=(
        Case("2 x for a vector", 1, _vector(3), calls.double, _ref_double, _diagnose_double),
        Case("2 x again, hidden", 1, _vector(4), calls.double, _ref_double, _diagnose_double, hidden=True),
    ),
    forbidden=("torch.softmax", "torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention"),
)

ASSIGNMENT = Assignment(
    key="zz_fake",
    version=3,
    title="A fake assignment for engine tests",
    notebook="zz_fake.ipynb",
    exercises=(ADD, DOUBLE),
)


# --- submissions for the tests -----------------------------------------------------------------

GOOD_ADD = "def add_arrays(a, b):\n    return a + b\n"
GOOD_DOUBLE = "import torch\n\ndef double(x):\n    return 2 * x\n"


def write_submission(path, *cells: str, metadata: bool = True, version: int = 3):
    """Write a notebook of code cells (plus a markdown cell) carrying zz_fake's metadata; returns path."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a submission")] + [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if metadata:
        nb.metadata["mha_course"] = {"assignment": "zz_fake", "version": version}
    nbformat.write(nb, str(path))
    return path


def require_sandbox() -> None:
    """Skip the calling test where the grader's sandbox (bubblewrap) cannot run; `make test` installs it as root."""
    import pytest

    from mha_course.grading.walls import bubblewrap as isolation

    why = isolation.probe()
    if why is not None:
        pytest.skip(f"the grader's sandbox cannot run here: {why}")


def assert_the_attack_cell_was_reached(result) -> None:
    """No cell before a test's attack (its last cell) hit a time limit: a zero score then comes from the attack.

    A cell stopped by its limit is named in a note ("cell N timed out ...: it and the cells after it were not
    run" or "... was skipped"); on a busy machine an honest cell could be, and the attack would never run.
    """
    stopped = [n for n in result.notes if n.startswith("cell ") and ("were not run" in n or "was skipped" in n)]
    assert not stopped, result.notes


def tagged_processes(tag: str) -> list[int]:
    """Pids of processes whose environment carries ``MHA_COURSE_RUN_TAG=tag`` or whose command line names ``tag``.

    A grading run started with that variable passes it into every sandbox, so this finds whatever a
    submission left behind (the sandbox gets a clean environment otherwise).
    """
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"MHA_COURSE_RUN_TAG={tag}".encode() in environ or tag.encode() in cmdline:
            found.append(int(proc.name))
    return [pid for pid in found if pid != __import__("os").getpid()]
