"""The tests mirror the package: ``tests/<folder>/`` tests ``mha_course/<folder>/``, and ``tests/grading/<folder>/``
tests ``mha_course/grading/<folder>/``; the few folders that are not package folders are declared here, each with
what it holds. No test file sits flat in ``tests/grading/``, and test file names are unique across ``tests/``
(there are no ``__init__.py`` files: pytest imports each test file by its name)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# tests/ folders that are not package folders (CONTRIBUTING.md, "Tests", says what each checks)
NOT_PACKAGE = {"notebooks", "repo", "site"}
# tests/grading/ folders of tests that are not folders of mha_course/grading/
GRADING_NOT_PACKAGE = {
    "vocabulary": "the grader's shared vocabulary at the root of mha_course/grading/ (spec, verdicts, safe_text)",
    "commands": "the command modules at the root of mha_course/grading/ (grade, gradescope, hidden_argv, assign)",
    "redteam": "the red team's cases, grouped by what they attack",
    "honest": "the honest corpus (sixty correct notebooks) and its tests",
}
# tests/grading/ folders of shared helpers, no tests
GRADING_HELPER_FOLDERS = {"bug_catalogue": "the bug catalogue, one module per assignment"}
# files directly in tests/grading/: its conftest and the helpers the subfolders share (on pytest's pythonpath)
GRADING_FLAT_FILES = {"conftest.py", "grading_fake.py", "grading_fake_calls.py", "sandbox_batch.py"}


def _folders(path: Path) -> set[str]:
    return {p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}


def layout_problems(tests: Path, package: Path) -> list[str]:
    """Every way ``tests`` fails to mirror ``package`` (an empty list when it mirrors it)."""
    problems = []
    for name in sorted(_folders(tests) - _folders(package) - NOT_PACKAGE):
        problems.append(f"tests/{name}/ names no folder of mha_course/ and is not declared in NOT_PACKAGE")
    for name in sorted(_folders(package) - _folders(tests)):
        problems.append(f"mha_course/{name}/ has no tests/{name}/")
    grading, tested = tests / "grading", package / "grading"
    declared = _folders(tested) | set(GRADING_NOT_PACKAGE) | set(GRADING_HELPER_FOLDERS)
    for name in sorted(_folders(grading) - declared):
        problems.append(f"tests/grading/{name}/ names no folder of mha_course/grading/ and is not declared")
    for name in sorted((_folders(tested) | set(GRADING_NOT_PACKAGE)) - _folders(grading)):
        problems.append(f"tests/grading/{name}/ is missing (mha_course/grading/{name}/ or a declared test folder)")
    for name in sorted(GRADING_HELPER_FOLDERS):
        if any((grading / name).glob("test_*.py")):
            problems.append(f"tests/grading/{name}/ is declared a helper folder but holds tests")
    for path in sorted(grading.glob("*.py")):
        if path.name not in GRADING_FLAT_FILES:
            problems.append(f"tests/grading/{path.name} sits flat: move it into the folder of what it tests")
    for path in sorted(grading.glob("*/*/**/test_*.py")):
        problems.append(f"{path.relative_to(tests.parent)} is nested deeper than tests/grading/<folder>/")
    seen: dict[str, Path] = {}
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            problems.append(
                f"{path.relative_to(tests.parent)} has the name of {seen[path.name].relative_to(tests.parent)}"
            )
        seen.setdefault(path.name, path)
    return problems


def test_tests_mirror_the_package():
    assert layout_problems(ROOT / "tests", ROOT / "mha_course") == []


def test_the_mirror_check_finds_a_flat_file_an_unknown_folder_and_a_twin(tmp_path):
    package, tests = tmp_path / "mha_course", tmp_path / "tests"
    for folder in ("core", "grading/engine"):
        (package / folder).mkdir(parents=True)
    for folder in (
        "core",
        "grading/engine",
        "grading/round3",
        "notebooks",
        *(f"grading/{n}" for n in GRADING_NOT_PACKAGE),
    ):
        (tests / folder).mkdir(parents=True, exist_ok=True)
    (tests / "grading" / "test_redteam_round4.py").write_text("")
    (tests / "grading" / "engine" / "test_pipeline.py").write_text("")
    (tests / "core" / "test_pipeline.py").write_text("")
    problems = "\n".join(layout_problems(tests, package))
    assert "tests/grading/round3/ names no folder" in problems
    assert "tests/grading/test_redteam_round4.py sits flat" in problems
    assert "tests/grading/engine/test_pipeline.py has the name of tests/core/test_pipeline.py" in problems
    (package / "grading" / "walls").mkdir()
    assert "tests/grading/walls/ is missing" in "\n".join(layout_problems(tests, package))


def test_contributing_names_every_grading_test_folder():
    """The table in CONTRIBUTING.md's "Tests" says what each folder of tests/grading/ checks."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("## Tests") :]
    section = section[: section.index("\n## ", 1)]
    named = set(re.findall(r"`tests/grading/(\w+)/`", section))
    assert _folders(ROOT / "tests" / "grading") - named == set()
