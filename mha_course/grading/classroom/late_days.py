"""Lateness per student: extensions (a due date of their own) and late-day tokens (a budget across assignments).

**Extensions** (``--extensions FILE``): a CSV ``student,due[,assignment]``; ``student`` is anything the
roster or the folder names them by (id, username, email, name, folder), ``due`` an ISO date and
time, ``assignment`` empty for every assignment. A roster column ``Due`` (or ``Due date``,
``Extension``) does the same. A student's own due date replaces ``--due``.

**Late-day tokens** (``--late-tokens N``): each student may hand in N days late in all over the term
without penalty; the days of each late submission are spent automatically (as many as are left),
and only the days beyond them are penalised. The tokens spent are kept in a plain CSV the
instructor keeps from one assignment to the next (``--tokens-file``, default ``late-tokens.csv``
beside the gradebook): ``student,assignment,days``. A regrade of an assignment replaces that
assignment's rows, so it never spends twice; deleting a row gives the tokens back.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from pathlib import Path

from .policy import LatePolicy, parse_due
from .submitted_at import FILE_TIME_WARNING

TOKENS_FILE = "late-tokens.csv"
_DUE_COLUMNS = ("due", "due date", "extension", "extended due")


def _norm(column: str) -> str:
    return re.sub(r"\s+", " ", (column or "").strip().lower().replace("\ufeff", ""))


def read_extensions(path: str | Path) -> list[tuple[str, str, datetime]]:
    """(student, assignment or "", due) rows of an extensions CSV; raises ValueError naming a bad row."""
    reader = csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig")))
    if not {"student", "due"} <= {_norm(c) for c in reader.fieldnames or []}:
        raise ValueError(f"{path}: extensions need the columns student and due; found {reader.fieldnames}")
    out = []
    for number, row in enumerate(reader, start=2):
        row = {_norm(k): (v or "").strip() for k, v in row.items() if k}
        if not row["student"]:
            raise ValueError(f"{path}, line {number}: no student")
        out.append((row["student"], row.get("assignment", ""), parse_due(row["due"], f"{path}, line {number}: due")))
    return out


def roster_due(student) -> datetime | None:
    """The due date in a roster row's ``Due`` / ``Extension`` column, or None (empty or no such column)."""
    if student is None:
        return None
    for column, value in student.row.items():
        if _norm(column) in _DUE_COLUMNS and (value or "").strip():
            return parse_due(value, f"the roster's {column!r} of {student.student_id}")
    return None


def read_tokens(path: Path) -> list[dict[str, str]]:
    """The ledger of tokens spent: ``student,assignment,days`` rows (none when the file does not exist yet)."""
    if not path.exists():
        return []
    reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig")))
    if not {"student", "assignment", "days"} <= {_norm(c) for c in reader.fieldnames or []}:
        raise ValueError(f"{path}: the late-day tokens file needs student,assignment,days; found {reader.fieldnames}")
    return [{_norm(k): (v or "").strip() for k, v in row.items() if k} for row in reader]


def _spent(ledger: list[dict[str, str]], student: str, other_than: str) -> int:
    total = 0
    for row in ledger:
        if row["student"] == student and row["assignment"] != other_than:
            try:
                total += int(row["days"])
            except ValueError:
                raise ValueError(f"late-day tokens: days must be a whole number; got {row['days']!r}") from None
    return total


def apply_late(args, results, rows, roster, write) -> list[str]:
    """The late penalty of every result, with extensions and tokens; returns the warnings to print.

    ``args`` carries ``late_penalty``, ``due``, ``late_penalty_of``, ``extensions``, ``late_tokens`` and
    ``tokens_file`` (a Path, or None when no tokens are used); ``write(path, text)`` writes the ledger.
    """
    late = LatePolicy.parse(args.late_penalty, args.due, args.late_penalty_of)
    by_id = {s.student_id: s for s in roster.students} if roster is not None else {}
    extensions = read_extensions(args.extensions) if args.extensions else []
    ledger = read_tokens(args.tokens_file) if args.late_tokens else []
    subs = {row.key: row for row in rows}
    warnings, spent_now = [], []
    for r in results:
        sub = subs.get(r.key)
        if sub is None:
            continue
        student = by_id.get(r.student_id)
        names = {r.student_id, r.student, r.key, r.student_name} | (student.identities() if student else set())
        due = roster_due(student)
        for who, assignment, when in extensions:
            if who in names - {""} and assignment in ("", r.assignment):
                due = when
        when = sub.submitted_at
        if when is None and sub.file_time is not None and (due or late.due) is not None and not r.error:
            when = sub.file_time
            r.notes.append(f"submission {FILE_TIME_WARNING}")
            warnings.append(f"{r.key}: {FILE_TIME_WARNING}")
        elif sub.time_source:
            r.notes.append(f"submitted {_iso(when)} ({sub.time_source})")
        if due is not None:
            r.notes.append(f"due date of this student: {due.isoformat()} (an extension)")
        who = r.student_id or r.student
        left = max(0, args.late_tokens - _spent(ledger, who, r.assignment or "")) if args.late_tokens else 0
        used = late.apply(r, when, sub.late_marked, due, left)
        if args.late_tokens:
            spent_now.append((who, r.assignment or "", used))
            if r.late_note:
                r.late_note += f"; late-day tokens left: {left - used} of {args.late_tokens}"
    if args.late_tokens:
        _record(args.tokens_file, ledger, spent_now, write)
    return warnings


def _iso(when: float | None) -> str:
    return datetime.fromtimestamp(when or 0, UTC).isoformat(timespec="seconds")


def _record(path: Path, ledger: list[dict[str, str]], spent: list[tuple[str, str, int]], write) -> None:
    """The ledger with this run's assignments' rows replaced by what they spent (rows of 0 days left out)."""
    regraded = {(who, assignment) for who, assignment, _ in spent}
    keep = [row for row in ledger if (row["student"], row["assignment"]) not in regraded]
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["student", "assignment", "days"])
    for row in keep:
        out.writerow([row["student"], row["assignment"], row["days"]])
    for who, assignment, days in spent:
        if days:
            out.writerow([who, assignment, days])
    write(path, buf.getvalue())


def summary_lines(results, anonymise: bool = False) -> list[str]:
    """Lines for the top of the report and the terminal: students with several notebooks, times from files."""
    lines = []
    several = [r for r in results if any(n.startswith("also submitted ") for n in r.notes)]
    if several:
        who = "" if anonymise else ": " + "; ".join(_several(r) for r in several)
        lines.append(f"{len(several)} student(s) submitted several notebooks (the newest is graded){who}")
    by_file = [r for r in results if any(FILE_TIME_WARNING in n for n in r.notes)]
    if by_file:
        who = "" if anonymise else ": " + ", ".join(r.student_name or r.student or r.key for r in by_file)
        lines.append(f"warning: {len(by_file)} submission(s) {FILE_TIME_WARNING}{who}")
    return lines


def _several(r) -> str:
    others = [n.split(" ", 2)[2].split(" for ", 1)[0] for n in r.notes if n.startswith("also submitted ")]
    return f"{r.student_name or r.student} graded {r.key}, not {', '.join(others)}"


def check(args, beside: Path | None) -> None:
    """Usage errors of the late options, before grading; sets ``args.tokens_file`` to where the ledger is kept."""
    if args.late_penalty:
        LatePolicy.parse(args.late_penalty, args.due, args.late_penalty_of)
        if args.extensions:
            read_extensions(args.extensions)
    elif args.due or args.extensions or args.late_tokens:
        raise ValueError(
            "--due, --extensions and --late-tokens go with --late-penalty; give the penalty too (e.g. 10%/day)"
        )
    if args.late_tokens < 0:
        raise ValueError(f"--late-tokens must be 0 or more; got {args.late_tokens}")
    if args.late_tokens and args.tokens_file is None:
        args.tokens_file = (beside.parent if beside is not None else Path()) / TOKENS_FILE
    if args.late_tokens:
        read_tokens(args.tokens_file)


def zone(args):
    """The zone a platform's time without one is read in: the due date's (UTC unless --due names one)."""
    if not getattr(args, "due", None):
        return UTC
    return parse_due(args.due, "--due").tzinfo or UTC


def describe(args) -> str:
    """The late policy of a run in words: the rule, the due date, extensions and tokens."""
    words = LatePolicy.parse(args.late_penalty, args.due, args.late_penalty_of).rule()
    words += f", due {args.due}" if args.due else ", from the platform's late marker"
    words += f", extensions from {args.extensions}" if args.extensions else ""
    if args.late_tokens:
        words += f", {args.late_tokens} late-day token(s) per student (spent ones kept in {args.tokens_file})"
    return words
