"""What a release needs: a licence, one version (the package's, which the built metadata and the changelog
carry), a console command for every ``python -m`` tool, a pinned pre-commit set-up, docs that name the
Python the package requires."""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint, PathDistribution
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

import mha_course

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
# Modules with a main() that are not commands for people: the runtime the grader starts inside a sandbox.
NOT_COMMANDS = {"mha_course.grading.inside.runner"}


def test_the_licence_is_mit_and_pyproject_says_so():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) 2026 the mha_course authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    assert PROJECT["license"] == "MIT"
    assert re.search(r"^## Licen[cs]e\n\nMIT", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)


def test_the_version_is_written_once_in_the_package():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mha_course.__version__"}
    Version(mha_course.__version__)  # PEP 440, or this raises
    # setuptools reads the attribute as a literal (no import of torch at build time): keep it one
    tree = ast.parse((ROOT / "mha_course" / "__init__.py").read_text(encoding="utf-8"))
    literals = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
        and isinstance(node.value, ast.Constant)
    ]
    assert literals == [mha_course.__version__]


def test_the_changelog_has_the_current_version_and_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings[0] == "Unreleased", headings
    versions = [Version(h) for h in headings[1:]]
    assert versions == sorted(versions, reverse=True), f"newest first: {headings}"
    assert versions and versions[0] == Version(mha_course.__version__), (
        f"mha_course.__version__ is {mha_course.__version__}, the changelog's last release {headings[1:2]}"
    )
    assert re.search(rf"^## \[{re.escape(mha_course.__version__)}\] - \d{{4}}-\d\d-\d\d$", text, re.M)


@functools.cache  # parsing the whole package once for the file's four uses
def _command_modules() -> frozenset[str]:
    """Every module that runs as ``python -m``: a top-level main() called under ``if __name__ == "__main__"``."""
    found = set()
    for path in sorted((ROOT / "mha_course").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "__main__" not in text:  # no `if __name__ == "__main__"` here: nothing to parse
            continue
        tree = ast.parse(text)
        has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
        runs = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if has_main and runs:
            found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return frozenset(found)


def _check_entry_points(points) -> None:
    for point in points:
        target = point.load()
        assert callable(target), f"{point.name} -> {point.value} is not callable"
        assert point.value.endswith(":main") and point.name.startswith("mha-course-"), point
        stem = point.module.rpartition(".")[2].replace("_", "-")
        assert point.name.endswith(stem), f"{point.name} runs {point.module}: name it after the module"
    targets = {point.module for point in points}
    assert targets == _command_modules() - NOT_COMMANDS, "a `python -m mha_course...` command has no console command"


def test_every_python_m_command_has_a_console_command():
    points = [EntryPoint(name, value, "console_scripts") for name, value in PROJECT["scripts"].items()]
    _check_entry_points(points)


def test_the_module_scan_finds_the_commands():
    assert {"mha_course.grading.grade", "mha_course.grading.assign", "mha_course.parallel.demo"} <= _command_modules()
    assert (
        "mha_course.grading.inside.runner" in _command_modules() and "mha_course.core.softmax" not in _command_modules()
    )


@pytest.mark.slow
def test_built_metadata_carry_the_package_version_and_the_commands(tmp_path):
    """What pip installs (here, and from the Gradescope bundle): metadata built by setuptools from a copy of the
    files the bundle ships, without importing the package."""
    import setuptools

    needed = next(Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools"))
    if not needed.specifier.contains(setuptools.__version__):
        pytest.skip(f"setuptools {setuptools.__version__} here; pyproject's build needs {needed} (pip fetches it)")
    source = tmp_path / "source"
    shutil.copytree(ROOT / "mha_course", source / "mha_course", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    code = (
        "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dist = PathDistribution(tmp_path / done.stdout.strip().splitlines()[-1])
    assert dist.version == mha_course.__version__
    assert dist.metadata["License-Expression"] == "MIT"
    points = list(dist.entry_points.select(group="console_scripts"))
    assert {p.name: p.value for p in points} == PROJECT["scripts"]
    _check_entry_points(points)


def _requirements_pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if re.match(rf"{name}==", line):
            return line.split("#")[0].split(";")[0].strip()
    raise AssertionError(f"requirements.txt does not pin {name}")


def test_pre_commit_hooks_are_pinned_and_run_what_make_lint_runs():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = {}
    for repo in config["repos"]:
        assert repo["repo"] == "local" or re.match(r"v?\d", repo.get("rev", "")), f"{repo['repo']} is not pinned"
        for hook in repo["hooks"]:
            hooks[hook["id"]] = hook
            for dependency in hook.get("additional_dependencies", []):
                assert re.match(r"^[\w.\-]+==\d", dependency), f"{hook['id']}: {dependency} is not pinned"
    ruff = _requirements_pin("ruff")
    assert hooks["ruff-check"]["entry"].startswith("ruff check") and hooks["ruff-format"]["entry"].startswith(
        "ruff format"
    )
    for name in ("ruff-check", "ruff-format"):
        # the same ruff as `make lint`, and pyproject's excludes for the files pre-commit passes by name
        assert hooks[name]["additional_dependencies"] == [ruff] and "--force-exclude" in hooks[name]["entry"]
    strip = hooks["nbstripout"]
    # --keep-id: the notebooks' cell ids are kept (nbstripout renumbers them otherwise)
    assert strip["entry"].split()[:1] == ["nbstripout"] and "--keep-id" in strip["entry"].split()
    assert strip.get("types") == ["jupyter"] and "exclude" not in strip


def test_make_test_does_not_need_pre_commit():
    assert "pre-commit" not in (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pre-commit" not in (ROOT / "requirements.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", ["README.md", "CONTRIBUTING.md", "docs/INSTRUCTORS.md"])
def test_docs_name_the_python_pyproject_requires(doc):
    minimum = re.fullmatch(r">=\s*(3\.\d+)", PROJECT["requires-python"])[1]
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = re.findall(r"Python (3\.\d+)(?:\+| or newer| or later)", text)
    assert set(named) <= {minimum}, f"{doc} names Python {named}; pyproject requires {minimum} or newer"
    if doc != "docs/INSTRUCTORS.md":
        assert named, f"{doc} does not say which Python the course needs"
