"""The repository keeps its promises: stripped notebooks with a kernel, a README that lists every
chapter and assignment, pinned requirements, and nothing that reads the commissioning material."""

import re
import tomllib
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LECTURES = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
ALL_NOTEBOOKS = LECTURES + SOLUTIONS + EXERCISES


def _ids(paths):
    return [f"{p.parent.name}/{p.name}" for p in paths]


def test_chapters_are_numbered_in_order():
    numbers = [int(p.name[:2]) for p in LECTURES]
    assert len(numbers) == len(set(numbers)), f"two chapters share a number: {numbers}"
    assert numbers == list(range(len(numbers))), f"every chapter from 00 to the last, without gaps: {numbers}"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_ids(ALL_NOTEBOOKS))
def test_notebook_is_committed_stripped_with_a_python_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", "kernelspec python3 missing"
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {index} has outputs: strip them before committing"
            assert cell.execution_count is None, f"cell {index} has an execution count"


@pytest.mark.parametrize("path", LECTURES, ids=_ids(LECTURES))
def test_lecture_uses_the_library_has_a_figure_and_ends_with_a_check(path):
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.search(r"^\s*(import mha_course|from mha_course)", code, re.M), "does not import mha_course"
    assert re.search(r"plt\.|viz\.|plot_|heatmap|show_", code), "draws no figure"
    assert "$" in markdown, "no formula in the prose"
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert headings and re.search(r"check", headings[-1], re.I), f"last section is {headings[-1:]!r}, not a check"
    last_code = [c for c in nb.cells if c.cell_type == "code"][-1].source
    checks = re.search(r"\bcheck(_prediction|_choice|_exercise)?\(", last_code)  # mha_course.predict's too
    assert "assert" in last_code or checks, "the final code cell checks nothing"


def test_no_notebook_sets_the_matplotlib_backend_through_the_environment():
    for path in ALL_NOTEBOOKS:
        assert "MPLBACKEND" not in path.read_text(), path


def test_readme_lists_every_chapter_and_every_exercise():
    readme = (ROOT / "README.md").read_text()
    for path in LECTURES + EXERCISES:
        assert f"{path.parent.name}/{path.name}" in readme, f"README does not link {path.name}"
    assert not re.search(r"\b[A-Z]+_(TABLE|SECTION)\b", readme), "README holds an unfilled placeholder"


def test_start_here_maps_every_chapter():
    start = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    markdown = "\n".join(c.source for c in start.cells if c.cell_type == "markdown")
    for path in LECTURES:
        assert f"| {path.name[:2]} |" in markdown, f"the chapter table of 00_start_here has no row for {path.name}"


def test_requirements_are_pinned_and_install_the_package():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    assert "-e ." in lines
    for line in lines:
        if line != "-e .":
            assert re.match(r"^[A-Za-z0-9_.\-\[\]]+==[0-9][^\s;]*(\s*;.*)?$", line), f"not pinned: {line}"


def _pins() -> dict[str, Version]:
    """requirements.txt's pins, by canonical package name."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and line != "-e .":
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = Version(str(requirement.specifier).removeprefix("=="))
    return pins


def test_each_pin_lies_in_the_range_pyproject_declares():
    """A pin outside pyproject's range would install one thing with `make` and refuse it with `pip install .`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    pins, checked = _pins(), []
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        if name in pins:
            assert requirement.specifier.contains(pins[name]), (
                f"requirements.txt pins {name} {pins[name]}, pyproject wants {requirement}"
            )
            checked.append(name)
    assert "torch" in checked and "numpy" in checked, checked


def test_the_torch_the_docs_tell_to_install_is_the_pinned_one():
    """The README's CUDA instructions (and any guide) name requirements.txt's torch, not an older one."""
    pinned = _pins()["torch"]
    named = {}
    for path in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")]:
        for version in re.findall(r"\btorch==([0-9][\w.+]*)", path.read_text()):
            named[f"{path.name}: torch=={version}"] = Version(version) == pinned
    assert named, "the README no longer says which torch to install on a CUDA machine"
    assert all(named.values()), f"requirements.txt pins torch {pinned}; the docs name {sorted(named)}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_nothing_reads_the_commissioning_material():
    # The product stands alone: users never have ../shared next to it.
    pattern = re.compile(r"\.\./shared|shared/seeds|DESIGN\.md")
    for path in ROOT.rglob("*"):
        if any(part in {".venv", ".git", "__pycache__", ".pytest_cache", ".hypothesis"} for part in path.parts):
            continue
        if (
            path.is_file()
            and path.suffix in {".py", ".ipynb", ".md", ".txt", ".toml", ".cfg"}
            and path != Path(__file__).resolve()
        ):
            assert not pattern.search(path.read_text(errors="ignore")), f"{path} refers to ../shared"
