"""What an exercise is: the contract between the assignment content and the grading engine.

An assignment (one solution notebook) holds exercises; an exercise names a *target* the learner
defines in the notebook (a function or a class) and a list of test cases. A case runs in two
processes:

    grader process (trusted)                     submission process (untrusted)
    ------------------------                     ------------------------------
    inputs = case.make_inputs()          ---->   got = case.call(target, inputs)
    expected = case.reference(inputs)    <----   got as plain NumPy arrays (no pickle)
    hint = case.diagnose(got, expected, inputs)  # None means passed

``make_inputs`` returns only plain data: a dict of NumPy arrays and Python scalars/str/None.
``call`` converts inputs to what the target expects (tensors, modules with given weights) and
returns an array, a scalar, or a tuple/list of arrays. ``call`` is a module-level function of a
module in :mod:`mha_course.grading.calls` (one per exercise module, same name): the submission
process imports only that module (and :mod:`mha_course.grading.inside.convert`), never the exercise
module, ``hints`` or this one, so its sandbox holds no reference implementation. ``reference``
and ``diagnose`` run only in the grader; exercise modules still import ``mha_course``'s reference
implementations inside those functions, not at module top.

``call`` runs with the exercise's ``forbidden`` tripwire armed, so it must not itself use a
forbidden callable (convert with NumPy / ``convert.to_numpy``).

Each module in ``mha_course.grading.exercises`` defines ``ASSIGNMENT`` (an :class:`Assignment`);
the registry discovers them, so adding an assignment touches no shared file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One graded test of one target."""

    name: str  # shown in the results table, e.g. "rows sum to 1"
    points: float
    make_inputs: Callable[[], Inputs]  # deterministic (seeded); plain data only
    # Runs in the submission process: a function of a mha_course.grading.calls module, the only
    # course module (with mha_course.grading.inside.convert) that process imports; never an exercise module's.
    call: Callable[[Any, Inputs], Any]
    reference: Callable[[Inputs], Any]  # runs in the grader: the expected output
    diagnose: Callable[[Any, Any, Inputs], str | None]  # grader: None = passed, else a hint for the learner
    hidden: bool = False  # hidden cases run only in the grader, never in check()
    # Self-check only (learner's own kernel): draw the learner's output beside the expected one,
    # e.g. two attention heatmaps; returns a matplotlib Figure or None.
    visualize: Callable[[Any, Any, Inputs], Any] | None = None
    # Engine safety net (optional): when diagnose passes, the engine still requires the output to
    # have the reference's structure and shapes and no NaN where the reference has none, so a
    # lenient diagnose cannot be fooled by an extra broadcasting axis. Set False for a case whose
    # reference is not shaped like the answer.
    exact_shape: bool = True
    # Seconds this case may run in the grader; None means the grader's default (--case-timeout).
    timeout_s: float | None = None


@dataclass(frozen=True)
class Exercise:
    """A target the learner writes, and the cases that grade it."""

    key: str  # used in check("key", obj), e.g. "softmax_np"
    target: str  # the name defined in the notebook, e.g. "softmax_np"
    title: str
    cases: tuple[Case, ...]
    # Dotted names the target must not use (e.g. "torch.nn.functional.scaled_dot_product_attention");
    # a case that runs while one of them is called scores 0 with an explanation.
    forbidden: tuple[str, ...] = ()

    @property
    def max_points(self) -> float:
        return sum(c.points for c in self.cases)


@dataclass(frozen=True)
class Assignment:
    """One solution notebook and its exercises; ``key`` and ``version`` go into notebook metadata."""

    key: str  # e.g. "a02_softmax"; recorded in the notebook's metadata
    version: int
    title: str
    notebook: str  # file name under solutions/ and exercises/
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)
    # mha_course modules the notebook may import as building blocks from earlier assignments, e.g.
    # ("mha_course.core.softmax",) for the attention assignment. In the grader's submission process every
    # other mha_course module (the reference answers) is blocked; ``check`` is always available.
    provided: tuple[str, ...] = ()

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)
