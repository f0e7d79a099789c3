"""The sample floor (issue 13): every run keeps enough samples a point for `compare` to call a
single regressed row SLOWER, and the timers never stop short of it before the safety limit."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness import compare, runner, stopping, suite, timer
from harness.compare import Verdict
from harness.stats import DEFAULT_ALPHA, _u_cdf, samples_floor, smallest_p
from harness.sweep import TimingOptions


@pytest.mark.parametrize("rows, floor", [(18, 12), (200, 15), (3646, 17), (21487, 19)])
def test_samples_floor_values(rows, floor):
    assert samples_floor(rows) == floor


@pytest.mark.parametrize("rows", [1, 18, 200, 3646, 21487])
def test_samples_floor_is_the_fewest_that_survives_one_stray_sample(rows):
    n = samples_floor(rows)
    needed = DEFAULT_ALPHA / rows
    assert _u_cdf(n, n)[n] <= needed < _u_cdf(n - 1, n - 1)[n - 1]
    assert smallest_p(n, n) <= needed         # complete separation passes with room to spare


def test_samples_floor_refuses_what_the_exact_test_cannot_reach():
    with pytest.raises(ValueError, match="more than 50 samples"):
        samples_floor(10**60)
    with pytest.raises(ValueError, match="alpha"):
        samples_floor(18, alpha=0)


def test_a_regressed_row_with_a_stray_baseline_sample_is_slower_at_the_floor():
    """The floor's promise: 18 rows, one of them 10% slower, its baseline with one hiccup
    above every new sample (n inversions), is still SLOWER; the other 17 stay SAME."""
    rows = 18
    n = samples_floor(rows)
    rng = np.random.default_rng(0)
    base, new = [], []
    for i in range(rows):
        b = 1.0 + 0.002 * rng.standard_normal(n)
        nw = 1.0 + 0.002 * rng.standard_normal(n)
        if i == 0:
            nw = nw * 1.10
            b[0] = 2.0                       # a context switch in the baseline's first sample
        base.append(_row(i, b))
        new.append(_row(i, nw))
    result = compare.compare(pd.DataFrame(base), pd.DataFrame(new))
    verdicts = {r.point_id: r.verdict for r in result.rows}
    assert verdicts.pop("p0") is Verdict.SLOWER
    assert set(verdicts.values()) == {Verdict.SAME}


def _row(i: int, samples) -> dict:
    return {"point_id": f"p{i}", "status": "ok", "samples_ms": list(map(float, samples)),
            "layer": f"l{i}"}


# ---- the runner plans it ------------------------------------------------------------------------
def test_planned_quick_points_keep_the_floor():
    planned = runner.plan(suite.load_suite("quick"))
    floor = samples_floor(len(planned.points))
    assert suite.load_suite("quick").timing.min_samples < floor     # so the note must say so
    assert all(p.timing.min_samples >= floor for p in planned.points)
    assert all(p.timing.max_samples >= p.timing.min_samples for p in planned.points)
    assert any(f"min_samples raised from 3 to {floor}" in note for note in planned.notes)


def test_a_suite_above_the_floor_is_left_alone():
    timing = TimingOptions(min_samples=30, max_samples=40)
    assert runner.with_samples_floor(timing, 18) == (timing, None)


def test_the_floor_raises_max_samples_too():
    timing, note = runner.with_samples_floor(TimingOptions(min_samples=3, max_samples=5), 200)
    assert (timing.min_samples, timing.max_samples) == (15, 15)
    assert note and "200 points" in note


# ---- the timers honour it -----------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_stopping_rule_never_stops_under_the_floor_before_the_safety_limit(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(stopping, "time", clock)
    rule = stopping.StoppingRule(TimingOptions(budget_ms=1, min_samples=12, max_samples=100))
    samples = [1.0, 1.0, 1.0]                      # quiet, and far over the 1 ms budget
    for elapsed_ms in (1, 5, 100, 10_000, stopping.SAFETY_LIMIT_MS - 1):
        clock.now = elapsed_ms / 1e3
        assert rule.reason_to_stop(samples) is None
    clock.now = stopping.SAFETY_LIMIT_MS / 1e3
    assert rule.reason_to_stop(samples) == "safety_limit"
    assert rule.reason_to_stop([1.0] * 12) in ("noise_target", "budget")


def test_cpu_timer_keeps_the_floor_for_a_launch_slower_than_its_budget():
    slow = lambda: sum(range(20_000))              # noqa: E731 - well over a 0.01 ms budget
    timing = timer.time_cpu(slow, TimingOptions(budget_ms=0.01, min_samples=12, warmup=0))
    assert len(timing.samples_ms) == 12 and timing.stop_reason in ("noise_target", "budget")


def test_gpu_batches_shrink_so_the_floor_fits_the_budget():
    """Each held batch is one sample: at the floor the batches get smaller, not the run longer."""
    options = TimingOptions(budget_ms=40, min_samples=19)
    calls = timer._batch_size(20, 1.0, options, 0, None)
    assert calls == 2 and 19 * calls * 1.0 <= options.budget_ms
    assert timer._batch_size(20, 1.0, TimingOptions(budget_ms=40, min_samples=3), 0, None) == 10
