"""The honest corpus (tests/grading/honest): sixty correct notebooks in realistic styles get full marks.

Fast: the corpus is as large and varied as promised and is what ``build_corpus.py`` makes of ``exercises/``.
Slow: ``check()`` gives every notebook full public marks when its cells run as in Jupyter (one subprocess
for the whole corpus); the grader gives every notebook full marks in tier A and the same public verdicts as
``check()``; a sample covering every style family gets full marks in tier B (the Docker reproduction).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mha_course.grading.classroom import batch
from mha_course.grading.engine import notebook, registry
from mha_course.grading.verdicts import Status

ROOT = Path(__file__).resolve().parents[3]
HONEST = Path(__file__).resolve().parent
sys.path.insert(0, str(HONEST))

import build_corpus  # noqa: E402
import corpus_spec  # noqa: E402
from styles import ALL  # noqa: E402

SEED = 20240611  # fixed: the same fresh inputs on every run, so a failure can be replayed


def corpus() -> list[Path]:
    return sorted(HONEST.glob("*__*.ipynb"))


def families_of(path: Path) -> tuple[str, ...]:
    return next(e.families for e in ALL if e.name == path.stem)


def _env() -> dict[str, str]:
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    )


# --- fast --------------------------------------------------------------------------------------------


def test_the_corpus_is_large_and_names_its_assignments():
    paths = corpus()
    assert len(paths) >= 60, f"{len(paths)} notebooks"
    seen = Counter()
    for path in paths:
        nb = notebook.load(path)
        assignment = registry.identify(nb)  # from metadata, as the grader does
        assert assignment.key == path.stem.split("__")[0], path.name
        assert all(c.get("outputs", []) == [] for c in nb["cells"]), f"{path.name} has outputs"
        seen[assignment.key] += 1
    assert len(seen) >= 10 and min(seen.values()) >= 5, seen


def test_every_style_family_is_present_several_times():
    counts = Counter(f for e in ALL for f in e.families)
    thin = {f: counts[f] for f in corpus_spec.STATE_FAMILIES if counts[f] < 2}
    assert not thin, f"families with fewer than 2 notebooks: {thin}"
    assert all(counts[f] >= 1 for f in corpus_spec.ORDINARY_FAMILIES), counts
    assert {e.name for e in ALL} == {p.stem for p in corpus()}


def test_the_builder_reproduces_the_committed_files():
    built = build_corpus.texts()
    committed = {p.name: p.read_text(encoding="utf-8") for p in corpus()}
    assert sorted(built) == sorted(committed)
    stale = [name for name in built if built[name] != committed[name]]
    assert not stale, f"run python tests/grading/honest/build_corpus.py: {stale}"


def test_the_builder_fails_on_an_answer_cell_it_cannot_find():
    entry = corpus_spec.Honest("a02_softmax", "nothing", (corpus_spec.LAMBDA,), answers={"no_such_function": "x = 1"})
    with pytest.raises(ValueError, match="no_such_function"):
        build_corpus.build(entry, ROOT / "exercises")
    with pytest.raises(ValueError, match="families"):
        corpus_spec.Honest("a02_softmax", "bad", ("not_a_family",), answers={})


# --- slow: check() in Jupyter's way, then the grader -------------------------------------------------


@pytest.fixture(scope="module")
def selfcheck(tmp_path_factory) -> dict:
    """``run_corpus.py`` over the whole corpus in one subprocess: {notebook stem: its verdicts}."""
    out = tmp_path_factory.mktemp("selfcheck") / "verdicts.json"
    done = subprocess.run(
        [sys.executable, str(HONEST / "run_corpus.py"), "--json", str(out), *map(str, corpus())],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
        cwd=ROOT,
    )
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def _lost_by_check(verdicts: dict) -> list[str]:
    lost = []
    for name, r in sorted(verdicts.items()):
        for key, e in r["exercises"].items():
            if e["score"] != e["max_score"]:
                failed = [f"{row[0]}: {row[2]}" for row in e["rows"] if row[1] != Status.PASSED]
                lost.append(f"{name} {key} {e['score']:g}/{e['max_score']:g}: {failed[:2]}")
        lost += [f"{name} {error}" for error in r["cell_errors"]]
    return lost


@pytest.mark.slow
def test_check_gives_every_honest_notebook_full_public_marks(selfcheck):
    assert sorted(selfcheck) == [p.stem for p in corpus()]
    lost = _lost_by_check(selfcheck)
    assert not lost, "\n".join(lost)


def _lost_by_grader(result) -> str | None:
    if result.error is None and result.max_score > 0 and result.score == result.max_score:
        return None
    failed = [f"{t.name}: {t.output}" for t in result.tests if t.score < t.points]
    return f"{Path(result.path).stem} ({', '.join(families_of(Path(result.path)))}) {result.score:g}/{result.max_score:g} {result.error or ''} {failed[:2]}"


def _disagreements(result, verdicts: dict) -> list[str]:
    """Public cases on which the grader and check() disagree (passed or not)."""
    mine = {
        (key, row[0]): row[1] == Status.PASSED
        for key, e in verdicts["exercises"].items()
        for row in e["rows"]
        if not row[3]
    }
    theirs = {(t.exercise, t.case): t.status == Status.PASSED for t in result.tests if not t.hidden}
    name = Path(result.path).stem
    out = [
        f"{name}: {case} check()={mine.get(case)} grader={theirs.get(case)}"
        for case in sorted(set(mine) | set(theirs))
        if mine.get(case) != theirs.get(case)
    ]
    return out


@pytest.mark.slow
def test_the_grader_gives_every_honest_notebook_full_marks_as_check_does(selfcheck, isolator):
    # seed=None: each case on its published inputs only, as check() runs it (the tier B sample adds fresh ones)
    results = batch.grade_many(corpus(), workers=2, progress=False, seed=None, isolator=isolator)
    lost = [line for line in map(_lost_by_grader, results) if line]
    disagree = [d for r in results for d in _disagreements(r, selfcheck[Path(r.path).stem])]
    assert not lost and not disagree, "\n".join([f"{len(lost)} of {len(results)} lose marks:", *lost, *disagree])


#: One notebook per assignment that together use every family of STATE_FAMILIES (asserted below).
TIER_B_SAMPLE = (
    "a02_softmax__factory",  # factory, default_dtype
    "a03_attention__partial",  # partial, globals_loop
    "a04_masks__class_export",  # class_export, cuda_branch
    "a05_multi_head__grad_off_subclass",  # grad_disabled, subclass
    "a09_positions__vectorize",  # np_vectorize, try_import
    "a11_kv_cache__wrapper",  # wrapper, module_values
    "a12_tiled_attention__own_decorator",  # own_decorator
    "a14_attention_backward__jit_script",  # jit_script
    "a15_ring_attention__module_instance",  # module_instance
    "a16_modern_attention__compile_prints",  # torch_compile, loop_table
)


def tier_b_sample() -> list[Path]:
    return [HONEST / f"{name}.ipynb" for name in TIER_B_SAMPLE]


def test_the_tier_b_sample_covers_every_assignment_and_family():
    sample = tier_b_sample()
    assert {p.stem.split("__")[0] for p in sample} == {p.stem.split("__")[0] for p in corpus()}
    assert set(corpus_spec.STATE_FAMILIES) <= {f for p in sample for f in families_of(p)}
    assert len(sample) == len({p.stem.split("__")[0] for p in sample}) and all(p.exists() for p in sample)


@pytest.mark.slow
def test_tier_b_gives_the_sample_full_marks(tmp_path):
    from sandbox_batch import require_repro

    from mha_course.grading.walls import container_repro

    require_repro()
    folder, out = tmp_path / "subs", tmp_path / "each"
    folder.mkdir()
    for path in tier_b_sample():
        shutil.copy(path, folder / path.name)
    argv = [sys.executable, "-m", "mha_course.grade", str(folder), "--results-dir", str(out), "--quiet"]
    argv += ["--workers", "2", "--seed", str(SEED), "--min-isolation", "B"]
    done = subprocess.run(
        container_repro.command(argv), capture_output=True, text=True, timeout=600, env=_env(), cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in out.glob("*.results.json"))
    }
    assert sorted(each) == sorted(p.stem for p in tier_b_sample())
    lost = []
    for name, data in sorted(each.items()):
        assert data["extra_data"]["isolation"]["tier"] == "B", data["output"][:500]
        most = data["extra_data"]["max_score"]
        if not (data["score"] == most > 0):
            failed = [f"{t['name']}: {t.get('output', '')[:200]}" for t in data["tests"] if t["score"] < t["max_score"]]
            lost.append(f"{name} {data['score']:g}/{most:g} {failed[:2]}")
    assert not lost, "\n".join(lost)
