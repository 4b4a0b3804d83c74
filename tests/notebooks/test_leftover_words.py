"""What learners and instructors read is the course itself, not traces of how it was made.

No file they open (the notebooks, the README, the guides, the benchmark notes, the library they are
invited to read) and no string the self-check shows them (exercise titles, test names) may carry
words left over from writing it: the source material called "seed notes", an "issue" or a
"session", or an editor's TODO/FIXME/XXX/TBD. A random seed (``torch.manual_seed(0)``, "five
seeds") is course content and is allowed.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]

LEFTOVERS = re.compile(
    "|".join(
        [
            r"\bseed (?:notes?|material)\b",  # the material the course was written from
            r"\bseed's\b",  # "the seed's claim / sentence / module"
            r"\bthe seed (?:of|is|are|was)\b",  # "the seed of FlashAttention", "oddities of the seed are"
            r"\bissues?\b",
            r"\bsessions?\b",  # how the work was organised
            r"\bTODO\b",
            r"\bFIXME\b",
            r"\bXXX\b",
            r"\bTBD\b",
            r"\blorem ipsum\b",
            r"\bcommission(?:ed|ing)\b",
        ]
    ),
    re.IGNORECASE,
)
CLASS_NAMES = re.compile(r"\bSeed[A-Z]\w*")  # SeedMultiHeadAttention; case-sensitive, so "seeded" is fine

NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))
TEXTS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "mha_course").glob("*.py"),
    ]
)  # the library modules, each meant to be read


# A GPU issues instructions: "issue clocks", "issue-bound", "issued per clock" are chapter 13's vocabulary
GPU_ISSUE = re.compile(r"clock|instruction|warp|issued|mufu|tensor|wgmma|\bsm_\d+|[-_ ]bound|per_clock", re.IGNORECASE)


def _hits(text: str) -> list[str]:
    return [
        f"{match[0]!r} in: {line.strip()[:120]}"
        for line in text.splitlines()
        for pattern in (LEFTOVERS, CLASS_NAMES)
        for match in pattern.finditer(line)
        if not (match[0].lower().startswith("issue") and GPU_ISSUE.search(line))
    ]


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def test_instruction_issue_is_course_content_and_a_tracker_issue_is_not():
    assert _hits("the loop is issue-bound: 16 instructions per score") == []
    assert _hits("issue clocks per 128 x 128 block") == []
    assert _hits("as noted in this issue, the kernel spills") != []
    assert _hits("see the issue for details") != []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_no_leftover_words_in_a_notebook(path):
    nb = nbformat.read(path, as_version=4)
    hits = [f"cell {i}: {hit}" for i, cell in enumerate(nb.cells) for hit in _hits(cell.source)]
    assert hits == [], "\n".join(hits)


@pytest.mark.parametrize("path", TEXTS, ids=_ids(TEXTS))
def test_no_leftover_words_in_a_text_or_library_file(path):
    hits = _hits(path.read_text())
    assert hits == [], "\n".join(hits)


def test_no_leftover_words_in_what_the_self_check_shows():
    from mha_course.grading.engine import registry

    shown = [
        (a.key, text)
        for a in registry.assignments()
        for text in [a.title, *(e.title for e in a.exercises), *(c.name for e in a.exercises for c in e.cases)]
    ]
    # the hints and errors a learner sees are string literals in the exercise modules
    shown += [(path.stem, path.read_text()) for path in (ROOT / "mha_course" / "grading" / "exercises").glob("*.py")]
    hits = [f"{key}: {hit}" for key, text in shown for hit in _hits(text)]
    assert hits == [], "\n".join(hits)


def test_the_patterns_catch_leftovers_and_spare_random_seeds():
    for leftover in [
        "The seed notes warn",
        "the seed's sentence",
        "the seed of FlashAttention",
        "class SeedMultiHeadAttention",
        "as the issue asks",
        "in the same session",
        "# TODO: fix",
        "FIXME",
        "the course's seed material",
    ]:
        assert _hits(leftover), leftover
    for fine in [
        "torch.manual_seed(0)",
        "five seeds and four head sizes",
        "for every seed",
        "change the seed to see how much it varies",
        "the same seed gives the same batches",
        "it is seeded",
        "seed_everything(1)",
        "--seed N reproduces a run",
    ]:
        assert _hits(fine) == [], fine
