"""Text a submission controls, made safe for every output of a class run.

A submission controls more text than its code: its file and folder names (a zip tool may write
bytes that are not UTF-8, kept by Python as lone surrogates), the messages of the exceptions it
raises, its notebook metadata. That text reaches a terminal, CSV files a spreadsheet opens, Markdown
a browser renders and UTF-8 files. Each output has one function here:

* :func:`clean` -- every learner-controlled field of a result, once, right after grading: lone
  surrogates become escapes (``\\xe9`` for a byte of a non-UTF-8 name, ``\\ud800`` otherwise), so
  the text encodes as UTF-8; control characters (newline, carriage return, ESC, C1, bidi overrides)
  become escapes, so one field is one line and a terminal runs none of it.
* :func:`csv_cell` -- a cell starting with ``= + - @``, a tab or a carriage return gets a leading
  ``'`` (OWASP's rule against formula injection); plain numbers are kept.
* :func:`markdown` / :func:`code_span` -- learner text inside Markdown: HTML as entities and
  backslashes, backticks and brackets escaped, or a code span whose fence is longer than any run of
  backticks inside (a code span shows HTML as text).
"""

from __future__ import annotations

import re

#: C0 and C1 controls, DEL, the line and paragraph separators and the bidi overrides
#: (they reorder what a terminal or an editor shows).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MARKDOWN = re.compile(r"([\\`\[\]])")  # code spans, links and images; HTML goes as entities


def _surrogate(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's escape of one byte that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def _control(match: re.Match) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def clean(text: object) -> str:
    """``text`` as one printable line of valid Unicode (see the module docstring).

    >>> clean("Ren\\udce9\\x1b]52;c;aGk=\\x07 [PASS]\\r\\n")
    'Ren\\\\xe9\\\\x1b]52;c;aGk=\\\\x07 [PASS]\\\\r\\\\n'
    """
    text = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(_control, _SURROGATE.sub(_surrogate, text))


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with an ellipsis when cut.

    >>> shorten("the weights do not sum to one", 20)
    'the weights do not…'
    """
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    cut = cut[:space] if space > limit // 2 else cut
    return cut.rstrip(" ,;:.") + "…"


def csv_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: clean, and ``'`` before a leading ``= + - @``, tab or CR.

    A lone ``-`` (Moodle's "no grade") is no formula and stays as it is.
    """
    text = value if isinstance(value, str) else str(value)
    if text.startswith(_FORMULA) and not _NUMBER.fullmatch(text) and text != "-":
        text = "'" + text
    return _SURROGATE.sub(_surrogate, text)


def markdown(text: object) -> str:
    """Learner text for Markdown: clean, ``& < >`` as entities, ``\\ ` [ ]`` escaped (no HTML, link, image or code span)."""
    text = clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", text)


def code_span(text: object) -> str:
    """Learner text as a Markdown code span (shown literally, HTML included): the fence outgrows any backtick run."""
    text = clean(text)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def clean_result(result) -> None:
    """Clean every learner-controlled text of a :class:`~mha_course.grading.verdicts.SubmissionResult` in place.

    ``path`` is kept as it is (the grader and the feedback writer open it); show it through
    :func:`clean`. Called once per result, as grading ends (:mod:`mha_course.grading.engine.pipeline`).
    """
    import dataclasses

    for name in ("error", "key", "student", "student_id", "student_name", "title", "assignment"):
        value = getattr(result, name)
        if value is not None:
            setattr(result, name, clean(value))
    result.notes = [clean(n) for n in result.notes]
    result.copied = [clean(c) for c in result.copied]
    result.flags = [dataclasses.replace(f, finding=clean(f.finding), source=clean(f.source)) for f in result.flags]
    result.tests = [
        dataclasses.replace(t, output=clean(t.output), case=clean(t.case), exercise_title=clean(t.exercise_title))
        for t in result.tests
    ]
