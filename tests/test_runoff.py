"""The runoff (harness/runoff.py): a GPU point's finalists are prepared afresh once more in each
timing process and timed again, so no finalist's time rests on where one preparation's buffers
happened to land; a fresh preparation that computes wrong makes the row wrong."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness import backends, runner, runoff
from harness.measurement import Measurement, Status
from harness.problem import ConvProblem
from harness.stopping import RACED_OUT
from harness.sweep import Point, TimingOptions

PROBLEM = ConvProblem(2, 4, 6, 6, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")
TIMING = TimingOptions(min_samples=4, max_samples=4, budget_ms=50.0, gpu_processes=1)


@pytest.fixture(autouse=True)
def placed_gpu():
    backends.register("placed_gpu", "planted_backends:PlacedGpuBackend")


def _point(algorithm: str, timing: TimingOptions = TIMING, backend: str = "placed_gpu",
           **kw) -> Point:
    return Point(PROBLEM, "fwd", "fp32", "NCHW", backend, algorithm, timing=timing, **kw)


def _run(algorithms: list[str], timing: TimingOptions = TIMING) -> dict[str, Measurement]:
    rows: list[Measurement] = []
    runner.run_points([_point(a, timing) for a in algorithms], rows.append)
    return {m.point.algorithm: m for m in rows}


def test_a_finalist_is_prepared_again_and_its_row_spans_both_placements():
    """slow_first's first placement reads 1.06 ms and every later one 1.0, as steady always
    does: decided on the first preparation it would lose by 6%; with the runoff its row holds
    both placements. `far` (2x) is no finalist and is not prepared again."""
    rows = _run(["slow_first", "steady", "far"])
    slow, steady, far = rows["slow_first"], rows["steady"], rows["far"]
    assert slow.samples_ms == (1.06,) * 4 + (1.0,) * 4
    assert slow.extras["process_samples"] == "4 4" and slow.extras["runoff_preparations"] == 1
    assert slow.median_ms == pytest.approx(1.03)
    assert steady.samples_ms == (1.0,) * 8 and steady.extras["runoff_preparations"] == 1
    assert far.samples_ms == (2.0,) * 4 and "runoff_preparations" not in far.extras


def test_two_timing_processes_are_the_two_placements_and_no_runoff_runs():
    """Each of two timing processes prepares every finalist once: its row spans two placements
    already (runoff.PLACEMENTS), so none is prepared a third and fourth time."""
    assert runoff.wanted(_point("steady")) and not runoff.wanted(
        _point("steady", replace(TIMING, gpu_processes=2)))
    rows = _run(["slow_first", "steady"], replace(TIMING, gpu_processes=2))
    slow = rows["slow_first"]
    assert slow.extras["process_samples"] == "2 2"
    assert "runoff_preparations" not in slow.extras
    assert "runoff_preparations" not in rows["steady"].extras


def test_no_runoff_decides_on_the_first_measurement():
    rows = _run(["slow_first", "steady"], replace(TIMING, runoff=False))
    assert rows["slow_first"].samples_ms == (1.06,) * 4
    assert "runoff_preparations" not in rows["slow_first"].extras


def test_an_expanding_algorithms_plans_are_prepared_again_by_name():
    """The graph API's finalists are plans: each is prepared alone, by its name."""
    rows: list[Measurement] = []
    planned = _point("plans")
    runner.run_points([planned], rows.append)
    by_plan = {m.point.algorithm: m for m in rows}
    assert set(by_plan) == {"plan_slow_first", "plan_steady"}
    slow = by_plan["plan_slow_first"]
    assert slow.samples_ms == (1.06,) * 4 + (1.0,) * 4
    assert slow.planned_id == planned.point_id and slow.extras["runoff_preparations"] == 1


def test_a_fresh_preparation_that_computes_wrong_makes_the_row_wrong():
    rows = _run(["wrong_when_moved", "steady"])
    moved = rows["wrong_when_moved"]
    assert moved.status == Status.WRONG and not moved.samples_ms
    assert moved.reason.startswith("on a fresh preparation (runoff): ")
    assert rows["steady"].ok


# ---- which rows are finalists --------------------------------------------------------------------
def _row(algorithm: str, ms: float, backend: str = "placed_gpu", limit: int | None = None,
         **kw) -> Measurement:
    return Measurement(_point(algorithm, backend=backend, workspace_limit=limit), Status.OK,
                       samples_ms=(ms,) * 4, rel_error=1e-7, effective_precision="fp32", **kw)


def _names(points: list[Point]) -> set[str]:
    return {f"{p.backend}:{p.algorithm}" for p in points}


def test_finalists_are_within_the_margin_and_each_backends_fastest_two():
    rows = [_row("a", 1.0), _row("b", 1.01), _row("c", 1.02), _row("d", 1.3),
            _row("exact", 1.05, backend="fake")]
    assert _names(runoff.finalists(rows)) == {"placed_gpu:a", "placed_gpu:b", "fake:exact"}


def test_no_runoff_where_one_candidate_is_alone_near_the_top_or_the_rest_raced_out():
    assert runoff.finalists([_row("a", 1.0), _row("d", 1.3)]) == []
    raced = replace(_row("b", 1.01), stop_reason=RACED_OUT)
    assert runoff.finalists([_row("a", 1.0), raced]) == []


def test_each_workspace_limit_is_its_own_point():
    tight = [replace(m, point=replace(m.point, workspace_limit=0))
             for m in (_row("b", 1.3), _row("c", 1.31))]
    assert _names(runoff.finalists([_row("a", 1.0), *tight])) == {"placed_gpu:b",
                                                                   "placed_gpu:c"}


def test_only_a_preparation_that_ran_pytorchs_pick_joins_its_row():
    row = _row("t", 1.0, extras={"torch_kernels": "k1", "process_samples": "4"})
    other = _row("t", 0.5, extras={"torch_kernels": "k2"})
    same = _row("t", 0.9, extras={"torch_kernels": "k1"})
    key = runoff.measured_as(row.point).point_id
    assert runoff.amended([row], {key: [other]}) == [row]
    (joined,) = runoff.amended([row], {key: [other, same]})
    assert joined.samples_ms == (1.0,) * 4 + (0.9,) * 4
    assert joined.extras["process_samples"] == "4 4" and joined.extras["runoff_preparations"] == 1


def test_the_fresh_preparations_cost_is_shared_among_the_rows_they_serve():
    """Two rows of one computation (two workspace limits): each carries half of its runoff's
    stage time, so a run's time, row by row, counts it once."""
    rows = [replace(_row("a", 1.0), extras={"stage_time_ms": 4.0}),
            replace(_row("a", 1.0, limit=0), extras={"stage_time_ms": 4.0})]
    again = replace(_row("a", 1.0), extras={"stage_time_ms": 10.0, "stage_prepare_ms": 2.0})
    key = runoff.measured_as(rows[0].point).point_id
    for row in runoff.amended(rows, {key: [again]}):
        assert row.extras["stage_time_ms"] == 9.0 and row.extras["stage_prepare_ms"] == 1.0


def test_the_run_says_what_the_runoff_did():
    import pandas as pd

    from harness.analysis.stages import runoff_line
    df = pd.DataFrame({"runoff_preparations": [1, 1, None, 2]})
    assert runoff_line(df).startswith("runoff: 3 rows within 8% of their point's fastest were "
                                      "prepared afresh 4 more times")
    assert runoff_line(df.iloc[[2]]) is None


def test_a_finalist_replayed_before_is_timed_by_replay_alone_and_others_in_full():
    """A row timed by graph replay (a library that captures itself ran its eager kernels there)
    needs no second capture check on its fresh preparation; one timed by the held stream does."""
    rows = [replace(_row("a", 1.0), extras={"gpu_timer": "cuda_graph"}),
            replace(_row("b", 1.01), extras={"gpu_timer": "held_stream"})]
    seen: dict[str, object] = {}

    def measure(replicate: int, point: Point) -> list[Measurement]:
        seen[point.algorithm] = point.timing
        return []
    runoff.run(rows, measure, 1, seed=0)
    assert seen["a"].replay_checked and not seen["b"].replay_checked
    assert all(t.replicate == 1 and not t.race for t in seen.values())
