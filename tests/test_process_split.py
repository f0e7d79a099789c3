"""harness.process_split: a GPU point's samples shared among worker processes, merged into one
row; and compare's process rule, which keeps a row whose processes disagree from being called a
regression by a jump of that size (issue 13)."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from harness import backends, process_split, runner, store
from harness.compare import Verdict, compare
from harness.compare import rows as compare_rows
from harness.measurement import Measurement
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions

PROBLEM = ConvProblem(2, 4, 8, 8, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")
TIMING = TimingOptions(min_samples=5, max_samples=9, budget_ms=100.0, gpu_processes=2)


def _point(algorithm: str = "exact", backend: str = "process_gpu",
           timing: TimingOptions = TIMING) -> Point:
    return Point(PROBLEM, "fwd", "fp32", "NCHW", backend, algorithm, None, timing)


def _ok(point: Point, samples, rel: float = 1e-7, **kw) -> Measurement:
    return Measurement(point, "ok", samples_ms=tuple(samples), rel_error=rel,
                       effective_precision="fp32", deterministic=True, **kw)


# ---- sharing and merging -------------------------------------------------------------------------
def test_each_process_takes_its_share_and_the_row_keeps_at_least_what_was_asked():
    shared = process_split.share(replace(TIMING, min_samples=19, max_samples=1000), 2)
    assert (shared.min_samples, shared.max_samples, shared.budget_ms) == (10, 500, 50.0)
    assert process_split.share(TIMING, 1) == TIMING


def test_each_replicate_knows_which_it_is_and_only_the_first_asks_for_policies():
    group = [_point(), _point("other")]
    assert [p.timing.replicate for p in process_split.shared_group(group, 2, 1)] == [1, 1]
    assert [p.timing.replicate for p in process_split.shared_group(group, 2)] == [0, 0]
    from harness.backends.cudnn import legacy
    assert legacy.NO_CHOICES.heuristic == [] and legacy.NO_CHOICES.found == []


def test_a_cpu_point_has_rounds_a_gpu_point_processes():
    point = replace(_point(), timing=replace(TIMING, gpu_processes=3, cpu_rounds=2))
    assert process_split.replicates(point, "cuda") == 3
    assert process_split.replicates(point, "cpu") == 2


def test_merged_cpu_rounds_keep_the_worst_contention_and_every_retake():
    point = _point()
    quiet = _ok(point, [1.0, 1.1], extras=dict(contended=False, samples_retaken=1,
                                                cpu_wait=0.01, cpu_time_ratio=1.9))
    busy = _ok(point, [3.0, 3.1], extras=dict(contended=True, samples_retaken=5, cpu_wait=0.6,
                                               cpu_time_ratio=0.9))
    busy = replace(busy, reason="shared the CPU: 2 of 2 samples waited")
    (row,) = process_split.merge([point], [[quiet], [busy]])
    assert row.extras["contended"] is True and row.extras["samples_retaken"] == 6
    assert (row.extras["cpu_wait"], row.extras["cpu_time_ratio"]) == (0.6, 0.9)
    assert "2 of 2 samples waited" in row.reason


def test_merged_row_has_every_process_samples_in_order_and_the_planned_timing():
    point = _point()
    shared = process_split.shared_group([point], 2)[0]
    (row,) = process_split.merge([point], [[_ok(shared, [1.0, 1.1, 1.2])],
                                           [_ok(shared, [2.0, 2.1], rel=3e-7)]])
    assert row.samples_ms == (1.0, 1.1, 1.2, 2.0, 2.1)
    assert row.extras["process_samples"] == "3 2"
    assert row.point == point and row.rel_error == 3e-7


def test_a_wrong_output_in_any_process_makes_the_row_wrong():
    point = _point()
    wrong = Measurement(point, "wrong", "relative L2 error 0.1 exceeds the fp32 tolerance")
    (row,) = process_split.merge([point], [[_ok(point, [1.0])], [wrong]])
    assert row.status == "wrong" and "its replicates saw: ok, wrong" in row.reason


def test_a_crash_in_one_process_is_the_planned_point_crash_alone():
    planned = _point("all_plans", "plans")
    variant = replace(planned, algorithm="plan_fast")
    first = [replace(_ok(variant, [1.0]), planned_point_id=planned.point_id)]
    crash = [Measurement(planned, "crashed", "worker process died (exit code -9)")]
    rows = process_split.merge([planned], [first, crash])
    assert [(r.point.point_id, r.status) for r in rows] == [(planned.point_id, "crashed")]


def test_a_variant_only_one_process_offered_is_not_a_half_measured_ok_row():
    planned = _point("all_plans", "plans")
    variant = replace(planned, algorithm="plan_fast")
    row = replace(_ok(variant, [1.0]), planned_point_id=planned.point_id)
    (merged,) = process_split.merge([planned], [[row], []])
    assert merged.status == "failed" and "1 of 2 worker processes" in merged.reason


# ---- PyTorch's pick per process (issue 38) ------------------------------------------------------
def _torch_rows(kernels, samples=([1.0, 1.1, 1.2], [2.0, 2.1])):
    point = _point("cudnn_benchmark", "torch_gpu")
    return point, [[_ok(point, s, extras={} if k is None else
                        {"torch_kernels": k, "torch_kernels_ms": 0.9})]
                   for k, s in zip(kernels, samples)]


def test_processes_that_ran_different_pytorch_picks_give_process_1s_time_and_say_so():
    point, measured = _torch_rows(["gemm<64>", "winograd<4x4>"])
    (row,) = process_split.merge([point], measured)
    assert row.samples_ms == (1.0, 1.1, 1.2) and row.median_ms == 1.1   # never a mixture
    assert row.extras["process_samples"] == "3"
    assert row.extras["torch_pick_stable"] is False
    assert row.extras["torch_picks"] == "gemm<64> || winograd<4x4>"
    assert row.extras["torch_pick_ms"] == "1.1 2.05"
    assert row.extras["torch_kernels"] == "gemm<64>"
    assert row.reason == ("PyTorch's pick is unstable here: process 1 ran gemm<64> (1.1 ms), "
                          "process 2 ran winograd<4x4> (2.05 ms); the row's time is process 1's "
                          "pick")
    stored = store.to_row(row, "run", "suite", {}, "now")
    assert stored["torch_pick_stable"] is False and stored["median_ms"] == 1.1
    assert process_split.process_groups(stored["samples_ms"], stored["process_samples"]) == [
        [1.0, 1.1, 1.2]]


def test_processes_that_ran_the_same_pytorch_pick_are_merged_as_before():
    point, measured = _torch_rows(["gemm<64>", "gemm<64>"])
    (row,) = process_split.merge([point], measured)
    assert row.samples_ms == (1.0, 1.1, 1.2, 2.0, 2.1) and row.reason == ""
    assert row.extras["torch_pick_stable"] is True and "torch_picks" not in row.extras


@pytest.mark.parametrize("kernels", [[None, None], ["gemm<64>", None]])
def test_a_pick_not_recorded_in_every_process_is_merged_as_before(kernels):
    point, measured = _torch_rows(kernels)
    (row,) = process_split.merge([point], measured)
    assert row.samples_ms == (1.0, 1.1, 1.2, 2.0, 2.1) and row.reason == ""
    assert "torch_pick_stable" not in row.extras and row.extras["process_samples"] == "3 2"


def test_stored_rows_split_back_into_their_processes():
    assert process_split.process_groups([1, 2, 3, 4, 5], "3 2") == [[1, 2, 3], [4, 5]]
    assert process_split.process_groups([1, 2, 3], None) == [[1, 2, 3]]
    assert process_split.process_groups([1, 2, 3], "2 2") == [[1, 2, 3]]   # does not add up


# ---- end to end through the worker processes -----------------------------------------------------
@pytest.fixture
def process_gpu():
    backends.register("process_gpu", "planted_backends:ProcessGpuBackend")


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_a_gpu_point_is_timed_in_as_many_worker_processes_as_asked(process_gpu, processes):
    """The planted backend's samples are the pid of the process that took them."""
    point = _point(timing=replace(TIMING, gpu_processes=processes))
    rows: list[Measurement] = []
    runner.run_points([point], rows.append)
    (row,) = rows
    assert row.ok and row.point == point
    groups = process_split.process_groups(row.samples_ms, row.extras.get("process_samples"))
    pids = {round(s * 1e3) for s in row.samples_ms}
    assert len(groups) == processes and len(pids) == processes and os.getpid() not in pids
    assert all(len(set(g)) == 1 for g in groups)           # each group from one process
    assert len(row.samples_ms) >= TIMING.min_samples
    stored = store.to_row(row, "run", "suite", {}, "now")
    assert stored["process_samples"] == " ".join(str(len(g)) for g in groups)


# ---- compare's process rule ----------------------------------------------------------------------
def _frame(rows: dict[str, tuple[list[list[float]], bool]]) -> pd.DataFrame:
    """point id -> (samples per process, whether the row says how they split)."""
    records = []
    for pid, (groups, split) in rows.items():
        records.append({"point_id": pid, "status": "ok", "reason": "", "layer": pid,
                        "samples_ms": [s for g in groups for s in g],
                        "process_samples": " ".join(str(len(g)) for g in groups) if split
                        else None, "backend": "cudnn", "algorithm": "algo_1"})
    return pd.DataFrame(records)


def _tight(ms: float, n: int, seed: int) -> list[float]:
    return (ms * np.random.default_rng(seed).lognormal(0, 0.002, n)).tolist()


def _state_pair(split: bool, jump_rows: int = 1, rows: int = 40, shift: float = 1.0,
                n: int = 10):
    """40 steady rows and rows whose time depends on the process (62 or 69 us, each process
    tight, as measured on an H100): the base run's two processes land in different states, the
    new run's both in the slow one; `n` samples a process. `shift` multiplies every new sample
    (a real regression)."""
    base, new = {}, {}
    for i in range(rows):
        base[f"r{i}"] = ([_tight(0.1, 10, i), _tight(0.1, 10, 100 + i)], split)
        new[f"r{i}"] = ([_tight(0.1 * shift, 10, 200 + i), _tight(0.1 * shift, 10, 300 + i)],
                        split)
    for j in range(jump_rows):
        base[f"j{j}"] = ([_tight(0.062, n, 400 + j), _tight(0.069, n, 500 + j)], split)
        new[f"j{j}"] = ([_tight(0.069 * shift, n, 600 + j), _tight(0.069 * shift, n, 700 + j)],
                        split)
    if not split:     # one process a run, as before the split: the base run saw the fast state
        for j in range(jump_rows):
            base[f"j{j}"] = ([_tight(0.062, 2 * n, 400 + j)], False)
    return _frame(base), _frame(new)


def _verdict_of(comparison, pid: str):
    return next(r for r in comparison.rows if r.point_id == pid)


def test_one_process_a_run_calls_a_process_state_jump_slower():
    """What the committed H100 legacy pair showed before the split: +11%, SLOWER."""
    row = _verdict_of(compare(*_state_pair(split=False)), "j0")
    assert row.verdict is Verdict.SLOWER


def test_processes_that_disagree_make_the_same_jump_ambiguous():
    """At the sample floor the pooled samples of two disagreeing processes already keep the rank
    test from calling it."""
    comparison = compare(*_state_pair(split=True))
    assert _verdict_of(comparison, "j0").verdict is Verdict.AMBIGUOUS
    assert not comparison.fails("slower")


def test_with_many_samples_the_process_rule_names_the_disagreeing_medians():
    """40 samples a process: the rank test alone would call the jump significant."""
    comparison = compare(*_state_pair(split=True, n=40))
    row = _verdict_of(comparison, "j0")
    assert row.verdict is Verdict.AMBIGUOUS, row.reason
    assert "not in every worker process (medians base 0.06196/0.06903, new" in row.reason
    assert not comparison.fails("slower")


def test_a_real_regression_moves_every_process_and_stays_slower():
    comparison = compare(*_state_pair(split=True, shift=1.10, n=40))
    assert _verdict_of(comparison, "r0").verdict is Verdict.SLOWER
    assert comparison.counts["SLOWER"] >= 40 and comparison.fails("slower")


def test_planted_fault_without_the_process_rule_the_jump_is_slower_again(monkeypatch):
    monkeypatch.setattr(compare_rows, "_process_overlap", lambda *args: None)
    row = _verdict_of(compare(*_state_pair(split=True, n=40)), "j0")
    assert row.verdict is Verdict.SLOWER


def _per_group(monkeypatch, measure) -> None:
    """Worker pools that answer each group of a message with `measure(pool, group, skip)`, and
    start no process to draw test data ahead."""
    from harness.worker import WorkerPool
    monkeypatch.setattr(WorkerPool, "measure_groups", lambda self, requests: [
        measure(self, r.group, r.skip) for r in requests])
    monkeypatch.setattr(WorkerPool, "prefetch", lambda self, group, ahead=None: None)


def test_a_group_that_crashes_one_process_is_not_sent_to_the_next(process_gpu, monkeypatch):
    """A crash (or a hang, killed after the unit timeout) would repeat in the next process:
    the rows are crashes either way, and a hung point must not cost the timeout twice."""
    calls = []

    def crash(self, group, skip=frozenset(), **_):
        calls.append(self)
        return [Measurement(p, "crashed", "worker process died (exit code -9)") for p in group]
    _per_group(monkeypatch, crash)
    rows: list[Measurement] = []
    runner.run_points([_point()], rows.append)
    assert [r.status for r in rows] == ["crashed"] and len(calls) == 1


def test_rows_that_are_not_ok_in_one_process_are_not_measured_in_the_next(process_gpu,
                                                                         monkeypatch):
    """The merged row is as bad as the worst process's, so a plan (or a whole group) with no
    ok row in process 1 is not set up, checked and timed again in process 2."""
    skips = []
    point = _point()

    def measure(self, group, skip=frozenset(), **_):
        skips.append(skip)
        rows = [Measurement(replace(p, algorithm=plan), status, "planted",
                            planned_point_id=p.point_id,
                            samples_ms=(1.0,) * 5 if status == "ok" else (),
                            rel_error=1e-7 if status == "ok" else None,
                            effective_precision="fp32" if status == "ok" else None)
                for p in group for plan, status in (("p_wrong", "wrong"), ("p_ok", "ok"))
                if plan not in skip]
        return rows
    _per_group(monkeypatch, measure)
    rows: list[Measurement] = []
    runner.run_points([point], rows.append)
    assert skips == [frozenset(), frozenset({"p_wrong"})]
    assert {r.point.algorithm: r.status for r in rows} == {"p_wrong": "wrong", "p_ok": "ok"}
    skips.clear()
    _per_group(monkeypatch, lambda self, group, skip=frozenset(), **_: (
        skips.append(skip) or [Measurement(p, "wrong", "planted") for p in group]))
    rows.clear()
    runner.run_points([point], rows.append)
    assert [r.status for r in rows] == ["wrong"] and len(skips) == 1
