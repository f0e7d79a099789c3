"""Points an algorithm computes alike (Algorithm.computes_as: the graph API's tf32 as fp32) are
measured once, beside each other, and each row is judged by its own precision (issue 39: one
tf32 graph-API row per plan, no duplicate timing)."""
from __future__ import annotations

from typing import ClassVar

import pytest

from harness import backends, precision, runner
from harness.backends.fake import FakeBackend, FakeExact
from harness.problem import ConvProblem
from harness.sweep import AlgorithmChoice, Sweep, TimingOptions

PROBLEM = ConvProblem(2, 8, 8, 8, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")
TIMING = TimingOptions(min_samples=5, max_samples=10, budget_ms=50.0, gpu_processes=1,
                       cpu_rounds=1)


class AlikePlans(FakeExact):
    """Expanding; fp32 and tf32 are one computation, as in the graph API. Plans: (name, relative
    error); `prepared` counts prepare calls per (plan, precision asked)."""
    backend = "alike"
    name = "plans"
    expands = True
    PLANS: ClassVar[list[tuple[str, float]]] = []
    prepared: ClassVar[list[tuple[str, str]]] = []
    SPEED: ClassVar[dict[str, float]] = {}      # GFLOP/s by plan, where not the fake's 100

    def supports(self, point):
        return None if point.precision in ("fp32", "tf32") else "fp32 and tf32 only"

    computed_as: ClassVar[dict[str, str]] = {"tf32": "fp32"}

    def variants(self, point, data):
        return [name for name, _ in self.PLANS]

    def prepare(self, point, data):
        AlikePlans.prepared.append((point.algorithm, point.precision))
        prepared = super().prepare(point, data)
        prepared.perturbation = dict(self.PLANS)[point.algorithm]
        prepared.gflops = self.SPEED.get(point.algorithm, prepared.gflops)
        return prepared


class AlikeBackend(FakeBackend):
    name = "alike"

    def algorithms(self):
        return [AlikePlans()]


@pytest.fixture
def alike(monkeypatch):
    backends.register("alike", f"{__name__}:AlikeBackend")
    monkeypatch.setattr(AlikePlans, "prepared", [])
    k = PROBLEM.reduction_length("fwd")
    tf32_level = (precision.tolerance("fp32", k, 1.0) * precision.tolerance("tf32", k, 1.0)) ** .5
    monkeypatch.setattr(AlikePlans, "PLANS", [("exact", 0.0), ("tensor_core", tf32_level),
                                              ("broken", 0.5)])


def _sweep(**axes) -> Sweep:
    # the fake backend between them in the sweep, as torch_gpu sits between cudnn_graph's fp32
    # and tf32 points in the GPU default
    axes = {"precisions": ("fp32", "tf32"), **axes}
    return Sweep("alike", (PROBLEM,), directions=("fwd", "bwd_data"),
                 backends=(AlgorithmChoice("alike"), AlgorithmChoice("fake", ("exact",))),
                 timing=TIMING, **axes)


def test_precisions_computed_alike_are_planned_side_by_side_and_grouped(alike):
    points = runner.plan(_sweep()).points
    grouped = [[(p.backend, p.precision, p.direction) for p in g] for g in runner.groups(points)]
    for direction in ("fwd", "bwd_data"):
        assert [("alike", "fp32", direction), ("alike", "tf32", direction)] in grouped
    assert [("fake", "tf32", "fwd")] in grouped          # others keep a group per precision


def test_each_plan_is_measured_once_and_each_row_judged_by_its_precision(alike):
    rows = []
    runner.run_points(runner.plan(_sweep(workspace_limits=(0, None))).points, rows.append)
    mine = [m for m in rows if m.point.backend == "alike"]
    assert sorted(AlikePlans.prepared) == sorted(
        (plan, "fp32") for plan in ("exact", "tensor_core", "broken") for _ in range(2))
    by = {(m.point.algorithm, m.point.precision, m.point.direction,
           m.point.workspace_limit): m for m in mine}
    assert len(by) == 3 * 2 * 2 * 2
    for (plan, asked, direction, limit), m in by.items():
        twin = by[plan, "fp32", direction, limit]
        if plan == "broken":
            assert m.status == "wrong" and str(m.point.precision) in m.reason
            continue
        assert m.ok and m.samples_ms == twin.samples_ms      # one measurement, both rows
        assert m.extras.get("measured_with") == (None if asked == "fp32" else "fp32")
        # its own precision's standard: tf32's tolerance is thousands of times fp32's
        assert (m.tolerance > 100 * twin.tolerance) == (asked == "tf32")
    assert by["exact", "fp32", "fwd", None].effective_precision == "fp32"
    assert by["tensor_core", "fp32", "fwd", None].effective_precision == "tf32"
    assert {by[p, "tf32", "fwd", None].effective_precision
            for p in ("exact", "tensor_core")} == {"tf32"}


def test_a_precision_alone_is_measured_as_itself(alike):
    rows = []
    runner.run_points(runner.plan(_sweep(precisions=("tf32",))).points, rows.append)
    mine = [m for m in rows if m.point.backend == "alike" and m.ok]
    assert mine and all("measured_with" not in m.extras for m in mine)
    assert {asked for _, asked in AlikePlans.prepared} == {"tf32"}


def test_the_race_is_keyed_on_what_the_measured_precision_delivered(alike, monkeypatch):
    """Whatever the order of a group's points: the exact plan, ten times slower than the tensor
    core plan, is still the fp32 point's only plan that delivers fp32, so it is timed in full
    (raced against the tf32 plan it would have been, where tf32 came first in the group)."""
    from dataclasses import replace

    from harness.executor import PointExecutor
    from harness.sweep import Point
    monkeypatch.setattr(AlikePlans, "PLANS", AlikePlans.PLANS[1::-1])   # tensor_core first
    monkeypatch.setattr(AlikePlans, "SPEED", {"tensor_core": 1000.0})
    timing = replace(TIMING, min_samples=12, max_samples=20)
    for order in (("tf32", "fp32"), ("fp32", "tf32")):
        group = [Point(PROBLEM, "fwd", asked, "NCHW", "alike", "plans", None, timing)
                 for asked in order]
        rows = {(m.point.algorithm, m.point.precision): m for m in PointExecutor().measure(group)}
        assert rows["exact", "fp32"].effective_precision == "fp32"
        assert len(rows["exact", "fp32"].samples_ms) >= 12, order
