"""``python -m mha_course.gradescope build|simulate``: a Gradescope autograder for one assignment, and a dry run of it.

Gradescope unzips the autograder into ``/autograder/source``, runs its ``setup.sh`` once (as root)
to build the image, then for each student copies ``run_autograder`` to ``/autograder/``, puts the
upload in ``/autograder/submission/`` and reads ``/autograder/results/results.json``::

    autograder.zip
      setup.sh              python3 venv in /autograder/venv, the pinned grader packages, the course
      run_autograder        grade /autograder/submission as one student's upload of ASSIGNMENT (the grader's
                            arguments in a root-only file, @FILE: no command line shows them)
      course/               the mha_course package, pyproject.toml, LICENSE, requirements-grader.txt, BUNDLE.json
                            (no solutions/, exercises/, notebooks/ or tests/: a student must not see them)

Both scripts find everything from ``$AUTOGRADER_ROOT`` (default ``/autograder``), never from the
working directory, so they work wherever they are started. ``simulate`` builds that layout in a
temporary folder (``--root``), runs ``setup.sh`` and ``run_autograder`` from an unrelated working
directory, and checks the results.json against Gradescope's documented fields and against
leaking hidden tests' scores. ``--reuse-packages`` (the default) lets the simulated venv see this
environment's packages, so no download is needed; pip still checks every pin.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

from .walls import tiers

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # mha_course/
#: What the grader imports at run time (the report's matplotlib included; triton for a13's kernels).
GRADER_PACKAGES = ("torch", "numpy", "matplotlib", "tqdm", "nbformat", "psutil", "triton")
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
TOP_FIELDS = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
TEST_FIELDS = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image. It finds its files from
# $AUTOGRADER_ROOT (default /autograder), never from the working directory.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
COURSE="$ROOT/source/course"
# The interpreter: python3 where it is 3.11 or newer, else python3.11 (Gradescope's documented default image,
# Ubuntu 22.04, ships 3.10 as python3 and 3.11 in its universe component).
new_enough() { "$1" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }
PY=""
for candidate in python3 python3.13 python3.12 python3.11; do
  if command -v "$candidate" >/dev/null 2>&1 && new_enough "$candidate"; then PY="$candidate"; break; fi
done
if [ -z "$PY" ] || ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap python3 python3-venv python3-pip
    if ! new_enough python3; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv || true
    fi
    for candidate in python3 python3.11; do
      if new_enough "$candidate"; then PY="$candidate"; break; fi
    done
  fi
fi
if [ -z "$PY" ]; then
  echo "setup.sh: the grader's pinned packages need Python >= 3.11 with venv, and none was found or could be" >&2
  echo "installed (python3 is $(python3 --version 2>&1)); choose an Ubuntu 22.04 or newer base image" >&2
  exit 1
fi
"$PY" -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install --disable-pip-version-check -q -r "$COURSE/requirements-grader.txt"
"$ROOT/venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps "$COURSE"
"$ROOT/venv/bin/python" -c "from mha_course.grading.engine import registry; print('autograder for', registry.get_assignment('@ASSIGNMENT@').title)"
# matplotlib's font list, built once into the image: each submission's sandbox copies it instead of scanning fonts
"$ROOT/venv/bin/python" -c "import matplotlib.font_manager" >/dev/null 2>&1 || true
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission. Exit status 0 even when tests fail: the grader writes
# results.json itself, last, from its own process.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
mkdir -p "$ROOT/results"
cd "$ROOT/results"
# The grader's arguments in a file only root reads (mktemp: 0600), never on a command line, which every
# process can read, the sandbox's included
ARGS="$(mktemp)"
printf '%s\n' "$ROOT/submission" --one-submission --assignment @ASSIGNMENT@ --workers 1 \
    --json "$ROOT/results/results.json" @EXTRA@ > "$ARGS"
"$ROOT/venv/bin/python" -m mha_course.grade "@$ARGS"
status=$?
rm -f "$ARGS"
exit "$status"
"""


def grader_requirements() -> str:
    """Pins of the grader's run-time packages, as installed here (what the tests ran with)."""
    lines = [
        "# The grader's run-time packages, pinned to what the course's tests ran with.",
        "# torch's CPU build: its own index serves 2.13.0+cpu, preferred to PyPI's CUDA build.",
        "--extra-index-url https://download.pytorch.org/whl/cpu",
    ]
    for name in GRADER_PACKAGES:
        try:
            version = metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
        marker = '; sys_platform == "linux"' if name == "triton" else ""
        lines.append(f"{name}=={version}{marker}")
    return "\n".join(lines) + "\n"


def build(
    assignment: str,
    output: Path,
    unsafe_no_isolation: bool = False,
    min_isolation: str = tiers.DEFAULT_MIN_ISOLATION,
    on_tamper: str = "review",
    strict_definitions: bool = False,
) -> Path:
    """Write the autograder zip for ``assignment``; returns its path. Raises KeyError for an unknown key and
    ValueError for a ``min_isolation`` no tier has or an ``on_tamper`` other than "review", "zero".

    ``strict_definitions``: each test loads only the notebook's definitions (an exam setting; the grader's
    ``--strict-definitions``)."""
    from .engine import registry
    from .verdicts import ON_TAMPER

    tiers.by_label(min_isolation)  # a letter no tier has: ValueError
    if on_tamper not in ON_TAMPER:
        raise ValueError(f"on_tamper must be one of {', '.join(ON_TAMPER)}, got {on_tamper!r}")
    key = registry.get_assignment(assignment).key
    extra = " ".join(
        (["--unsafe-no-isolation"] if unsafe_no_isolation else [])
        + ([f"--min-isolation {min_isolation}"] if min_isolation != tiers.DEFAULT_MIN_ISOLATION else [])
        + ([f"--on-tamper {on_tamper}"] if on_tamper != "review" else [])
        + (["--strict-definitions"] if strict_definitions else [])
    )
    project = PACKAGE_DIR.parent
    manifest = {
        "assignment": key,
        "version": registry.get_assignment(key).version,
        "built": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": sys.version.split()[0],
        "on_tamper": on_tamper,
        "strict_definitions": strict_definitions,
    }
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as bundle:

        def add_text(name: str, text: str, executable: bool = False) -> None:
            info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, text)

        add_text("setup.sh", SETUP_SH.replace("@ASSIGNMENT@", key), executable=True)
        add_text(
            "run_autograder", RUN_AUTOGRADER.replace("@ASSIGNMENT@", key).replace("@EXTRA@", extra), executable=True
        )
        for path in sorted(PACKAGE_DIR.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                bundle.write(path, f"course/mha_course/{path.relative_to(PACKAGE_DIR).as_posix()}")
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (project / name).is_file():
                bundle.write(project / name, f"course/{name}")
        add_text("course/requirements-grader.txt", grader_requirements())
        add_text("course/BUNDLE.json", json.dumps(manifest, indent=2) + "\n")
    return output


def validate_results(data: object) -> list[str]:
    """Problems of a results.json against Gradescope's documented fields and hidden-test secrecy (empty: fine)."""
    if not isinstance(data, dict):
        return [f"results.json must be an object, got {type(data).__name__}"]
    problems = [f"unknown top-level field {k!r}" for k in sorted(set(data) - TOP_FIELDS)]
    tests = data.get("tests", [])
    if not isinstance(tests, list):
        return problems + ["tests must be a list"]
    problems += _top_level_problems(data, tests)
    hidden, visible_text = [], [str(data.get("output", ""))]
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            problems.append(f"tests[{i}] must be an object")
            continue
        problems += _test_problems(t, f"tests[{i}]", data.get("visibility", "visible"))
        if t.get("visibility", data.get("visibility", "visible")) != "visible":
            hidden.append(t)
        else:
            visible_text += [str(t.get("name", "")), str(t.get("output", ""))]
    if hidden:
        problems += _total_leaks(tests, "\n".join(visible_text))
    return problems


def _number_problem(value: object, where: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{where} must be a finite number, got {value!r}"
    return None


def _top_level_problems(data: dict, tests: list) -> list[str]:
    """Problems of results.json's own fields: score, execution_time, visibilities, output."""
    problems = []
    if "score" in data:
        problems.append(_number_problem(data["score"], "score"))
    elif not all(isinstance(t, dict) and "score" in t for t in tests):
        problems.append("score is required when a test has none")
    if "execution_time" in data:
        problems.append(_number_problem(data["execution_time"], "execution_time"))
    for name in ("visibility", "stdout_visibility"):
        if name in data and data[name] not in VISIBILITIES:
            problems.append(f"{name} must be one of {sorted(VISIBILITIES)}, got {data[name]!r}")
    if not isinstance(data.get("output", ""), str):
        problems.append("output must be a string")
    return [p for p in problems if p is not None]


def _test_problems(t: dict, where: str, default_visibility: object) -> list[str]:
    """Problems of one entry of ``tests``: unknown fields, types, score range, status, tags, visibility."""
    problems: list[str | None] = [f"{where}: unknown field {k!r}" for k in sorted(set(t) - TEST_FIELDS)]
    problems += [
        f"{where}.{n} must be a string" for n in ("name", "output", "number") if n in t and not isinstance(t[n], str)
    ]
    # the first of score and max_score that is not a number (as before: the second is not checked then)
    bad = next((p for k in ("score", "max_score") if k in t and (p := _number_problem(t[k], f"{where}.{k}"))), None)
    problems.append(bad)
    if bad is None and "score" in t and "max_score" in t and not 0 <= t["score"] <= t["max_score"]:
        problems.append(f"{where}: score {t['score']} outside [0, max_score {t['max_score']}]")
    if t.get("status", "passed") not in ("passed", "failed"):  # Gradescope's two values, not the grader's verdicts
        problems.append(f"{where}.status must be 'passed' or 'failed', got {t['status']!r}")
    if not isinstance(t.get("tags", []), list) or not all(isinstance(x, str) for x in t.get("tags", [])):
        problems.append(f"{where}.tags must be a list of strings")
    vis = t.get("visibility", default_visibility)
    if vis not in VISIBILITIES:
        problems.append(f"{where}.visibility must be one of {sorted(VISIBILITIES)}, got {vis!r}")
    return [p for p in problems if p is not None]


def _total_leaks(tests: list, visible_text: str) -> list[str]:
    """Visible text that gives away the total with the hidden tests counted (before grades are published)."""
    total = sum(t.get("score", 0) for t in tests if isinstance(t, dict))
    most = sum(t.get("max_score", 0) for t in tests if isinstance(t, dict))
    leaks = [f"{total:g} / {most:g}", f"{total:g}/{most:g}", f"out of {most:g}"]
    return [
        f"visible text reveals the total including hidden tests ({leak!r})" for leak in leaks if leak in visible_text
    ]


def _plant_packages(venv: Path) -> None:
    """Make a venv at ``venv`` whose interpreter also sees this environment's installed packages."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    lib = next((venv / "lib").glob("python3*")) / "site-packages"
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # setup.sh's own `python3 -m venv` on this folder keeps site-packages and this file
    (lib / "_grader_packages_from_build_env.pth").write_text("\n".join(sorted(here)) + "\n")


def simulate(
    bundle: Path,
    submission: Path,
    root: Path | None = None,
    reuse_packages: bool = True,
    keep: bool = False,
    timeout: float = 1800,
    setup: bool = True,
    container: bool = True,
) -> tuple[dict, list[str], Path, int]:
    """Run the autograder like Gradescope: (results.json data, problems, root used, run_autograder's exit status).

    A non-zero exit status with a results.json is the grader refusing to grade (exit 3: no isolation):
    the file is valid, and says so to the student, yet nothing was graded.

    ``root`` (default: a new temporary folder) gets source/, submission/, results/, run_autograder;
    setup.sh and run_autograder run with ``AUTOGRADER_ROOT=root`` from an unrelated working directory.
    ``setup=False`` reuses a ``root`` set up before (Gradescope too builds once and grades many).
    ``container`` (the default) runs both scripts under Docker's default restrictions, as Gradescope does
    (:mod:`.grading.container_repro`: moby's seccomp profile, Docker's capabilities, masked /proc; it needs
    root); the grader then has no namespaces and isolates each submission with tier B.
    """
    if container and os.geteuid() != 0:
        raise RuntimeError(
            "simulating Gradescope's container needs root (it reproduces Docker's restrictions with a mount "
            "namespace and a seccomp filter); run as root, or pass --no-container to run on this machine as it is"
        )
    own = root is None
    root = Path(root or tempfile.mkdtemp(prefix="autograder-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # as Gradescope's /autograder: the sandbox's own uid reaches the venv's interpreter
    try:
        source = root / "source"
        if source.exists():
            shutil.rmtree(source)
        with zipfile.ZipFile(bundle) as z:
            z.extractall(source)
            for info in z.infolist():  # zipfile drops permissions; restore the scripts' x bit
                if info.external_attr >> 16 & 0o111:
                    (source / info.filename).chmod(0o755)
        shutil.copy2(source / "run_autograder", root / "run_autograder")
        if (root / "submission").exists():
            shutil.rmtree(root / "submission")
        shutil.copytree(submission, root / "submission", symlinks=True)
        (root / "results").mkdir(exist_ok=True)
        env = dict(os.environ, AUTOGRADER_ROOT=str(root))
        env.pop("VIRTUAL_ENV", None)
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(Path(sys.prefix)))
        )
        if (root / "results" / "results.json").exists():
            (root / "results" / "results.json").unlink()
        if reuse_packages and setup:
            _plant_packages(root / "venv")
        elsewhere = tempfile.mkdtemp(prefix="cwd-")
        for script in ((source / "setup.sh",) if setup else ()) + (root / "run_autograder",):
            argv = ["bash", str(script)]
            if container:
                from .walls import container_repro

                argv = container_repro.command(argv, also_open=(str(root),))
            done = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)
            # a grader that refused (exit 3) still wrote the results.json Gradescope shows the student
            wrote = script.name == "run_autograder" and (root / "results" / "results.json").is_file()
            status = done.returncode  # the last script run is run_autograder
            if done.returncode != 0 and not wrote:
                raise RuntimeError(
                    f"{script.name} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
        shutil.rmtree(elsewhere, ignore_errors=True)
        results = root / "results" / "results.json"
        if not results.is_file():
            return {}, ["run_autograder wrote no results/results.json"], root, status
        data = json.loads(results.read_text())
        return data, validate_results(data), root, status
    finally:
        if own and not keep:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from . import grade_options

    parser = argparse.ArgumentParser(
        prog="python -m mha_course.gradescope",
        description="Build a Gradescope autograder for one assignment, or run one locally the way Gradescope does.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write autograder.zip for one assignment")
    b.add_argument("--assignment", required=True, metavar="KEY", help="e.g. a02_softmax")
    b.add_argument("-o", "--output", type=Path, help="the zip to write (default: build/autograder-KEY.zip)")
    b.add_argument(
        "--unsafe-no-isolation",
        action="store_true",
        help="grade even where no sandbox of --min-isolation holds (Gradescope's container is then the only "
        "wall; the bundle holds no solutions)",
    )
    b.add_argument(
        "--min-isolation",
        choices=tiers.labels(),
        default=tiers.DEFAULT_MIN_ISOLATION,
        help=f"the weakest sandbox the autograder grades in: {tiers.help_text()} (default "
        f"{tiers.DEFAULT_MIN_ISOLATION}: what Gradescope's Docker container allows on a kernel with Landlock)",
    )
    b.add_argument(
        "--on-tamper",
        choices=("review", "zero"),
        default="review",
        help="what code the static scan finds reaching into the grader does: 'review' (default) flags it with "
        "the evidence and keeps the tests' score; 'zero' (exams) scores it 0 until you resolve the flag",
    )
    b.add_argument("--strict-definitions", action="store_true", help=grade_options.STRICT_HELP)
    s = sub.add_parser("simulate", help="run a bundle's setup.sh and run_autograder on a submission folder")
    s.add_argument("bundle", type=Path)
    s.add_argument("submission", type=Path, help="the folder a student uploads (becomes /autograder/submission)")
    s.add_argument("--root", type=Path, help="the folder standing in for /autograder (default: a temporary one)")
    s.add_argument(
        "--download-packages",
        action="store_true",
        help="let setup.sh download every package instead of reusing this environment's",
    )
    s.add_argument("--keep", action="store_true", help="keep the temporary /autograder folder")
    s.add_argument(
        "--no-container",
        action="store_true",
        help="run the scripts on this machine as it is, not under Docker's default restrictions (which need root)",
    )
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            path = build(
                args.assignment,
                args.output or Path("build") / f"autograder-{args.assignment}.zip",
                args.unsafe_no_isolation,
                args.min_isolation,
                args.on_tamper,
                args.strict_definitions,
            )
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
        with zipfile.ZipFile(path) as z:
            print(f"{path}: {len(z.namelist())} files for {args.assignment} (no solutions/, exercises/, tests/)")
        return 0
    try:
        data, problems, root, status = simulate(
            args.bundle,
            args.submission,
            args.root,
            not args.download_packages,
            args.keep,
            container=not args.no_container,
        )
    except (RuntimeError, subprocess.SubprocessError, OSError, zipfile.BadZipFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: data.get(k) for k in ("score", "execution_time", "output")}, indent=2))
    refused = f"; but the grader REFUSED to grade (run_autograder exit {status}): no grade" if status else ""
    print(f"{len(data.get('tests', []))} tests; results.json " + ("valid" if not problems else "INVALID:") + refused)
    for p in problems:
        print(f"  - {p}")
    if args.keep or args.root:
        print(f"autograder folder: {root}")
    return status if status != 0 else (1 if problems else 0)


if __name__ == "__main__":
    sys.exit(main())
