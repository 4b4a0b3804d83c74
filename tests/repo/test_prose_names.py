"""What the prose names exists: every ``mha_course.x.y`` written in the docs, the README, the newest
changelog section, pyproject.toml, the package's own text and the notebooks' markdown is a module, or a
name defined in one; and each command is spelled one way, ``python -m mha_course.<short name>``.

Names are resolved from the file tree and each module's syntax tree, so nothing is imported: a name
that a move left behind fails here, whatever folder it moved to.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mha_course"
# a dotted name of the package; not one followed by "-" or "/" (mha_course.egg-info, a path)
DOTTED = re.compile(r"\bmha_course(?:\.[A-Za-z_]\w*)+(?![\w/-])")
# in the docs, a name may start at a folder of the package (``grading.inside.runner``); not a file (@grading.args)
FOLDERS = "core|efficient|inference|kernels|models|parallel|plots|timing|tracking|grading"
RELATIVE = re.compile(rf"(?<![\w./@-])(?:{FOLDERS})(?:\.[A-Za-z_]\w*)+(?![\w/(-])")
# a placeholder part: mha_course.X, mha_course.NAME, (``mha_course.module``, node)
PLACEHOLDER = re.compile(r"^(?:[A-Z]+|module)$")
# Names the newest changelog section gives as those of modules that moved away (its "Removed" part is left out).
FORMER_NAMES = {"mha_course.tiled", "mha_course.grading.grader"}
# Labels that look like names: the benchmark calls the course's own attention "mha_course.sdpa" (timing/bench_impls.py).
LABELS = {"mha_course.sdpa"}


def _newest_changelog_section() -> str:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)
    newest = sections[1] if len(sections) > 1 else ""
    return re.split(r"^### Removed", newest, flags=re.M)[0]  # what was removed is named there by its old name


def _markdown_cells(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def prose() -> dict[str, str]:
    """Where prose is -> its text (a module's whole text: its docstrings, comments and messages)."""
    texts = {"CHANGELOG.md (newest section)": _newest_changelog_section()}
    for path in [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "pyproject.toml",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "benchmarks" / "RESULTS.md",
    ]:
        texts[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    for path in sorted(PACKAGE.rglob("*.py")):
        texts[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    for folder in ("notebooks", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            texts[path.relative_to(ROOT).as_posix()] = _markdown_cells(path)
    return texts


def _module_file(parts: tuple[str, ...]) -> Path | None:
    base = ROOT.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


@functools.cache
def _defined(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names a module defines or imports (a class maps to its node), and a package's lazy exports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, ast.AST | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node if isinstance(node, ast.ClassDef) else None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update({t.id: None for t in ast.walk(target) if isinstance(t, ast.Name)})
            if any(isinstance(t, ast.Name) and t.id in ("_EXPORTS", "_MODULES") for t in targets):
                value = node.value
                keys = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
                names.update({k.value: None for k in keys if isinstance(k, ast.Constant)})
    return names


def _class_members(node: ast.ClassDef) -> set[str]:
    found = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        elif isinstance(item, ast.Assign):
            found |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
    found |= {  # attributes set in methods: self.x = ...
        t.attr
        for item in ast.walk(node)
        if isinstance(item, (ast.Assign, ast.AnnAssign))
        for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    return found


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``mha_course.a.b``) is a module of the tree or a name defined in one."""
    parts = tuple(dotted.split("."))
    for split in range(len(parts), 0, -1):
        path = _module_file(parts[:split])
        if path is None:
            continue
        rest = parts[split:]
        if not rest:
            return True
        node = _defined(path).get(rest[0], False)
        if node is False:
            return False
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            return True  # a deeper attribute of a function's result or a table is not checked
        return rest[1] in _class_members(node) or bool(node.bases)  # inherited members are not followed
    return False


def dotted_names(where: str, text: str) -> set[str]:
    """The package's dotted names ``text`` writes (from a folder on too, outside the package's modules)."""
    names = set(DOTTED.findall(text))
    if not where.endswith(".py"):
        names |= {f"mha_course.{name}" for name in RELATIVE.findall(text)}
    return {
        n for n in names if not any(PLACEHOLDER.match(part) for part in n.split(".")) and n not in FORMER_NAMES | LABELS
    }


def stale_names(texts: dict[str, str]) -> dict[str, list[str]]:
    """Where -> the dotted names it writes that are no module and no name of one."""
    found = {}
    for where, text in texts.items():
        bad = sorted({name for name in dotted_names(where, text) if not resolves(name)})
        if bad:
            found[where] = bad
    return found


def test_every_dotted_name_in_the_prose_exists():
    assert stale_names(prose()) == {}


def test_a_stale_name_is_found():
    texts = {
        "a.md": "See mha_course.core.masks.causal_mask and mha_course.grading.sandbox, "
        "mha_course.core.masks. Also mha_course.egg-info and mha_course.core.mha.MultiHeadAttention.forward.",
        "b.md": "mha_course.core.masks.no_such_function, mha_course.models.train (a module and a function)",
        "c.toml": "Not here: grading.sandbox; @grading.args; python -m mha_course.X; mha_course.tiled",
        "d.py": "a module's text is read for mha_course names only: grading.sandbox",
    }
    assert stale_names(texts) == {
        "a.md": ["mha_course.grading.sandbox"],
        "b.md": ["mha_course.core.masks.no_such_function"],
        "c.toml": ["mha_course.grading.sandbox"],
    }


# --- one spelling per command ------------------------------------------------------------------------


def short_commands() -> dict[str, str]:
    """The module each documented short command runs (``grade`` -> the module its ``main`` comes from).

    Read from the short modules themselves (``mha_course/grade.py`` imports ``main`` from where the
    command lives), so a command whose code moves needs no change here.
    """
    found = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and any(a.name == "main" for a in node.names) and node.module:
                found[path.stem] = node.module
    return found


def long_spellings(text: str, commands: dict[str, str]) -> list[str]:
    """The commands ``text`` starts by their long name (``python -m mha_course.grading.grade``)."""
    long = {module: short for short, module in commands.items()}
    return sorted(
        {f"{m} (say mha_course.{long[m]})" for m in re.findall(r"-m\s+(mha_course(?:\.\w+)+)", text) if m in long}
    )


def test_the_short_commands_are_the_documented_ones():
    assert set(short_commands()) == {"grade", "assign", "gradescope", "train", "bench", "gpu_report", "progress"}


def test_each_command_is_spelled_one_way():
    commands = short_commands()
    # pyproject declares the long names; RESULTS.md keeps each measurement's command as it was run
    texts = {where: text for where, text in prose().items() if where not in ("pyproject.toml", "benchmarks/RESULTS.md")}
    for path in sorted((ROOT / "site").glob("*.py")):
        texts[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    found = {where: bad for where, text in texts.items() if (bad := long_spellings(text, commands))}
    assert found == {}, "spell each command python -m mha_course.<short name>"


def test_a_long_spelling_is_found():
    commands = {"grade": "mha_course.grading.grade", "bench": "mha_course.timing.bench"}
    text = "run `python -m mha_course.grading.grade X` or python -m mha_course.grade, python -m mha_course.timing.bench"
    assert long_spellings(text, commands) == [
        "mha_course.grading.grade (say mha_course.grade)",
        "mha_course.timing.bench (say mha_course.bench)",
    ]


# A file of the repository named by its path from the root (``tests/grading/walls/test_confined.py``,
# ``mha_course/grading/spec.py``); ``aNN_topic.py`` and ``aNN_NAME.py`` stand for families and are not paths.
REPO_PATH = re.compile(r"(?<![\w./-])(?:tests|mha_course|benchmarks|site|docs)/[\w./-]*\w\.(?:py|md)\b")
PLACEHOLDER_PATH = re.compile(r"/aNN_|[/_]NAME\b")
# Files the docs tell a contributor to write (CONTRIBUTING's worked examples; a test writes the same file).
EXAMPLE_FILES = {"mha_course/grading/classroom/lms/blackboard.py"}


def stale_paths(texts: dict[str, str]) -> dict[str, list[str]]:
    """Where -> the repository paths it names that are not files (a test or module moved away)."""
    found = {}
    for where, text in texts.items():
        named = {p for p in REPO_PATH.findall(text) if not PLACEHOLDER_PATH.search(p)} - EXAMPLE_FILES
        missing = sorted(p for p in named if not (ROOT / p).exists())
        if missing:
            found[where] = missing
    return found


def test_every_file_path_in_the_prose_exists():
    texts = prose()
    for folder in ("tests", "benchmarks"):  # the tests' and benchmarks' own docstrings name their neighbours
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent.name != "repo":  # the structure checks hold made-up paths as their examples
                texts[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    texts.pop("benchmarks/RESULTS.md", None)  # dated entries name the files of their day
    assert stale_paths(texts) == {}


def test_a_stale_path_is_found():
    text = (
        "see tests/grading/test_bug_catalogue.py and tests/grading/walls/test_confined.py, mha_course/grading/spec.py"
    )
    assert stale_paths({"x": text}) == {"x": ["tests/grading/test_bug_catalogue.py"]}
