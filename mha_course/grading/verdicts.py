"""What grading produces: the limits it runs under, one verdict per test case, one result per submission.

Plain data shared by the grader (:mod:`mha_course.grading.engine.pipeline`), its outputs (:mod:`mha_course.grading.classroom.results`, :mod:`mha_course.grading.classroom.report`,
:mod:`mha_course.grading.classroom.feedback`) and the class workflow (:mod:`mha_course.grading.classroom.roster`). A result's score applies the
instructor's overrides (``adjustments``); its tests keep what the grader found.

A submission the static scan found reaching into the grader or the interpreter carries :class:`ReviewFlag` s
(the evidence) until the instructor resolves them (``review``, from an override row). The run's policy
(``on_tamper``) says what an open flag does to the score: ``review`` (default) keeps what the tests gave,
``zero`` scores 0 until the flag is resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """A case's verdict. The values are written as they are into the class CSV, results.json's tags and
    the feedback files that instructors and Gradescope read: they never change."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not attempted"  # the target still raises NotImplementedError
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    MEMORY = "memory"
    FORBIDDEN = "forbidden"  # a forbidden name used in the exercise's target (the scan or the tripwire saw it)
    NOT_RUN = "not run"  # not run at all: earlier crashes, the submission's time, a notebook that did not run


#: What an open review flag does to a score (``--on-tamper``): ``review`` keeps the tests' score, ``zero`` gives 0.
ON_TAMPER = ("review", "zero")
#: Flags kept per submission (each with its evidence); the rest are counted (``flag_count``).
MAX_FLAGS = 20


@dataclass(frozen=True)
class ReviewFlag:
    """One static-scan finding a person should look at: what, where, the line as written, and its label."""

    finding: str  # the scan's name for it: "os.write", "globals()[...] (written)", "the string '/proc/'"
    cell: int  # 1-based, as Jupyter counts
    line: int
    source: str  # the line as written (learner text: cleaned with the result)
    likely_tampering: bool  # only an attack makes this finding (scan_rules.likely_tampering)

    @property
    def label(self) -> str:
        return "likely tampering" if self.likely_tampering else "review"

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"

    def evidence(self) -> str:
        """``os.write (cell 3, line 2: os.write(5, b'x'))``."""
        return f"{self.finding} ({self.where()}" + (f": {self.source})" if self.source else ")")

    def as_dict(self) -> dict:
        return {
            "finding": self.finding,
            "cell": self.cell,
            "line": self.line,
            "source": self.source,
            "label": self.label,
        }


#: The verdicts of a process that did not return: the next case gets a fresh one.
STOPPED = frozenset({Status.TIMEOUT, Status.CRASHED, Status.MEMORY})


@dataclass(frozen=True)
class Limits:
    """Time and memory limits for one submission."""

    case_timeout: float = 10.0  # seconds per case (a case's own timeout_s wins)
    cell_timeout: float = 60.0  # seconds per notebook cell
    notebook_timeout: float = 180.0  # seconds for all cells together
    memory_mb: int = 2048  # extra memory the submission may allocate
    submission_timeout: float = 600.0  # seconds for everything of one submission (all its sandboxes)
    batch_timeout: float | None = None  # seconds for a whole grade_many run; later submissions are not graded
    max_crashes: int = 2  # crashes/timeouts in one exercise before its other cases are skipped
    # each case loads only the notebook's definitions (an exam setting) instead of the state its cells left
    strict_definitions: bool = False


#: What each case starts from, by ``Limits.strict_definitions``: named in every output beside the tier.
CASES_SEE = {
    False: "the notebook's state after its cells ran in order (as in Jupyter)",
    True: "the notebook's definitions only (strict mode: imports, functions, classes and plain values)",
}


@dataclass(frozen=True)
class TestResult:
    """One case's verdict, as reported to the learner."""

    exercise: str
    exercise_title: str
    case: str
    points: float
    score: float
    status: Status
    output: str
    hidden: bool

    @property
    def name(self) -> str:
        return f"{self.exercise}: {self.case}"


@dataclass
class SubmissionResult:
    """Everything the grader found for one notebook."""

    path: str
    assignment: str | None = None
    seed: int | None = None  # the assignment's and class's seed (``--seed``; grading-seed.json keeps it)
    input_seed: int | None = None  # this student's salt of the fresh inputs, drawn from seed and identity
    title: str = ""
    version: int | None = None
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    execution_time: float = 0.0
    max_points: float = 0.0
    isolation: dict = field(default_factory=dict)  # what walls the submission ran behind (Walls.as_dict)
    # Who and where (a class run; see collect.py): the path relative to the folder graded, the student.
    key: str = ""
    student: str = ""
    student_id: str = ""
    student_name: str = ""
    copied: list[str] = field(default_factory=list)  # graded functions equal to the library's reference
    # The instructor's overrides: exercise key (or "*", the whole submission) -> points, None = waived.
    adjustments: dict[str, float | None] = field(default_factory=dict)
    adjustment_log: list[str] = field(default_factory=list)  # each override and penalty, in the order applied
    late_days: int = 0  # days late (0: on time), from the platform's marker or the due date
    late_penalty: float = 0.0  # points taken for lateness, after the overrides
    late_note: str = ""  # the days late and the penalty in words, shown wherever the score is (policy.LatePolicy)
    lms_max: float | None = None  # the platform's maximum: lms_score rescales the final score to it
    # The static scan's findings for review (at most MAX_FLAGS kept; flag_count counts them all), the run's
    # policy for them, and the instructor's resolution ("" while open; set by an override row "review").
    flags: list[ReviewFlag] = field(default_factory=list)
    flag_count: int = 0
    on_tamper: str = "review"
    review: str = ""

    @property
    def flag_label(self) -> str:
        """ "likely tampering" when any flag is, else "review"; "" without flags."""
        if not self.flags:
            return ""
        return "likely tampering" if any(f.likely_tampering for f in self.flags) else "review"

    @property
    def review_state(self) -> str:
        """ "" (no flag), "to review (LABEL)" or "reviewed: DECISION"."""
        if not self.flags:
            return ""
        return f"reviewed: {self.review}" if self.review else f"to review ({self.flag_label})"

    @property
    def withheld(self) -> bool:
        """Whether the score is 0 because of an open flag (policy ``zero``)."""
        return bool(self.flags) and not self.review and self.on_tamper == "zero"

    def raw_exercise_scores(self) -> dict[str, tuple[float, float]]:
        """Exercise key -> (score, max) as graded, before overrides."""
        scores: dict[str, tuple[float, float]] = {}
        for t in self.tests:
            got, most = scores.get(t.exercise, (0.0, 0.0))
            scores[t.exercise] = (got + t.score, most + t.points)
        return scores

    def exercise_scores(self) -> dict[str, float]:
        """Exercise key -> points, overrides applied (a waived exercise is left out)."""
        scores = {}
        for key, (got, _) in self.raw_exercise_scores().items():
            if key in self.adjustments:
                override = self.adjustments[key]
                if override is None:
                    continue
                got = override
            scores[key] = got
        return scores

    @property
    def raw_score(self) -> float:
        """The points the tests gave, before any override or penalty."""
        return sum(t.score for t in self.tests)

    @property
    def adjusted_score(self) -> float:
        """The score after the instructor's overrides, before the late penalty (0 while :attr:`withheld`)."""
        if self.withheld:
            return 0.0
        if "*" in self.adjustments:
            return self.adjustments["*"] or 0.0
        return sum(self.exercise_scores().values())

    @property
    def score(self) -> float:
        """The final score: overrides applied, then the late penalty (never below 0)."""
        return max(0.0, self.adjusted_score - self.late_penalty)

    @property
    def lms_score(self) -> float | None:
        """The final score on the platform's scale (``lms_max``); None when the submission is excused."""
        if self.max_score <= 0:
            return None
        if self.lms_max is None:
            return self.score
        return self.score / self.max_score * self.lms_max

    @property
    def max_score(self) -> float:
        if "*" in self.adjustments and self.adjustments["*"] is None:
            return 0.0
        waived = sum(
            most
            for key, (_, most) in self.raw_exercise_scores().items()
            if key in self.adjustments and self.adjustments[key] is None
        )
        return max(self.max_points, sum(t.points for t in self.tests)) - waived
