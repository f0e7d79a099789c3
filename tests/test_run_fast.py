"""conftest's run_fast, through which the GPU tests measure: it times every planned point with
FAST (one worker process, a few samples), not with the sample floor runner.plan gives a run's
points; at the floor and two processes the GPU tests took 608 s on an H100 (issue 38). Run here
on the fake backend, so it holds without a GPU."""
from __future__ import annotations

from dataclasses import replace

from harness import runner
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, AlgorithmChoice, Sweep

SWEEP = Sweep("fast", (ConvProblem(1, 4, 6, 6, 4, 3, 3, name="tiny"),), directions=DIRECTIONS,
              precisions=("fp32", "fp64"), backends=(AlgorithmChoice("fake"),))


def test_run_fast_measures_every_planned_point_with_fast_timing(run_fast):
    planned = runner.plan(SWEEP).points
    # what a run would time with: the floor, above FAST's few samples, and two processes
    assert {(p.timing.min_samples > run_fast.timing.min_samples, p.timing.gpu_processes)
            for p in planned} == {(True, 2)}
    cold = replace(run_fast.timing, mode="cold")
    rows = run_fast(SWEEP, mode="cold")
    assert sorted(m.point.point_id for m in rows) == sorted(
        replace(p, timing=cold).point_id for p in planned)
    assert {m.point.timing for m in rows} == {cold}
    assert run_fast.timing.gpu_processes == 1 and run_fast.timing.max_samples <= 5


def test_measure_keeps_the_timing_the_points_were_planned_with(run_fast):
    planned = runner.plan(SWEEP).points
    rows = run_fast.measure(planned)
    assert {m.point.timing for m in rows} == {planned[0].timing}
    assert len(rows) == len(planned)
