"""The package's shape: layers that import only downward, no import cycle, few top-level modules, no re-export
shims, small modules, exercise modules that share helpers only through _common, and maps (docs/ARCHITECTURE.md,
the README's module table) that match the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mha_course"
MAX_CODE_LINES = 370  # "short enough to read in one sitting": code only (no docstrings, comments, blank lines)
# Known to be too long, to be split by concept: each is listed here with what to split off, so the
# debt is visible and a new long module still fails.
TOO_LONG_FOR_NOW = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every mha_course module ``name`` imports, at any depth (function-level imports count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in MODULES and c != name}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


# The library's layers, lowest first (docs/ARCHITECTURE.md draws them): a module imports only from its own
# layer or a lower one. Top-level modules are named by file, the rest by their folder under mha_course/.
LAYERS = (
    ("validation", "testing", "device", "predict", "tracking"),
    ("plots",),
    ("core",),
    ("inference",),
    ("efficient",),
    ("kernels",),
    ("parallel",),
    ("models",),
    ("timing",),
    ("grading",),
    (
        "grade",
        "assign",
        "gradescope",
        "train",
        "bench",
        "gpu_report",
        "progress",
    ),  # the documented `python -m` short names
)
MAX_TOP_LEVEL_MODULES = 12  # the rest lives in folders, one layer or role each


def _rank(name: str, package: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The layer of module ``name`` among ``layers`` of ``package`` (named by their first part below it);
    None outside ``package`` or for the package's own __init__ (its lazy export map names every layer)."""
    parts, prefix = name.split("."), package.split(".")
    if parts[: len(prefix)] != prefix or len(parts) <= len(prefix):
        return None
    for rank, layer in enumerate(layers):
        if parts[len(prefix)] in layer:
            return rank
    raise AssertionError(f"{name} is in no layer of {package}'s: add it there and to docs/ARCHITECTURE.md")


def _layer(name: str) -> int | None:
    return _rank(name, "mha_course", LAYERS)


def _upward(graph: dict[str, set[str]], layer=_layer) -> list[str]:
    """Imports of a higher layer by a lower one, as 'importer -> imported'."""
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if (low := layer(a)) is not None and (high := layer(b)) is not None and high > low
    )


def test_no_upward_import():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert _upward(graph) == []


# The grader's own layers, lowest first (docs/ARCHITECTURE.md, "The grader's layers"): the same rule
# inside mha_course/grading/. Modules at the grader's root are named by file, the rest by their folder.
GRADING_LAYERS = (
    ("spec", "verdicts", "safe_text"),  # the vocabulary every stage shares: plain data and safe text
    ("inside",),  # runs in the submission's process: knows nothing of the grader around it
    ("calls",),  # how each assignment's function is called there
    ("static",),  # the scan: reads the code, runs nothing
    ("walls",),  # the sandboxes (tiers) and what a sandbox sees
    ("engine",),  # one submission: run its cells and cases behind the walls, judge each case
    ("learner",),  # the self-check and hints a learner sees (the same judging, in the notebook)
    ("exercises",),  # each assignment's cases, references and hints
    ("classroom",),  # a class: collect, grade the batch, record, report
    ("authoring",),  # writing a new assignment
    ("grade", "grade_options", "hidden_argv", "gradescope", "assign"),  # the commands
)


def _grading_upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a higher grading layer by a lower one, as 'importer -> imported'."""
    return _upward(graph, lambda name: _rank(name, "mha_course.grading", GRADING_LAYERS))


def test_no_upward_import_inside_the_grader():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert _grading_upward(graph) == []


def test_the_grading_layer_check_finds_an_upward_import():
    upward = {"mha_course.grading.engine.pipeline": {"mha_course.grading.classroom.collect"}}
    assert _grading_upward(upward) == ["mha_course.grading.engine.pipeline -> mha_course.grading.classroom.collect"]
    downward = {"mha_course.grading.classroom.collect": {"mha_course.grading.engine.pipeline"}}
    assert _grading_upward(downward) == []
    assert _grading_upward({"mha_course.grading.walls.view": {"mha_course.grading.verdicts"}}) == []


def test_the_layer_check_finds_an_upward_import():
    assert _upward({"mha_course.core.attention": {"mha_course.kernels.function"}}) == [
        "mha_course.core.attention -> mha_course.kernels.function"
    ]
    assert _upward({"mha_course.kernels.function": {"mha_course.core.attention"}}) == []


def test_few_top_level_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"mha_course/ holds {len(top)} modules; put them in a folder: {top}"


def test_no_reexport_shims_outside_init():
    """A name is imported from the module that defines it: no ``noqa: F401`` re-export outside __init__.py."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"noqa:[^#]*F401", line)
    ]
    assert found == []


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def code_lines(source: str) -> int:
    """Lines holding code: docstrings (module, class, function), comments and blank lines do not count."""
    tree = ast.parse(source)
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                prose.update(range(first.lineno, first.end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(source.splitlines(), 1)
        if number not in prose and line.strip() and not line.lstrip().startswith("#")
    )


def test_code_lines_leave_out_docstrings_comments_and_blank_lines():
    source = '"""Module.\n\nMore."""\n\n# why\nX = 1  # counted\n\n\ndef f():\n    """Doc."""\n    return X\n'
    assert code_lines(source) == 3


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=f"to split: {TOO_LONG_FOR_NOW[n]}", strict=False))
        if n in TOO_LONG_FOR_NOW
        else n
        for n in sorted(MODULES)
    ],
)
def test_module_is_short(name):
    lines = code_lines(MODULES[name].read_text(encoding="utf-8"))
    assert lines <= MAX_CODE_LINES, f"{name} has {lines} lines of code; split it by concept (at most {MAX_CODE_LINES})"


def _named_on_map(name: str, text: str) -> bool:
    """``name`` stands on the map as a word of its own (``tiled`` is not named by ``tiled_backward``)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def test_architecture_map_names_every_module():
    """Every module of the library and of the grader, and every sub-package, is on the map by its own name."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = []
    for name in MODULES:
        parts = name.split(".")[1:]
        if not parts or parts[:2] in (["grading", "exercises"], ["grading", "calls"]):
            continue  # the package itself; one exercise and one call module per assignment (aNN_*.py)
        missing += [f"{name} ({part})" for part in parts if not _named_on_map(part, text)]
    assert missing == [], f"docs/ARCHITECTURE.md does not name {missing}"


def test_a_module_is_named_only_by_its_whole_name():
    assert _named_on_map("tiled", "tiling -> tiled_backward -> tiled (the forward)")
    assert not _named_on_map("tiled", "tiling -> tiled_backward, tiled_attention")
    assert not _named_on_map("mha", "the library (`mha_course`)")
    assert not _named_on_map("layout", "python -m mha_course.parallel.layout")  # a path is not a name on the map
    assert _named_on_map("layout", "layout (who holds which positions)")


def _readme_module_table() -> dict[str, str]:
    """First-column name -> the row's other text, for the README's module table (``| module | what it holds |``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = text[text.index("| module | what it holds") :].splitlines()[2:]
    names = {}
    for row in rows:
        if not row.startswith("|"):
            break
        cells = row.split("|")
        for name in re.findall(r"`([^`]+)`", cells[1]):
            names[name] = "|".join(cells[2:])
    return names


def _children(folder: Path) -> set[str]:
    """A folder's modules (``name``) and sub-packages (``name/``), as a README row names them."""
    found = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return found | {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_readme_module_table_matches_the_tree():
    """Every top-level module and folder of the library has a row, and every name in the table's first column exists."""
    tree = _children(PACKAGE)
    named = set(_readme_module_table())
    assert sorted(tree - named) == [], "README's module table misses these modules"
    assert sorted(named - tree) == [], "README's module table names modules that do not exist"


def test_readme_folder_rows_name_their_modules():
    """A folder's row names every module and sub-folder directly inside it (exercises/ and calls/ as a whole)."""
    rows = _readme_module_table()
    missing = []
    for folder, text in rows.items():
        if folder.endswith("/"):
            named = set(re.findall(r"`([^`]+)`", text))
            missing += [f"{folder}{child}" for child in sorted(_children(PACKAGE / folder.rstrip("/")) - named)]
    assert missing == [], "README's folder rows miss these modules"


def test_architecture_map_names_only_files_that_exist():
    """Every ``something.py`` the map names is a file of the tree (``aNN_*.py`` stands for a family)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    files = {p.name for folder in ("mha_course", "tests", "benchmarks") for p in (ROOT / folder).rglob("*.py")}
    named = {n for n in re.findall(r"[\w*]+\.py\b", text) if "*" not in n}
    assert sorted(named - files) == []


def test_exercise_modules_share_helpers_only_through_common():
    """An exercise module never imports another assignment's exercise module, nor a private name of another module."""
    folder = PACKAGE / "grading" / "exercises"
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            target = (node.module or "").rpartition(".")[2]
            names = [alias.name for alias in node.names]
            if node.level == 1 and (re.match(r"a\d\d", target) or any(re.match(r"a\d\d", n) for n in names)):
                found.append(f"{path.name} imports exercise module {target or names}")
            found += [f"{path.name} imports private {n} from {target}" for n in names if n.startswith("_")]
    assert found == []
