"""Build the honest-notebook corpus: every notebook from its exercise notebook plus a style table.

    python tests/grading/honest/build_corpus.py            # (re)write tests/grading/honest/*.ipynb
    python tests/grading/honest/build_corpus.py --check    # exit 1 if a committed file differs

Each entry of ``styles/<assignment>.py`` (:class:`corpus_spec.Honest`) takes ``exercises/<assignment>.ipynb``
(its metadata, markdown and given cells as they are), replaces the answer cells with a learner's own
code and adds the learner's own cells. Outputs stay empty; files are written with the generator's
deterministic serialisation, so a rebuild after ``exercises/`` changes shows as a plain diff.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from corpus_spec import Honest  # noqa: E402
from styles import ALL  # noqa: E402

from mha_course.grading.engine.notebook import dumps  # noqa: E402

STUB = "raise NotImplementedError()"


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _code(source: str, nb: dict, number: int, name: str) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": _clean(source)}
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        cell["id"] = f"{name.replace('_', '-')[:40]}-{number}"
    return cell


def _clean(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


def answer_index(cells: list[dict], target: str, where: str) -> int:
    """The index of the exercise's answer cell that defines ``target`` (a stub still raising)."""
    pattern = re.compile(rf"^(?:def|class)\s+{re.escape(target)}\b", re.MULTILINE)
    found = [
        i for i, c in enumerate(cells) if c["cell_type"] == "code" and STUB in _source(c) and pattern.search(_source(c))
    ]
    if len(found) != 1:
        raise ValueError(f"{where}: expected one answer cell defining {target!r}, found {len(found)}")
    return found[0]


def build(entry: Honest, exercises: Path) -> dict:
    """The learner's notebook for ``entry`` (a new dict; the exercise file is only read)."""
    path = exercises / f"{entry.assignment}.ipynb"
    nb = copy.deepcopy(json.loads(path.read_text(encoding="utf-8")))
    cells = nb["cells"]
    counter = iter(range(1, 1000))

    def new(source: str) -> dict:
        return _code(source, nb, next(counter), entry.style)

    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    imports = _clean(entry.imports) if entry.imports is not None else _source(cells[first])
    parts = [_clean(entry.setup), imports, _clean(entry.setup_after)]
    cells[first]["source"] = "\n".join(p for p in parts if p)
    # answers first (indices stay put), then insertions from the bottom up
    inserts: list[tuple[int, list[dict]]] = []
    for target, source in entry.answers.items():
        index = answer_index(cells, target, f"{path.name} ({entry.name})")
        cells[index]["source"] = _clean(source)
        if target in entry.before:
            inserts.append((index, [new(s) for s in entry.before[target]]))
        if target in entry.after:
            nxt = index + 1
            if nxt < len(cells) and cells[nxt]["cell_type"] == "code" and _source(cells[nxt]).startswith("check("):
                nxt += 1
            inserts.append((nxt, [new(s) for s in entry.after[target]]))
    extra = set(entry.before) | set(entry.after)
    if extra - set(entry.answers):
        raise ValueError(f"{entry.name}: before/after name no answer: {sorted(extra - set(entry.answers))}")
    for index, added in sorted(inserts, key=lambda pair: pair[0], reverse=True):
        cells[index:index] = added
    cells.extend(new(s) for s in entry.end)
    for cell in cells:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def texts(exercises: Path = ROOT / "exercises") -> dict[str, str]:
    """File name -> the notebook's text, for every entry of the corpus."""
    out: dict[str, str] = {}
    for entry in ALL:
        name = f"{entry.name}.ipynb"
        if name in out:
            raise ValueError(f"two entries build {name}")
        out[name] = dumps(build(entry, exercises))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write (default: this one)")
    parser.add_argument("--check", action="store_true", help="compare with the files there instead of writing")
    args = parser.parse_args(argv)
    built = texts()
    present = {p.name for p in args.out.glob("*__*.ipynb")}
    if args.check:
        stale = sorted(n for n, t in built.items() if not (args.out / n).exists() or (args.out / n).read_text() != t)
        stale += sorted(present - set(built))
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in sorted(present - set(built)):
        (args.out / name).unlink()
    for name, text in built.items():
        (args.out / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(built)} notebooks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
