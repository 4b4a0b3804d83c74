"""The instructor's grading policy: per-student overrides, the late penalty, the platform's scale.

Applied after grading, in this order, each step recorded in the result's ``adjustment_log`` (the
CSV's ``adjustments`` column, the feedback, results.json):

1. **Overrides** (:func:`read_overrides`), exercise rows first, then whole-submission rows (``*``).
   ``points`` says what to do: ``20`` or ``set 20`` sets the points, ``cap 20`` keeps at most 20,
   ``+2`` / ``-3`` adds, ``waive`` excuses (the exercise leaves the total *and* the maximum; ``*``
   excuses the whole submission). An ``action`` column (set, cap, add, waive) may say it instead.
   Exercise ``late`` with ``waive`` excuses a student's lateness. Exercise ``review`` resolves the static
   scan's review flags (a reason is required): ``accept`` keeps the score the tests gave, a number (``0``,
   ``cap 10``, ``-2``) acts on the total as a ``*`` row does; it applies only to a flagged submission
   (a resubmission the scan no longer flags gets a note, not the old decision), and before ``*`` rows.
2. **Late penalty** (:class:`LatePolicy`): a percentage of the maximum points (as Canvas and Moodle;
   ``--late-penalty-of points``: of the points after overrides), per day late (``10%/day``) or once
   (``20%``); days late come from the due date (or the student's extension) and the time the platform
   recorded (:mod:`.submitted_at`; the file's time with a warning), or from the platform's marker
   (Canvas's ``_LATE_``: one day when no due date is given); late-day tokens excuse days first
   (:mod:`.late_days`).
3. **The platform's scale**: ``lms_max`` (``--lms-max``, or the maximum the platform's grade sheet
   carries) rescales the final score for the grade export: final / maximum * lms_max.
"""

from __future__ import annotations

import csv
import io
import math
import re
import unicodedata
from collections.abc import Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ACTIONS = ("set", "cap", "add", "waive", "accept")


def _norm(column: str) -> str:
    return re.sub(r"\s+", " ", column.strip().lower().replace("\ufeff", ""))


@dataclass(frozen=True)
class Override:
    """An instructor's decision for one student and one exercise (``*``: the total; ``late``: the penalty)."""

    student: str  # a student id, username, email, name, folder name or submission key
    exercise: str
    action: str  # set | cap | add | waive | accept (review rows only)
    points: float | None  # None for waive and accept
    reason: str
    assignment: str = ""  # empty: any assignment

    def applies_to(self, result, identities: Set[str] = frozenset()) -> bool:
        """Whether this override names ``result``'s student (any identity) and assignment."""
        who = {result.student_id, result.student, result.key, result.student_name, *identities} - {""}
        return self.student in who and self.assignment in ("", result.assignment)

    def describe(self) -> str:
        what = {"*": "total", "late": "late penalty"}.get(self.exercise, self.exercise)
        how = self.action if self.points is None else f"{self.action} {self.points:+g}".replace("set +", "set ")
        how = how.replace("cap +", "cap ")
        return f"{what}: {how}" + (f" ({self.reason})" if self.reason else "")


_POINTS = re.compile(r"^(?:(?P<action>set|cap|max|add)\s*[: ]?\s*)?(?P<number>[+-]?\d+(?:\.\d+)?)$")


def parse_points(raw: str, action: str = "") -> tuple[str, float | None]:
    """(action, points) from an overrides cell: ``20``, ``set 20``, ``cap 20``, ``+2``, ``-3``, ``waive``,
    ``accept`` (a ``review`` row: the score stands).

    Raises ValueError naming what was expected and found.
    """
    text = raw.strip().lower()
    action = action.strip().lower()
    if text in ("waive", "waived", "excused") or (action == "waive" and not text):
        return "waive", None
    if text in ("accept", "accepted") or (action == "accept" and not text):
        return "accept", None
    if not text and not action:
        return "waive", None  # the guide's earlier format: an empty cell waived
    match = _POINTS.match(text)
    if not match:
        raise ValueError(f"points must be a number, 'cap N', 'set N', '+N', '-N', 'waive' or 'accept'; got {raw!r}")
    number = float(match["number"])
    written = {"max": "cap"}.get(match["action"] or "", match["action"] or "")
    if not written:
        written = "add" if match["number"][0] in "+-" else "set"
    if action and action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}; got {action!r}")
    return (action or written), number


def read_overrides(path: str | Path) -> list[Override]:
    """Read ``student,exercise,points,reason[,assignment][,action]`` rows; raises ValueError naming a bad row."""
    reader = csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig")))
    if not {"student", "exercise", "points"} <= {_norm(c) for c in reader.fieldnames or []}:
        raise ValueError(
            f"{path}: overrides need the columns student, exercise, points (and reason); found {reader.fieldnames}"
        )
    out = []
    for number, row in enumerate(reader, start=2):
        row = {_norm(k): (v or "").strip() for k, v in row.items() if k}
        try:
            action, points = parse_points(row["points"], row.get("action", ""))
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None
        exercise = row["exercise"] or "*"
        if exercise == "late" and action != "waive":
            raise ValueError(f"{path}, line {number}: exercise 'late' takes 'waive' only; got {row['points']!r}")
        if action == "accept" and exercise != "review":
            raise ValueError(f"{path}, line {number}: 'accept' is for exercise 'review' only; got {exercise!r}")
        if exercise == "review" and action == "waive":
            raise ValueError(
                f"{path}, line {number}: exercise 'review' takes 'accept' or points (0, cap N, -N); got 'waive' "
                "(to excuse the whole submission use exercise '*')"
            )
        if exercise == "review" and not row.get("reason", ""):
            raise ValueError(f"{path}, line {number}: a 'review' row needs a reason (what you found, what you decided)")
        out.append(
            Override(
                unicodedata.normalize("NFC", row["student"]),
                exercise,
                action,
                points,
                row.get("reason", ""),
                row.get("assignment", ""),
            )
        )
    return out


def _apply_one(current: float, o: Override) -> float | None:
    if o.action == "accept":
        return current
    if o.action == "waive" or o.points is None:  # only a waiver has no points (read_overrides checks)
        return None
    if o.action == "cap":
        return min(current, o.points)
    if o.action == "add":
        return current + o.points
    return o.points


def apply_overrides(results, overrides: list[Override], identities=None) -> None:
    """Apply every matching override to its result: ``adjustments`` (the points they leave) and the log.

    ``identities`` maps a result to further names of its student (the roster's username, email, ...).
    A ``review`` row resolves the result's review flags (``review`` records the decision): ``accept``
    leaves the score as it is; points act on the total as a ``*`` row.
    """
    order = {"review": 1, "*": 2, "late": 3}  # exercises first, then the review decision, then the total
    for r in results:
        names = identities(r) if identities else set()
        mine = [o for o in overrides if o.applies_to(r, names)]
        raw = {key: got for key, (got, _) in r.raw_exercise_scores().items()}
        for o in sorted(mine, key=lambda o: order.get(o.exercise, 0)):
            if o.exercise == "late":
                r.adjustments["late"] = None
                r.adjustment_log.append(o.describe())
                continue
            if o.exercise == "review":
                _resolve_review(r, o)
                continue
            if o.exercise == "*":
                current = r.adjusted_score
            else:
                if o.exercise not in raw:
                    r.notes.append(
                        f"instructor override for {o.exercise}: no such exercise in {r.assignment}; not applied"
                    )
                    continue
                current = r.adjustments.get(o.exercise, raw[o.exercise])
                current = 0.0 if current is None else current
            r.adjustments[o.exercise] = _apply_one(current, o)
            r.adjustment_log.append(o.describe())
            value = "waived" if r.adjustments[o.exercise] is None else f"{r.adjustments[o.exercise]:g} points"
            what = "the whole submission" if o.exercise == "*" else f"exercise {o.exercise}"
            r.notes.append(
                f"instructor override: {what} {o.action} -> {value}" + (f" ({o.reason})" if o.reason else "")
            )


def _resolve_review(r, o: Override) -> None:
    """Resolve ``r``'s review flags with ``o`` (accept, or points on the total); a note when none is open."""
    if not r.flags:
        r.notes.append(f"instructor review ({o.reason}): this submission has no review flag; not applied")
        return
    r.review = f"{o.action}" + ("" if o.points is None else f" {o.points:g}") + f" ({o.reason})"
    if o.action != "accept":
        r.adjustments["*"] = _apply_one(r.adjusted_score, o)
    r.adjustment_log.append(o.describe())
    r.notes.append(f"instructor review: {o.action} -> {r.adjusted_score:g} points ({o.reason})")


PENALTY_OF = ("max", "points")


@dataclass(frozen=True)
class LatePolicy:
    """A percentage taken per day late (``per_day``) or once (not ``per_day``), of the maximum (``of="max"``,
    as Canvas's and Moodle's late policies take a % of the points possible) or of the points scored
    (``of="points"``, after overrides). The final score never goes below 0."""

    percent: float
    per_day: bool
    due: datetime | None = None  # the deadline; None: only the platform's late marker counts
    of: str = "max"

    @classmethod
    def parse(cls, spec: str, due: str | None = None, of: str = "max") -> LatePolicy:
        """``10%/day`` or ``20%`` (flat), with an optional ISO due date (UTC unless it names a zone)."""
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*(/\s*day)?\s*", spec or "")
        if not match or not 0 <= float(match[1]) <= 100:
            raise ValueError(f"--late-penalty must be 'P%/day' or 'P%' with 0 <= P <= 100; got {spec!r}")
        if of not in PENALTY_OF:
            raise ValueError(f"--late-penalty-of must be one of {', '.join(PENALTY_OF)}; got {of!r}")
        return cls(float(match[1]), bool(match[2]), parse_due(due, "--due") if due else None, of)

    def rule(self) -> str:
        """The policy in words, as every output prints it: ``10%/day of the maximum``."""
        base = "of the maximum points" if self.of == "max" else "of the points scored"
        return f"{self.percent:g}%{'/day' if self.per_day else ''} {base}"

    def days_late(self, file_time: float | None, marked_late: bool, due: datetime | None = None) -> int:
        """Whole days (started) after the due date (``due``: a student's extension); a platform's late marker
        counts at least one day."""
        days = 0
        due = due or self.due
        if due is not None and file_time is not None:
            seconds = file_time - due.timestamp()
            days = math.ceil(seconds / 86400) if seconds > 0 else 0
        return max(days, 1 if marked_late else 0)

    def apply(
        self,
        result,
        file_time: float | None,
        marked_late: bool,
        due: datetime | None = None,
        tokens_left: int = 0,
    ) -> int:
        """Record the days late and the penalty on ``result`` (none when an override waived lateness);
        up to ``tokens_left`` late-day tokens excuse whole days first. Returns the tokens spent."""
        days = self.days_late(file_time, marked_late, due)
        if days == 0 or result.error:
            return 0
        result.late_days = days
        if "late" in result.adjustments:
            result.adjustment_log.append(f"late {days} day(s): penalty waived")
            result.late_note = f"handed in {days} day(s) late; the penalty is waived"
            return 0
        spent = max(0, min(days, tokens_left))
        charged = days - spent
        share = min(100.0, self.percent * (charged if self.per_day else (1 if charged else 0))) / 100
        base = result.max_score if self.of == "max" else result.adjusted_score
        result.late_penalty = round(min(base * share, result.adjusted_score), 6)
        tokens = f", {spent} late-day token(s) used" if spent else ""
        result.adjustment_log.append(f"late {days} day(s){tokens}, {self.rule()}: -{result.late_penalty:g}")
        result.late_note = (
            f"handed in {days} day(s) late{tokens}: late penalty -{result.late_penalty:g} points ({self.rule()})"
        )
        return spent


def parse_due(text: str, what: str) -> datetime:
    """An ISO date and time (UTC unless it names a zone); raises ValueError naming ``what`` and the text."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be an ISO date and time (2026-11-20T23:59); got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
