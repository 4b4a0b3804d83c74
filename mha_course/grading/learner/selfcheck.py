"""The self-check a learner runs inside the notebook: ``check("softmax", softmax)``.

It runs the exercise's *public* cases in the learner's own kernel and shows a table -- case,
points, passed/failed, and a hint in the learner's terms -- plus, for a failed case that has a
``visualize``, a picture of the learner's output beside the expected one (two heatmaps). A case
never shows a traceback: an exception becomes a failed row whose hint is the exception's last
line, the cell and line of the learner's code it came from (``cell In[4], line 3``, as the grader's
``cell 4, line 3``) and the fix when one is known; ``NotImplementedError`` (the unedited stub)
reads "not attempted yet", with the stub's line.

Each output makes the same trip it makes in the grader (:func:`~mha_course.grading.inside.wire.roundtrip`: plain arrays only,
subclasses rejected) and is judged by the same code (:func:`~mha_course.grading.engine.scoring.judge`), so check() and the
grader agree. Hidden cases run only in the grader (``include_hidden=True`` is for the solution
notebooks' own hidden-test cells).

Inside the grader's submission process ``check`` does nothing and returns None: the grader sets
``GRADING = True`` there, so a submission cannot use the self-check to reach reference code.

The table's last line says what the self-check cannot: how many more points the hidden cases carry
when graded ("4 more points by hidden tests when graded: 14 in all"). Each check of the public cases is
recorded in the learner's progress file (:mod:`mha_course.tracking`), which ``mha_course.progress()`` lists.
"""

from __future__ import annotations

import contextlib
import html
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..verdicts import Status

GRADING = False  # set by the grader's submission process: check() is then a no-op


@dataclass(frozen=True)
class Row:
    """One case's verdict."""

    case: str
    points: float
    score: float
    status: Status  # PASSED, FAILED or NOT_ATTEMPTED
    hint: str
    hidden: bool = False

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED


@dataclass
class CheckResult:
    """What check() found: rows, score and max_score; renders as HTML in Jupyter and text elsewhere."""

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    hidden_points: float = 0  # the hidden cases' points, not run here (0 when they are among the rows)
    _shown: bool = field(default=False, repr=False)

    @property
    def score(self) -> float:
        return sum(r.score for r in self.rows)

    @property
    def max_score(self) -> float:
        return sum(r.points for r in self.rows)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def hidden_line(self) -> str:
        """What the grader adds: "4 more points by hidden tests when graded: 14 in all" ("" when nothing)."""
        if not self.hidden_points:
            return ""
        total = self.max_score + self.hidden_points
        return f"{_fmt(self.hidden_points)} more points by hidden tests when graded: {_fmt(total)} in all"

    def __str__(self) -> str:
        lines = [f"{self.title} ({self.key}): {_fmt(self.score)} / {_fmt(self.max_score)} points"]
        for r in self.rows:
            mark = {Status.PASSED: "PASS", Status.FAILED: "FAIL"}.get(r.status, "TODO")
            lines.append(
                f"  [{mark}] {_fmt(r.score)}/{_fmt(r.points)}  {r.case}" + (f"\n         -> {r.hint}" if r.hint else "")
            )
        if self.hidden_line:
            lines.append(f"  ({self.hidden_line})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CheckResult({self.key!r}, score={_fmt(self.score)}, max_score={_fmt(self.max_score)})"

    def _repr_html_(self) -> str:
        colour = {Status.PASSED: "#1a7f37", Status.FAILED: "#cf222e"}
        cells = []
        for r in self.rows:
            c = colour.get(r.status, "#9a6700")
            cells.append(
                f"<tr><td style='text-align:left'>{html.escape(r.case)}{' (hidden)' if r.hidden else ''}</td>"
                f"<td>{_fmt(r.score)} / {_fmt(r.points)}</td>"
                f"<td style='color:{c};font-weight:bold'>{html.escape(r.status)}</td>"
                f"<td style='text-align:left'>{html.escape(r.hint)}</td></tr>"
            )
        return (
            f"<p><b>{html.escape(self.title)}</b> (<code>{html.escape(self.key)}</code>): "
            f"{_fmt(self.score)} / {_fmt(self.max_score)} points</p>"
            "<table><tr><th style='text-align:left'>case</th><th>points</th><th>result</th>"
            "<th style='text-align:left'>hint</th></tr>"
            + "".join(cells)
            + "</table>"
            + (f"<p>{html.escape(self.hidden_line)}</p>" if self.hidden_line else "")
        )

    def _ipython_display_(self) -> None:
        if not self._shown:  # check() already displayed it: do not show the table twice
            from IPython.display import HTML, display

            display(HTML(self._repr_html_()))
            self._shown = True


def _fmt(x: float) -> str:
    return f"{x:g}"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    try:
        ip = shell.get_ipython() if shell else None
    except Exception:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


@contextlib.contextmanager
def grader_settings() -> Iterator[None]:
    """Within the block, torch's global settings are the grader's own: float32 default dtype, autograd on.

    The self-check makes a case's inputs and judges the answer under them, as the grader does in a process
    of its own, while the learner's function runs under the notebook's settings (as in the grader's case
    process): ``torch.set_default_dtype(torch.float64)`` or ``torch.set_grad_enabled(False)`` at the top of
    a notebook then gives the same verdict in both.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


def run_case(case: Any, obj: Any, forbidden: tuple[str, ...] = (), inputs: dict | None = None) -> tuple[Row, Any, dict]:
    """Run one case in this process: (row, got or None, inputs); ``inputs`` None: the case draws them."""
    from ..engine import fresh_draws
    from ..engine.scoring import judge
    from ..inside import wire
    from ..inside.guard import Tripwire, guarded

    if inputs is None:
        with grader_settings():
            inputs = fresh_draws.inputs(case)  # inside salted(s): the grader's fresh inputs for salt s
    tripwire = Tripwire()
    try:
        with guarded(obj) as target, tripwire.armed(forbidden):
            got = wire.roundtrip(case.call(target, inputs))
        if tripwire.tripped:
            return Row(case.name, case.points, 0, Status.FAILED, tripwire.explanation(), case.hidden), None, inputs
    except NotImplementedError as exc:
        return Row(case.name, case.points, 0, Status.NOT_ATTEMPTED, not_attempted(exc), case.hidden), None, inputs
    except Exception as exc:
        if tripwire.tripped:
            return Row(case.name, case.points, 0, Status.FAILED, tripwire.explanation(), case.hidden), None, inputs
        return Row(case.name, case.points, 0, Status.FAILED, error_hint(exc, inputs), case.hidden), None, inputs
    with grader_settings():
        hint = judge(case, got, inputs)
    if hint is None:
        return Row(case.name, case.points, case.points, Status.PASSED, "", case.hidden), got, inputs
    return Row(case.name, case.points, 0, Status.FAILED, hint, case.hidden), got, inputs


def error_hint(exc: BaseException, inputs: Any = None) -> str:
    """``"NameError: name 'w' is not defined (cell In[4], line 3) -> define it ..."``: the error, where, the fix.

    Where: the innermost frame of the learner's own code (:func:`own_line`), as the grader's message
    names it. The fix: the advice for a common error (:mod:`.error_hints`), or for a name that is not defined.
    """
    from ..engine.error_hints import with_exception_hint
    from ..inside.convert import exception_line

    text = exception_line(exc)
    where = own_line(exc)
    if where:
        text += f" ({where})"
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        return f"{text} -> define it, or run the cell that defines it, before check()"
    return with_exception_hint(text, inputs)


def not_attempted(exc: NotImplementedError) -> str:
    """The hint of a case whose target raised NotImplementedError: the stub's line, or the library call's.

    The stub is the learner's own ``raise NotImplementedError()``: its line when the source can be read,
    else a NotImplementedError without a message. Anything else came from a library their code called.
    """
    from ..inside.convert import exception_line

    frames = _frames(exc)
    where = own_line(exc)
    last = frames[-1] if frames else None
    if last is not None and _own_place(last) is not None and last.line:
        stub = "NotImplementedError" in last.line
    else:
        stub = exception_line(exc) == "NotImplementedError"  # no message: the stub's bare raise
    if stub:
        line = f" ({where})" if where else ""
        return f"not attempted yet: replace `raise NotImplementedError()`{line} with your code"
    return f"not attempted yet? {exception_line(exc)}" + (
        f" ({where}): a library call there is not implemented for these inputs" if where else ""
    )


def own_line(exc: BaseException) -> str | None:
    """``"cell In[4], line 3"``: the innermost frame of the learner's own code in ``exc``'s traceback, or None.

    Own code is a notebook cell (Jupyter's ``In[n]``, or ``<cell n>`` as the grader compiles cells) or a file
    outside the course's package and the installed libraries.
    """
    for frame in reversed(_frames(exc)):
        place = _own_place(frame)
        if place is not None:
            return f"{place}, line {frame.lineno}"
    return None


def _frames(exc: BaseException) -> list:
    import traceback

    try:
        return list(traceback.extract_tb(exc.__traceback__))
    except Exception:  # a traceback that cannot be read names no line
        return []


def _own_place(frame: Any) -> str | None:
    """How to name ``frame``'s file to the learner ("cell In[4]", "cell 4", "train.py"), or None if not theirs."""
    import os
    import sysconfig

    name = str(frame.filename)
    if name.startswith("<"):
        inner = name.strip("<>")
        return inner if inner.startswith(("cell", "ipython-input")) else None
    cell = _jupyter_cell(name)
    if cell:
        return cell
    path = os.path.realpath(name)
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # mha_course/
    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if path.startswith(package + os.sep) or any(path.startswith(os.path.realpath(p) + os.sep) for p in libraries):
        return None
    return os.path.basename(name) if os.path.exists(name) else None


def _jupyter_cell(filename: str) -> str | None:
    """``"cell In[4]"`` when IPython compiled ``filename`` from a cell (its own traceback names it so)."""
    shell = sys.modules.get("IPython")
    try:
        ip = shell.get_ipython() if shell else None
        named = ip.compile.format_code_name(filename) if ip is not None else None
    except Exception:  # an IPython without this naming: the line is left out
        return None
    return f"cell {named[1]}" if named else None


def check(key: str, obj: Any, include_hidden: bool = False, show: bool = True) -> CheckResult | None:
    """Run the public cases of exercise ``key`` on ``obj`` (your function or class) and show the verdicts.

    Args:
        key: the exercise's key, e.g. ``"softmax"`` (the notebook tells you which).
        obj: what you wrote: a function, or a class for module exercises.
        include_hidden: also run the hidden cases (solution notebooks only).
        show: display the table (HTML in Jupyter, text elsewhere) and heatmaps of failed cases.

    Returns:
        a :class:`CheckResult` (``.score``, ``.max_score``, ``.rows``), or None inside the grader.

    Raises:
        KeyError: ``key`` names no exercise (the message lists the known keys).
    """
    if GRADING:
        return None
    from ..engine.registry import find_exercise

    exercise = find_exercise(key)
    result = CheckResult(exercise.key, exercise.title)
    if not include_hidden:
        result.hidden_points = sum(case.points for case in exercise.cases if case.hidden)
    if not callable(obj):  # check("softmax", None), or a value where the function belongs
        hint = (
            f"check got {type(obj).__name__}, not a function or class: run the cell that defines "
            f"{exercise.target}, then check({exercise.key!r}, {exercise.target})"
        )
        return _recorded(_every_case_fails(result, exercise, hint, include_hidden, show), exercise, include_hidden)
    reached = library_reach(obj, _provided(exercise))
    if reached:  # the grader's sandbox cannot import it: say so now, with the grade the grader will give
        hint = (
            f"your code uses {reached}, the course's own implementation; the grader cannot import it (only "
            "check, assert_close and the building blocks this assignment provides), so this case gets 0 points "
            "there: write it yourself"
        )
        return _recorded(_every_case_fails(result, exercise, hint, include_hidden, show), exercise, include_hidden)
    checked, figures = run_exercise(exercise, obj, include_hidden, pictures=show)
    result.rows = checked.rows
    if show:
        _show(result, figures)
    return _recorded(result, exercise, include_hidden)


def _recorded(result: CheckResult, exercise: Any, include_hidden: bool) -> CheckResult:
    """``result``, recorded in the learner's progress file (public cases only; never raising)."""
    if not include_hidden:
        try:
            from ...tracking.record import record_selfcheck

            assignment = _assignment_of(exercise)
            if assignment is not None:
                record_selfcheck(assignment.key, exercise.key, result.score, result.max_score, result.hidden_points)
        except Exception:  # progress is a convenience: the table above is the self-check
            pass
    return result


def _every_case_fails(result: CheckResult, exercise: Any, hint: str, include_hidden: bool, show: bool) -> CheckResult:
    """``result`` with one failed row per case, each with ``hint`` (shown when ``show``)."""
    for case in exercise.cases:
        if include_hidden or not case.hidden:
            result.rows.append(Row(case.name, case.points, 0, Status.FAILED, hint, case.hidden))
    if show:
        _show(result, [])
    return result


def run_exercise(exercise: Any, obj: Any, include_hidden: bool = False, pictures: bool = False) -> tuple[Any, list]:
    """(:class:`CheckResult`, figures of failed cases) for ``obj`` on ``exercise``'s cases, whatever it reaches.

    :func:`check` adds, first, the verdict the grader gives code that reaches the course's own modules; the
    course's tests call this to judge the library's own implementations with the cases themselves.
    """
    result = CheckResult(exercise.key, exercise.title)
    figures = []
    for case in exercise.cases:
        if case.hidden and not include_hidden:
            continue
        row, got, inputs = run_case(case, obj, exercise.forbidden)
        result.rows.append(row)
        if pictures and row.status == Status.FAILED and case.visualize is not None and got is not None:
            try:
                with grader_settings():
                    expected = case.reference(inputs)
                figures.append(case.visualize(got, expected, inputs))
            except Exception:  # a picture is a bonus; never let it hide the table
                pass
    return result, [f for f in figures if f is not None]


ALWAYS_IMPORTABLE = ("mha_course.grading", "mha_course.testing")  # check, assert_close: in the sandbox too


def _assignment_of(exercise: Any) -> Any:
    """The registered assignment that holds ``exercise``, or None."""
    from ..engine.registry import assignments

    for assignment in assignments():
        if any(e is exercise for e in assignment.exercises):
            return assignment
    return None


def _provided(exercise: Any) -> tuple[str, ...]:
    assignment = _assignment_of(exercise)
    return tuple(assignment.provided) if assignment is not None else ()


def library_reach(obj: Any, provided: tuple[str, ...] = ()) -> str | None:
    """The first ``mha_course`` function, class or module that ``obj`` reaches and the grader cannot import.

    Follows what a function can reach: its own module, the globals its code names (nested code too), its
    closure and defaults, a class's methods, and the learner's own helpers in turn. ``None`` if it only
    reaches the self-check helpers, the assignment's ``provided`` modules and code outside the course.
    """
    allowed = ALWAYS_IMPORTABLE + tuple(provided)
    seen: set[int] = set()
    todo = [obj]
    while todo and len(seen) < 500:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        found = _course_name(value, allowed)
        if found:
            return found
        if getattr(value, "__module__", None) not in ("__main__", None) and value is not obj:
            continue  # a library outside the course: not followed
        if isinstance(value, type):
            todo.extend(v for v in vars(value).values() if callable(v) or isinstance(v, (staticmethod, classmethod)))
            continue
        function = getattr(value, "__func__", value)
        if getattr(function, "__code__", None) is None:
            continue
        todo.extend(_named_by(function))
        todo.extend(cell.cell_contents for cell in (function.__closure__ or ()) if _filled(cell))
        todo.extend(function.__defaults__ or ())
    return None


def _course_name(value: Any, allowed: tuple[str, ...]) -> str | None:
    """``value``'s dotted name when it is a module, function or class of the course outside ``allowed``."""
    import types

    module: Any
    if isinstance(value, types.ModuleType):
        module, name = value.__name__, value.__name__
    else:
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", getattr(value, "__name__", ""))
        name = f"{module}.{qualname}"
    if not isinstance(module, str) or not (module == "mha_course" or module.startswith("mha_course.")):
        return None
    if module == "mha_course" or any(module == a or module.startswith(a + ".") for a in allowed):
        return None
    return name


def _named_by(function: Any) -> list[Any]:
    """The globals a function's code names (nested code too), and those names' attributes of modules it names."""
    import types

    names, stack = set(), [function.__code__]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    module_globals = getattr(function, "__globals__", {})
    reached = [module_globals[n] for n in names if n in module_globals]
    for module in [m for m in reached if isinstance(m, types.ModuleType)]:
        # ``mha_course.softmax(x)``: attribute names are in co_names too; the package exports lazily
        for n in names:
            if n in getattr(module, "__all__", ()) or n in vars(module):
                try:
                    reached.append(getattr(module, n))
                except Exception:  # a lazy attribute that fails to import reaches nothing
                    pass
    return reached


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _show(result: CheckResult, figures: list) -> None:
    if _in_notebook():
        from IPython.display import HTML, display

        display(HTML(result._repr_html_()))
        result._shown = True
        for fig in figures:
            display(fig)
    else:
        print(result)
    if figures:
        import matplotlib.pyplot as plt

        for fig in figures:
            plt.close(fig)
