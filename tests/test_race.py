"""Racing the plans of a point (harness/stopping.py, harness/race.py): a plan whose heat is all
over the fastest plan so far is not timed in full, its row says so and by how much it lost, and
no plan that could still be the best is ever raced out."""
from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import pytest

from harness import backends, precision, stopping
from harness.backends.fake import FakeBackend, FakeExact
from harness.executor import PointExecutor
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions

PROBLEM = ConvProblem(2, 8, 8, 8, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")
TIMING = TimingOptions(min_samples=12, max_samples=20, budget_ms=100.0, gpu_processes=1)
MiB = 1 << 20


class RacePlans(FakeExact):
    """Expanding, with plans named by `PLANS`: (name, GFLOP/s, workspace, relative error)."""
    backend = "race_plans"
    name = "all"
    expands = True
    PLANS: ClassVar[list[tuple[str, float, int, float]]] = []

    def variants(self, point, data):
        return [name for name, *_ in self.PLANS]

    def prepare(self, point, data):
        speed, workspace, error = next(p[1:] for p in self.PLANS if p[0] == point.algorithm)
        prepared = super().prepare(point, data)
        prepared.gflops, prepared.workspace_bytes, prepared.perturbation = \
            speed, workspace, error
        return prepared


class RacePlansBackend(FakeBackend):
    name = "race_plans"

    def algorithms(self):
        return [RacePlans()]


@pytest.fixture
def plans(monkeypatch):
    backends.register("race_plans", f"{__name__}:RacePlansBackend")

    def with_plans(*plans):
        monkeypatch.setattr(RacePlans, "PLANS", [(*p, 0, 0.0)[:4] if len(p) < 4 else p
                                                 for p in plans])
    return with_plans


def _rows(timing=TIMING, limits=(None,)):
    group = [Point(PROBLEM, "fwd", "fp32", "NCHW", "race_plans", "all", limit, timing)
             for limit in limits]
    return {(m.point.algorithm, m.point.workspace_limit): m
            for m in PointExecutor().measure(group)}


def test_a_plan_far_slower_than_the_fastest_so_far_is_raced_out_and_says_by_how_much(plans):
    plans(("fast", 300.0), ("near", 270.0), ("slow", 30.0))
    rows = _rows()
    fast, near, slow = (rows[name, None] for name in ("fast", "near", "slow"))
    assert fast.ok and near.ok and slow.ok
    assert len(fast.samples_ms) >= 12 and len(near.samples_ms) >= 12   # within the margin
    assert slow.stop_reason == stopping.RACED_OUT
    assert len(slow.samples_ms) == stopping.RACE_SAMPLES
    assert slow.extras["raced_out_by"] == pytest.approx(10.0, rel=0.1)
    assert slow.extras["raced_against"] == "fast"
    assert "raced out after 4 samples" in slow.reason and "fast" in slow.reason
    assert "raced_out_by" not in near.extras and stopping.RACED_OUT not in near.reason


def test_without_the_race_every_plan_is_timed_in_full(plans):
    plans(("fast", 300.0), ("slow", 30.0))
    rows = _rows(replace(TIMING, race=False))
    assert all(len(m.samples_ms) >= 12 and m.stop_reason != stopping.RACED_OUT
               for m in rows.values())


def test_a_plan_met_before_any_faster_one_is_timed_in_full(plans):
    plans(("slow", 30.0), ("fast", 300.0))
    rows = _rows()
    assert all(len(m.samples_ms) >= 12 for m in rows.values())


def test_a_plan_over_the_tightest_limit_sets_no_bar(plans):
    # At limit 0 the slow plan is the only one that fits: it is that point's best, so the
    # hungry fast plan, measured first, must not race it out.
    plans(("fast_hungry", 300.0, 64 * MiB, 0.0), ("slow", 30.0, 0, 0.0))
    rows = _rows(limits=(0, None))
    assert rows["fast_hungry", 0].status == "workspace_exceeded"
    assert rows["slow", 0].ok and len(rows["slow", 0].samples_ms) >= 12


def test_plans_race_only_plans_that_delivered_the_same_precision(plans):
    # A plan that computes at tf32 accuracy is ranked with tf32, never with fp32: the fp32 plan,
    # ten times slower, is still the fp32 point's best and is timed in full.
    k = PROBLEM.reduction_length("fwd")
    error = (precision.tolerance("fp32", k, 1.0) * precision.tolerance("tf32", k, 1.0)) ** 0.5
    plans(("fast_tf32", 300.0, 0, error), ("slow_fp32", 30.0, 0, 0.0))
    rows = _rows()
    assert rows["fast_tf32", None].effective_precision == "tf32"
    assert rows["slow_fp32", None].effective_precision == "fp32"
    assert len(rows["slow_fp32", None].samples_ms) >= 12


@pytest.mark.parametrize("samples, expected", [
    ([2.0] * 3, False),                     # the heat is not over
    ([2.0] * 4, True),                      # every sample over the bar
    ([2.0, 2.0, 2.0, 1.1], False),          # one sample within it: it could still win
    ([2.0] * 12, False),                    # at the floor a plan is timed in full anyway
])
def test_the_heat_races_a_plan_out_only_when_every_sample_lost(samples, expected):
    options = replace(TIMING, race_bar_ms=1.2)
    assert stopping.raced_out(samples, options) is expected
    assert stopping.raced_out(samples, replace(options, race_bar_ms=None)) is False


@pytest.mark.parametrize("over_the_line, first_replay, expected", [
    ([1.05], True, True),           # a first replayed sample over the bar by the factor
    ([0.95], True, False),          # over the bar, within the factor: the heat decides
    ([1.05], False, False),         # a first sample in stream order or on a CPU: the heat
    ([1.05, 1.05], True, False),    # the first sample only: after it the heat decides
    ([1.05] * 12, True, False),     # at the floor a plan is timed in full anyway
])
def test_a_graphs_first_replayed_sample_races_a_plan_far_over_the_bar(over_the_line,
                                                                      first_replay, expected):
    """The line is the bar times REPLAY_FIRST_FACTOR; samples are given as multiples of it."""
    options = replace(TIMING, race_bar_ms=1.0, race_first_replay=first_replay)
    samples = [x * stopping.REPLAY_FIRST_FACTOR for x in over_the_line]
    assert stopping.raced_out(samples, options) is expected


def test_a_plan_raced_out_in_one_process_says_by_how_much_it_lost_in_the_worst():
    from harness import process_split
    from harness.measurement import Measurement
    point = Point(PROBLEM, "fwd", "fp32", "NCHW", "race_plans", "p", None,
                  replace(TIMING, gpu_processes=2))
    full = Measurement(point, "ok", samples_ms=(1.0,) * 6, rel_error=1e-7,
                       effective_precision="fp32", stop_reason="noise_target")
    raced = Measurement(point, "ok", samples_ms=(1.6,) * 4, rel_error=1e-7,
                        effective_precision="fp32", stop_reason=stopping.RACED_OUT,
                        extras={"raced_out_by": 1.6, "raced_against": "q"})
    for order in ([full, raced], [raced, full]):
        (row,) = process_split.merge([point], [[m] for m in order])
        assert row.extras["raced_out_by"] == 1.6 and stopping.RACED_OUT in row.stop_reason


def test_a_plan_over_the_tight_limit_is_raced_at_the_limits_it_fits(plans):
    # Both plans need 64 MiB: at limit 0 neither is ok, so the slow plan's only standing is
    # at the unlimited limit, where the fast one beats it: it is raced out there.
    plans(("fast_hungry", 300.0, 64 * MiB, 0.0), ("slow_hungry", 30.0, 64 * MiB, 0.0))
    rows = _rows(limits=(0, None))
    assert rows["slow_hungry", 0].status == "workspace_exceeded"
    slow = rows["slow_hungry", None]
    assert slow.ok and slow.stop_reason == stopping.RACED_OUT
    assert slow.extras["raced_against"] == "fast_hungry"


# ---- a GPU backend's plain algorithms race across their groups ---------------------------------
@pytest.fixture
def racing_gpu():
    backends.register("racing_gpu", "planted_backends:RacingGpuBackend")


def _racing_points(order, timing=TIMING, limits=(None,)):
    return [Point(PROBLEM, "fwd", "fp32", "NCHW", "racing_gpu", name, limit, timing)
            for name in order for limit in limits]


def _in_one_executor(points):
    executor = PointExecutor()
    from harness.runner import groups
    return {(m.point.algorithm, m.point.workspace_limit): m
            for group in groups(points) for m in executor.measure(group)}


def test_a_gpu_algorithm_far_slower_than_one_before_it_is_raced_out(racing_gpu):
    rows = _in_one_executor(_racing_points(["fast", "slow"]))
    fast, slow = rows["fast", None], rows["slow", None]
    assert len(fast.samples_ms) >= 12 and fast.stop_reason != stopping.RACED_OUT
    assert slow.ok and slow.stop_reason == stopping.RACED_OUT
    assert len(slow.samples_ms) == stopping.RACE_SAMPLES
    assert slow.extras["raced_against"] == "fast" and "raced out after 4" in slow.reason
    # met first, the slow algorithm is timed in full; and without the race nothing is raced
    first = _in_one_executor(_racing_points(["slow", "fast"]))
    assert all(len(m.samples_ms) >= 12 for m in first.values())
    off = _in_one_executor(_racing_points(["fast", "slow"], replace(TIMING, race=False)))
    assert all(m.stop_reason != stopping.RACED_OUT for m in off.values())


def test_a_gpu_algorithm_over_a_limit_races_no_algorithm_at_that_limit(racing_gpu):
    # hungry needs 64 MiB: at limit 0 fast is the best and must be timed in full; at the
    # unlimited limit slow is raced out by fast (hungry's group has a limit it does not fit).
    rows = _in_one_executor(_racing_points(["hungry", "fast", "slow"], limits=(0, None)))
    assert rows["hungry", 0].status == "workspace_exceeded"
    assert len(rows["fast", 0].samples_ms) >= 12
    assert rows["slow", None].stop_reason == stopping.RACED_OUT
    assert rows["slow", None].extras["raced_against"] == "fast"


def test_cpu_algorithms_never_race_across_groups(plans):
    # The CPU's plain algorithms are measured in rounds that would race one another.
    from harness.backends.fake import FakeExact, FakeExactSlow
    assert FakeExact.gflops > FakeExactSlow.gflops
    points = [Point(PROBLEM, "fwd", "fp32", "NCHW", "fake", name, None, TIMING)
              for name in ("exact", "exact_slow")]
    rows = _in_one_executor(points)
    assert all(len(m.samples_ms) >= 12 for m in rows.values())


def test_a_second_process_times_only_what_the_first_did_not_race_out(racing_gpu):
    from harness import process_split, runner
    rows = []
    timing = replace(TIMING, gpu_processes=2)
    runner.run_points(_racing_points(["fast", "slow"], timing), rows.append)
    by_name = {m.point.algorithm: m for m in rows}
    fast, slow = by_name["fast"], by_name["slow"]
    assert fast.ok and len(fast.extras["process_samples"].split()) == 2     # both processes
    assert slow.ok and slow.stop_reason == stopping.RACED_OUT      # not "measured in 1 of 2"
    assert slow.extras["process_samples"] == str(stopping.RACE_SAMPLES)
    assert process_split.process_groups(slow.samples_ms, slow.extras["process_samples"]) == [
        list(slow.samples_ms)]


# ---- a point's candidates measured in their library's order (issue 39) -------------------------
@pytest.fixture
def ranked_gpu():
    backends.register("ranked_gpu", "planted_backends:RankedGpuBackend")


def _ranked(names, timing=TIMING):
    from harness.worker import Request
    return [Request([Point(PROBLEM, "fwd", "fp32", "NCHW", "ranked_gpu", name, None, timing)])
            for name in names]


def test_the_worker_measures_first_what_the_library_ranks_first(ranked_gpu):
    """Given slow before fast, the worker times fast first (cuDNN ranks it first), so slow is
    raced out after its heat; each request still gets its own rows."""
    from harness.worker import WorkerPool
    pool = WorkerPool()
    try:
        (slow,), (fast,) = pool.measure_groups(_ranked(["slow", "fast"]))
    finally:
        pool.close()
    assert (slow.point.algorithm, fast.point.algorithm) == ("slow", "fast")
    assert fast.ok and len(fast.samples_ms) >= 12
    assert slow.ok and slow.stop_reason == stopping.RACED_OUT
    assert slow.extras["raced_against"] == "fast"


def test_a_ranking_that_fails_leaves_the_order_given(ranked_gpu):
    from harness.executor import PointExecutor
    groups = [r.group for r in _ranked(["rank_fails", "slow", "fast"])]
    assert PointExecutor().race_order(groups) == [2, 1, 0]
    assert PointExecutor().race_order(groups[:1] + groups[:1]) == [0, 1]


def test_a_ranking_that_hangs_costs_its_time_and_no_row(ranked_gpu, monkeypatch):
    """The worker hangs naming its order: it is replaced and the same groups go again, measured
    in the order given, so every row is measured."""
    from harness import worker
    monkeypatch.setattr(worker, "ORDER_TIMEOUT_S", 2.0)
    pool = worker.WorkerPool()
    try:
        (hung,), (fast,) = pool.measure_groups(_ranked(["rank_hangs", "fast"]))
    finally:
        pool.close()
    assert hung.ok and fast.ok and fast.stop_reason != stopping.RACED_OUT


def test_a_later_timing_process_does_not_rank(ranked_gpu):
    from harness.executor import PointExecutor
    later = replace(TIMING, replicate=1)
    groups = [r.group for r in _ranked(["slow", "fast"], later)]
    assert PointExecutor().race_order(groups) == [0, 1]


def test_a_legacy_algorithms_rank_is_its_place_among_what_cudnn_offers():
    """CudnnAlgorithm.race_rank, without a GPU: the _v7 list (algo, status, memory) ranks the
    algorithms it offers with status 0; one it lists as failing, or not at all, is unranked."""
    from harness.backends.cudnn.legacy import CudnnAlgorithm

    class Session:
        def heuristic(self, point):
            return [(1, 0, 0), (0, 0, 64), (2, 3, 0)]      # algo_1, algo_0, then fft failing

    class Owner:
        def session(self):
            return Session()
    point = Point(PROBLEM, "bwd_data", "fp32", "NCHW", "cudnn", "algo_0")
    ranks = {name: CudnnAlgorithm(name, Owner()).race_rank(point)
             for name in ("algo_0", "algo_1", "fft", "winograd")}
    assert ranks == {"algo_0": 1, "algo_1": 0, "fft": None, "winograd": None}


def test_a_row_raced_out_by_its_probe_says_how():
    """The graph timer's probe (one stream-ordered sample, harness/timer.py) has a note of its
    own: its bar is PROBE_RACE_FACTOR higher than the heat's."""
    from harness.race import Race
    from harness.timer import Timing
    race = Race()
    race.finished("fast", "fp32", Timing((1.0,) * 12, "noise_target"), 0)
    probe = Timing((3.0,), stopping.RACED_OUT, gpu_timer="held_stream")
    columns, note = race.row_notes("fp32", probe, None)
    assert columns == {"raced_out_by": 3.0, "raced_against": "fast"}
    assert note.startswith("raced out by its probe (its calls in stream order): 3 ms, 3.00x")
    assert "under 2.4x of that plus 50 us in its probe is replayed" in note
    heat = Timing((3.0,) * stopping.RACE_SAMPLES, stopping.RACED_OUT, gpu_timer="cuda_graph")
    assert race.row_notes("fp32", heat, None)[1].startswith("raced out after 4 samples")
    first = Timing((3.0,), stopping.RACED_OUT, gpu_timer="cuda_graph")
    assert race.row_notes("fp32", first, None)[1].startswith(
        "raced out on its first replayed sample: 3 ms, 3.00x")
    assert "under 1.44x of that there is timed on" in race.row_notes("fp32", first, None)[1]
