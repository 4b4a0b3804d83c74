"""Every answer of every answers cell is right by the chapter's own check, and no check shows it first.

A chapter's answers cell (tag ``answers``, one ``- `name`: answer — why`` line per prediction or exercise) is
written by hand, while its checks compare with values the notebook computes: the two can disagree,
and a learner who predicts the key's value then hears "not right". So, for each chapter that asks
for predictions or exercises, in one kernel and one execution of the notebook:

1. every code cell runs as shipped (what nbval --nbval-lax checks; nbval's own run of the notebook
   is then left out, see tests/conftest.py), with the widget checks and the slider replay of
   test_interactive_replay.py where the chapter has sliders;
2. what each check cell printed while the predictions were still ``None`` must not show any
   answer of the answers cell (a check that prints the measured values on every run gives the
   answer away before the learner has tried);
3. then each prediction cell runs once more with the key's answers in place of ``None`` (each
   answer read as a Python value: ``3145728``, ``0.693``, ``"first"``, ``(3, 4)``, ``e^-10``,
   ``4 GiB``), each exercise cell with its functions' bodies taken from the answers cell (its
   ```python block, or its `code` spans one per line), the check cells run again, and each must
   print ``<name>: right``.

A failure names the chapter, the prediction, the key's answer and what the check printed.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
from test_interactive_replay import (
    MAKES_A_WIDGET,
    NotebookKernel,
    Ran,
    asks_the_learner,
    replay_sliders,
    run_every_cell,
)

from mha_course.predict import parse_answers, prediction_names

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [
    p for folder in ("notebooks", "solutions") for p in sorted((ROOT / folder).glob("*.ipynb")) if asks_the_learner(p)
]
CHECK_CALL = re.compile(r"\bcheck_(?:prediction|choice|exercise)\(\s*[\"'](?P<name>\w+)[\"']")
# What a check prints while its prediction is None: the name, never the answer (lines left out of the scan).
NOT_YET = re.compile(r"^\s*\w+: (?:make your prediction first|write it first)\b.*$", re.M)

# Known problems, each owned elsewhere: (chapter, prediction, "shown" or "wrong") -> what it is. The test
# xfails while exactly these remain and fails once one is gone, so that its entry is removed. None today.
KNOWN: dict[tuple[str, str, str], str] = {}

# --- reading an answer as a value --------------------------------------------------------------------

BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "kB": 10**3, "MB": 10**6, "GB": 10**9}
_SIZE = re.compile(rf"(?P<number>[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(?P<unit>{'|'.join(BYTE_UNITS)})")
_WORDS = re.compile(r"[A-Za-z][\w\- ]*")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_CONSTANTS = {"e": math.e, "pi": math.pi, "inf": math.inf}


def _arithmetic(node: ast.AST) -> object:
    """The value of a tuple of numbers written with + - * / **, e, pi, inf and exp(...); ValueError otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_arithmetic(e) for e in node.elts)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _arithmetic(node.left) ** _arithmetic(node.right)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exp" and len(node.args) == 1:
        return math.exp(_arithmetic(node.args[0]))
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


def key_value(text: str) -> object:
    """The Python value a learner would type for the answer ``text`` of an answers cell.

    A worked answer (``2 · 16 · 8192² · 2 = 4 GiB``, ``… ≈ 1.1e12``) counts by what follows its last
    ``=`` or ``≈``. Then, in order: a size with a byte unit (``4 GiB`` is 4·2³⁰); a Python literal
    (``3145728``, ``0.693``, ``(3, 4)``, ``False``, ``"first"``); arithmetic in the notebooks'
    notation (``·``, ``×``, ``²``, ``e^-10``); a set of words (``{kv cache}``); words (``GRU``).

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: the text is none of these (prose: the answer needs rewording).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = re.split(r"\s(?:=|≈)\s", text)[-1].strip()
    if size := _SIZE.fullmatch(text):
        number = float(size["number"]) * BYTE_UNITS[size["unit"]]
        return int(number) if number.is_integer() else number
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    python = text.replace("·", "*").replace("×", "*").replace("−", "-").replace("²", "**2").replace("³", "**3")
    python = re.sub(r"\be\^(\([^()]*\)|[-+]?[\d.]+)", r"exp(\1)", python)
    try:
        return _arithmetic(ast.parse(python, mode="eval").body)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError, OverflowError):
        pass
    if len(text) >= 2 and text[0] == "{" and text[-1] == "}":
        words = [word.strip() for word in text[1:-1].split(",")]
        if all(_WORDS.fullmatch(word) for word in words):
            return set(words)
    if _WORDS.fullmatch(text):
        return text
    raise ValueError(f"cannot read the answer {text!r} as a value a learner would type")


def with_key(source: str, values: dict[str, object]) -> str:
    """The prediction cell ``source`` with each ``name = None`` set to ``repr(values[name])``.

    Raises:
        ValueError: a prediction of the cell has no value in ``values``.
    """
    missing = [name for name in prediction_names(source) if name not in values]
    if missing:
        raise ValueError(f"the answers cell has no answer for {', '.join(missing)}")
    for name in prediction_names(source):
        source = re.sub(rf"^({name}\s*=\s*)None\b", lambda m, n=name: m[1] + repr(values[n]), source, flags=re.M)
    return source


def answer_code(markdown: str, name: str) -> str | None:
    """The code the answers cell gives for the exercise ``name``: the ```python block of its line, else the
    `code` spans after its `` — ``, one per line; None when its line has neither."""
    lines = markdown.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(rf"\s*[-*]\s+`{name}`\s*:", line)]
    if not starts:
        return None
    end = next((j for j in range(starts[0] + 1, len(lines)) if re.match(r"[-*]\s|</details>", lines[j])), len(lines))
    text = "\n".join(lines[starts[0] : end])
    if fenced := re.search(r"```(?:python)?\n(.*?)```", text, re.S):
        return textwrap.dedent(fenced[1]).strip()
    spans = re.findall(r"`([^`]+)`", text.partition(" — ")[2])
    return "\n".join(" ".join(span.split()) for span in spans) or None


def with_answer(source: str, name: str, code: str) -> str:
    """The exercise cell ``source`` with the body of its function ``name`` (its docstring kept) replaced by ``code``.

    Raises:
        ValueError: the cell defines no function ``name``.
    """
    tree = ast.parse(source)
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if function is None:
        raise ValueError(f"the cell defines no function {name!r}")
    body = function.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    lines = source.splitlines()
    indent = " " * body[0].col_offset
    written = [indent + line if line else line for line in code.splitlines()]
    return "\n".join(lines[: body[0].lineno - 1] + written + lines[body[-1].end_lineno :])


# --- does a check's output show an answer? ----------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d.])|\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _numbers(value: object) -> list[float] | None:
    """The numbers of an answer (a number or a tuple of them), or None if it is not numeric."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (tuple, list)) and value and all(_numbers(part) is not None for part in value):
        return [number for part in value for number in _numbers(part)]
    return None


def shows(printed: str, value: object) -> bool:
    """Whether the text ``printed`` (less its "make your prediction first" lines) shows the answer ``value``:
    every number of a numeric answer among its numbers (within 1 %), every word of a word answer among its
    words. True/False are not looked for: every check cell ends by echoing False."""
    text = NOT_YET.sub("", printed)
    numbers = _numbers(value)
    if numbers is not None:
        found = [float(token.replace(",", "")) for token in _NUMBER.findall(text)]
        return all(any(math.isclose(f, n, rel_tol=0.01, abs_tol=1e-12) for f in found) for n in numbers)
    words = sorted(value) if isinstance(value, (set, frozenset)) else [value] if isinstance(value, str) else []
    return bool(words) and all(re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I) for word in words)


# --- the test -------------------------------------------------------------------------------------


def _answers_cell(cells) -> str:
    answers = [cell.source for cell in cells if "answers" in cell.metadata.get("tags", [])]
    assert len(answers) == 1, f"expected one answers cell, found {len(answers)}"
    return answers[0]


def _verdict(printed: str, name: str) -> str:
    lines = [line for line in printed.splitlines() if line.startswith(f"{name}: ")]
    return lines[-1] if lines else f"(nothing about {name})"


def _settle(chapter: str, problems: dict[tuple[str, str, str], str]) -> None:
    """Fail on a problem not in KNOWN, or on a KNOWN one that is gone; xfail on known ones alone."""
    known = {k: v for k, v in KNOWN.items() if k[0] == chapter}
    new = [text for k, text in problems.items() if k not in known]
    gone = [f"{k[1]} ({k[2]}): {why}" for k, why in known.items() if k not in problems]
    if new or gone:
        pytest.fail(
            "\n".join(new + [f"{chapter}: fixed, so remove it from KNOWN in this file: {line}" for line in gone]),
            pytrace=False,
        )
    if problems:
        pytest.xfail("known: " + "; ".join(f"{k[1]} ({k[2]}): {known[k]}" for k in problems))


class Chapter:
    """A chapter's code cells, its predictions and exercises, and the answers cell's key for each, read as
    what a learner would type (a value; for an exercise, the function's body). Problems are collected in
    ``problems``, keyed (chapter, name, kind), each naming the chapter, the name and the key's answer."""

    def __init__(self, path: Path):
        self.chapter = path.stem
        cells = nbformat.read(path, as_version=4).cells
        self.code = [cell.source for cell in cells if cell.cell_type == "code"]
        self.number = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]  # as the notebook counts
        self.predicting = [i for i, c in enumerate(cells) if c.cell_type == "code" and "prediction" in _tags(c)]
        self.predicting = [self.number.index(i) for i in self.predicting]
        self.exercising = [self.number.index(i) for i, c in enumerate(cells) if "exercise" in _tags(c)]
        markdown = _answers_cell(cells)
        self.key = parse_answers(markdown)
        self.problems: dict[tuple[str, str, str], str] = {}
        self.values: dict[str, object] = {}
        for name in (name for i in self.predicting for name in prediction_names(self.code[i])):
            try:
                self.values[name] = key_value(self.key[name])
            except (KeyError, ValueError) as error:
                self.say(name, "unread", f"the answers cell's answer: {error!r}")
        self.bodies = {}
        for i in self.exercising:
            for name in (n.name for n in ast.parse(self.code[i]).body if isinstance(n, ast.FunctionDef)):
                body = answer_code(markdown, name)
                try:
                    ast.parse(with_answer(self.code[i], name, body or ""))
                    self.bodies[name] = body
                except (SyntaxError, IndexError) as error:
                    self.say(name, "unread", f"the answers cell gives no runnable body ({body!r}): {error}")
        asked = set(self.values) | set(self.bodies)
        for name in sorted(set(self.key) - asked - {named for _, named, _ in self.problems}):
            self.say(name, "unasked", f"the answers cell answers {name!r}, which no prediction or exercise cell asks")
        self.checking = {
            i: [n for n in CHECK_CALL.findall(source) if n in asked]
            for i, source in enumerate(self.code)
            if i not in self.predicting and any(n in asked for n in CHECK_CALL.findall(source))
        }
        for name in sorted(asked - {n for checked in self.checking.values() for n in checked}):
            self.say(name, "unchecked", "no cell checks it")

    def say(self, name: str, kind: str, text: str) -> None:
        self.problems[(self.chapter, name, kind)] = f"{self.chapter}: `{name}`: {text}"

    def look_for_shown_answers(self, ran: list[Ran]) -> None:
        """Each check cell's output, as it ran with the predictions None, must show no answer."""
        for i in self.checking:
            output = ran[i].printed + "\n" + ran[i].results
            for name, value in self.values.items():
                if shows(output, value):
                    self.say(
                        name,
                        "shown",
                        f"cell {self.number[i]} shows the answer {self.key[name]!r} while the predictions are "
                        f"None:\n{output.strip()}",
                    )

    def put_the_key_in(self, kernel: NotebookKernel) -> None:
        """The prediction and exercise cells with the key's answers, then every check cell again: each says right."""
        for i in self.predicting:
            kernel.run(with_key(self.code[i], self.values), f"cell {self.number[i]} with the answers cell's values")
        for i in self.exercising:
            source = self.code[i]
            for name, body in self.bodies.items():
                if name in source:
                    source = with_answer(source, name, body)
            kernel.run(source, f"cell {self.number[i]} with the answers cell's functions")
        for i, checked in self.checking.items():
            printed = kernel.run(self.code[i], f"cell {self.number[i]} after the answers were put in").printed
            for name in checked:
                if not _verdict(printed, name).startswith(f"{name}: right"):
                    read = f" (read as {self.values[name]!r})" if name in self.values else ""
                    self.say(
                        name,
                        "wrong",
                        f"the answers cell says {self.key.get(name)!r}{read}; cell {self.number[i]} printed: "
                        f"{_verdict(printed, name)}",
                    )


def _tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=[f"{p.parent.name}/{p.name}" for p in CHAPTERS])
def test_every_answer_key_is_right(path):
    chapter = Chapter(path)
    with NotebookKernel(path.parent) as kernel:
        ran = run_every_cell(kernel, chapter.code)
        if any(MAKES_A_WIDGET.search(source) for source in chapter.code):
            replay_sliders(kernel)
        chapter.look_for_shown_answers(ran)
        if not any(kind == "unread" for _, _, kind in chapter.problems):
            chapter.put_the_key_in(kernel)
    _settle(chapter.chapter, chapter.problems)


# --- the parts above, on their own (fast) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3145728", 3145728),
        ("0.693", 0.693),
        ("first", "first"),
        ("GRU", "GRU"),
        ("(3, 4, 6, 8)", (3, 4, 6, 8)),
        ("False", False),
        ("{kv cache}", {"kv cache"}),
        ("2 · 16 · 8192² · 2 = 4 GiB", 4 * 2**30),
        ("4 · 2 · 16 · 8192² · 128 ≈ 1.1e12", 1.1e12),
        ("(0, e^-10, e^-10)", (0, math.exp(-10), math.exp(-10))),
        ("(1, 1 + e^-10, 1 + e^-10 + e^-20)", (1, 1 + math.exp(-10), 1 + math.exp(-10) + math.exp(-20))),
        ("2 · 16 · 8192²", 2 * 16 * 8192**2),
    ],
)
def test_an_answer_reads_as_the_value_a_learner_would_type(text, value):
    assert key_value(text) == value
    assert type(key_value(text)) is type(value)


@pytest.mark.parametrize("text", ["__import__('os')", "q @ k.T", "exp(1000) ** 2", "x; y"])
def test_an_answer_that_is_no_value_is_refused_not_guessed(text):
    with pytest.raises(ValueError, match="cannot read the answer"):
        key_value(text)


def test_the_prediction_cell_gets_the_keys_values_and_a_missing_one_is_named():
    cell = "my_D = None              # the per-head dimension D\nmy_shape = None\nother = None  # not asked"
    put = with_key(cell, {"my_D": 8, "my_shape": (3, 4), "other": "first"})
    assert put == "my_D = 8              # the per-head dimension D\nmy_shape = (3, 4)\nother = 'first'  # not asked"
    with pytest.raises(ValueError, match="no answer for other"):
        with_key(cell, {"my_D": 8, "my_shape": (3, 4)})


def test_an_answer_printed_before_the_prediction_is_seen_and_a_name_alone_is_not():
    assert shows("m: [0.0, 10.0, 20.0]  l: [1.0, 1.0000454, 1.0000454]", (0, 10, 20))
    assert shows("break-even at 19,788 queries per rank", 19788)
    assert shows("the first block's output passes", "first")
    assert shows("exact: {'KV cache'}", {"kv cache"})
    assert not shows("m: [0.0, 10.0]", (0, 10, 20))
    assert not shows("merge_with_empty_block: make your prediction first: set it, then rerun both cells", "first")
    assert not shows("False", False)
    assert not shows("answer_flops_2: 3", 2)  # a digit inside a name is no number


ANSWERS = """<details><summary>Answers — open after you have tried</summary>

- `my_softmax`: one way — `e = np.exp(x - x.max())` then `return e / e.sum()`: after the shift
  nothing overflows.
- `my_mask`: one way:

  ```python
  pos = torch.arange(T)
  return pos[None, :] <= pos[:, None]
  ```

- `my_words`: one way — shift, then divide.

</details>"""


def test_an_exercise_gets_the_answers_cells_body_and_prose_gives_none():
    assert answer_code(ANSWERS, "my_softmax") == "e = np.exp(x - x.max())\nreturn e / e.sum()"
    assert answer_code(ANSWERS, "my_mask") == "pos = torch.arange(T)\nreturn pos[None, :] <= pos[:, None]"
    assert answer_code(ANSWERS, "my_words") is None and answer_code(ANSWERS, "absent") is None
    cell = 'import numpy as np\n\n\ndef my_softmax(x):\n    """x (n,) -> (n,)."""\n    raise NotImplementedError("write it")\n'
    written = with_answer(cell, "my_softmax", answer_code(ANSWERS, "my_softmax"))
    assert written == (
        'import numpy as np\n\n\ndef my_softmax(x):\n    """x (n,) -> (n,)."""\n'
        "    e = np.exp(x - x.max())\n    return e / e.sum()"
    )
    namespace: dict = {}
    exec(written, namespace)
    assert abs(namespace["my_softmax"](np.array([1000.0, 1000.0]))[0] - 0.5) < 1e-12
    with pytest.raises(ValueError, match="no function 'other'"):
        with_answer(cell, "other", "return 1")
