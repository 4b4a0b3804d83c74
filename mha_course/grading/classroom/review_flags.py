"""How a submission's review flags read in each output: for the instructor, with evidence; for the learner, neutral.

A flag is a static-scan finding (:class:`~mha_course.grading.verdicts.ReviewFlag`): code that reaches
into the grader or the interpreter, which no exercise needs. It never costs points by itself: the run's
policy (``--on-tamper``) says what an open flag does, and every output states that policy, as it states
the sandbox's tier. The instructor resolves a flag with an override row (exercise ``review``; see
:mod:`.policy`). The learner's text names what was found and where, and says a person will look at it;
it never calls it cheating (honest code trips some of these rules).
"""

from __future__ import annotations

from ..verdicts import SubmissionResult

#: Flags listed in one line of text; the rest are counted.
SHOWN = 5

POLICY = {
    "review": "flagged for review, the tests' score kept",
    "zero": "flagged for review, scored 0 until reviewed",
}


def policy_line(on_tamper: str) -> str:
    """What this run does with scan findings: ``scan findings: flagged for review, ... (--on-tamper review)``."""
    return f"scan findings: {POLICY.get(on_tamper, on_tamper)} (--on-tamper {on_tamper})"


def _more(result: SubmissionResult, shown: int) -> str:
    more = max(result.flag_count, len(result.flags)) - shown
    return f" and {more} more" if more > 0 else ""


def evidence(result: SubmissionResult, limit: int = SHOWN) -> str:
    """The flags as one line for the instructor: ``os.write (cell 3, line 2: os.write(5, b'x')); ...``."""
    shown = result.flags[:limit]
    return "; ".join(f.evidence() for f in shown) + _more(result, len(shown))


def instructor_line(result: SubmissionResult) -> str:
    """``to review (likely tampering): EVIDENCE``, or ``reviewed: DECISION; EVIDENCE``; "" without flags."""
    if not result.flags:
        return ""
    return f"{result.review_state}: {evidence(result)}"


def resolve_row(result: SubmissionResult) -> str:
    """The overrides row that resolves this submission's flags (the reason left for the instructor to write)."""
    who = result.student_id or result.student or result.key or result.path
    who = f'"{who}"' if "," in who or '"' in who else who
    return f"{who},review,accept,<your reason>  (or: {who},review,0,<your reason>)"


def learner_sentences(result: SubmissionResult) -> list[str]:
    """What the learner reads about the flags: what and where, and that the instructor will review it."""
    if not result.flags:
        return []
    shown = result.flags[:3]
    listed = ", ".join(f"{f.finding} ({f.where()})" for f in shown) + _more(result, len(shown))
    if result.review:
        return [f"Your notebook uses {listed}; the instructor has reviewed it."]
    lines = [f"Your notebook uses {listed}; the instructor will review it."]
    if result.withheld:
        lines.append(
            "Until then this submission scores 0, as this assignment's rules say for such code; none of it is "
            "needed for the exercises."
        )
    return lines
