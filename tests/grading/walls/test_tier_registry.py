"""The registry of sandbox tiers: a new tier is one module and one registration line.

The toy tier (tests/grading/walls/toy_tier.py, the worked example of CONTRIBUTING.md's "Add a sandbox tier")
is registered by the ``toy`` fixture, one line, and removed after each test. Then the grader offers its
letter to ``--min-isolation``, chooses it where no stronger tier holds, refuses it below the floor the
instructor set, and names it in every output.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, write_submission
from toy_tier import TOY, PlainForTests

from mha_course.grading import grade_options
from mha_course.grading.walls import bubblewrap, confined, tiers
from mha_course.grading.walls.tier import IsolationError, Tier

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def toy():
    tiers.register_tier(TOY)  # the one line a new tier adds (in walls/tiers.py, for a tier of the grader's own)
    yield TOY
    tiers.unregister_tier(TOY.name)


@pytest.fixture
def real_tiers_off(monkeypatch):
    """No registered tier but the toy holds, as on a machine without any of them (whatever tiers are registered)."""
    for tier in tiers.registered():
        if tier is not TOY:
            monkeypatch.setattr(type(tier), "why_not", lambda self: "switched off for this test")


def real_labels() -> set[str]:
    return {t.label for t in tiers.registered() if t is not TOY}


def test_the_grader_s_tiers_are_registered_by_mechanism_strongest_first():
    strengths = [t.strength for t in tiers.registered()]
    assert strengths == sorted(strengths, reverse=True)
    assert [t for t in tiers.registered() if t.label in "ABC"] == [
        bubblewrap.BUBBLEWRAP,
        confined.LANDLOCK,
        confined.UID,
    ]
    assert [t.name for t in (bubblewrap.BUBBLEWRAP, confined.LANDLOCK, confined.UID)] == [
        "bubblewrap",
        "landlock",
        "uid",
    ]
    assert tiers.by_label("B") is confined.LANDLOCK
    with pytest.raises(ValueError, match="min_isolation must be one of A, B, C.*, got 'T'"):
        tiers.by_label("T")


def test_a_registered_tier_is_offered_to_min_isolation(toy):
    assert tiers.labels()[-1] == "T"  # the weakest, last
    args = grade_options.parser().parse_args(["sub.ipynb", "--min-isolation", "T"])
    assert args.min_isolation == "T"
    assert "T plain processes, for tests only" in " ".join(grade_options.parser().format_help().split())


def test_unregistered_the_letter_is_refused_again(toy):
    tiers.unregister_tier(toy.name)
    try:
        with pytest.raises(SystemExit):
            grade_options.parser().parse_args(["sub.ipynb", "--min-isolation", "T"])
    finally:
        tiers.register_tier(toy)


def test_registration_refuses_a_clash_and_what_is_no_tier(toy):
    for clash in (
        PlainForTests("bubblewrap", "X", 2, "x"),  # a name taken
        PlainForTests("other", "A", 2, "x"),  # a letter taken
        PlainForTests("other", "X", 1, "x"),  # a strength taken: the order would be a guess
        PlainForTests("other", "", 2, "x"),  # no letter for --min-isolation
    ):
        with pytest.raises(ValueError):
            tiers.register_tier(clash)
    with pytest.raises(TypeError, match="register_tier takes a Tier"):
        tiers.register_tier("toy")  # type: ignore[arg-type]

    class Unfinished(Tier):  # no why_not, no open
        pass

    with pytest.raises(TypeError):
        Unfinished("unfinished", "U", 2, "nothing")  # type: ignore[abstract]
    assert tiers.labels().count("T") == 1 and "X" not in tiers.labels()


def test_where_no_stronger_tier_holds_the_toy_is_chosen(toy, real_tiers_off):
    tier, refused = tiers.choose("T")
    assert tier is toy
    assert set(refused) == real_labels() and refused["C"] == "switched off for this test"


def test_below_the_instructor_s_floor_the_toy_is_refused_and_named(toy, real_tiers_off):
    with pytest.raises(IsolationError) as refused:
        tiers.choose("C")
    text = str(refused.value)
    assert "only tier T (plain processes, for tests only) holds, and --min-isolation is C" in text
    assert "accept tier T (plain processes, for tests only) with --min-isolation T" in text
    tier, why = tiers.choose("C", unsafe=True)
    assert tier is None and why["T"] == "weaker than --min-isolation C"


def test_a_stronger_tier_that_holds_wins_over_the_toy(toy, monkeypatch):
    monkeypatch.setattr(bubblewrap.BUBBLEWRAP.__class__, "why_not", lambda self: None)
    tier, refused = tiers.choose("T")
    assert tier is bubblewrap.BUBBLEWRAP and refused == {}


@pytest.mark.slow
def test_the_grader_grades_through_the_toy_and_names_it_in_every_output(toy, real_tiers_off, tmp_path):
    from mha_course.grading import grade
    from mha_course.grading.engine import registry

    sub = write_submission(tmp_path / "s.ipynb", GOOD_ADD, GOOD_DOUBLE)
    with registry.registered("grading_fake"):
        argv = [str(sub), "--quiet", "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "g.csv")]
        assert grade.main([*argv, "--min-isolation", "T"]) == 0
        data = json.loads((tmp_path / "r.json").read_text())
        with open(tmp_path / "g.csv", newline="") as f:
            (row,) = list(csv.DictReader(f))
        refused = grade.main([str(sub), "--quiet", "--json", str(tmp_path / "no.json"), "--min-isolation", "C"])
    assert data["score"] == 6
    isolation = data["extra_data"]["isolation"]
    assert (isolation["kind"], isolation["tier"]) == ("toy", "T")
    assert isolation["summary"].startswith("tier T (plain processes, for tests only): no walls")
    assert set(isolation["refused"]) == real_labels()
    assert "tier T (plain processes" in data["output"]  # Gradescope's text names walls other than bubblewrap
    assert row["isolation"] == "toy"
    assert refused == 3
    assert (
        "only tier T (plain processes, for tests only) holds"
        in json.loads((tmp_path / "no.json").read_text())["output"]
    )


def test_contributing_shows_the_toy_tier_as_it_is():
    """CONTRIBUTING.md's worked example is tests/grading/walls/toy_tier.py, code for code (its docstring aside)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Add a sandbox tier", 1)[1].split("\n## ", 1)[0]
    shown = re.findall(r"```python\n(.*?)```", section, re.S)
    module = (ROOT / "tests" / "grading" / "walls" / "toy_tier.py").read_text(encoding="utf-8")
    code = module.split('"""\n', 1)[1].lstrip("\n")  # after the module's docstring
    assert code in shown, "CONTRIBUTING.md's example and tests/grading/walls/toy_tier.py differ: copy one to the other"
    assert "tiers.register_tier(TOY)" in section
