"""TRIAL ONLY: the "namespaces-only" trial tier (walls/tier_namespaces.py) registered by its one line.

The grader lists it, refuses it under a stronger --min-isolation with a sentence naming it, and names
it in results.json and the CSV when it grades through it.
"""

from __future__ import annotations

import csv
import json

import pytest
from grading_fake import GOOD_ADD, GOOD_DOUBLE, write_submission

from mha_course.grading import grade_options
from mha_course.grading.walls import tier_a, tier_b, tier_namespaces, tiers
from mha_course.grading.walls.tier import IsolationError

TITLE = "tier N (namespaces only (trial: plain processes, for tests only))"


@pytest.fixture
def only_the_trial_holds(monkeypatch):
    monkeypatch.setattr(tier_a, "probe", lambda: "bwrap is switched off for this test")
    monkeypatch.setattr(tier_b, "probe", lambda abi: "switched off for this test")
    monkeypatch.setenv("MHA_COURSE_TRIAL_TIER", "namespaces")


def test_the_grader_lists_the_trial_tier_weakest_of_the_real_ones():
    assert tier_namespaces.NAMESPACES in tiers.registered()
    assert tiers.labels() == ("A", "B", "C", "N")
    assert all(
        t.strength > tier_namespaces.NAMESPACES.strength for t in (tier_a.BUBBLEWRAP, tier_b.LANDLOCK, tier_b.UID)
    )
    assert grade_options.parser().parse_args(["s.ipynb", "--min-isolation", "N"]).min_isolation == "N"
    assert "N namespaces only (trial" in " ".join(grade_options.parser().format_help().split())


def test_it_holds_only_when_asked_for(monkeypatch):
    monkeypatch.delenv("MHA_COURSE_TRIAL_TIER", raising=False)
    assert "MHA_COURSE_TRIAL_TIER=namespaces" in (tier_namespaces.NAMESPACES.why_not() or "")
    monkeypatch.setenv("MHA_COURSE_TRIAL_TIER", "namespaces")
    assert tier_namespaces.NAMESPACES.why_not() is None


def test_where_only_it_holds_it_is_chosen_and_refused_below_a_stronger_floor(only_the_trial_holds):
    tier, refused = tiers.choose("N")
    assert tier is tier_namespaces.NAMESPACES and set(refused) == {"A", "B", "C"}
    with pytest.raises(IsolationError) as refusal:
        tiers.choose("C")
    assert f"only {TITLE} holds, and --min-isolation is C" in str(refusal.value)
    assert f"accept {TITLE} with --min-isolation N" in str(refusal.value)


@pytest.mark.slow
def test_the_grader_names_it_in_every_output(only_the_trial_holds, tmp_path):
    from mha_course.grading import grade
    from mha_course.grading.engine import registry

    sub = write_submission(tmp_path / "s.ipynb", GOOD_ADD, GOOD_DOUBLE)
    with registry.registered("grading_fake"):
        argv = [str(sub), "--quiet", "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "g.csv")]
        assert grade.main([*argv, "--min-isolation", "N"]) == 0
        refused = grade.main([str(sub), "--quiet", "--json", str(tmp_path / "no.json"), "--min-isolation", "B"])
    data = json.loads((tmp_path / "r.json").read_text())
    with open(tmp_path / "g.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    isolation = data["extra_data"]["isolation"]
    assert (data["score"], isolation["kind"], isolation["tier"]) == (6, "namespaces", "N")
    assert isolation["summary"].startswith(f"{TITLE}: no walls")
    assert TITLE in data["output"] and row["isolation"] == "namespaces"
    assert refused == 3 and f"only {TITLE} holds" in json.loads((tmp_path / "no.json").read_text())["output"]
