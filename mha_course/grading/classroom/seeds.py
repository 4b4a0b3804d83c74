"""One seed per assignment and class, kept beside the results so that a regrade draws the same inputs.

The grader runs every passing case again on fresh inputs (:func:`~mha_course.grading.engine.case_inputs.salted`). Their salt
comes from the class's seed and the student's identity (:func:`student_seed`), so classmates get
different inputs while a regrade of the same class gets the same ones: the class's seed is stored
in ``grading-seed.json`` in the output folder (never on a command line), one entry per assignment and
class identity (:func:`class_key`)::

    {"seeds": {"a04_masks @ moodle-a04": {"seed": 1234567, "first_drawn": "2026-11-26T08:40:00+00:00"}}}

The identity is ``--class-id`` when given, else the class folder's own name: never its absolute path, so
the same class downloaded again elsewhere, or copied, draws the same inputs. ``--seed N`` sets the seed
(and records it), ``--new-seed`` draws a new one (and records that).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

SEED_FILE = "grading-seed.json"


def student_seed(class_seed: int, identity: str) -> int:
    """The salt of one student's fresh inputs: a hash of the class's seed and the student's identity.

    ``identity`` is the roster id when the roster matched one, else the student's folder (or file
    prefix); Unicode is normalised (NFC) so that a name unzipped as NFD gets the same inputs.
    """
    if not isinstance(class_seed, int):
        raise TypeError(f"class_seed must be an int; got {type(class_seed).__name__}")
    text = f"{class_seed}\x00{unicodedata.normalize('NFC', identity)}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:4], "big") >> 1  # 31 bits, like grader.new_seed


def class_identity(submissions: list[str], class_id: str | None = None) -> tuple[str, str]:
    """(the class's identity, where it came from): ``class_id`` (``--class-id``), else the folders' own names.

    A folder's name, not its path: the same download unpacked elsewhere is the same class (``.`` and
    ``subdir/..`` are resolved to the name they stand for). Unicode is normalised (NFC). Raises ValueError
    for an empty or multi-line ``class_id``.
    """
    if class_id is not None:
        text = unicodedata.normalize("NFC", class_id.strip())
        if not text or "\n" in text or "\r" in text:
            raise ValueError(f"--class-id must be a one-line name such as 'ml101-fall26'; got {class_id!r}")
        return text, "--class-id"
    names = sorted({unicodedata.normalize("NFC", Path(p).resolve().name) for p in submissions})
    what = "the class folder's name" if len(names) == 1 else "the class folders' names"
    return ", ".join(names), f"{what}; --class-id to name it"


def class_key(submissions: list[str], assignment: str | None, class_id: str | None = None) -> str:
    """The key of one assignment and class in ``grading-seed.json``: ``ASSIGNMENT @ IDENTITY`` (``*``: all assignments)."""
    return f"{assignment or '*'} @ {class_identity(submissions, class_id)[0]}"


def path_key(submissions: list[str], assignment: str | None) -> str:
    """The key earlier versions recorded (the folders' absolute paths): read once, so their seed is kept."""
    folders = ", ".join(sorted(str(Path(p).resolve()) for p in submissions))
    return f"{assignment or '*'} @ {folders}"


def read_seeds(path: Path) -> dict:
    """The seeds recorded in ``path`` (empty when it does not exist); raises ValueError if it does not parse."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        seeds = data["seeds"]
        if not isinstance(seeds, dict):
            raise TypeError("'seeds' is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a grading-seed file ({exc}); remove it or pass --new-seed") from None
    return seeds


def choose_seed(
    path: Path | None, key: str, explicit: int | None, new: bool, draw, old_key: str | None = None
) -> tuple[int, str]:
    """(seed, how it was chosen): ``explicit``, else the recorded one (unless ``new``), else ``draw()``.

    ``old_key`` is looked up when ``key`` is not recorded (:func:`path_key`, an earlier version's key).
    """
    seeds = read_seeds(path) if path is not None and not new else {}
    if explicit is not None:
        return explicit, "given with --seed"
    for found, where in ((key, ""), (old_key, " under the class folder's path")):
        recorded = seeds.get(found) if found else None
        if isinstance(recorded, dict) and isinstance(recorded.get("seed"), int):
            return recorded["seed"], f"recorded in {path}{where}"
    return draw(), "new"


def record_seed(path: Path, key: str, seed: int, write, old_key: str | None = None) -> None:
    """Record ``seed`` for ``key`` in ``path`` (other entries kept); ``write`` is the atomic writer.

    An entry under ``old_key`` (:func:`path_key`) moves to ``key``. A file that does not parse is
    replaced: the run got here only with ``--seed`` or ``--new-seed``.
    """
    try:
        seeds = read_seeds(path)
    except ValueError:
        seeds = {}
    old = seeds.pop(old_key, None) if old_key and old_key != key else None
    found = seeds.get(key, old)
    entry = found if isinstance(found, dict) else {}
    if entry.get("seed") != seed:
        entry = {"seed": seed, "first_drawn": datetime.now(UTC).isoformat(timespec="seconds")}
    seeds[key] = entry
    write(path, json.dumps({"seeds": seeds}, indent=2, ensure_ascii=False) + "\n")


def reproduce_line(input_seed: int | None) -> str:
    """The line a student's feedback shows: their fresh inputs' salt, and how to rerun the self-check on them."""
    if input_seed is None:
        return ""
    return (
        f"Your tests were also run on fresh inputs drawn with salt {input_seed}. To rerun a self-check on "
        f"them: `from mha_course.grading.engine.case_inputs import salted` then `with salted({input_seed}): check(...)`."
    )
