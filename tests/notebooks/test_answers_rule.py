"""Every answer stays hidden until the learner tries: the rule of ``mha_course.predict``, for every chapter.

The rule (CONTRIBUTING.md, "Predictions and answers"):

* a code cell tagged ``prediction`` sets each prediction to ``None`` and does nothing else;
* no other cell assigns a prediction or compares it with a literal (``assert x == "GRU"``,
  ``math.isclose(x, 0.693)``, ``abs(x - 8) < 1``): a prediction is judged by
  ``check_prediction(name, x, <computed>)`` or ``check_choice(name, x, <digest>)``, whose digest
  must be ``answer_digest(name, answer)`` of the answer written in the answers cell;
* the answers live in one markdown cell at the end, tagged ``answers``, collapsed
  (``jupyter.source_hidden``) and wrapped in ``<details>``, one ``- `name`: answer`` line each;
* a "write it yourself" cell is tagged ``exercise`` and ships unwritten: each function's body
  raises ``NotImplementedError`` (or is ``...``), and ``check_exercise`` only accepts such a
  function; inside a "Check yourself" section no cell ships a ``my_*`` name filled in.

Each notebook is one test case, so a failure names the chapter; the message names the cell and
the part of the rule it breaks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from mha_course.predict import (
    answer_digest,
    check_choice,
    check_exercise,
    check_prediction,
    normalise_answer,
    parse_answers,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
SUMMARY = "<details><summary>Answers — open after you have tried</summary>"
CHECKERS = {"check_prediction", "check_choice"}
SECTION_START = re.compile(r"check yourself|\b(build|write)\b[^\n]*\byourself\b", re.I)


# --- the helpers themselves ---------------------------------------------------------------------


def test_no_prediction_yet_prints_and_returns_false_without_raising(capsys):
    assert check_prediction("x", None, 0.693) == False  # noqa: E712 - a Verdict, equal to the bool
    assert check_choice("x", None, answer_digest("x", "GRU")) == False  # noqa: E712
    out = capsys.readouterr().out
    assert out.count("make your prediction first") == 2 and "0.693" not in out and "gru" not in out.lower()


def test_a_right_prediction_is_right_within_its_tolerance(capsys):
    assert check_prediction("x", 0.69, 0.6931, rel_tol=0.01)
    assert check_prediction("shape", (3, 4, 6, 8), (3, 4, 6, 8), rel_tol=0)
    assert check_prediction("p", [0.1, 0.2, 0.7], np.array([0.1, 0.2, 0.7]) + 1e-4, abs_tol=1e-3)
    assert check_prediction("word", "GRU", "gru") and check_prediction("flag", False, False)
    assert check_choice("fell_behind", " gru ", answer_digest("fell_behind", "GRU"))
    assert check_choice("exact", {"kv cache"}, answer_digest("exact", '{"KV cache"}'))
    assert capsys.readouterr().out.count("right") == 7


WHOLE_LARGE = "too large by a whole factor (2 to 16)"
WHOLE_SMALL = "too small by a whole factor (2 to 16)"


@pytest.mark.parametrize(
    ("predicted", "actual", "kind"),
    [
        (1.386, 0.693, WHOLE_LARGE),
        (2.772, 0.693, WHOLE_LARGE),
        (0.3465, 0.693, WHOLE_SMALL),
        (0.693 / 16, 0.693, WHOLE_SMALL),
        (-0.693, 0.693, "wrong sign"),
        (-5.0, 0.693, "wrong sign"),
        (69.3, 0.693, "too large by a power of ten"),
        (0.000693, 0.693, "too small by a power of ten"),
        (60.0, 0.693, "about 2 orders of magnitude too large"),
        (0.5, 0.693, "too small"),
        ((3, 4, 8, 6), (3, 4, 6, 8), "2 of 4 entries: entry 2 too large; entry 3 too small"),
        ((3, 4, 12, 8), (3, 4, 6, 8), f"1 of 4 entries: entry 2 {WHOLE_LARGE}"),
        ((3, 4), (3, 4, 6, 8), "2 entries, the answer has 4"),
    ],
)
def test_a_wrong_prediction_says_what_kind_of_mistake_never_the_answer(capsys, predicted, actual, kind):
    assert not check_prediction("x", predicted, actual, rel_tol=0.01)
    out = capsys.readouterr().out
    assert kind in out, out
    assert str(actual) not in out and "0.693" not in out, out


@pytest.mark.parametrize("factor", [2, 3, 4, 5, 8, 10, 16, 100, 1000])
@pytest.mark.parametrize("actual", [0.693, 4096.0, -3.0])
def test_no_message_is_one_step_from_the_answer(capsys, factor, actual):
    """Neither a division, a negation nor a reordering the message suggests turns a wrong prediction right.

    A message that names the factor ("4 times too large") or the kind exactly ("right size, wrong sign",
    "the right numbers, in the wrong order") would; the message may name the mistake's kind only.
    """
    for predicted in (actual * factor, actual / factor, -actual):
        assert not check_prediction("x", predicted, actual, rel_tol=0.01)
        out = capsys.readouterr().out
        assert not re.search(rf"\b{factor}\b(?! to 16)", out.replace("2 to 16", "")), out
        assert "right size" not in out and "factor of" not in out, out
    assert not check_prediction("x", [actual, 2 * actual], [2 * actual, actual], rel_tol=0.01)
    assert "order" not in capsys.readouterr().out


def test_a_wrong_choice_gives_no_answer_away(capsys):
    assert not check_choice("fell_behind", "transformer", answer_digest("fell_behind", "GRU"))
    assert not check_choice("fell_behind", 2.5j, answer_digest("fell_behind", "GRU"))
    assert "gru" not in capsys.readouterr().out.lower()


def test_digests_hide_the_answer_and_depend_on_the_name():
    digest = answer_digest("fell_behind", "GRU")
    assert re.fullmatch(r"[0-9a-f]{16}", digest) and "gru" not in digest.lower()
    assert digest == answer_digest("fell_behind", "'gru'") != answer_digest("other", "GRU")
    assert normalise_answer((2, 3)) == normalise_answer("(2, 3)") == normalise_answer("[2,3]")
    assert normalise_answer({"b", "a"}) == normalise_answer("{'a', 'b'}")
    assert normalise_answer(8.0) == normalise_answer("8") and normalise_answer(True) == "true"


def test_bad_arguments_raise_naming_expected_and_actual():
    with pytest.raises(TypeError, match="identifier"):
        check_prediction("not a name", 1, 1)
    with pytest.raises(ValueError, match="rel_tol must be finite and >= 0, got -1"):
        check_prediction("x", 1, 1, rel_tol=-1)
    with pytest.raises(TypeError, match="abs_tol must be a real number, got str"):
        check_prediction("x", 1, 1, abs_tol="0.1")
    with pytest.raises(ValueError, match="16 lower-case hex digits"):
        check_choice("x", "a", "GRU")
    with pytest.raises(TypeError, match="digest must be a str"):
        check_choice("x", "a", 123)
    with pytest.raises(TypeError, match="answer must be a str, bool, int, float or tuple/set"):
        answer_digest("x", object())
    with pytest.raises(TypeError, match="cases must be a non-empty sequence"):
        check_exercise("f", abs, abs, [])
    with pytest.raises(TypeError, match="function must be callable"):
        check_exercise("f", 3, abs, [(1.0,)])
    with pytest.raises(ValueError, match="'x' twice"):
        parse_answers("- `x`: 1\n- `x`: 2")


def test_check_exercise_waits_for_the_learner_then_judges(capsys):
    def unwritten(x):
        raise NotImplementedError

    def naive(x):
        return np.exp(x) / np.exp(x).sum()

    def stable(x):
        e = np.exp(x - x.max())
        return e / e.sum()

    def reference(x):
        return stable(x)

    cases = [(np.array([1.0, 2.0]),), (np.array([1000.0, 0.0]),)]
    assert not check_exercise("s", unwritten, reference, cases)
    assert not check_exercise("s", lambda x: None, reference, cases)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not check_exercise("s", naive, reference, cases)
    assert not check_exercise("s", lambda x: x[:1], reference, cases)
    assert check_exercise("s", stable, reference, cases) == True  # noqa: E712
    out = capsys.readouterr().out.splitlines()
    assert "write it first" in out[0] and "write it first" in out[1]
    assert "not finite" in out[2] and "shape (1,), expected (2,)" in out[3] and "right on all 2" in out[4]


def test_parse_answers_reads_name_lines_only():
    cell = f"{SUMMARY}\n\n- `fell_behind`: GRU — its gradient vanishes\n- `x`: `(2, 3)`\nprose: no\n\n</details>"
    assert parse_answers(cell) == {"fell_behind": "GRU", "x": "(2, 3)"}


# --- the rule, on a notebook --------------------------------------------------------------------


def _parse(source: str) -> ast.Module | None:
    lines = ["" if re.match(r"\s*[%!]", line) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _is_literal(node: ast.AST) -> bool:
    """An expression made of constants only (None excluded): what an answer written out looks like."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    return False


def _mentions(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp):
        return _mentions(node.left, names) or _mentions(node.right, names)
    if isinstance(node, ast.UnaryOp):
        return _mentions(node.operand, names)
    return False


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _assigned(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _unwritten(function: ast.FunctionDef) -> bool:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1:
        return False
    statement = body[0]
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is ...
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _check_yourself_cells(cells) -> set[int]:
    """Indices of code cells inside a "Check yourself" / "Build ... yourself" section."""
    inside, found = False, set()
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            if SECTION_START.search(cell.source):
                inside = True
            elif re.search(r"^#{1,6} ", cell.source, re.M):
                inside = False
        elif inside:
            found.add(i)
    return found


def rule_problems(nb, label: str) -> list[str]:
    """Every break of the answers rule in ``nb``, as 'label cell i: what'."""
    rule = _AnswersRule(nb.cells, label)
    rule.prediction_cells_hold_only_none()
    rule.old_predictions()
    rule.answers_cell()
    for i, tree in rule.trees.items():
        if tree is not None:
            rule.code_cell(i, tree)
    rule.every_prediction_checked()
    return rule.problems


class _AnswersRule:
    """The checks of :func:`rule_problems`, one method per part of the rule, sharing what they found."""

    def __init__(self, cells, label: str) -> None:
        self.cells, self.label = cells, label
        self.problems: list[str] = []
        self.trees = {i: _parse(c.source) for i, c in enumerate(cells) if c.cell_type == "code"}
        self.prediction_cells = [i for i, c in enumerate(cells) if "prediction" in c.metadata.get("tags", [])]
        self.exercise_cells = {i for i, c in enumerate(cells) if "exercise" in c.metadata.get("tags", [])}
        self.section = _check_yourself_cells(cells)
        self.predictions: dict[str, int] = {}
        self.answers: dict[str, str] = {}
        self.checked: set[str] = set()
        self.exercised: dict[str, int] = {}

    @property
    def names(self) -> set[str]:
        return set(self.predictions)

    def say(self, i, text) -> None:
        self.problems.append(f"{self.label} cell {i}: {text}")

    def prediction_cells_hold_only_none(self) -> None:
        """Prediction cells: name = None, nothing else."""
        for i in self.prediction_cells:
            tree = self.trees.get(i)
            if tree is None:
                self.say(i, "a prediction cell must be a code cell of valid Python")
                continue
            for statement in tree.body:
                ok = (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)
                    and isinstance(statement.value, ast.Constant)
                    and statement.value.value is None
                )
                if not ok:
                    self.say(i, f"a prediction cell may only set names to None, found: {ast.unparse(statement)}")
                else:
                    self.predictions[statement.targets[0].id] = i

    def old_predictions(self) -> None:
        """The old pattern, `name = ...` in an untagged cell, is a prediction too (and breaks the rule)."""
        for i, tree in self.trees.items():
            if tree is None or i in self.prediction_cells:
                continue
            for statement in tree.body:
                if (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)
                    and isinstance(statement.value, ast.Constant)
                    and statement.value.value is ...
                ):
                    self.say(
                        i,
                        f"{statement.targets[0].id!r} = ... is a prediction: start it as None in a cell tagged 'prediction'",
                    )
                    self.predictions.setdefault(statement.targets[0].id, i)

    def answers_cell(self) -> None:
        """One answers cell: markdown, last, collapsed, in <details>, with a line per prediction."""
        cells, names = self.cells, self.names
        answer_cells = [i for i, c in enumerate(cells) if "answers" in c.metadata.get("tags", [])]
        if len(answer_cells) > 1:
            self.say(
                answer_cells[1], f"one answers cell per notebook, found {len(answer_cells)} (cells {answer_cells})"
            )
        for i in answer_cells[:1]:
            cell = cells[i]
            if cell.cell_type != "markdown":
                self.say(i, "the answers cell must be markdown")
            if i != len(cells) - 1:
                self.say(i, f"the answers cell must be the last cell, {len(cells) - 1 - i} cell(s) follow it")
            if cell.metadata.get("jupyter", {}).get("source_hidden") is not True:
                self.say(i, 'the answers cell must be collapsed: metadata {"jupyter": {"source_hidden": true}}')
            text = cell.source.strip()
            if not (text.startswith(SUMMARY) and text.endswith("</details>")):
                self.say(i, f"the answers cell must be wrapped in {SUMMARY} ... </details>")
            try:
                self.answers = parse_answers(cell.source)
            except ValueError as error:
                self.say(i, str(error))
        if (names or answer_cells) and not answer_cells:
            self.say(len(cells) - 1, "predictions need an answers cell at the end (tag 'answers')")
        for name in sorted(names - set(self.answers)):
            self.say(
                self.predictions[name], f"prediction {name!r} has no '- `{name}`: answer' line in the answers cell"
            )

    def code_cell(self, i: int, tree: ast.Module) -> None:
        """A code cell: no answers in code, predictions only set in their cell, used only as the rule allows."""
        source, names = self.cells[i].source, self.names
        if "COURSE_ANSWERS" in source or re.search(r"\bprediction\(", source):
            self.say(
                i, "the course's answers sit in code (COURSE_ANSWERS / testing.prediction); use mha_course.predict"
            )
        if i not in self.prediction_cells:
            for name in sorted(_assigned(tree) & names - {n for n, j in self.predictions.items() if j == i}):
                self.say(i, f"prediction {name!r} is assigned outside its prediction cell")
        for node in ast.walk(tree):
            self.node(i, node)
        if i in self.exercise_cells:
            self.exercise_cell(i, tree)
        elif i in self.section and i not in self.prediction_cells:
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith("my_"):
                    self.say(i, f"{node.name!r} is the learner's to write: put it in a cell tagged 'exercise'")
            for name in sorted(n for n in _assigned(tree) if n.startswith("my_")):
                self.say(i, f"{name!r} ships filled in: a prediction starts as None in a cell tagged 'prediction'")

    def node(self, i: int, node: ast.AST) -> None:
        """A prediction compared, computed or passed with a literal; the checks and check_exercise calls."""
        names = self.names
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_mentions(o, names) for o in operands) and any(_is_literal(o) for o in operands):
                self.say(i, f"compares a prediction with a literal: {ast.unparse(node)}")
        elif isinstance(node, ast.BinOp) and _mentions(node, names):
            if _is_literal(node.left) or _is_literal(node.right):
                self.say(i, f"computes with a prediction and a literal: {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            called = _call_name(node)
            if called in CHECKERS:
                _check_call(node, called, names, self.answers, self.checked, lambda text, i=i: self.say(i, text))
            elif called == "check_exercise" and len(node.args) >= 2 and isinstance(node.args[1], ast.Name):
                self.exercised[node.args[1].id] = i
            elif any(_mentions(a, names) for a in node.args) and any(_is_literal(a) for a in node.args):
                self.say(i, f"passes a prediction together with a literal: {ast.unparse(node)}")

    def exercise_cell(self, i: int, tree: ast.Module) -> None:
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef):
                if not _unwritten(statement):
                    self.say(i, f"exercise {statement.name!r} ships written: its body must raise NotImplementedError")
            elif not isinstance(statement, (ast.Import, ast.ImportFrom)):
                self.say(i, f"an exercise cell holds only functions to write, found: {ast.unparse(statement)[:60]}")

    def every_prediction_checked(self) -> None:
        """Every prediction checked; every check_exercise target defined in an exercise cell."""
        for name in sorted(self.names - self.checked):
            self.say(
                self.predictions[name], f"prediction {name!r} is never checked with check_prediction or check_choice"
            )
        for name, i in sorted(self.exercised.items()):
            defined = [
                j
                for j in self.exercise_cells
                if self.trees.get(j)
                and any(isinstance(s, ast.FunctionDef) and s.name == name for s in self.trees[j].body)
            ]
            if not defined:
                self.say(i, f"check_exercise checks {name!r}, which no cell tagged 'exercise' defines")


def _check_call(node: ast.Call, called: str, names: set[str], answers: dict, checked: set, say) -> None:
    if len(node.args) < 3 or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[1], ast.Name):
        say(f'{called} takes ("name", name, ...) positionally: {ast.unparse(node)}')
        return
    label, variable, third = node.args[0].value, node.args[1].id, node.args[2]
    if label != variable:
        say(f"{called} labels {variable!r} as {label!r}")
    if variable not in names:
        say(f"{called} checks {variable!r}, which no prediction cell sets to None")
    checked.add(variable)
    if called == "check_prediction" and _is_literal(third):
        say(f"check_prediction must compare with what the notebook computes, not a literal: {ast.unparse(node)}")
    if called == "check_choice":
        if not (isinstance(third, ast.Constant) and isinstance(third.value, str)):
            say(f"check_choice's digest must be written out: {ast.unparse(node)}")
        elif variable in answers and answer_digest(variable, answers[variable]) != third.value:
            say(f"check_choice({variable!r}): the digest is not answer_digest of the answers cell's {variable!r}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_every_answer_stays_hidden_until_the_learner_tries(path):
    problems = rule_problems(nbformat.read(path, as_version=4), str(path.relative_to(ROOT)))
    assert problems == [], "\n".join(problems)


def test_chapters_do_ask_for_predictions():
    asked = [
        p.name for p in NOTEBOOKS if any("prediction" in c.metadata.get("tags", []) for c in nbformat.read(p, 4).cells)
    ]
    assert len(asked) >= 10, asked


# --- the rule catches what it is for ------------------------------------------------------------


def _notebook(*cells):
    return new_notebook(cells=list(cells))


def _answers(body: str, hidden=True):
    meta = {"tags": ["answers"], **({"jupyter": {"source_hidden": True}} if hidden else {})}
    return new_markdown_cell(f"{SUMMARY}\n\n{body}\n\n</details>", metadata=meta)


def _pred(source: str):
    return new_code_cell(source, metadata={"tags": ["prediction"]})


GOOD = [
    new_markdown_cell("## Check yourself"),
    _pred("fell_behind = None\nratio = None"),
    new_code_cell(
        "from mha_course.predict import check_choice, check_prediction\n"
        f"check_choice('fell_behind', fell_behind, '{answer_digest('fell_behind', 'GRU')}')\n"
        "check_prediction('ratio', ratio, measured_ratio, rel_tol=0.05)"
    ),
    new_code_cell("def my_softmax(x):\n    raise NotImplementedError('write it')", metadata={"tags": ["exercise"]}),
    new_code_cell("check_exercise('my_softmax', my_softmax, softmax_np, [(x,)])"),
    _answers("- `fell_behind`: GRU — its gradient fades\n- `ratio`: 8 — H / G"),
]


def test_a_notebook_that_follows_the_rule_passes():
    assert rule_problems(_notebook(*GOOD), "good") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.__setitem__(1, _pred('fell_behind = "GRU"\nratio = None')), "may only set names to None"),
        (lambda c: c.insert(3, new_code_cell('assert fell_behind == "GRU"')), "compares a prediction with a literal"),
        (lambda c: c.insert(3, new_code_cell("math.isclose(ratio, 0.693)")), "passes a prediction together with"),
        (lambda c: c.insert(3, new_code_cell("abs(ratio - 8) < 1")), "computes with a prediction and a literal"),
        (lambda c: c.insert(3, new_code_cell("ratio = 8")), "assigned outside its prediction cell"),
        (
            lambda c: c.__setitem__(2, new_code_cell(c[2].source.replace("measured_ratio", "8"))),
            "not a literal",
        ),
        (
            lambda c: c.__setitem__(5, _answers("- `fell_behind`: transformer\n- `ratio`: 8")),
            "the digest is not answer_digest",
        ),
        (lambda c: c.__setitem__(5, _answers("- `fell_behind`: GRU\n- `ratio`: 8", hidden=False)), "collapsed"),
        (lambda c: c.__setitem__(5, _answers("- `fell_behind`: GRU")), "'ratio' has no"),
        (lambda c: c.append(new_code_cell("print(1)")), "must be the last cell"),
        (
            lambda c: c.__setitem__(
                3, new_code_cell("def my_softmax(x):\n    return x", metadata={"tags": ["exercise"]})
            ),
            "ships written",
        ),
        (lambda c: c.__setitem__(3, new_code_cell("def my_softmax(x):\n    return x")), "put it in a cell tagged"),
        (lambda c: c.insert(3, new_code_cell("my_mask = pos[None] <= pos[:, None]")), "ships filled in"),
        (lambda c: c.insert(3, new_code_cell("COURSE_ANSWERS = {'ratio': 8}")), "COURSE_ANSWERS"),
        (lambda c: c.insert(3, new_code_cell("hf_layout = ...")), "start it as None"),
        (
            lambda c: c.insert(3, new_code_cell('hf_layout = ...\nassert hf_layout == "half"')),
            "compares a prediction with a literal",
        ),
        (
            lambda c: c.__setitem__(2, new_code_cell(c[2].source.replace("check_prediction('ratio'", "print('ratio'"))),
            "'ratio' is never checked",
        ),
    ],
)
def test_the_rule_names_each_break(change, expected):
    cells = [nbformat.from_dict(dict(c)) for c in GOOD]
    change(cells)
    problems = rule_problems(_notebook(*cells), "broken")
    assert any(expected in p for p in problems), problems
