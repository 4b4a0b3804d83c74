"""The GPU run shipped in the package (mha_course.timing.measured) is the one benchmarks/ records, unchanged."""

import json
from pathlib import Path

import pytest

from mha_course.timing.measured import RUN_FILE, gpu_run

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.mark.skipif(not (BENCHMARKS / "gpu_results.json").exists(), reason="benchmarks/ is not in this checkout")
def test_the_shipped_run_is_benchmarks_gpu_results_unchanged_with_its_date_gpu_and_command_from_results_md():
    run = gpu_run()
    assert list(run.records) == json.loads((BENCHMARKS / "gpu_results.json").read_text(encoding="utf-8"))
    results = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    assert f"## GPU run, {run.measured}\n" in results
    section = results.split(f"## GPU run, {run.measured}\n")[1].split("\n## ")[0]
    assert f"`{run.command}`" in section and run.gpu in section
    assert {r["environment"]["gpu"] for r in run.records} == {run.gpu}


def test_series_reads_one_implementation_sorted_by_length():
    run = gpu_run()
    lengths, tflops = run.series("triton", causal=False)
    assert lengths == sorted(lengths) and len(lengths) == len(tflops) > 1
    assert all(value > 0 for value in tflops)
    assert run.series("triton", causal=False, key="ms")[0] == lengths


@pytest.mark.parametrize(
    ("impl", "key", "message"),
    [("no such kernel", "tflops", "no forward record of 'no such kernel'"), ("triton", "speed", "no field 'speed'")],
)
def test_series_names_what_is_missing(impl, key, message):
    with pytest.raises(ValueError, match=message):
        gpu_run().series(impl, causal=False, key=key)


def test_a_changed_copy_is_noticed(tmp_path):
    data = json.loads(RUN_FILE.read_text(encoding="utf-8"))
    data["records"][0]["tflops"] *= 2
    changed = tmp_path / "run.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    assert list(gpu_run(changed).records) != list(gpu_run().records)


def test_the_run_file_is_package_data():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"mha_course.timing" = ["*.json"]' in pyproject
