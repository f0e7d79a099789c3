"""The --threads axis (issue 16): CPU points run with the thread count they name, the row
records it, GPU points are planned once at the default, and the default changes nothing (point
ids, files older than the column)."""
from __future__ import annotations

import pandas as pd
import planted_backends
import pytest

from harness import backends, runner, schema, store, threads
from harness.cli import main
from harness.problem import ConvProblem
from harness.suite import SuiteError, load_suite
from harness.suite.overrides import sweep_with_overrides
from harness.sweep import AlgorithmChoice, Point, Sweep, TimingOptions

PROBLEM = ConvProblem(2, 8, 10, 10, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="t")
FAST = TimingOptions(min_samples=3, max_samples=3, budget_ms=5.0)


def _point(count: int, backend: str = "threads_seen") -> Point:
    return Point(PROBLEM, "fwd", "fp32", "NCHW", backend, "im2col", None, FAST, count)


def test_the_default_keeps_point_ids_and_a_count_is_part_of_the_id():
    default = _point(threads.ALL)
    assert default.point_id == Point(PROBLEM, "fwd", "fp32", "NCHW", "threads_seen", "im2col",
                                     None, FAST).point_id
    assert "+t" not in default.point_id
    assert _point(1).point_id == default.point_id + "+t1"


def test_a_cpu_point_runs_with_its_thread_count_and_puts_the_count_back():
    pytest.importorskip("torch")
    import torch  # noqa: F401 - loaded, as a torch_cpu point would have it: its pool is set too
    backends.register("threads_seen", "planted_backends:ThreadsSeenBackend")
    before = planted_backends._threads_now()
    planted_backends.THREADS_SEEN.clear()
    m = runner.run_point(_point(1))
    assert m.ok, m.reason
    assert set(planted_backends.THREADS_SEEN) == {(1, 1)}
    assert planted_backends._threads_now() == before
    planted_backends.THREADS_SEEN.clear()
    assert runner.run_point(_point(threads.ALL)).ok
    assert set(planted_backends.THREADS_SEEN) == {before}      # the default touches nothing
    row = schema.to_row(m, "r", "s", {}, schema.finished_now())
    assert row["threads"] == 1


def test_gpu_points_are_planned_once_at_the_default_cpu_points_per_count():
    backends.register("faulty_gpu", "planted_backends:FaultyGpuBackend")
    sweep = Sweep("t", (PROBLEM,), threads=(1, 2),
                  backends=(AlgorithmChoice("cpu", ("im2col",)),
                            AlgorithmChoice("faulty_gpu", ("quotes_a_fault",))))
    points = runner.plan(sweep).points
    assert sorted((p.backend, p.threads) for p in points) == [
        ("cpu", 1), ("cpu", 2), ("faulty_gpu", threads.ALL)]


@pytest.mark.parametrize("given, expected", [(["1", "all"], (1, threads.ALL)), (["2"], (2,))])
def test_threads_flag_values(given, expected):
    sweep = sweep_with_overrides(load_suite("quick"), threads=given)
    assert sweep.threads == expected


@pytest.mark.parametrize("given, words", [(["0"], "positive integer"), (["two"], "'two'"),
                                          (["1", "1"], "twice")])
def test_bad_thread_counts_name_the_flag_and_the_value(given, words):
    with pytest.raises(SuiteError) as caught:
        sweep_with_overrides(load_suite("quick"), threads=given)
    assert "--threads" in str(caught.value) and words in str(caught.value)


def test_bad_threads_on_the_command_line_is_one_line_and_exit_2(capsys, tmp_path):
    code = main(["run", "quick", "--threads", "none", "--out", str(tmp_path / "r.parquet")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--threads" in err and "none" in err
    assert not list(tmp_path.iterdir())


def test_a_file_older_than_the_column_reads_as_the_default(tmp_path):
    m = runner.run_point(_point(threads.ALL, backend="cpu"))
    row = schema.to_row(m, "r", "s", {}, schema.finished_now())
    del row["threads"]
    path = tmp_path / "old.parquet"
    pd.DataFrame([row]).to_parquet(path)
    assert store.load(path)["threads"].tolist() == [threads.ALL]


def test_a_sweep_over_thread_counts_shows_them_apart(capsys, tmp_path):
    out = tmp_path / "t.parquet"
    code = main(["run", "quick", "--backend", "cpu", "--algorithm", "im2col", "--direction", "fwd",
                 "--threads", "1,2", "--budget-ms", "5", "--out", str(out)])
    assert code == 0
    df = store.load(out)
    assert sorted(set(df["threads"])) == [1, 2]
    assert df.groupby("threads").size().nunique() == 1     # every layer at both counts
    table = capsys.readouterr().out
    assert "threads" in table.split("best verified algorithm per layer")[1].splitlines()[1]


def test_without_threadpoolctl_a_thread_count_is_refused_in_one_line(capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(threads, "missing_library", lambda: "setting a thread count needs "
                                                            "threadpoolctl (planted)")
    code = main(["run", "quick", "--backend", "cpu", "--threads", "1",
                 "--out", str(tmp_path / "r.parquet")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "threadpoolctl" in err
    assert main(["run", "quick", "--backend", "cpu", "--algorithm", "im2col", "--direction",
                 "fwd", "--budget-ms", "5", "--out", str(tmp_path / "d.parquet")]) == 0
