"""The package's public surface: every exported name resolves, and to the right kind of object."""

import importlib
import pkgutil
import subprocess
import sys
import types

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


def test_shape_legend_is_documented_once_in_the_package():
    for letter in (
        "B  batch",
        "H  number of heads",
        "T  query length",
        "S  key/value length",
        "D  per-head",
        "E  model dimension",
        "Dv value dimension",
    ):
        assert letter in mha_course.__doc__


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
