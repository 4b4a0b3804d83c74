"""Red-team regressions on the real assignments: the run-time defences alone stop each cheat.

Every submission is a copy of a ``solutions/`` notebook with one injected bug or cheat. They are all
graded in ONE command-line run over a folder -- in a subprocess, with the static scan switched off
(so what is tested is the sandbox, the tripwire and the grader, not the scan, which has its own
tests in tests/grading/static/test_scan_routes.py), and with a marker in the environment that finds any process a
submission leaves behind. The subprocess matters: a cheat that got through could kill or stop the
grader, and that must fail this test, not take pytest down.

Where the cases came from: the red team on the real assignments (test_grader_redteam.py before the
tests mirrored the package); the same kind of cheats on the fake assignment are in test_cheat_a_fake_assignment.py.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from grading_fake import require_sandbox, tagged_processes

from mha_course.grading.engine import registry

ROOT = Path(__file__).resolve().parents[3]
MARKER = f"MHA_REDTEAM_{os.getpid()}"

NO_SCAN = (
    "import sys\nfrom mha_course.grading.engine import pipeline as grader\nfrom mha_course.grading.static.scan import ScanReport\n"
    "grader.scan = lambda cells, assignment: ScanReport()\nfrom mha_course.grading.grade import main\n"
    "sys.exit(main(sys.argv[1:]))"
)


def _load(name: str) -> dict:
    return json.loads((ROOT / "solutions" / name).read_text())


def _code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def _inject(
    name: str,
    define: dict[str, str] | None = None,
    before: str | None = None,
    replace: tuple[str, str] | list[tuple[str, str]] | None = None,
) -> dict:
    """A copy of solutions/<name> with cells redefined (by the name they define), a cell added after the
    imports, or text replacements."""
    nb = _load(name)
    cells = nb["cells"]
    for target, source in (define or {}).items():
        cell = next(
            c
            for c in cells
            if c["cell_type"] == "code" and re.search(rf"^(def|class) {target}\b", "".join(c["source"]), re.M)
        )
        cell["source"] = source
    for old, new in [replace] if isinstance(replace, tuple) else replace or []:
        cell = next(c for c in cells if c["cell_type"] == "code" and old in "".join(c["source"]))
        cell["source"] = "".join(cell["source"]).replace(old, new)
    if before:
        first = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
        cells.insert(first + 1, _code(before))
    for cell in cells:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    return nb


def _memorised(key: str, first: str, signature: str, fallback: str, torch_out: bool) -> str:
    """A target that looks its answer up in a table built from the installed package's cases (hidden ones
    included), as a learner could at home."""
    table = {}
    for case in registry.find_exercise(key).cases:
        inputs = case.make_inputs()
        expected = case.reference(inputs)
        if isinstance(expected, tuple) and len(expected) == 2 and isinstance(expected[1], tuple):
            expected = expected[0]  # an "inputs unchanged" case: (the result, the inputs as they were)
        items = expected if isinstance(expected, tuple) else (expected,)
        x = np.ascontiguousarray(inputs[first])
        table[hashlib.sha1(x.tobytes() + str(x.shape).encode()).hexdigest()] = [
            isinstance(expected, tuple),
            [[str(np.asarray(a).dtype), list(np.shape(a)), np.asarray(a).ravel().tolist()] for a in items],
        ]
    name = "scaled_dot_product_attention" if key == "sdpa" else key
    return (
        f"import hashlib, json\nTABLE = json.loads({json.dumps(table)!r})\n\n"
        f"def {name}({signature}):\n"
        f"    a = {first}.numpy() if hasattr({first}, 'numpy') else {first}\n"
        "    a = np.ascontiguousarray(a)\n"
        "    hit = TABLE.get(hashlib.sha1(a.tobytes() + str(a.shape).encode()).hexdigest())\n"
        "    if hit is None:\n"
        f"        {fallback}\n"
        "    outs = [np.asarray(v).reshape(s).astype(d) for d, s, v in hit[1]]\n"
        f"    outs = [torch.from_numpy(o) for o in outs] if {torch_out} else outs\n"
        "    return tuple(outs) if hit[0] else outs[0]\n"
    )


A02, A03, A04, A08, A09, A13, A14 = (
    "a02_softmax.ipynb",
    "a03_attention.ipynb",
    "a04_masks.ipynb",
    "a08_cross_attention.ipynb",
    "a09_positions.ipynb",
    "a13_triton_kernel.ipynb",
    "a14_attention_backward.ipynb",
)
ZEROS_NP = "def softmax_np(x, axis=-1):\n    return np.zeros_like(x)\n"
FORGE = (
    "import json, os, time\nPATH = RESULTS_PATH\nfake = {'score': 999, 'max_score': 1, 'tests': []}\n"
    "if os.fork() == 0:\n    os.setsid()\n    for _ in range(40):\n        time.sleep(0.1)\n"
    "        try:\n            open(PATH, 'w').write(json.dumps(fake))\n        except OSError:\n"
    "            pass\n    os._exit(0)\n"
)
FORWARD = (
    "    q = q.detach().clone().requires_grad_(True)\n    k = k.detach().clone().requires_grad_(True)\n"
    "    v = v.detach().clone().requires_grad_(True)\n"
    "    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v\n"
)

# name -> (notebook, the exercise it attacks, the most it may score there, how it was made)
SUBMISSIONS = {
    "honest": (A02, "softmax_np", 14, {}),
    # the grader and other processes
    "stop_the_parent": (
        A02,
        "softmax_np",
        0,
        dict(define={"softmax_np": ZEROS_NP}, before="import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"),
    ),
    "detached_forger": (A02, "softmax_np", 0, dict(define={"softmax_np": ZEROS_NP}, before=FORGE)),
    "detached_subprocess": (
        A02,
        "softmax_np",
        0,
        dict(
            define={"softmax_np": ZEROS_NP},
            before=(
                "import asyncio\nasync def go():\n    await asyncio.create_subprocess_exec('sleep', '30', "
                "start_new_session=True)\nasyncio.run(go())"
            ),
        ),
    ),
    "read_the_grader_cmdline": (
        A02,
        "softmax_np",
        0,
        dict(
            define={"softmax_np": ZEROS_NP}, before=("import os\nINFO = open(f'/proc/{os.getppid()}/cmdline').read()")
        ),
    ),
    # the reference answers
    "meta_path_then_import": (
        A02,
        "softmax_np",
        0,
        dict(
            define={
                "softmax_np": (
                    "import sys, pkgutil\nfor f in list(sys.meta_path):\n    if 'Block' in type(f).__name__:\n"
                    "        sys.meta_path.remove(f)\n\ndef softmax_np(x, axis=-1):\n"
                    "    return pkgutil.resolve_name('mha_course.core.softmax:softmax_np')(x, axis)\n"
                )
            }
        ),
    ),
    "exec_the_reference_source": (
        A02,
        "softmax_np",
        0,
        dict(
            define={
                "softmax_np": (
                    "import mha_course, pathlib\nNS = {}\nexec(pathlib.Path(mha_course.__file__).with_name('softmax.py')"
                    ".read_text().replace('from .', 'from mha_course.'), NS)\n\ndef softmax_np(x, axis=-1):\n"
                    "    return NS['softmax_np'](x, axis)\n"
                )
            }
        ),
    ),
    "memorised_answers": (
        A02,
        "softmax_np",
        0,
        dict(define={"softmax_np": _memorised("softmax_np", "x", "x, axis=-1", "return x", False)}),
    ),
    "memorised_answers_torch": (
        A03,
        "sdpa",
        0,
        dict(
            define={"scaled_dot_product_attention": _memorised("sdpa", "q", "q, k, v, scale=None", "return q, q", True)}
        ),
    ),
    # torch's shortcuts by other names
    "log_softmax": (
        A02,
        "softmax",
        0,
        dict(
            define={
                "softmax": ("def softmax(x, dim=-1):\n    return torch.log_softmax(x.float(), dim).exp().to(x.dtype)\n")
            }
        ),
    ),
    "raw_aten_sdpa": (
        A03,
        "sdpa",
        0,
        dict(
            define={
                "scaled_dot_product_attention": (
                    "def scaled_dot_product_attention(q, k, v, scale=None):\n"
                    "    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, scale=scale)[:2]\n"
                )
            }
        ),
    ),
    "tripwire_class_patched": (
        A03,
        "sdpa",
        0,
        dict(
            before="import sys\nsys.modules['mha_course.grading.inside.guard'].Tripwire.hit = lambda self, name: None",
            define={
                "scaled_dot_product_attention": (
                    "def scaled_dot_product_attention(q, k, v, scale=None):\n"
                    "    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, scale=scale)[:2]\n"
                )
            },
        ),
    ),
    "autograd_backward": (
        A14,
        "attention_backward",
        0,
        dict(
            define={
                "attention_backward": (
                    "def attention_backward(q, k, v, grad_out):\n"
                    + FORWARD
                    + "    (out * grad_out).sum().backward()\n    return q.grad, k.grad, v.grad\n"
                )
            }
        ),
    ),
    "autograd_engine": (
        A14,
        "attention_backward",
        0,
        dict(
            define={
                "attention_backward": (
                    "from torch.autograd import graph\n\ndef attention_backward(q, k, v, grad_out):\n"
                    + FORWARD
                    + "    return graph._engine_run_backward((out,), (grad_out,), True, False, (q, k, v), True, False)\n"
                )
            }
        ),
    ),
    "jacobian_by_jacrev": (
        A14,
        "softmax_jacobian",
        0,
        dict(
            define={
                "softmax_jacobian": (
                    "from torch.func import jacrev, vmap\n\ndef softmax_jacobian(p):\n"
                    "    z = p.log().reshape(-1, p.shape[-1])\n"
                    "    return vmap(jacrev(lambda r: torch.softmax(r, -1)))(z).reshape(*p.shape, p.shape[-1])\n"
                )
            }
        ),
    ),
    "triton_wrapper_bypass": (
        A13,
        "triton_softmax",
        0,
        dict(
            replace=[  # the kernel left unwritten
                (
                    "    x = x.contiguous()\n    y = torch.empty_like(x)",
                    "    import numpy as np\n    a = x.numpy().astype(np.float64)\n    e = np.exp(a - a.max(1, keepdims=True))\n"
                    "    return torch.from_numpy((e / e.sum(1, keepdims=True)).astype(np.float32))\n"
                    "    x = x.contiguous()\n    y = torch.empty_like(x)",
                ),
                (
                    "    shifted = x - tl.max(x, axis=0)\n    numerator = tl.exp(shifted)\n    y = numerator / tl.sum(numerator, "
                    "axis=0)",
                    "    y = x",
                ),
            ]
        ),
    ),
    # torch's fused attention computes a softmax inside: it is a softmax shortcut too
    "softmax_via_sdpa": (
        A02,
        "softmax",
        0,
        dict(
            define={
                "softmax": (
                    "import torch.nn.functional as F\n\ndef softmax(x, dim=-1):\n"
                    "    z = x.movedim(dim, -1).unsqueeze(-2)  # (..., 1, N): one query whose scores are x\n"
                    "    eye = torch.eye(z.shape[-1], dtype=z.dtype)\n"
                    "    return F.scaled_dot_product_attention(z, eye, eye, scale=1.0).squeeze(-2).movedim(-1, dim)\n"
                )
            }
        ),
    ),
    # torch's modes are per thread: the tripwire follows the threads a case starts
    "autograd_in_a_thread": (
        A14,
        "attention_backward",
        0,
        dict(
            define={
                "attention_backward": (
                    "import threading\n\ndef attention_backward(q, k, v, grad_out):\n    box = {}\n\n    def work():\n"
                    "        nonlocal q, k, v\n"
                    + "\n".join("    " + line for line in FORWARD.splitlines())
                    + "\n        (out * grad_out).sum().backward()\n        box['g'] = (q.grad, k.grad, v.grad)\n\n"
                    "    t = threading.Thread(target=work)\n    t.start()\n    t.join()\n    return box['g']\n"
                )
            }
        ),
    ),
    # a kernel look-alike: a class that claims to come from triton and launches NumPy instead
    "triton_lookalike_kernel": (
        A13,
        "triton_softmax",
        0,
        dict(
            replace=(
                "\n\ndef triton_softmax(x):",
                (
                    "\n\nimport numpy as np\n\nclass _Launch:\n    def __getitem__(self, grid):\n"
                    "        def run(x, y, n, sx, sy, BLOCK):\n            a = x.numpy().astype(np.float64)\n"
                    "            e = np.exp(a - a.max(1, keepdims=True))\n"
                    "            y.copy_(torch.from_numpy((e / e.sum(1, keepdims=True)).astype(np.float32)))\n"
                    "        return run\n\n_Launch.__module__ = 'triton.runtime.jit'\nsoftmax_kernel = _Launch()\n"
                    "\n\ndef triton_softmax(x):"
                ),
            )
        ),
    ),
    # the module's own forward, through a reference saved before any case ran (the head gate does the rest)
    "saved_forward": (
        A08,
        "without_head",
        0,
        dict(
            define={
                "without_head": (
                    "from mha_course.core.mha import MultiHeadAttention\nFORWARD = MultiHeadAttention.forward\n\n"
                    "def without_head(mha, query, key, value, head):\n    gate = torch.ones(mha.num_heads)\n"
                    "    gate[head] = 0.0\n    mha.head_gate = gate\n    return FORWARD(mha, query, key, value)[0]\n"
                )
            }
        ),
    ),
    # a function that returns nothing useful gets nothing, not the "inputs unchanged" point
    "returns_none": (
        A02,
        "softmax_np",
        0,
        dict(define={"softmax_np": "def softmax_np(x, axis=-1):\n    return None\n"}),
    ),
}

# bugs the red team found the tests let through: each must now lose points on its exercise
BUGS = {
    "scale_or_default": (
        A03,
        "sdpa",
        dict(
            replace=(
                "    if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])",
                "    scale = scale or 1.0 / math.sqrt(q.shape[-1])",
            )
        ),
    ),
    "masked_scale_ignored": (
        A04,
        "masked_sdpa",
        dict(replace=("    if scale is None:\n        scale = 1.0 / math", "    if True:\n        scale = 1.0 / math")),
    ),
    "causal_mask_numpy": (
        A04,
        "causal_mask",
        dict(
            define={
                "causal_mask": (
                    "def causal_mask(T, S=None):\n    S = T if S is None else S\n"
                    "    return np.tril(np.ones((T, S), dtype=bool))\n"
                )
            }
        ),
    ),
    "rope_in_place": (
        A09,
        "apply_rotary",
        dict(
            replace=(
                "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, D/2)\n"
                "    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)",
                "    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()\n"
                "    x[..., 0::2] = even * cos - odd * sin\n    x[..., 1::2] = even * sin + odd * cos\n    return x",
            )
        ),
    ),
    "rope_float64": (
        A09,
        "apply_rotary",
        dict(
            replace=(
                "cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)",
                "cos, sin = torch.cos(angle), torch.sin(angle)",
            )
        ),
    ),
    "sinusoidal_float64": (A09, "sinusoidal_positions", dict(replace=("    return table.float()", "    return table"))),
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("redteam")
    folder, results = root / "subs", root / "out" / "results.json"
    folder.mkdir()
    for name, (nb_name, _, _, how) in SUBMISSIONS.items():
        nb = _inject(nb_name, **how)
        text = json.dumps(nb).replace("RESULTS_PATH", repr(str(results)).replace("'", '\\"'))
        (folder / f"{name}.ipynb").write_text(text)
    for name, (nb_name, _, how) in BUGS.items():
        (folder / f"bug_{name}.ipynb").write_text(json.dumps(_inject(nb_name, **how)))
    env = dict(os.environ, MHA_COURSE_RUN_TAG=MARKER)
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_SCAN,
            str(folder),
            "--json",
            str(results),
            "--results-dir",
            str(root / "each"),
            "--csv",
            str(root / "grades.csv"),
            "--quiet",
            "--workers",
            "2",
            "--case-timeout",
            "20",
            "--cell-timeout",
            "30",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - start
    written = results.read_text() if results.exists() else ""
    time.sleep(1.5)  # a detached forger would have rewritten it by now
    left = tagged_processes(MARKER)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in (root / "each").glob("*.json"))
    }
    return {
        "proc": proc,
        "wall": wall,
        "written": written,
        "after": results.read_text() if results.exists() else "",
        "left": left,
        "each": each,
        "csv": root / "grades.csv",
    }


def _exercise_score(data: dict, exercise: str) -> float:
    return sum(t["score"] for t in data["tests"] if t["name"].split(":")[0] == exercise)


def _exercise_max(data: dict, exercise: str) -> float:
    return sum(t["max_score"] for t in data["tests"] if t["name"].split(":")[0] == exercise)


@pytest.mark.slow
def test_grading_ran_to_the_end(batch):
    proc = batch["proc"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(batch["each"]) == set(SUBMISSIONS) | {f"bug_{n}" for n in BUGS}


@pytest.mark.slow
def test_results_json_is_the_graders_and_stays_so(batch):
    merged = json.loads(batch["after"])
    assert batch["after"] == batch["written"]
    assert merged["score"] == sum(d["score"] for d in batch["each"].values())
    assert all({"name", "score", "max_score", "output", "visibility"} <= set(t) for t in merged["tests"])


@pytest.mark.slow
def test_no_submission_process_is_left(batch):
    assert batch["left"] == []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SUBMISSIONS))
def test_cheat_gains_nothing(batch, name):
    _, exercise, cap, _ = SUBMISSIONS[name]
    data = batch["each"][name]
    assert _exercise_score(data, exercise) <= cap, json.dumps(data["tests"], indent=1)[:3000]
    if name != "honest":
        assert data["score"] < data["extra_data"]["max_score"]


@pytest.mark.slow
def test_honest_submission_gets_full_marks(batch):
    data = batch["each"]["honest"]
    assert data["score"] == data["extra_data"]["max_score"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUGS))
def test_bug_loses_points(batch, name):
    _, exercise, _ = BUGS[name]
    data = batch["each"][f"bug_{name}"]
    assert _exercise_score(data, exercise) < _exercise_max(data, exercise), json.dumps(data["tests"], indent=1)


@pytest.mark.slow
def test_refusals_are_explained(batch):
    each = batch["each"]

    def outputs(name):
        return " ".join(t["output"] for t in each[name]["tests"])

    assert "autograd" in outputs("autograd_backward")
    assert "scaled_dot_product_attention" in outputs("raw_aten_sdpa")
    assert "log_softmax" in outputs("log_softmax")
    assert "fresh random inputs" in outputs("memorised_answers")
    assert "scale argument (0.0) is ignored" in outputs("bug_scale_or_default")
    assert "torch tensor" in outputs("bug_causal_mask_numpy")
    assert "changed its input" in outputs("bug_rope_in_place")
    assert any("not available while grading" in n for n in each["stop_the_parent"]["output"].splitlines())
    assert "scaled_dot_product_attention" in outputs("softmax_via_sdpa")
    assert "autograd" in outputs("autograd_in_a_thread")
    assert "MultiHeadAttention.forward" in outputs("saved_forward")
    assert "@triton.jit kernel" in outputs("triton_lookalike_kernel")


@pytest.mark.slow
def test_gradebook_has_every_submission(batch):
    with open(batch["csv"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(SUBMISSIONS) + len(BUGS) and all(r["status"] == "graded" for r in rows)


# What the course teaches or the standard library does routinely must get full marks with every defence
# on (the static scan included): logging and typing and enum and namedtuple use frames inside, and
# torch.broadcast_shapes builds a function on its first call.
HONEST_IDIOMS = (
    "import collections, enum, logging, typing\n"
    "from mha_course.grading.learner.selfcheck import check as check_again\n\n"
    "Shape = typing.TypeVar('Shape')\nKind = enum.Enum('Kind', 'SELF CROSS')\n"
    "Pair = collections.namedtuple('Pair', 'out weights')\nlog = logging.getLogger('student')\n\n"
    "def scaled_dot_product_attention(q, k, v, scale=None):\n"
    "    logging.warning('attention for %s', tuple(q.shape))\n"
    "    log.info('kind %s', Kind.SELF if q is k else Kind.CROSS)\n"
    "    torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])\n"
    "    if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])\n"
    "    weights = softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)\n"
    "    return tuple(Pair(weights @ v, weights))\n"
)


# The course's own code reached from a target (tests/grading/learner/test_selfcheck_agrees.py: the self-check
# says 0 before the learner submits); the grader must say 0 too. The same source as WRAPPED there.
LIBRARY_MASK = (
    "from mha_course.core.masks import causal_mask as _library_mask\n\n\n"
    "def causal_mask(T, S=None):\n    return _library_mask(T, S)\n"
)


@pytest.fixture(scope="module")
def defended(tmp_path_factory):
    """The notebooks graded with every defence on (the static scan included), in ONE command-line run over a
    folder: the honest idioms (a03) and a target that reaches the course's own code (a04)."""
    require_sandbox()
    root = tmp_path_factory.mktemp("defended")
    folder = root / "subs"
    folder.mkdir()
    idioms = _inject(A03, define={"scaled_dot_product_attention": HONEST_IDIOMS})
    (folder / "idioms.ipynb").write_text(json.dumps(idioms))
    (folder / "library_mask.ipynb").write_text(json.dumps(_inject(A04, define={"causal_mask": LIBRARY_MASK})))
    proc = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.grade", str(folder), "--json", str(root / "r.json")]
        + ["--results-dir", str(root / "each"), "--quiet", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    each = {
        Path(d["extra_data"]["submission"]).stem: d
        for d in (json.loads(p.read_text()) for p in (root / "each").glob("*.json"))
    }
    return proc, idioms, each


@pytest.mark.slow
def test_honest_idioms_get_full_marks_with_every_defence_on(defended):
    proc, nb, each = defended
    imports = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "from mha_course import check, softmax, softmax_np" in imports  # the package-level names, as taught
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = each["idioms"]
    assert data["score"] == data["extra_data"]["max_score"] > 0, json.dumps(data, indent=1)[:3000]


@pytest.mark.slow
def test_the_course_own_code_scores_nothing_in_the_grader(defended):
    """The sandbox's ``mha_course`` holds no ``core``: a target that wraps the library's causal_mask scores 0,
    as the self-check says it will (tests/grading/learner/test_selfcheck_agrees.py)."""
    proc, _, each = defended
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [t for t in each["library_mask"]["tests"] if t["name"].startswith("causal_mask:")]
    assert rows and all(t["score"] == 0 for t in rows), rows
