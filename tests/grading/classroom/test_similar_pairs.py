"""Similarity between students, and with the references, as an instructor meets it.

A Moodle-style class folder is built from the honest corpus (independent answers that must not be
flagged), plus a renamed copy of a classmate's notebook (names, comments and layout changed) and a
reference pasted with its validation lines removed. The similarity needs no sandbox: the report is
written from the results and the notebooks, as ``grade --report`` does.
"""

from __future__ import annotations

import ast
import copy
import glob
import inspect
import itertools
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import nbformat
import pytest

from mha_course.core import softmax as core_softmax
from mha_course.grading.classroom import similar_pairs
from mha_course.grading.classroom.collect import collect
from mha_course.grading.classroom.report import write_report
from mha_course.grading.engine import notebook, registry
from mha_course.grading.static import fingerprints
from mha_course.grading.static.similarity import find_copies
from mha_course.grading.verdicts import SubmissionResult

HONEST = Path(__file__).resolve().parents[1] / "honest"
KEEP = {"np", "torch", "math", "functools", "F", "nn", "softmax", "softmax_np", "print", "len", "range", "max", "min"}


class _Rename(ast.NodeTransformer):
    """Every local name renamed (``x`` -> ``value_x``): what a copier does to hide a copy."""

    def visit_Name(self, node):
        if node.id not in KEEP and not node.id.startswith("__"):
            node.id = f"value_{node.id}"
        return node

    def visit_arg(self, node):
        node.arg = f"value_{node.arg}"
        return node


def _renamed_copy(source: Path, target: Path) -> None:
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(notebook.python_source(cell.source))
        except SyntaxError:
            continue
        # new names, no comments, new layout (ast.unparse), a comment of the copier's own
        cell.source = "# my own work\n" + ast.unparse(_Rename().visit(tree))
    nbformat.write(nb, target)


def _pasted_reference(target: Path) -> None:
    """The exercise notebook with the library's softmax_np pasted in, checks removed, names changed (softmax a stub)."""
    tree = ast.parse(inspect.getsource(core_softmax.softmax_np))
    pasted = ast.unparse(fingerprints.strip_validation(tree)).replace("row_max", "biggest").replace("exps", "ex")
    nb = nbformat.read(HONEST.parents[2] / "exercises" / "a02_softmax.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("def softmax_np"):
            cell.source = pasted
    nbformat.write(nb, target)


@pytest.fixture(scope="module")
def class_results(tmp_path_factory):
    """A Moodle download of a02: six honest learners, a renamed copy of one, a pasted reference."""
    root = tmp_path_factory.mktemp("similar") / "submissions"
    honest = sorted(HONEST.glob("a02_softmax__*.ipynb"))
    names = []
    for i, path in enumerate(honest):
        name = f"Learner {path.stem.split('__')[1]}_{1000 + i}_assignsubmission_file_"
        (root / name).mkdir(parents=True)
        shutil.copy(path, root / name / "a02_softmax.ipynb")
        names.append(name)
    copier = root / "Copy Cat_2000_assignsubmission_file_"
    copier.mkdir()
    _renamed_copy(HONEST / "a02_softmax__globals_loop.ipynb", copier / "a02_softmax.ipynb")
    paster = root / "Paste Ref_3000_assignsubmission_file_"
    paster.mkdir()
    _pasted_reference(paster / "a02_softmax.ipynb")
    rows = collect([root], "a02_softmax", notebook_names={"a02_softmax": "a02_softmax.ipynb"})
    results = []
    for row in rows:
        assert row.path is not None, row.problem
        cells = notebook.code_cells(notebook.load(row.path))
        targets = [e.target for e in registry.get_assignment("a02_softmax").exercises]
        results.append(
            SubmissionResult(
                path=str(row.path),
                assignment="a02_softmax",
                key=row.key,
                student=row.student,
                copied=find_copies(cells, targets),
            )
        )
    return root.parent, results


@pytest.mark.slow  # reads the library once (about 6 s)
def test_renamed_copy_of_a_classmate_is_paired_and_honest_learners_are_not(class_results):
    _, results = class_results
    pairs = similar_pairs.similar_pairs(results)
    assert pairs, "the renamed copy was not found"
    flagged = {frozenset((p.first, p.second)) for p in pairs}
    copier = next(r.student for r in results if r.student.startswith("Copy Cat"))
    original = next(r.student for r in results if "globals_loop" in r.student)
    assert flagged == {frozenset((copier, original))}, flagged  # no honest pair, no pasted-reference pair
    top = pairs[0]
    assert top.score == 1.0 and top.exercise in ("softmax", "softmax_np")
    # the evidence: both definitions as written, the copy's new names on one side
    copy_side = top.first_code if top.first == copier else top.second_code
    original_side = top.second_code if top.first == copier else top.first_code
    assert "value_" in copy_side and "value_" not in original_side and "def " in original_side


@pytest.mark.slow
def test_pasted_reference_without_its_checks_is_flagged(class_results):
    _, results = class_results
    paster = next(r for r in results if r.student.startswith("Paste Ref"))
    assert any(
        "identical to mha_course.core.softmax.softmax_np (names and validation lines ignored)" in line
        for line in paster.copied
    ), paster.copied
    honest = [r for r in results if r.student.startswith("Learner")]
    assert not any(r.copied for r in honest), [r.copied for r in honest]


@pytest.mark.slow
def test_report_has_the_section_and_its_own_files(class_results, tmp_path):
    _, results = class_results

    def write_text(path, text):
        Path(path).write_text(text, encoding="utf-8")

    def write_bytes(path, data):
        Path(path).write_bytes(data)

    written = write_report(tmp_path / "report.html", results, [], write_text, write_bytes)
    assert tmp_path / "report-similarity.md" in written and tmp_path / "report-similarity.json" in written
    page = (tmp_path / "report.html").read_text()
    assert "Similar answers between students" in page and "Copy Cat" in page and "<pre>" in page
    assert "Similar answers between students" in (tmp_path / "report.md").read_text()
    document = json.loads((tmp_path / "report-similarity.json").read_text())
    assert document["threshold"] == similar_pairs.THRESHOLD and document["count"] >= 1
    assert {"first", "second", "score", "first_code", "second_code", "exercise"} <= set(document["pairs"][0])
    markdown = (tmp_path / "report-similarity.md").read_text()
    assert "Copy Cat" in markdown and "never a penalty" in markdown
    # the page to project names nobody
    write_report(tmp_path / "anon.html", results, [], write_text, write_bytes, anonymise=True)
    for name in ("anon.html", "anon.md", "anon-similarity.md", "anon-similarity.json"):
        assert "Copy Cat" not in (tmp_path / name).read_text(), name


def _written(node: ast.AST) -> str:
    """A definition as written (names kept), decorators, annotations and docstrings aside."""
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if hasattr(sub, "decorator_list"):
            sub.decorator_list = []
        if hasattr(sub, "returns"):
            sub.returns = None
        if isinstance(sub, ast.arg):
            sub.annotation = None
        body = getattr(sub, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                sub.body = body[1:] or [ast.Pass()]
    return ast.dump(node)


@pytest.mark.slow  # parses the 60 notebooks (about 4 s)
def test_false_positive_rate_on_the_honest_corpus():
    """Pairs of the corpus written independently (no definition alike as written) are never flagged.

    The corpus reuses some answers verbatim across styles (the same text behind another decorator):
    those pairs are copies by construction and left out of the rate.
    """
    by_assignment = defaultdict(list)
    for path in sorted(glob.glob(str(HONEST / "*.ipynb"))):
        by_assignment[Path(path).name.split("__")[0]].append(path)
    independent, flagged, highest = 0, [], 0.0
    for key, paths in by_assignment.items():
        targets = list(dict.fromkeys(e.target for e in registry.get_assignment(key).exercises))
        units = {}
        for path in paths:
            found = fingerprints.definitions(notebook.code_cells(notebook.load(path)))
            for target in targets:
                parts = fingerprints.unit(target, found)
                tokens = fingerprints.unit_tokens(parts)
                units[path, target] = (tokens, fingerprints.fingerprints(tokens), {_written(n) for _, _, n in parts})
        for target in targets:
            for a, b in itertools.combinations(paths, 2):
                (ta, fa, wa), (tb, fb, wb) = units[a, target], units[b, target]
                if not ta or not tb or wa & wb:
                    continue
                independent += 1
                score = fingerprints.jaccard(fa, fb)
                highest = max(highest, score)
                if score >= similar_pairs.THRESHOLD and min(len(ta), len(tb)) >= similar_pairs.MIN_TOKENS:
                    flagged.append((key, target, a, b, score))
    assert independent >= 200, independent  # the measurement covers the corpus
    assert flagged == [], flagged
    assert highest < similar_pairs.THRESHOLD - 0.1, highest  # a margin, not a knife edge


def test_validation_lines_are_what_is_removed():
    source = (
        "def f(x, axis=-1):\n"
        "    assert x.ndim > 0\n"
        "    if not isinstance(x, float):\n"
        "        raise TypeError('no')\n"
        "    axis = require_int(axis, 'axis')\n"
        "    check_qkv(x, x, x)\n"
        "    if x.ndim == 0:\n"
        "        return x\n"
        "    return x.sum(axis)\n"
    )
    stripped = ast.unparse(fingerprints.strip_validation(ast.parse(source)))
    assert "assert" not in stripped and "raise" not in stripped and "require_int" not in stripped
    assert "check_qkv" not in stripped
    assert "if x.ndim == 0:\n        return x" in stripped and "return x.sum(axis)" in stripped


def test_threshold_must_be_a_fraction():
    with pytest.raises(ValueError, match="threshold"):
        similar_pairs.similar_pairs([], threshold=1.5)


@pytest.mark.slow
def test_the_report_stage_reads_each_notebook_once(class_results, tmp_path, monkeypatch):
    """Feedback, the class report and the similarity files share one reading of each submission."""
    import argparse

    from mha_course.grading.classroom import outputs, submitted_code

    _, results = class_results
    loads = Counter()
    real_load = submitted_code.notebook.load

    def counting_load(path, *args, **kwargs):
        loads[str(path)] += 1
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(submitted_code.notebook, "load", counting_load)
    args = argparse.Namespace(
        results_dir=None,
        feedback_dir=tmp_path / "feedback",
        csv=None,
        report=tmp_path / "report.html",
        grades_out=None,
        summary=None,
        json=None,
        quiet=True,
        anonymise=False,
    )
    args.feedback_dir.mkdir()
    assert outputs.write_outputs(args, results, None, []) == 0
    graded = {r.path for r in results if not r.error and r.assignment}
    assert set(loads) == graded and set(loads.values()) == {1}, loads
    assert "Copy Cat" in (tmp_path / "report-similarity.md").read_text()  # the shared reading found the copy
    assert len(list(args.feedback_dir.glob("*.feedback.md"))) == len(results)


def test_copy_tree_is_deepcopy_without_its_memo():
    """The stripped copy is a new tree equal to deepcopy's; stripping it leaves the notebook's tree as it was."""
    source = inspect.getsource(core_softmax)
    for node in ast.parse(source).body:
        before = ast.dump(node, include_attributes=True)
        clone = fingerprints.copy_tree(node)
        assert ast.dump(clone, include_attributes=True) == ast.dump(copy.deepcopy(node), include_attributes=True)
        shared = {id(n) for n in ast.walk(node)} & {id(n) for n in ast.walk(clone)}
        assert not shared  # no node is shared, so a transformer on the copy cannot reach the original
        fingerprints.strip_validation(node)
        assert ast.dump(node, include_attributes=True) == before
    validated = ast.parse("def f(x):\n    if x is None:\n        raise ValueError('x')\n    return x + 1\n").body[0]
    assert "Raise" not in fingerprints.normalised(validated) and "Raise" in fingerprints.tokens(validated)
