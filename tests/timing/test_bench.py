"""The benchmark CLI: runs, names what it ran, writes JSON records with every field (mha_course.timing.bench)."""

import json
import subprocess
import sys

import pytest
import torch

from mha_course import assert_close, causal_mask
from mha_course import scaled_dot_product_attention as sdpa
from mha_course.timing.bench import _interleaved_ms, main, run_benchmark
from mha_course.timing.bench_impls import naive_attention, with_backward
from mha_course.timing.bench_report import add_ratios, format_load_summary, format_table
from mha_course.timing.machine_load import background_load

FIELDS = {
    "impl": str,
    "backend": str,
    "device": str,
    "dtype": str,
    "B": int,
    "H": int,
    "T": int,
    "D": int,
    "causal": bool,
    "ms": float,
    "tflops": float,
}


@pytest.mark.slow
def test_cli_quick_writes_valid_records_and_plot(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    cmd = [
        sys.executable,
        "-m",
        "mha_course.timing.bench",
        "--quick",
        "--device",
        "cpu",
        "--T",
        "64",
        "96",
        "--H",
        "2",
        "--repeats",
        "1",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for word in ("torch=", "float32", "cpu", "FLASH_ATTENTION", "MATH"):
        assert word in run.stdout, word
    records = json.loads(out_json.read_text())
    impls = {r["impl"] for r in records}
    assert {"naive", "mha_course.sdpa", "torch.sdpa[FLASH_ATTENTION]", "torch.sdpa[MATH]"} <= impls
    assert {(r["T"], r["causal"]) for r in records} == {(64, False), (64, True), (96, False), (96, True)}
    for r in records:
        for name, kind in FIELDS.items():
            assert isinstance(r[name], kind), (name, r)
        assert r["ms"] > 0 and r["tflops"] > 0
        assert r["peak_mib"] is None or r["peak_mib"] >= 0
        assert r["device"] == "cpu" and r["dtype"] == "float32" and (r["B"], r["H"], r["D"]) == (1, 2, 64)
        assert r["max_abs_err"] < 1e-4, r  # every implementation computed the same attention
        assert r["vs_torch.sdpa[FLASH_ATTENTION]"] > 0
        # the machine it ran on travels with each record
        assert r["environment"]["torch"] == torch.__version__
        assert r["environment"]["cpu capability"] == torch.backends.cpu.get_cpu_capability()
    assert out_png.stat().st_size > 1000


def test_calls_are_timed_in_turns_each_round_starting_one_further():
    # In a fixed order one implementation would always run right after the same other one and pay
    # for whatever that one leaves behind (torch's intra-op threads spin for ms after a parallel op).
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    ms = _interleaved_ms(calls, repeats=4, device="cpu")
    assert order == [*"abc", *"bca", *"cab", *"abc"]
    assert set(ms) == set("abc") and all(t >= 0 for t in ms.values())
    assert _interleaved_ms({}, repeats=3, device="cpu") == {}


def test_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--json" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--dtype", "int8"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_is_attention(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4) for _ in range(3))
    expected = sdpa(q, k, v, mask=causal_mask(7) if causal else None)[0]
    assert_close(naive_attention(q, k, v, causal), expected, what="naive")


def test_ratios_and_table():
    base = {
        "impl": "torch.sdpa[FLASH_ATTENTION]",
        "T": 8,
        "causal": False,
        "ms": 2.0,
        "tflops": 1.0,
        "peak_mib": 1.0,
        "max_abs_err": 0.0,
    }
    slow = dict(base, impl="naive", ms=8.0, peak_mib=None)
    records = [base, slow]
    add_ratios(records, "cpu")
    assert slow["vs_torch.sdpa[FLASH_ATTENTION]"] == 0.25 and base["vs_torch.sdpa[FLASH_ATTENTION]"] == 1.0
    table = format_table(records, "cpu")
    assert "0.25" in table and "n/a" in table and "x FLASH_ATTENTION" in table


def test_backward_mode_times_gradients_and_credits_three_times_the_flops():
    records, _ = run_benchmark(
        "cpu",
        B=1,
        H=2,
        D=16,
        Ts=[48],
        repeats=1,
        warmup=1,
        measure_memory=False,
        only=["naive", "tiled", "torch.sdpa[MATH]"],
        backward=True,
        log=lambda _: None,
    )
    assert {r["impl"] for r in records} == {"naive", "tiled", "torch.sdpa[MATH]"}
    for r in records:
        assert r["pass"] == "forward+backward"
        assert r["max_abs_err"] < 1e-4, r  # the gradients of all three agree with torch's
        forward_flops = 4 * 1 * 2 * 48 * 48 * 16 / (2 if r["causal"] else 1)
        credited = 3 * forward_flops / (r["ms"] * 1e-3) / 1e12
        assert r["tflops"] == pytest.approx(credited, rel=2e-3, abs=1e-6)  # up to the rounding of ms and tflops


def test_with_backward_returns_the_gradients():
    torch.manual_seed(1)
    q, k, v, grad_out = (torch.randn(1, 2, 5, 4) for _ in range(4))
    got = with_backward(naive_attention, grad_out)(q, k, v, True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True).backward(grad_out)
    assert got.shape == (3, 1, 2, 5, 4)
    for g, leaf in zip(got, leaves, strict=True):
        assert_close(g, leaf.grad)
    assert not q.requires_grad  # the caller's tensors are left alone


# ---- background load --------------------------------------------------------------------------------


def _alive(pid):
    """True while pid runs; a zombie (exited, not yet reaped by whoever adopted it) counts as ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.slow
@linux_only
def test_background_load_runs_busy_processes_and_stops_them():
    import os
    import time

    def cpu_ticks(pid):
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[11])  # utime, in clock ticks

    # Python's start-up costs each helper 1 or 2 ticks (measured); only a spinning one goes on to 20 (0.2 s of CPU). Waited for,
    # not slept for: on a busy machine the helpers get a core only now and then.
    spun = int(0.2 * os.sysconf("SC_CLK_TCK"))
    with background_load(2) as pids:
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        deadline = time.monotonic() + 120
        while min(cpu_ticks(p) for p in pids) < spun and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_alive(p) and cpu_ticks(p) >= spun for p in pids), "the helpers are not spinning"
    assert not any(_alive(p) for p in pids)
    with background_load(0) as pids:
        assert pids == []


@pytest.mark.slow
@linux_only
@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_background_load_stops_on_ctrl_c_and_errors(error):
    seen = []
    with pytest.raises(error):
        with background_load(1) as pids:
            seen += pids
            raise error("stop")
    assert seen and not _alive(seen[0])


@pytest.mark.slow
@linux_only
def test_helpers_end_by_themselves_when_the_benchmark_is_killed():
    import os
    import signal
    import time

    code = (
        "import time\nfrom mha_course.timing.machine_load import background_load\n"
        "with background_load(1) as pids:\n    print(pids[0], flush=True)\n    time.sleep(120)\n"
    )
    bench = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        helper = int(bench.stdout.readline())
        assert _alive(helper)
        os.kill(bench.pid, signal.SIGKILL)  # no finally block runs: the helper must notice on its own
        bench.wait()
        deadline = time.monotonic() + 20
        while _alive(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(helper), "an orphaned helper kept spinning"
    finally:
        bench.kill()
        bench.wait()
        bench.stdout.close()


def test_background_load_rejects_bad_counts(capsys):
    with pytest.raises(ValueError, match="-1"):
        with background_load(-1):
            pass
    with pytest.raises(TypeError, match="float"):
        with background_load(1.5):
            pass
    with pytest.raises(SystemExit) as exit_info:
        main(["--background-load", "-1"])
    assert exit_info.value.code == 2 and "must be >= 0" in capsys.readouterr().err


@pytest.mark.slow
@linux_only
def test_cli_measures_quiet_and_loaded_in_one_run(tmp_path):
    out_json = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        "-m",
        "mha_course.timing.bench",
        "--device",
        "cpu",
        "--T",
        "64",
        "--H",
        "2",
        "--causal",
        "no",
        "--repeats",
        "1",
        "--no-memory",
        "--impl",
        "tiled",
        "torch.sdpa[FLASH_ATTENTION]",
        "--background-load",
        "0",
        "1",
        "--json",
        str(out_json),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "load average (1, 5, 15 min) before" in run.stdout and "quiet  load 1" in run.stdout
    records = json.loads(out_json.read_text())
    assert sorted((r["impl"], r["background_load"]) for r in records) == [
        ("tiled", 0),
        ("tiled", 1),
        ("torch.sdpa[FLASH_ATTENTION]", 0),
        ("torch.sdpa[FLASH_ATTENTION]", 1),
    ]
    for r in records:
        assert r["other_load"] is None or r["other_load"] >= 0
        assert r["vs_torch.sdpa[FLASH_ATTENTION]"] > 0  # each load compared with the baseline at the same load


def test_load_summary_puts_the_ratios_side_by_side():
    rows = [
        {
            "impl": impl,
            "T": 8,
            "causal": False,
            "ms": ms,
            "tflops": 1.0,
            "peak_mib": None,
            "max_abs_err": 0.0,
            "background_load": load,
            "other_load": 0.01,
        }
        for impl, load, ms in [
            ("torch.sdpa[FLASH_ATTENTION]", 0, 1.0),
            ("tiled", 0, 2.0),
            ("torch.sdpa[FLASH_ATTENTION]", 1, 3.0),
            ("tiled", 1, 4.0),
        ]
    ]
    add_ratios(rows, "cpu")
    summary = format_load_summary(rows, "cpu")
    assert "quiet  load 1" in summary and "0.50    0.75" in summary
    assert format_load_summary([r for r in rows if r["background_load"] == 0], "cpu") == ""
    assert "load" in format_table(rows, "cpu").splitlines()[0]
