"""The website's pages about the course, made from the repository by site/prepare.py.

- ``how_to_run.md``: the notebooks on your own machine (the README's ``make lab``), on Colab, on a
  JupyterHub or a cluster;
- ``references.md``: the papers the chapters cite (site/references.toml), each with its link and the
  chapters that cite it (found in the chapters' text, so the list cannot claim a citation that is not there);
- ``cite.md``: how to cite the course, from CITATION.cff at the repository's root.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABOUT_PAGES = ("how_to_run.md", "references.md", "cite.md")

HOW_TO_RUN = """# How to run the course

Each chapter and assignment page shows its notebook as it ran when this site was built. To change the
code, move the sliders, answer "Check yourself" and do the assignments, run the notebooks yourself:
download one from its page (the download button at the top; a chapter's "Check yourself" links it too),
or get the whole course: clone its repository, or download the course's zip from this site.

## On your own machine

You need Python 3.11 or newer and `make`. In the course's folder:

```bash
make lab    # creates .venv, installs the pinned packages, opens the course in JupyterLab
```

The first run installs everything from `requirements.txt` into `.venv` (a few minutes; PyTorch is the
CPU build) and opens `notebooks/00_start_here.ipynb`. No GPU is needed: every chapter is measured at
under a minute on 2 CPU cores (`python benchmarks/chapter_times.py`). `make test` runs the course's tests. With an NVIDIA GPU, install the CUDA build of the same
PyTorch version first (`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128`
or the index your driver needs); chapter 13 then runs its Triton kernel on the GPU.

Without `make`: `python -m venv .venv`, activate it, `pip install -r requirements.txt`, then
`jupyter lab notebooks/00_start_here.ipynb`.

## On Colab

Open a chapter with the "Open in Colab" link at the top of its page, or upload the notebook downloaded
from the page (File → Upload notebook). The notebook needs the course's library: the downloaded copy, and
the copy Colab opens where the site publishes one, start with the cell that installs it; otherwise run, in a
new cell at the top, the `!pip install "mha_course[grading] @ git+…"` line that the page's "Run this
notebook" box gives (it names the course's repository). Then run the notebook from the top. Colab already has PyTorch, Triton
and a GPU runtime (Runtime → Change runtime type). An assignment needs nothing else: its self-check
(`check(...)`) is part of the library.

## On a JupyterHub or a cluster

- **JupyterHub**: in the user environment (or the image the hub starts), `pip install -r requirements.txt`
  in the course's folder (it installs the course's library too); nothing is downloaded while the notebooks run (every
  data set is generated in code), so a hub without internet access works. Instructors hand out
  `exercises/` and collect the notebooks for the grader (`python -m mha_course.grade`).
- **A cluster node** (Slurm or similar): the same environment on a shared filesystem, then
  `jupyter lab --no-browser --port 8888` on the node and an SSH tunnel from your machine
  (`ssh -L 8888:NODE:8888 LOGIN-HOST`), or your site's Open OnDemand Jupyter app. On a GPU node, install
  the CUDA build of PyTorch as above; `python -m mha_course.bench --device cuda` measures attention there.

## Checking yourself

Each chapter's "Check yourself" and each assignment's `check(...)` cell need a running notebook: the
answers are not on this site. Run the notebook, fill in the cells, and the check says what is right and
what is not, with a hint.
"""


def _markdown_text(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join(
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in cells
        if c["cell_type"] == "markdown"
    )


def papers() -> list[dict]:
    """The reference list's entries (site/references.toml), in its order.

    Raises:
        ValueError: an entry lacks one of authors, year, title, url, cited_as.
    """
    entries = tomllib.loads((ROOT / "site" / "references.toml").read_text(encoding="utf-8"))["paper"]
    for entry in entries:
        missing = [key for key in ("authors", "year", "title", "url", "cited_as") if key not in entry]
        if missing:
            raise ValueError(f"site/references.toml: {entry.get('title', entry)!r} lacks {missing}")
    return entries


def citing_chapters(entry: dict, chapters: list[str], root: Path = ROOT) -> list[str]:
    """The chapters (paths relative to ``root``) whose text matches the entry's ``cited_as``."""
    pattern = re.compile(entry["cited_as"])
    return [chapter for chapter in chapters if pattern.search(_markdown_text(root / chapter))]


def references_page(all_chapters: list[str], chapters_here: list[str]) -> str:
    lines = [
        "# Papers the chapters cite",
        "",
        "The papers and reports the chapters name, with a link to each (arXiv or the publisher) and the",
        "chapters that cite it.",
        "",
    ]
    for entry in papers():
        cited = citing_chapters(entry, all_chapters)
        where = f" {entry['where']}." if entry.get("where") else ""
        lines.append(f"- {entry['authors']} ({entry['year']}). [{entry['title']}]({entry['url']}).{where}")
        # a chapter left out of a mini-site is named, not linked
        named = [
            f"[chapter {Path(c).stem[:2]}]({c})" if c in chapters_here else f"chapter {Path(c).stem[:2]}" for c in cited
        ]
        if named:
            lines.append(f"  Cited in {', '.join(named)}.")
    return "\n".join(lines) + "\n"


def cite_page() -> str:
    """The "Cite this course" page: CITATION.cff's fields as text and as a BibTeX entry."""
    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    authors = " and ".join(a.get("name") or f"{a['given-names']} {a['family-names']}" for a in cff["authors"])
    year = str(cff.get("date-released", ""))[:4]
    url = cff.get("repository-code") or cff.get("url")
    bibtex = [
        "@software{mha_course,",
        f"  author  = {{{{{authors}}}}},",
        f"  title   = {{{cff['title']}}},",
        f"  version = {{{cff['version']}}},",
        *([f"  year    = {{{year}}},"] if year else []),
        *([f"  url     = {{{url}}},"] if url else []),
        f"  license = {{{cff['license']}}},",
        "}",
    ]
    return "\n".join(
        [
            "# Cite this course",
            "",
            cff["message"],
            "",
            f"> {authors}. *{cff['title']}*, version {cff['version']}"
            + (f", {year}" if year else "")
            + "."
            + (f" {url}" if url else ""),
            "",
            "As BibTeX:",
            "",
            "```text",
            *bibtex,
            "```",
            "",
            'The repository\'s `CITATION.cff` holds the same (GitHub offers it as "Cite this repository").',
            f"The course and its library are under the {cff['license']} licence.",
            "",
        ]
    )


def about_pages(all_chapters: list[str], chapters_here: list[str]) -> dict[str, str]:
    """File name -> markdown of each page about the course (``ABOUT_PAGES``)."""
    return {
        "how_to_run.md": HOW_TO_RUN,
        "references.md": references_page(all_chapters, chapters_here),
        "cite.md": cite_page(),
    }
