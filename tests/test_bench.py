"""The benchmark CLI: runs, names what it ran, writes JSON records with every field (mha_course.bench)."""

import json
import subprocess
import sys

import pytest
import torch

from mha_course import assert_close, causal_mask
from mha_course import scaled_dot_product_attention as sdpa
from mha_course.bench import add_ratios, format_table, main, naive_attention

FIELDS = {"impl": str, "backend": str, "device": str, "dtype": str, "B": int, "H": int, "T": int, "D": int,
          "causal": bool, "ms": float, "tflops": float}


def test_cli_quick_writes_valid_records_and_plot(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    cmd = [sys.executable, "-m", "mha_course.bench", "--quick", "--device", "cpu", "--T", "64", "96",
           "--H", "2", "--repeats", "1", "--json", str(out_json), "--plot", str(out_png)]
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
    assert out_png.stat().st_size > 1000


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
    base = {"impl": "torch.sdpa[FLASH_ATTENTION]", "T": 8, "causal": False, "ms": 2.0, "tflops": 1.0,
            "peak_mib": 1.0, "max_abs_err": 0.0}
    slow = dict(base, impl="naive", ms=8.0, peak_mib=None)
    records = [base, slow]
    add_ratios(records, "cpu")
    assert slow["vs_torch.sdpa[FLASH_ATTENTION]"] == 0.25 and base["vs_torch.sdpa[FLASH_ATTENTION]"] == 1.0
    table = format_table(records, "cpu")
    assert "0.25" in table and "n/a" in table and "x FLASH_ATTENTION" in table


def test_backward_mode_times_gradients_and_credits_three_times_the_flops():
    from mha_course.bench import run_benchmark

    records, _ = run_benchmark("cpu", B=1, H=2, D=16, Ts=[48], repeats=1, warmup=1, measure_memory=False,
                               only=["naive", "tiled", "torch.sdpa[MATH]"], backward=True, log=lambda _: None)
    assert {r["impl"] for r in records} == {"naive", "tiled", "torch.sdpa[MATH]"}
    for r in records:
        assert r["pass"] == "forward+backward"
        assert r["max_abs_err"] < 1e-4, r  # the gradients of all three agree with torch's
        forward_flops = 4 * 1 * 2 * 48 * 48 * 16 / (2 if r["causal"] else 1)
        credited = 3 * forward_flops / (r["ms"] * 1e-3) / 1e12
        assert r["tflops"] == pytest.approx(credited, rel=2e-3, abs=1e-6)  # up to the rounding of ms and tflops


def test_with_backward_returns_the_gradients():
    from mha_course.bench import with_backward

    torch.manual_seed(1)
    q, k, v, grad_out = (torch.randn(1, 2, 5, 4) for _ in range(4))
    got = with_backward(naive_attention, grad_out)(q, k, v, True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True).backward(grad_out)
    assert got.shape == (3, 1, 2, 5, 4)
    for g, leaf in zip(got, leaves, strict=True):
        assert_close(g, leaf.grad)
    assert not q.requires_grad  # the caller's tensors are left alone
