"""The package's public surface: every exported name resolves, and to the right kind of object."""

import importlib
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import mha_course


def test_every_export_resolves_to_a_function_or_class_even_after_all_submodules_are_imported():
    # Importing a submodule rebinds a package attribute of the same name (mha_course.core.softmax).
    for info in pkgutil.walk_packages(mha_course.__path__, "mha_course."):
        if not info.name.endswith(("__main__", ".grade", ".assign", ".train", ".bench")):
            importlib.import_module(info.name)
    for name in mha_course.__all__:
        value = getattr(mha_course, name)
        assert not isinstance(value, types.ModuleType), f"mha_course.{name} is a module, expected the object"
    from mha_course import softmax

    assert callable(softmax) and softmax.__name__ == "softmax"


@pytest.mark.slow
def test_import_is_light():
    code = "import sys, mha_course; print(sorted(m for m in ('triton', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _legend(text: str) -> dict[str, str]:
    """The shape legend stated in ``text`` as {letter: meaning}: lines ``    B  batch size`` after "Shape legend"."""
    block = text[text.index("Shape legend") :].split("\n\n")[1]
    return dict(re.findall(r"^\s+(\w{1,2})\s+(\S.*)$", block, re.M))


def _restated(text: str, legend: dict[str, str]) -> list[str]:
    """The legend's entries ``text`` states again: a line that gives a letter with the first words of its meaning."""
    return [
        letter
        for letter, meaning in legend.items()
        if re.search(
            rf"^[\s#*|-]*{letter}\b[\s:=|-]+{re.escape(' '.join(meaning.split()[:2]).rstrip(','))}", text, re.M
        )
    ]


def test_shape_legend_is_documented_once_in_the_package():
    legend = _legend(mha_course.__doc__)
    assert sorted(legend) == ["B", "D", "Dv", "E", "H", "S", "T"], legend
    for letter, words in [("B", "batch"), ("H", "heads"), ("T", "query"), ("S", "key/value"), ("D", "per-head")]:
        assert words in legend[letter], f"the legend says {letter} is {legend[letter]!r}"
    assert "E = H * D" in legend["E"] and "Dv == D" in legend["Dv"]
    # once: no other module of the package states it again (a second copy drifts from the first)
    init = Path(mha_course.__file__)
    again = {
        str(path.relative_to(init.parent)): found
        for path in sorted(init.parent.rglob("*.py"))
        if path != init and len(found := _restated(path.read_text(encoding="utf-8"), legend)) >= 3
    }
    assert again == {}, f"the shape legend is stated again in {again}; point to mha_course/__init__.py instead"


def test_the_readme_shows_the_package_legend():
    """The README's legend table has the package's letters, no more and no fewer."""
    readme = (Path(mha_course.__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("**Shape legend**") :].split("\n\n")[1]
    letters = re.findall(r"^\| (\w{1,2}) \|", table, re.M)
    assert sorted(letters) == sorted(_legend(mha_course.__doc__)), letters


def test_a_restated_legend_is_found():
    legend = _legend(mha_course.__doc__)
    copy = "Shapes:\n\n    B  batch size\n    H  number of heads\n    T  query length (queries)\n"
    assert _restated(copy, legend) == ["B", "H", "T"]
    assert _restated("    E: model dimension; must be even.", legend) == ["E"]  # one argument is not a legend
    assert _restated("b = (batch_head // num_heads)", legend) == []


@pytest.mark.slow
def test_import_chooses_the_triton_interpreter_without_a_gpu_and_respects_the_environment():
    import os

    code = "import os, mha_course, torch; print(os.environ.get('TRITON_INTERPRET'), torch.cuda.is_available())"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    value, cuda = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert value == ("None" if cuda == "True" else "1")
    value, _ = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "TRITON_INTERPRET": "0"}
    ).stdout.split()
    assert value == "0"
