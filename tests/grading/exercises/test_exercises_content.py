"""The assignment content of chapters 01-05: cases, references, diagnoses and hints.

* every case's reference passes its own diagnosis (after the trip through the wire format);
* the library's own implementations get full marks through the self-check (hidden cases included);
* inputs are deterministic plain data; exercise modules import no reference code at module level;
* typical mistakes get the hint that names them (wrong axis, no max subtraction, 1/D, mask inverted...).
"""

from __future__ import annotations

import ast
import importlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_course.grading.engine import registry
from mha_course.grading.engine.scoring import judge
from mha_course.grading.inside import wire
from mha_course.grading.learner import selfcheck

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the buggy softmaxes overflow on purpose

MODULES = ["a01_dot_products", "a02_softmax", "a03_attention", "a04_masks", "a05_multi_head", "a06_debug_mha"]


def _assignment(name):
    return importlib.import_module(f"mha_course.grading.exercises.{name}").ASSIGNMENT


def _all_cases():
    for name in MODULES:
        for exercise in _assignment(name).exercises:
            for case in exercise.cases:
                yield pytest.param(exercise, case, id=f"{exercise.key}:{case.name}")


def _debug_solution_class():
    """The repaired seed class, taken from the solution notebook's definition cell."""
    from mha_course.grading.engine.notebook import code_cells, read

    nb = read(ROOT / "solutions" / "a06_debug_mha.ipynb")
    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n", namespace)  # noqa: S102 - trusted course file
    source = next(src for _, src in code_cells(nb) if src.lstrip().startswith("class MultiHeadAttention"))
    exec(source, namespace)  # noqa: S102
    return namespace["MultiHeadAttention"]


def _library_objects():
    from mha_course.core.attention import scaled_dot_product_attention, scaled_dot_product_attention_np
    from mha_course.core.heads import merge_heads, split_heads
    from mha_course.core.masks import causal_mask, padding_mask
    from mha_course.core.mha import MultiHeadAttention
    from mha_course.core.softmax import softmax, softmax_np

    return {
        "softmax_np": softmax_np,
        "softmax": softmax,
        "attention_np": scaled_dot_product_attention_np,
        "sdpa": scaled_dot_product_attention,
        "causal_mask": causal_mask,
        "padding_mask": padding_mask,
        "masked_sdpa": scaled_dot_product_attention,
        "split_heads": split_heads,
        "merge_heads": merge_heads,
        "multi_head_attention": MultiHeadAttention,
        # chapter 01 has no library function: these are the formulas themselves
        "dot_product_np": lambda a, b: float(np.dot(a, b)),
        "dot_scores_np": lambda q, k: np.matmul(q, np.swapaxes(k, -1, -2)),
        "scaled_dot_scores_np": lambda q, k: np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1]),
        "debug_mha": _debug_solution_class(),
    }


def test_assignments_are_discovered_without_errors():
    keys = {a.key for a in registry.assignments()}
    assert set(MODULES) <= keys
    errors = {m: e for m, e in registry.discovery_errors().items() if m.rsplit(".", 1)[-1] in MODULES}
    assert errors == {}
    for name in MODULES:
        assignment = _assignment(name)
        assert assignment.notebook == f"{name}.ipynb" and assignment.key == name
        assert (ROOT / "solutions" / assignment.notebook).exists()
        for exercise in assignment.exercises:
            assert any(not c.hidden for c in exercise.cases), f"{exercise.key}: no public case"
            assert any(c.hidden for c in exercise.cases), f"{exercise.key}: no hidden case"
            assert len({c.name for c in exercise.cases}) == len(exercise.cases), f"{exercise.key}: duplicate names"


@pytest.mark.parametrize("name", [*MODULES, "_common"])
def test_exercise_modules_import_no_reference_code_at_top(name):
    tree = ast.parse((ROOT / "mha_course" / "grading" / "exercises" / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("mha_course") for a in node.names), ast.dump(node)
        if isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            # ._common holds grader-side helpers only (a test below checks it the same way)
            assert module in {
                "..",
                "..engine",
                "..spec",
                "..learner",
                "..inside",
                "..calls",
                "._common",
                "__future__",
                "math",
                "numpy",
            } or not module.startswith(("mha_course", ".")), f"{name}: top-level import of {module}"


@pytest.mark.parametrize(("exercise", "case"), list(_all_cases()))
def test_reference_passes_its_own_diagnosis(exercise, case):
    inputs = case.make_inputs()
    again = case.make_inputs()
    assert inputs.keys() == again.keys()
    for key, value in inputs.items():  # deterministic plain data
        assert value is None or isinstance(value, (np.ndarray, int, float, str, bool)), (key, type(value))
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, again[key])
    expected = case.reference(inputs)
    got = wire.roundtrip(expected)
    assert judge(case, got, inputs) is None


def test_library_implementations_get_full_marks():
    objects = _library_objects()
    for name in MODULES:
        for exercise in _assignment(name).exercises:
            result, _ = selfcheck.run_exercise(exercise, objects[exercise.key], include_hidden=True)
            failed = [(r.case, r.hint) for r in result.rows if not r.passed]
            assert failed == [] and result.score == exercise.max_points, (exercise.key, failed)


def test_unattempted_stub_scores_zero():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    for name in MODULES:
        for exercise in _assignment(name).exercises:
            result = selfcheck.check(exercise.key, stub, include_hidden=True, show=False)
            assert result.score == 0, exercise.key


@pytest.mark.parametrize(
    ("notebook", "key"), [("a05_multi_head", "multi_head_attention"), ("a06_debug_mha", "debug_mha")]
)
def test_unedited_exercise_class_is_not_attempted(notebook, key):
    # the student's class as handed out: a06_debug_mha gives the whole constructor, only forward is a stub
    from mha_course.grading.engine.notebook import code_cells, read

    nb = read(ROOT / "exercises" / f"{notebook}.ipynb")
    namespace: dict = {}
    exec("import math\nimport torch\nfrom torch import nn\n", namespace)  # noqa: S102 - trusted course file
    source = next(src for _, src in code_cells(nb) if src.lstrip().startswith("class MultiHeadAttention"))
    assert "raise NotImplementedError()" in source
    exec(source, namespace)  # noqa: S102
    result = selfcheck.check(key, namespace["MultiHeadAttention"], include_hidden=True, show=False)
    assert result.score == 0
    assert {r.status for r in result.rows} == {"not attempted"}


# --- hints: a typical mistake gets the hint that names it -----------------------------------------


def _hints(key, obj):
    """The failed cases' hints for ``obj`` (which may wrap the library's own code, as these tests' bugs do)."""
    from mha_course.grading.engine.registry import find_exercise

    result, _ = selfcheck.run_exercise(find_exercise(key), obj, include_hidden=True)
    assert result.score < result.max_score, key
    return " | ".join(r.hint for r in result.rows if not r.passed)


def test_hint_softmax_without_max_subtraction():
    hint = _hints("softmax_np", lambda x, axis=-1: np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True))
    assert "subtract the maximum" in hint


def test_hint_softmax_wrong_axis():
    def over_first_axis(x, axis=-1):
        e = np.exp(x - x.max(axis=0, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)

    assert "wrong axis" in _hints("softmax_np", over_first_axis)


def test_hint_softmax_rows_do_not_sum_to_one():
    def unnormalised(x, dim=-1):
        return torch.exp(x - x.amax(dim=dim, keepdim=True))

    assert "sum to 1" in _hints("softmax", unnormalised)


def test_hint_attention_scale_one_over_d():
    def one_over_d(q, k, v, scale=None):
        weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)
        return weights @ v, weights

    assert "1/D" in _hints("sdpa", one_over_d)


def test_hint_mask_inverted_and_ignored():
    from mha_course.core.attention import scaled_dot_product_attention as reference

    def inverted(q, k, v, mask=None, scale=None):
        return reference(q, k, v, None if mask is None else (~mask if mask.dtype == torch.bool else mask))

    def ignored(q, k, v, mask=None, scale=None):
        return reference(q, k, v)

    assert "inverted" in _hints("masked_sdpa", inverted)
    assert "ignored" in _hints("masked_sdpa", ignored)


def test_hint_split_heads_without_transpose():
    def no_transpose(x, num_heads):
        B, T, E = x.shape
        return x.reshape(B, num_heads, T, E // num_heads)

    assert "without a transpose" in _hints("split_heads", no_transpose)


def test_hint_shape_expected_vs_got():
    hint = _hints("dot_scores_np", lambda q, k: np.swapaxes(q @ np.swapaxes(k, -1, -2), -1, -2))
    assert "shape expected" in hint and "transposed" in hint


def test_visualize_draws_yours_expected_and_difference():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    exercise = registry.find_exercise("masked_sdpa")
    case = next(c for c in exercise.cases if c.visualize is not None)
    inputs = case.make_inputs()
    expected = case.reference(inputs)
    got = (expected[0], np.flip(expected[1], -1).copy())
    fig = case.visualize(got, expected, inputs)
    try:
        panels = [ax for ax in fig.axes if ax.images]
        assert [ax.get_title().split(" ")[0] for ax in panels] == ["yours", "expected", "yours"]
        difference = panels[2].images[0].get_array()
        mine, ref = (np.asarray(a, dtype=np.float64) for a in (got[1], expected[1]))
        worst = np.abs(mine - ref).reshape(-1, *ref.shape[-2:]).max(axis=(1, 2)).argmax()
        assert np.allclose(difference, (mine - ref).reshape(-1, *ref.shape[-2:])[worst])
    finally:
        plt.close(fig)


def test_visualize_gives_no_picture_for_a_wrong_shape_or_a_non_array():
    exercise = registry.find_exercise("sdpa")
    case, inputs, expected = next(
        (c, inputs, c.reference(inputs))
        for c in exercise.cases
        if c.visualize is not None
        for inputs in [c.make_inputs()]
        if inputs["q"].shape[-2] != inputs["k"].shape[-2]
    )  # T != S
    transposed = (expected[0], np.swapaxes(expected[1], -1, -2).copy())
    assert case.visualize(transposed, expected, inputs) is None
    assert case.visualize(("not", "arrays"), expected, inputs) is None
    assert case.visualize(expected[1], expected, inputs) is None  # not a pair
