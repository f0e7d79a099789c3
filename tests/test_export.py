"""harness.export against the formats it imitates: pytest-benchmark's own JSON and Stats,
github-action-benchmark's custom entries, DeepBench's results columns."""
from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd
import pytest

from harness import store
from harness.export import (DEEPBENCH_SHAPE, pytest_benchmark_stats, to_deepbench_csv,
                            to_github_action_benchmark, to_pytest_benchmark_json)
from harness.measurement import Measurement
from harness.problem import ConvProblem
from harness.sweep import Point

pytest_plugins = ["pytester"]

# Non-square on purpose (W != H, S != R, strides and pads differ) so a swapped axis shows.
PROBLEM = ConvProblem(4, 3, 20, 30, 8, 3, 5, stride_h=1, stride_w=2, pad_top=1, pad_left=2,
                      pad_bottom=1, pad_right=2, name="t:conv")
ENV = {"hostname": "box", "cpu_model": "Test CPU", "cpu_cores": 8, "os": "Linux 6.1",
       "python": "3.11.9", "gpu_name": "NVIDIA H200", "git_commit": "abc1234"}


def _measurement(direction: str, algorithm: str, samples_ms: list[float] | None,
                 status: str = "ok", precision: str = "fp32") -> Measurement:
    point = Point(PROBLEM, direction, precision, "NCHW", "cpu", algorithm)
    return Measurement(point, status, "" if status == "ok" else "planted",
                       samples_ms=tuple(samples_ms or ()))


def _frame(measurements: list[Measurement]) -> pd.DataFrame:
    return store.frame(store.to_row(m, "run1", "quick", ENV, "2026-01-02T03:04:05+00:00")
                       for m in measurements)


SAMPLES = [1.0, 1.2, 0.9, 1.1, 5.0, 1.05, 0.95]


# ---- pytest-benchmark ----------------------------------------------------------------------------
def test_stats_match_pytest_benchmark_own_stats():
    stats_module = pytest.importorskip("pytest_benchmark.stats")
    rng = np.random.default_rng(0)
    for n in list(range(1, 13)) + [31, 100]:
        data = (rng.lognormal(0, 0.3, n) * 1e-3).tolist()
        if n > 3:
            data[0] = data[1]            # a tie, for the quartile and fence code
        reference = stats_module.Stats()
        for value in data:
            reference.update(value)
        ours = pytest_benchmark_stats(data)
        expected = {**reference.as_dict(), "data": data, "iterations": 1}
        assert ours.keys() == expected.keys()
        for key, value in expected.items():
            assert ours[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_pytest_benchmark_json_in_seconds_ok_rows_only():
    df = _frame([_measurement("fwd", "direct", SAMPLES),
                 _measurement("fwd", "fft", None, status="unsupported")])
    out = to_pytest_benchmark_json(df)
    (bench,) = out["benchmarks"]
    assert bench["stats"]["data"] == pytest.approx([s / 1e3 for s in SAMPLES])
    assert bench["stats"]["median"] == pytest.approx(statistics.median(SAMPLES) / 1e3)
    assert bench["stats"]["rounds"] == len(SAMPLES)
    assert bench["fullname"] == f"convbench::{df['point_id'][0]}"
    assert bench["params"]["algorithm"] == "direct" and bench["params"]["batch"] == 4
    assert bench["extra_info"]["status"] == "ok"
    assert out["commit_info"]["id"] == "abc1234"
    assert out["machine_info"]["convbench"]["gpu_name"] == "NVIDIA H200"
    assert out["machine_info"]["system"] == "Linux" and out["machine_info"]["release"] == "6.1"
    assert out["datetime"] == "2026-01-02T03:04:05+00:00"
    json.dumps(out)                      # plain JSON, no numpy or pandas values left


def test_pytest_benchmark_json_has_the_layout_pytest_benchmark_writes(pytester):
    """Key sets of a real --benchmark-json file (the installed pytest-benchmark) vs ours."""
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile("""
        def test_tiny(benchmark):
            benchmark.pedantic(lambda: None, rounds=3)
    """)
    result = pytester.runpytest("--benchmark-json=real.json", "-p", "no:cacheprovider",
                                "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=1)
    real = json.loads((pytester.path / "real.json").read_text())
    ours = to_pytest_benchmark_json(_frame([_measurement("fwd", "direct", SAMPLES)]))
    assert set(ours) == set(real)
    (real_bench,), (our_bench,) = real["benchmarks"], ours["benchmarks"]
    assert set(our_bench) == set(real_bench)
    assert set(our_bench["stats"]) == set(real_bench["stats"])
    assert set(real_bench["options"]) <= set(our_bench["options"])
    assert set(real["commit_info"]) <= set(ours["commit_info"])
    assert set(real["machine_info"]) - {"cpu"} <= set(ours["machine_info"])


def test_pytest_benchmark_compare_reads_the_export(tmp_path, capsys, monkeypatch):
    """pytest-benchmark's own `compare` command loads and tabulates an exported file."""
    cli = pytest.importorskip("pytest_benchmark.cli")
    df = _frame([_measurement("fwd", "direct", SAMPLES), _measurement("fwd", "im2col", [2.0, 2.1])])
    path = tmp_path / "0001_convbench.json"
    path.write_text(json.dumps(to_pytest_benchmark_json(df)))
    monkeypatch.setattr("sys.argv", ["pytest-benchmark", "compare", str(path)])
    cli.main()
    table = capsys.readouterr().out
    assert "t:conv[cpu-direct-fwd-fp32-NCHW]" in table
    assert "t:conv[cpu-im2col-fwd-fp32-NCHW]" in table


# ---- github-action-benchmark ---------------------------------------------------------------------
def test_github_action_benchmark_entries():
    df = _frame([_measurement("fwd", "direct", SAMPLES), _measurement("fwd", "im2col", [2.0]),
                 _measurement("fwd", "fft", None, status="wrong")])
    entries = to_github_action_benchmark(df)
    assert [e["name"] for e in entries] == ["t:conv n4 fwd fp32 NCHW cpu:direct",
                                            "t:conv n4 fwd fp32 NCHW cpu:im2col"]
    first, second = entries
    assert first["unit"] == "ms" and first["value"] == pytest.approx(statistics.median(SAMPLES))
    assert first["range"].startswith("± ") and "samples 7" in first["extra"]
    assert "range" not in second             # one sample has no spread
    assert set(first) <= {"name", "unit", "value", "range", "extra"}
    json.dumps(entries)


def test_github_action_benchmark_names_stay_unique():
    df = _frame([_measurement("fwd", "direct", SAMPLES)])
    twin = df.copy()
    twin["point_id"] = "other-id"
    entries = to_github_action_benchmark(pd.concat([df, twin], ignore_index=True))
    assert len({e["name"] for e in entries}) == 2


# ---- DeepBench -----------------------------------------------------------------------------------
def test_deepbench_csv_one_row_per_problem_fastest_algorithm_per_direction(tmp_path):
    df = _frame([_measurement("fwd", "direct", [2.0, 2.0]), _measurement("fwd", "im2col", [1.0]),
                 _measurement("bwd_data", "direct", [3.0]),
                 _measurement("bwd_filter", "direct", [4.5]),
                 _measurement("bwd_filter", "fft", None, status="failed"),
                 _measurement("fwd", "direct", [9.0], precision="fp16")])
    table = to_deepbench_csv(df, tmp_path / "deepbench.csv")
    read = pd.read_csv(tmp_path / "deepbench.csv")
    assert list(read.columns[:11]) == list(DEEPBENCH_SHAPE)
    fp32 = read[read["precision"] == "float"].iloc[0]
    assert list(fp32[list(DEEPBENCH_SHAPE)]) == [30, 20, 3, 4, 8, 5, 3, 2, 1, 2, 1]
    assert (fp32["fwd_time_usec"], fp32["fwd_algo"]) == (1000.0, "im2col")
    assert fp32["bwd_inputs_time_usec"] == 3000.0 and fp32["bwd_params_time_usec"] == 4500.0
    assert fp32["total_time_usec"] == 8500.0
    fp16 = read[read["precision"] == "half"].iloc[0]
    assert fp16["fwd_time_usec"] == 9000.0
    assert pd.isna(fp16["bwd_inputs_time_usec"]) and pd.isna(fp16["total_time_usec"])
    assert len(table) == 2 and fp32["layer"] == "t:conv"
