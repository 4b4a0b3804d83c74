"""Lays out the website's sources: the chapters and exercises as they are, and the pages made from the repository.

``python site/prepare.py OUT [--only 01 a01 ...]`` writes into OUT (``_build/src`` for ``make site``):

- ``notebooks/*.ipynb`` and ``exercises/*.ipynb``: copies of the repository's own files (never
  ``solutions/``), so the site shows exactly what a learner opens (copies, not symbolic links:
  MyST resolves a link between pages through the real path, which would leave the source folder);
- ``index.md``: the README's syllabus table as the home page, and the navigation in reading order
  (each chapter followed by its assignments, then the library reference and the pages about the course);
- ``how_to_run.md``, ``references.md``, ``cite.md``: the pages about the course (site/about_pages.py);
- ``reference.md``: the course's API, every public name of ``mha_course`` and of its documented
  subpackages (their lazy export maps), rendered by autodoc from the docstrings, each with the chapter
  that first uses it;
- ``first_uses.json``: chapter -> the public names it uses first, read by ``course_pages`` to link
  each chapter to the reference.

``--only`` keeps the chapters and exercises whose names start with one of the given prefixes
(the test's mini-site); the pages are made the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "site"))

import about_pages as about  # noqa: E402  (the pages about the course: how to run, references, citing)

# A syllabus row: | NN | [title](notebooks/NN_x.ipynb) | question | assignment cell |
_ROW = re.compile(r"^\|\s*(\d\d)\s*\|\s*\[[^\]]*\]\((notebooks/[^)]+\.ipynb)\)\s*\|")
_EXERCISE_LINK = re.compile(r"\[([^\]]*)\]\((exercises/[^)]+\.ipynb)\)")


def syllabus(readme: str) -> tuple[str, list[str], list[tuple[str, list[str]]]]:
    """The README's syllabus: its header lines, its rows, and per row (chapter path, exercise paths).

    Raises:
        ValueError: the README has no "## Syllabus" table with chapter rows.
    """
    lines = readme.splitlines()
    try:
        start = lines.index("## Syllabus")
    except ValueError:
        raise ValueError("README.md has no '## Syllabus' section: the site's navigation is made from it") from None
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
    header, rows = table[:2], table[2:]
    parsed = []
    for row in rows:
        match = _ROW.match(row)
        if match is None:
            raise ValueError(f"a syllabus row without a chapter link: {row!r}")
        parsed.append((match.group(2), [path for _, path in _EXERCISE_LINK.findall(row)]))
    if not parsed:
        raise ValueError("README.md's syllabus table has no rows")
    return "\n".join(header), rows, parsed


def exported_names() -> dict[str, str]:
    """``mha_course``'s public names -> the module that defines them (the package's lazy export map)."""
    import mha_course

    return dict(sorted(mha_course._EXPORTS.items()))


def api_names() -> dict[str, str]:
    """The course's API: each public name, dotted below ``mha_course`` -> the module that defines it.

    The top's names as they are (``softmax``), a subpackage's after its name (``inference.KVCache``);
    a module that is API itself (``efficient.roofline``) maps to itself.
    """
    import importlib

    import mha_course

    names = exported_names()
    for package in mha_course._API_PACKAGES:
        module = importlib.import_module(f"mha_course.{package}")
        for name in module.__all__:
            where = module._EXPORTS.get(name, name)  # not exported by name: a module that is API itself
            names[f"{package}.{name}"] = f"{package}.{where}"
    return names


def api_object(name: str):
    """The object ``mha_course.NAME`` names (``NAME`` dotted below the package: ``inference.KVCache``)."""
    import importlib

    package, _, last = f"mha_course.{name}".rpartition(".")
    return getattr(importlib.import_module(package), last)


def _code_cells(path: Path) -> list[str]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def first_uses(chapters: list[Path], names: list[str], root: Path = ROOT) -> dict[str, str]:
    """Public name -> the first chapter (its path relative to ``root``) whose code uses it.

    A use is ``mc.NAME``, ``mha_course.NAME`` or ``NAME`` imported ``from mha_course[.module] import ...``;
    a subpackage's name (``inference.KVCache``) is used when imported from that subpackage.
    """
    found: dict[str, str] = {}
    for chapter in chapters:
        code = "\n".join(_code_cells(chapter))
        imported = set()  # (the package after mha_course, or "" for the top or a deeper module; name)
        groups = re.findall(r"from mha_course(\.[\w.]+)? import \(([^)]*)\)", code)
        groups += re.findall(r"from mha_course(\.[\w.]+)? import ([\w ,]+)", code)
        for package, group in groups:
            package = package.removeprefix(".") if package.count(".") == 1 else ""
            for part in group.split(","):
                imported.add((package, part.split("#")[0].strip().split(" as ")[0]))
        for name in names:
            if name in found:
                continue
            package, _, last = name.rpartition(".")
            attribute = re.search(rf"\b(?:mc|mha_course)\.{re.escape(name)}\b", code)
            if attribute or (package, last) in imported or (not package and any(n == last for _, n in imported)):
                found[name] = chapter.relative_to(root).as_posix()
    return found


def _keep(path: str, only: list[str] | None) -> bool:
    stem = Path(path).stem
    return only is None or any(stem.startswith(prefix) for prefix in only)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)  # keeps the mtime: Sphinx re-reads only the chapters that changed


def _write(target: Path, text: str) -> None:
    """Writes ``text`` unless ``target`` already holds it (an unchanged page keeps its mtime, so is not re-read)."""
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def _index(title: str, header: str, rows: list[str], order: list[str]) -> str:
    """The home page: the syllabus, and the navigation in reading order (each chapter, then its assignments)."""
    return "\n".join(
        [
            f"# {title}",
            "",
            "An interactive course that builds multi-head attention from the first dot product up to a",
            "fused FlashAttention kernel on a GPU. Each chapter below is shown as it runs: its code, its",
            "output and its figures, executed when this site was built. To change the code, move the",
            "sliders and do the exercises, run the course yourself (each page has the links):",
            "",
            "```bash",
            "make lab    # creates .venv, installs everything, opens the course in JupyterLab",
            "make test   # the same set-up, then every test",
            "```",
            "",
            "## Syllabus",
            "",
            header,
            *rows,
            "",
            "The [library reference](reference.md) lists every public function and class of `mha_course`",
            "with its shapes and errors; [How to run](how_to_run.md) says how to run the notebooks on your",
            "machine, on Colab or on a JupyterHub; the [papers](references.md) the chapters cite are listed with",
            "links, and [Cite this course](cite.md) says how to cite it.",
            "",
            "```{toctree}",
            ":hidden:",
            ":caption: Chapters and assignments",
            "",
            *[path.removesuffix(".ipynb") for path in order],
            "```",
            "",
            "```{toctree}",
            ":hidden:",
            ":caption: Library",
            "",
            "reference",
            "```",
            "",
            "```{toctree}",
            ":hidden:",
            ":caption: About the course",
            "",
            *[page.removesuffix(".md") for page in about.ABOUT_PAGES],
            "```",
            "",
        ]
    )


def _comment_above(module: str, name: str) -> str:
    """The ``#`` comment lines just above ``NAME = ...`` / ``NAME: ... =`` in ``mha_course.module``.

    Raises:
        ValueError: the definition has no comment above it (a public table must say what it holds).
    """
    lines = (ROOT / "mha_course" / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if re.match(rf"{re.escape(name)}\s*[:=]", line):
            if "  # " in line:  # a comment on the definition's line, continued on the lines below
                comment = [line.split("  # ", 1)[1]]
                for more in lines[index + 1 :]:
                    if not more.lstrip().startswith("#") or more.startswith("#"):
                        break
                    comment.append(more.lstrip().lstrip("# "))
                return " ".join(comment)
            comment = []
            while index > 0 and lines[index - 1].startswith("#"):
                index -= 1
                comment.insert(0, lines[index].lstrip("# "))
            if comment:
                return " ".join(comment)
    raise ValueError(f"mha_course.{module}.{name} has no comment above its definition to document it")


def _first_line(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _entry(name: str, module: str) -> list[str]:
    """The reference's entry for ``mha_course.NAME``: autodoc's, or for a table its comment and value."""
    import types

    obj = api_object(name)
    if isinstance(obj, types.ModuleType):  # a module read as a namespace: its docstring, its public names
        public = sorted(
            n for n, v in vars(obj).items() if not n.startswith("_") and getattr(v, "__module__", None) == obj.__name__
        )
        lines = ["```{eval-rst}", f".. automodule:: mha_course.{name}", "   :no-members:", "```", ""]
        lines += [f"- `{n}`: {_first_line(getattr(obj, n))}" for n in public] + [""]
        return lines
    if isinstance(obj, type) or callable(obj):
        directive = "autoclass" if isinstance(obj, type) else "autofunction"
        options = ["   :members:"] if directive == "autoclass" else []
        return ["```{eval-rst}", f".. {directive}:: mha_course.{name}", *options, "```", ""]
    package, _, last = f"mha_course.{name}".rpartition(".")
    return [
        f"```{{py:data}} {last}",
        f":module: {package}",
        "",
        _comment_above(module, last),
        "```",
        "",
        "```python",
        f"{last} = {obj!r}",
        "```",
        "",
    ]


def _reference(names: dict[str, str], uses: dict[str, str], chapter_titles: dict[str, str]) -> str:
    import mha_course

    lines = [
        "# Library reference",
        "",
        "The course's API: every public name of `mha_course` and of its documented subpackages, generated",
        "from its docstring: the shapes it takes and returns, the formula, and what it raises on bad input.",
        "The chapters import only these names (`from mha_course import ...`, `from mha_course.inference",
        "import ...`); the modules behind them may move, these names stay.",
        "",
        "```{eval-rst}",
        ".. automodule:: mha_course",
        "   :no-members:",
        "```",
        "",
    ]
    packages = ["", *mha_course._API_PACKAGES]
    for package in packages:
        here = {n: m for n, m in names.items() if n.rpartition(".")[0] == package}
        if not here:
            continue
        if package:
            lines += [
                f"## mha_course.{package}",
                "",
                f"```{{eval-rst}}\n.. automodule:: mha_course.{package}\n   :no-members:\n```",
                "",
            ]
        else:
            lines += ["## mha_course", ""]
        for name, module in here.items():
            lines += _entry(name, module)
            where = uses.get(name)
            if where:
                lines += [f"First used in [{chapter_titles[where]}]({where}); defined in `mha_course.{module}`.", ""]
            else:
                lines += [f"Defined in `mha_course.{module}`.", ""]
    return "\n".join(lines)


def prepare(out: Path, only: list[str] | None = None) -> dict[str, list[str]]:
    """Writes the site's sources into ``out`` (other files there are removed); returns what it laid out.

    Raises:
        ValueError: ``only`` keeps no chapter, or a syllabus link names a missing notebook.
    """
    import tomllib

    settings = tomllib.loads((ROOT / "site" / "site.toml").read_text(encoding="utf-8"))
    header, rows, parsed = syllabus((ROOT / "README.md").read_text(encoding="utf-8"))
    all_chapters = [chapter for chapter, _ in parsed]
    kept_rows, chapters, exercises, order = [], [], [], []
    for row, (chapter, row_exercises) in zip(rows, parsed, strict=True):
        if not _keep(chapter, only):
            continue
        kept = [path for path in row_exercises if _keep(path, only)]
        for path in row_exercises:
            if path not in kept:  # a link to a page left out of a mini-site would be broken
                row = re.sub(rf"\[([^\]]*)\]\({re.escape(path)}\)", r"\1", row)
        kept_rows.append(row)
        chapters.append(chapter)
        order += [chapter, *[path for path in kept if path not in exercises]]  # each assignment after its chapter
        exercises += [path for path in kept if path not in exercises]
    if not chapters:
        raise ValueError(f"--only {only} keeps no chapter of the syllabus")
    for path in chapters + exercises:
        if not (ROOT / path).is_file():
            raise ValueError(f"the syllabus links {path}, which does not exist")

    out.mkdir(parents=True, exist_ok=True)
    pages = {"index.md", "reference.md", "first_uses.json", *about.ABOUT_PAGES, *chapters, *exercises}
    for old in [p for p in out.rglob("*") if p.is_file() and p.relative_to(out).as_posix() not in pages]:
        old.unlink()  # a chapter renamed or left out since the last build
    for path in chapters + exercises:
        _copy(ROOT / path, out / path)

    names = api_names()
    # first uses are looked for in every chapter, so a mini-site links the same way as the full one
    uses = {name: path for name, path in first_uses([ROOT / c for c in all_chapters], list(names)).items()}
    titles = {path: f"chapter {Path(path).stem[:2]}" for path in all_chapters}
    uses_here = {name: path for name, path in uses.items() if path in chapters}
    _write(out / "index.md", _index(settings["title"], header, kept_rows, order))
    for page, text in about.about_pages(all_chapters, chapters).items():
        _write(out / page, text)
    _write(out / "reference.md", _reference(names, uses_here, titles))
    by_chapter: dict[str, list[str]] = {}
    for name, path in uses_here.items():
        by_chapter.setdefault(path, []).append(name)
    _write(out / "first_uses.json", json.dumps(by_chapter, indent=1, sort_keys=True))
    return {"chapters": chapters, "exercises": exercises}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the sources into (other files there are removed)")
    parser.add_argument("--only", nargs="+", help="keep chapters/exercises whose file names start with these")
    args = parser.parse_args(argv)
    laid = prepare(args.out.resolve(), args.only)
    print(f"{len(laid['chapters'])} chapters, {len(laid['exercises'])} exercises -> {os.fspath(args.out)}")


if __name__ == "__main__":
    main()
