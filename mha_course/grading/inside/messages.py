"""The channel between the grader and a submission's sandbox: its messages, their kinds, the paths both sides use.

One socket joins the grader (:mod:`mha_course.grading.engine.process`, :mod:`mha_course.grading.engine.notebook_run`) to the sandbox's broker
(:mod:`.broker`), which relays to the notebook's process (:mod:`mha_course.grading.inside.runner`); each frame is a JSON
header plus an optional blob of ``.npy`` arrays (:mod:`.wire`). In order:

    grader -> broker      Config                    the cells to run and the run's settings
    broker -> grader      CellStarted, CellDone     one pair per cell it hands over, then Ready
    grader -> broker      CaseRequest + inputs blob one per case
    broker -> grader      CaseReply + output blob   the notebook's reply (its known fields only), or
                                                    a BACKGROUND reply when something else still ran

The TypedDicts say what each side writes; the reader still checks every field of a frame from
the sandbox (it is the learner's process). The string values are the protocol: a grader and a
sandbox of different versions must agree on them, so they never change.

This module runs on both sides (it is one of the view's runtime files) and imports only the
standard library.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict

#: The submission's writable folder inside the sandbox (tier A: a private tmpfs; B, C: its own folder,
#: named to the notebook's process by SCRATCH_ENV), and matplotlib's config folder inside it.
SCRATCH = "/scratch"
SCRATCH_ENV = "MHA_COURSE_SCRATCH"
MPL_CONFIG = ".matplotlib"
#: Where the view mounts what the grader adds (extra modules, the font list) inside the sandbox.
VIEW_EXTRA = "/run/grader"
#: The grader's matplotlib font list: a folder of the view (MPL_CACHE inside the sandbox), copied into
#: MPL_CONFIG so no sandbox scans the fonts again.
MPL_CACHE_DIR = "mplcache"
MPL_CACHE = f"{VIEW_EXTRA}/{MPL_CACHE_DIR}"


class Event(StrEnum):
    """The ``event`` field of a frame that is not a case reply."""

    CELL = "cell"
    CELL_DONE = "cell_done"
    READY = "ready"
    CASE = "case"
    SETTLE = "settle"  # broker -> notebook process: fork the process the cases start from, then end


class ReplyKind(StrEnum):
    """Why a case reply is not ok (its ``kind``)."""

    NOT_IMPLEMENTED = "not_implemented"  # the target raised NotImplementedError: not attempted yet
    MISSING = "missing"  # the notebook does not define the target
    ERROR = "error"  # the target raised
    BACKGROUND = "background"  # the broker's: something of the notebook still ran beside the call


class Config(TypedDict):
    """grader -> broker, first frame: what to run and under which settings."""

    cells: list[tuple[int, str]]
    skip: list[int]
    strict: bool  # each case loads the definitions only, instead of forking from the notebook's state
    memory_mb: int
    provided: list[str]
    extra_modules: list[str]
    call_modules: list[str]
    forbidden: list[str]


class CellStarted(TypedDict):
    """broker -> grader: cell ``index`` is handed to the notebook's process (its time starts);
    broker -> notebook process with ``source``."""

    event: Literal[Event.CELL]
    index: int
    source: NotRequired[str]


class CellDone(TypedDict):
    """broker -> grader: cell ``index`` ended, with the error it raised (None: it ran)."""

    event: Literal[Event.CELL_DONE]
    index: int
    error: str | None


class Ready(TypedDict):
    """broker -> grader: every cell ran; cases may come. ``threads``: the threads the cells left running
    (they do not carry over into the cases; a case that times out is told so)."""

    event: Literal[Event.READY]
    threads: NotRequired[int]


class CaseRequest(TypedDict):
    """grader -> broker: call ``target`` through ``call`` on the inputs (``structure`` of the blob)."""

    event: Literal[Event.CASE]
    call: str
    target: str
    forbidden: list[str]
    inputs: Any


class CaseReply(TypedDict, total=False):
    """broker -> grader: the answer (``ok``, ``structure`` of the blob) or why there is none (``kind``, ``error``),
    and the forbidden names and fused operators the call used."""

    ok: bool
    kind: ReplyKind
    error: str
    structure: Any
    forbidden: list[str]
    ops: list[str]


#: The fields of a case reply the broker passes on; anything else the notebook's process wrote is dropped.
REPLY_FIELDS: tuple[str, ...] = tuple(CaseReply.__annotations__)
