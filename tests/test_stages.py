"""Where a row's time goes (measurement.STAGE_COLUMNS): the executor records how long it spent
preparing, verifying and timing each row, a row measured in two processes sums them, and `run`
ends with one line of totals."""
from __future__ import annotations

import time

import pandas as pd

from harness import backends, process_split
from harness.backends.fake import FakeBackend, FakeExact
from harness.cli.tables import print_stages
from harness.executor import PointExecutor
from harness.measurement import STAGE_COLUMNS, Measurement
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions

PROBLEM = ConvProblem(2, 4, 8, 8, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")


def test_each_row_records_prepare_verify_and_time_and_a_slow_prepare_shows():
    backends.register("slow", "planted_backends:SlowBackend")     # 30 ms to prepare
    point = Point(PROBLEM, "fwd", "fp32", "NCHW", "slow", "exact", None,
                  TimingOptions(budget_ms=5, min_samples=3, max_samples=5))
    (row,) = PointExecutor().measure([point])
    assert row.status == "ok"
    stages = {name: row.extras[name] for name in STAGE_COLUMNS if name != "stage_list_ms"}
    assert all(ms > 0 for ms in stages.values()), stages
    assert "stage_list_ms" not in row.extras      # a plain algorithm lists no variants
    assert stages["stage_prepare_ms"] >= 30 > stages["stage_verify_ms"]


class SlowListing(FakeExact):
    """Expanding: listing its two variants takes 40 ms (a graph-API point's plan enumeration)."""
    backend, name, expands = "slow_listing", "all", True

    def variants(self, point, data):
        time.sleep(0.04)
        return ["plan_a", "plan_b"]


class SlowListingBackend(FakeBackend):
    name = "slow_listing"

    def algorithms(self):
        return [SlowListing()]


def test_listing_the_variants_is_shared_by_their_rows():
    """A graph-API point's plans are listed before its first plan is prepared: each row of the
    listing's variants and limits carries its share, so the run's stages count it once."""
    backends.register("slow_listing", f"{__name__}:SlowListingBackend")
    timing = TimingOptions(budget_ms=5, min_samples=3, max_samples=5)
    group = [Point(PROBLEM, "fwd", "fp32", "NCHW", "slow_listing", "all", limit, timing)
             for limit in (0, None)]
    rows = PointExecutor().measure(group)
    assert len(rows) == 4 and all(m.ok for m in rows)
    shares = [m.extras["stage_list_ms"] for m in rows]
    assert len(set(shares)) == 1 and 40 <= sum(shares) < 400


def test_a_wrong_row_keeps_what_it_spent_before_it_was_refused():
    point = Point(PROBLEM, "fwd", "fp32", "NCHW", "fake", "wrong_fast", None,
                  TimingOptions(budget_ms=5, min_samples=3, max_samples=5))
    (row,) = PointExecutor().measure([point])
    assert row.status == "wrong"
    assert row.extras["stage_verify_ms"] > 0 and "stage_time_ms" not in row.extras


def test_two_processes_sum_their_stages():
    backends.register("process_gpu", "planted_backends:ProcessGpuBackend")
    timing = TimingOptions(min_samples=4, max_samples=9, budget_ms=100.0, gpu_processes=2)
    point = Point(PROBLEM, "fwd", "fp32", "NCHW", "process_gpu", "exact", None, timing)
    one = {"stage_prepare_ms": 2.0, "stage_verify_ms": 3.0, "stage_time_ms": 10.0}
    two = {"stage_prepare_ms": 1.0, "stage_verify_ms": 4.0, "stage_time_ms": 12.0}
    rows = [[Measurement(point, "ok", samples_ms=(1.0, 1.1), rel_error=1e-7,
                         effective_precision="fp32", deterministic=True, extras=stages)]
            for stages in (one, two)]
    (row,) = process_split.merge([point], rows)
    assert {name: row.extras.get(name) for name in STAGE_COLUMNS} == {
        "stage_list_ms": None, "stage_prepare_ms": 3.0, "stage_verify_ms": 7.0,
        "stage_time_ms": 22.0}


def test_run_ends_with_where_the_time_went(capsys):
    df = pd.DataFrame({"stage_prepare_ms": [1000.0, 1000.0], "stage_verify_ms": [500.0, None],
                       "stage_time_ms": [4000.0, 3500.0]})
    print_stages(df, 12.0)
    line = capsys.readouterr().out.strip()
    assert line.startswith("where the 12.0 s went")
    for part in ("prepare 2.0 s (17%)", "verify 0.5 s (4%)", "time 7.5 s (62%)",
                 "other 2.0 s (17%)"):
        assert part in line
    print_stages(df.assign(stage_list_ms=0.0), 12.0)      # nothing listed (CPU): not said
    assert "list 0.0 s" not in capsys.readouterr().out
    print_stages(df.assign(stage_list_ms=[500.0, 0.0]), 12.0)
    assert "list 0.5 s (4%), prepare 2.0 s" in capsys.readouterr().out
    print_stages(pd.DataFrame({"status": ["ok"]}), 3.0)     # files from before: nothing said
    assert capsys.readouterr().out == ""


def test_stages_beyond_the_wall_leave_other_out(capsys):
    """Two timing processes (or a cluster) spend more row time than the wall clock passes."""
    df = pd.DataFrame({"stage_prepare_ms": [3000.0], "stage_verify_ms": [1000.0],
                       "stage_time_ms": [4000.0]})
    print_stages(df, 5.0)
    line = capsys.readouterr().out
    assert line.rstrip().endswith("time 4.0 s (80%)")


def test_rows_of_one_call_under_several_workspace_limits_share_its_cost():
    """Three limits of one point are one prepared call: each row carries a third of its stages,
    so the run's totals count the call once (not three times)."""
    backends.register("slow", "planted_backends:SlowBackend")
    timing = TimingOptions(budget_ms=5, min_samples=3, max_samples=5)
    group = [Point(PROBLEM, "fwd", "fp32", "NCHW", "slow", "exact", limit, timing)
             for limit in (0, 1 << 20, None)]
    rows = PointExecutor().measure(group)
    assert len(rows) == 3 and all(r.status == "ok" for r in rows)
    prepare = [r.extras["stage_prepare_ms"] for r in rows]
    assert len(set(prepare)) == 1 and 10 <= sum(prepare) and prepare[0] < 30


def test_a_resumed_sitting_says_what_the_plan_limit_left_out_of_the_whole_run(capsys):
    """A point whose two plans were measured one in each sitting: the sitting alone reads as
    a plan limit that was never set; the whole run does not."""
    whole = pd.DataFrame({"planned_point_id": ["p", "p"], "algorithm": ["eng0", "eng1"],
                          "plans_offered": [2, 2], "status": ["ok", "ok"],
                          "stage_prepare_ms": [1000.0, 1000.0], "stage_time_ms": [500.0, 500.0]})
    sitting = whole.iloc[1:]
    print_stages(sitting, 3.0)
    assert "plan limit: 1 of 1 points" in capsys.readouterr().out
    print_stages(sitting, 3.0, whole=whole)
    out = capsys.readouterr().out
    assert "plan limit" not in out and "prepare 1.0 s (33%)" in out
