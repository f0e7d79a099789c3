"""A lost CUDA context is known by the error's type and status number where it is raised
(backends.base.context_lost), never by words in a row's reason: the executor makes the point
`crashed`, and the worker process reports its whole group crashed and is replaced. The planted
faults (tests/planted_backends.py) raise the typed errors the real backends raise; the real
fault, an illegal address on a GPU, is tests/test_cudnn_gpu.py's."""
from __future__ import annotations

import sys
import time
import types
from dataclasses import replace

import pytest

from harness import backends
from harness.backends.base import CONTEXT_LOST_CODES, AlgorithmFailed, context_lost
from harness.backends.cudnn import lib as cudnn_lib
from harness.backends.cudnn.graph import frontend_status
from harness.backends.cudnn.legacy import CudnnFailed
from harness.executor import PointExecutor
from harness.measurement import Status
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions
from harness.worker import Request, WorkerPool

PROBLEM = ConvProblem(1, 4, 6, 6, 4, 3, 3, name="w")
FAST = TimingOptions(min_samples=3, max_samples=3, budget_ms=10.0)
LOST = ("CUDA context lost: CUDNN_STATUS_EXECUTION_FAILED (5000) from the convolution call: "
        "planted")
QUOTED_NAMES = ("cudaErrorIllegalAddress: an illegal memory access was encountered",
                "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
                "CUDNN_STATUS_EXECUTION_FAILED (5000) from the convolution call")


@pytest.fixture(autouse=True)
def faulty_gpu():
    backends.register("faulty_gpu", "planted_backends:FaultyGpuBackend")


def _point(algorithm: str, limit: int | None = None) -> Point:
    return Point(PROBLEM, "fwd", "fp32", "NCHW", "faulty_gpu", algorithm, limit, FAST)


# ---- classification -------------------------------------------------------------------------
@pytest.mark.parametrize("text", QUOTED_NAMES)
def test_a_message_that_merely_names_a_context_losing_error_is_a_plain_failure(text):
    assert not context_lost(AlgorithmFailed(text))
    assert not context_lost(RuntimeError(text))
    assert not context_lost(CudnnFailed(text, None))       # no status the library named


def test_cudnn_errors_lose_the_context_by_their_execution_failed_status():
    assert context_lost(CudnnFailed("any text", 5000))
    assert context_lost(CudnnFailed("any text", 5003))    # EXECUTION_FAILED_CUDART
    assert context_lost(cudnn_lib.CudnnError(5001, "cudnnGetConvolutionForwardAlgorithm_v7"))
    assert not context_lost(CudnnFailed("CUDNN_STATUS_EXECUTION_FAILED in a log", 3000))
    assert not context_lost(cudnn_lib.CudnnError(4000, "cudnnConvolutionForward"))


def _library_error(monkeypatch, module: str, name: str, attribute: str, code: int):
    """An error of a CUDA library that is 'loaded' (a stand-in module), carrying `code`."""
    kind = type(name, (RuntimeError,), {})
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    setattr(sys.modules[module], name, kind)
    err = kind(f"code {code}")
    setattr(err, attribute, code)
    return err


@pytest.mark.parametrize("module, name, attribute", [
    ("cupy_backends.cuda.api.runtime", "CUDARuntimeError", "status"),
    ("cupy_backends.cuda.api.driver", "CUDADriverError", "status"),
    ("torch", "AcceleratorError", "error_code"),
], ids=["cupy_runtime", "cupy_driver", "torch"])
def test_cuda_library_errors_lose_the_context_by_their_status_number(monkeypatch, module, name,
                                                                     attribute):
    for code in CONTEXT_LOST_CODES:
        assert context_lost(_library_error(monkeypatch, module, name, attribute, code)), code
    # out of memory, invalid value, launch out of resources, unknown: the context survives
    for code in (2, 1, 701, 999):
        assert not context_lost(_library_error(monkeypatch, module, name, attribute, code)), code


def test_torch_cudnn_failures_without_a_number_are_known_by_their_fixed_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert context_lost(RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))
    assert not context_lost(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error "
                                         "may appear if you passed in a non-contiguous input."))
    assert not context_lost(RuntimeError("a log: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))


def test_the_graph_frontend_status_is_read_back_as_cudnn_numbers():
    def frontend(code: str) -> RuntimeError:
        return RuntimeError("cudnnBackendExecute(...) failed with message: CUDNN_STATUS_BAD_PARAM "
                            f"seen earlier, and code: {code}")
    assert frontend_status(frontend("CUDNN_STATUS_EXECUTION_FAILED_CUDART")) == 5003
    assert frontend_status(frontend("CUDNN_STATUS_NOT_SUPPORTED_SHAPE")) == 3002
    assert frontend_status(frontend("CUDNN_STATUS_EXECUTION_FAILED_SOMETHING_NEW")) == 5000
    assert frontend_status(RuntimeError("no status here")) is None


# ---- executor and worker --------------------------------------------------------------------
def test_the_executor_makes_a_lost_context_crashed_and_a_quoted_name_failed():
    executor = PointExecutor()
    (lost,) = executor.measure([_point("context_lost")])
    assert (lost.status, lost.reason, lost.family) == (Status.CRASHED, LOST, "gemm")
    (quoted,) = executor.measure([_point("quotes_a_fault")])
    assert quoted.status == Status.FAILED and "cudaErrorIllegalAddress" in quoted.reason


def test_a_library_that_refuses_at_its_first_call_makes_an_unsupported_row():
    (refused,) = PointExecutor().measure([_point("refused_when_called")])
    assert refused.status == Status.UNSUPPORTED, refused.reason
    assert refused.reason == "CUDNN_STATUS_NOT_SUPPORTED (3000) from cudnnRNNForward: planted"


def test_a_worker_that_lost_its_context_is_replaced_and_the_plans_after_go_on_in_a_fresh_one():
    pool = WorkerPool()
    try:
        (quoted,) = pool.measure([_point("quotes_a_fault")])
        assert quoted.status == Status.FAILED
        first = pool._process
        assert first is not None and first.is_alive()      # a failure keeps the worker

        group = [_point("plans"), _point("plans", 0)]
        rows = pool.measure(group)
        # plan_ok was verified and timed before plan_faulty lost the context: its rows stand;
        # plan_after is measured in a fresh process
        assert _statuses(rows) == {("plan_ok", Status.OK): 2, ("plan_faulty", Status.CRASHED): 2,
                                   ("plan_after", Status.OK): 2}
        assert {m.reason for m in rows if m.status == Status.CRASHED} == {LOST}
        assert {m.planned_point_id for m in rows} == {p.point_id for p in group}
        assert not first.is_alive() and pool._process.pid != first.pid

        (again,) = pool.measure([_point("quotes_a_fault")])   # the fresh process serves on
        assert again.status == Status.FAILED
    finally:
        pool.close()


def _statuses(rows) -> dict:
    counts: dict = {}
    for m in rows:
        counts[(m.point.algorithm, m.status)] = counts.get((m.point.algorithm, m.status), 0) + 1
    return counts


def test_a_hung_plan_costs_its_own_rows_and_the_cap_not_the_point():
    """The planted plan sleeps for an hour; with a 3 s cap the pool kills the worker, gives that
    plan a crashed row naming the cap, and measures the plan after it in a fresh process."""
    pool = WorkerPool(unit_timeout_s=60.0, plan_timeout_s=3.0)
    try:
        group = [_point("hanging_plans"), _point("hanging_plans", 0)]
        rows = pool.measure(group)
        # the shorter cap, as plan_ok returned first: the reason names the cap applied
        assert _statuses(rows) == {("plan_ok", Status.OK): 2, ("plan_faulty", Status.CRASHED): 2,
                                   ("plan_after", Status.OK): 2}
        hung = {m.reason for m in rows if m.status == Status.CRASHED}
        assert hung == {"plan_faulty: no result within 3 s (another plan of this point "
                        "returned): worker killed"}
        assert {m.planned_point_id for m in rows} == {p.point_id for p in group}
        assert len({m.point.point_id for m in rows}) == len(rows)    # no row twice
    finally:
        pool.close()


def test_after_a_plan_of_an_engine_hung_its_siblings_are_not_tried_and_it_gets_the_short_cap():
    """Once eng2_k1=0 hung, eng2's other knob setting on this point is a not_tried row (no wait
    at all), and on the next point eng2's first plan waits 1 s, not the 4 s plan cap."""
    pool = WorkerPool(unit_timeout_s=60.0, plan_timeout_s=4.0, hung_engine_timeout_s=1.0)
    try:
        started = time.monotonic()
        rows = pool.measure([_point("hanging_engine")])
        assert [(m.point.algorithm, m.status) for m in rows] == [
            ("eng1_k1=0", Status.OK), ("eng2_k1=0", Status.CRASHED),
            ("eng2_k1=1", Status.NOT_TRIED), ("eng3", Status.OK)]
        assert rows[1].reason == ("eng2_k1=0: no result within 4 s (another plan of this point "
                                  "returned): worker killed")
        assert rows[2].reason == ("eng2_k1=1: not tried: eng2_k1=0 of the same engine hung on "
                                  "this point")
        assert rows[2].planned_point_id == rows[1].planned_point_id
        assert time.monotonic() - started < 4.0 * 2    # the one cap waited out, not two
        later = pool.measure([_point("hanging_engine", 0)])
        assert [(m.point.algorithm, m.status) for m in later][1:3] == [
            ("eng2_k1=0", Status.CRASHED), ("eng2_k1=1", Status.NOT_TRIED)]
        assert later[1].reason == ("eng2_k1=0: no result within 1 s (engine eng2 hung before on "
                                   "this GPU): worker killed")
        assert pool.hung_engines == {("faulty_gpu", "fwd", "fp32", "auto", "eng2")}
    finally:
        pool.close()


def test_a_resumed_run_remembers_which_engines_hung_and_that_its_point_returned(tmp_path,
                                                                                monkeypatch):
    """The hung plan's row names its engine; through the journal a resumed run starts with
    that engine hung (1 s cap on its first plan, not the 60 s unit cap) and, as plans of the
    point were measured before, gives the point's other plans the plan cap from the start."""
    from harness import runner, store, worker
    monkeypatch.setattr(worker, "UNIT_TIMEOUT_S", 60.0)
    monkeypatch.setattr(worker, "PLAN_TIMEOUT_S", 2.0)
    monkeypatch.setattr(worker, "HUNG_ENGINE_TIMEOUT_S", 1.0)
    first, second = [replace(_point("hanging_engine", limit), timing=replace(FAST, gpu_processes=1))
                     for limit in (None, 0)]
    killed = tmp_path / "r.parquet"
    writer = store.ResultWriter(killed)
    runner.run_points([first], lambda m: writer.append(store.to_row(m, "r", "t", {}, "now")),
                      on_group_done=writer.mark_done)
    writer.close()
    resumed = store.ResultWriter(killed, store.WriteMode.RESUME)
    hung = resumed.resume_state().hung_engines
    resumed.close()
    assert hung == {("faulty_gpu", "fwd", "fp32", "auto", "eng2")}
    rows: list = []
    runner.run_points([second], rows.append, hung_engines=hung)
    assert [m.reason for m in rows if m.status == Status.CRASHED] == [
        "eng2_k1=0: no result within 1 s (engine eng2 hung before on this GPU): worker killed"]
    assert rows[1].extras["hung_engine"] == "eng2"
    pool = worker.WorkerPool()
    try:    # eng1_k1=0 measured before: eng2_k1=0 waits the 2 s plan cap, not the unit cap
        rows = pool.measure([second], skip=frozenset({"eng1_k1=0"}))
        assert rows[0].reason == ("eng2_k1=0: no result within 2 s (another plan of this point "
                                  "returned): worker killed")
    finally:
        pool.close()


def test_graph_plans_name_the_engine_their_knob_settings_belong_to():
    from harness.backends.cudnn.graph import EnginesAlgorithm
    engines = EnginesAlgorithm(owner=None)
    assert engines.engine_of("eng57_k2=1_k5=3_k14=5") == engines.engine_of("eng57") == "eng57"
    assert engines.engine_of("eng5_k2=1") == "eng5" and engines.engine_of("odd") is None


def test_a_plan_that_kills_the_process_costs_its_own_rows_only():
    pool = WorkerPool()
    batches: list = []
    try:
        rows = pool.measure([_point("dying_plans")], on_rows=batches.append)
        assert _statuses(rows) == {("plan_ok", Status.OK): 1, ("plan_faulty", Status.CRASHED): 1,
                                   ("plan_after", Status.OK): 1}
        # each plan's rows are handed on as they come (the journal gets them before the next)
        assert [[m.point.algorithm for m in batch] for batch in batches] == [
            ["plan_ok"], ["plan_faulty"], ["plan_after"]]
        (died,) = [m for m in rows if m.status == Status.CRASHED]
        assert died.reason == "plan_faulty: worker process died (exit code 9)"
    finally:
        pool.close()


def test_a_plain_algorithm_that_hangs_is_one_crashed_row_per_point():
    pool = WorkerPool(unit_timeout_s=3.0)
    try:
        group = [_point("hangs"), _point("hangs", 0)]
        rows = pool.measure(group)
        assert [(m.point, m.status, m.reason) for m in rows] == [
            (p, Status.CRASHED, "no result within 3 s: worker killed") for p in group]
        (after,) = pool.measure([_point("quotes_a_fault")])    # a fresh worker serves on
        assert after.status == Status.FAILED
    finally:
        pool.close()


def test_a_setup_step_over_its_budget_is_not_tried_again_on_a_point_that_shares_its_key():
    """The planted build never returns at 8 output channels: the pool stops it at its own 1 s
    budget (the unit cap is 60 s), its rows are not_tried, and the same sizes at another batch
    are not tried at all, naming where it ran over; a fast build on other sizes is measured."""
    pool = WorkerPool(unit_timeout_s=60.0)
    big = ConvProblem(1, 4, 6, 6, 8, 3, 3, name="big")
    timing = replace(FAST, build_budget_s=1.0)
    at = {name: Point(problem, "fwd", "fp32", "NCHW", "faulty_gpu", "slow_setup", None, timing)
          for name, problem in (("big", big), ("big_batch_2", replace(big, batch=2)),
                                ("small", PROBLEM))}
    try:
        (over,) = pool.measure([at["big"]])
        (skipped,) = pool.measure([at["big_batch_2"]])
        (small,) = pool.measure([at["small"]])
    finally:
        pool.close()
    assert (over.status, over.reason) == (
        Status.NOT_TRIED, "not measured: the planted build (8 channels) ran past its 1 s budget: "
                          "worker killed (--build-budget-s waits longer)")
    assert (skipped.status, skipped.reason) == (
        Status.NOT_TRIED, "not tried: the planted build (8 channels) ran past its 1 s budget on "
                          "big fwd in this run (--build-budget-s waits longer)")
    assert small.status == Status.OK


def test_a_build_longer_than_the_unit_cap_but_within_its_budget_is_measured():
    """--build-budget-s 8 with a 3 s unit cap: the planted 4 s build runs out neither (the cap
    stands still while a build runs); at a 2 s budget the same build is not tried."""
    six = ConvProblem(1, 4, 6, 6, 6, 3, 3, name="six")
    rows = {}
    for budget in (8.0, 2.0):
        pool = WorkerPool(unit_timeout_s=3.0)
        point = Point(six, "fwd", "fp32", "NCHW", "faulty_gpu", "slow_setup", None,
                      replace(FAST, build_budget_s=budget))
        try:
            (rows[budget],) = pool.measure([point])
        finally:
            pool.close()
    assert rows[8.0].status == Status.OK, rows[8.0].reason
    assert rows[2.0].status == Status.NOT_TRIED


def test_a_setup_step_runs_unwatched_in_process_and_a_known_key_is_not_tried(monkeypatch):
    from harness import setup_budget
    (row,) = PointExecutor().measure([_point("slow_setup")])
    assert row.status == Status.OK and setup_budget._send is None
    monkeypatch.setattr(setup_budget, "_over", {("faulty_gpu", "slow_setup", 4, 4): "w fwd"})
    (row,) = PointExecutor().measure([_point("slow_setup")])
    assert (row.status, row.reason) == (
        Status.NOT_TRIED, "not tried: the planted build (4 channels) ran past its 30 s budget on "
                          "w fwd in this run (--build-budget-s waits longer)")


def test_the_pools_clock_is_not_restarted_by_a_steps_messages(monkeypatch):
    """The unit's cap runs from its start, not from the end of its setup step, and stands still
    while the step runs; the step's own budget runs from the step's start, and only then, and is
    what stops a step even where it is longer than the cap."""
    from harness import setup_budget
    now = [100.0]
    monkeypatch.setattr(setup_budget.time, "monotonic", lambda: now[0])
    clock = setup_budget.Clock()
    assert not clock.heard("start", ("v", "e"))
    now[0] = 110.0
    assert clock.heard(setup_budget.SETUP, (("k",), "the build", 30.0))
    assert clock.wait(60.0) == (30.0, True)
    assert clock.wait(5.0) == (30.0, True)            # a cap shorter than the budget: no matter
    now[0] = 130.0
    assert clock.heard(setup_budget.SETUP_DONE, None) and clock.step is None
    assert clock.wait(60.0) == (50.0, False)          # 60 s from the start, less the step's 20 s
    now[0] = 180.0
    assert clock.wait(60.0) == (0.0, False)
    clock.heard(setup_budget.SETUP, (("k",), "the build", 30.0))     # at 180
    now[0] = 185.0
    assert not clock.heard("row", None)      # a message mid-step restarts the cap, still paused
    now[0] = 200.0
    clock.heard(setup_budget.SETUP_DONE, None)
    assert clock.wait(60.0) == (60.0, False)


def test_a_plan_that_hung_in_one_process_is_not_waited_for_in_the_next(monkeypatch):
    """Timed in two processes (process_split): the hung plan costs the cap once, its row is the
    crash, and the other plans' rows merge the samples of both processes."""
    from harness import runner, worker
    monkeypatch.setattr(worker, "PLAN_TIMEOUT_S", 3.0)
    skipped = []
    measure_groups = worker.WorkerPool.measure_groups

    def recording(self, requests):
        skipped.extend(r.skip for r in requests)
        return measure_groups(self, requests)
    monkeypatch.setattr(worker.WorkerPool, "measure_groups", recording)
    point = replace(_point("hanging_plans"),
                    timing=replace(FAST, gpu_processes=2, runoff=False))
    rows: list = []
    runner.run_points([point], rows.append)
    assert skipped == [frozenset(), {"plan_faulty"}]     # the cap is waited out once
    assert _statuses(rows) == {("plan_ok", Status.OK): 1, ("plan_faulty", Status.CRASHED): 1,
                               ("plan_after", Status.OK): 1}
    assert {len(m.extras["process_samples"].split()) for m in rows if m.ok} == {2}


def test_knob_settings_not_tried_in_one_process_are_not_tried_in_the_next(monkeypatch):
    """The second process skips the hung plan and its not-tried sibling alike: the merged rows
    are the first process's crash and not_tried rows, and the other plans' samples of both."""
    from harness import runner, worker
    monkeypatch.setattr(worker, "PLAN_TIMEOUT_S", 3.0)
    point = replace(_point("hanging_engine"),
                    timing=replace(FAST, gpu_processes=2, runoff=False))
    rows: list = []
    started = time.monotonic()
    runner.run_points([point], rows.append)
    assert [(m.point.algorithm, m.status) for m in rows] == [
        ("eng1_k1=0", Status.OK), ("eng2_k1=0", Status.CRASHED),
        ("eng2_k1=1", Status.NOT_TRIED), ("eng3", Status.OK)]
    assert time.monotonic() - started < 3.0 * 2     # one cap waited out in all
    assert {len(m.extras["process_samples"].split()) for m in rows if m.ok} == {2}


def test_one_process_streams_each_plans_rows_then_marks_the_group_done():
    from harness import runner
    point = replace(_point("dying_plans"), timing=replace(FAST, gpu_processes=1, runoff=False))
    events: list = []
    runner.run_points([point], lambda m: events.append((m.point.algorithm, m.status)),
                      on_group_done=lambda ids: events.append(("done", ids)))
    assert events == [("plan_ok", Status.OK), ("plan_faulty", Status.CRASHED),
                      ("plan_after", Status.OK), ("done", [point.point_id])]


def test_a_hung_engine_is_remembered_per_op():
    """A fused graph's engine is another kernel than the plain convolution's of the same number:
    its hang must not cap the plain plans (nor the reverse)."""
    from harness import worker
    from harness.problem import ConvProblem
    from harness.sweep import Point
    p = ConvProblem(1, 8, 8, 8, 8, 3, 3)
    plain = [Point(p, "fwd", "fp16", "NHWC", "cudnn_graph", "eng1")]
    fused = [Point(p, "fwd", "fp16", "NHWC", "cudnn_graph", "eng1", op="conv_bias_relu")]
    assert worker._hung_key(plain, "eng1") != worker._hung_key(fused, "eng1")
    assert worker._hung_key(plain, "eng1") == ("cudnn_graph", "fwd", "fp16", "auto", "eng1")


def test_a_hung_engine_is_remembered_per_precision_and_result_type(tmp_path):
    """eng4 at fp8 into fp8 is another kernel than eng4 at fp16 or fp8 into fp32: a hang of one
    caps none of the others, and a resumed run reads back the same keys the pool made."""
    from harness import store, worker
    from harness.problem import ConvProblem
    from harness.sweep import Point
    p = ConvProblem(1, 8, 8, 8, 8, 3, 3)
    points = [Point(p, "fwd", "fp16", "NHWC", "cudnn_graph", "eng4"),
              Point(p, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "eng4"),
              Point(p, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "eng4", output="fp8_e4m3")]
    keys = [worker._hung_key([point], "eng4") for point in points]
    assert len(set(keys)) == 3
    rows = worker._crashed(points[2:], "hung", "eng4_k1=0", "eng4")
    path = tmp_path / "r.parquet"
    writer = store.ResultWriter(path)
    for m in rows:
        writer.append(store.to_row(m, "r", "t", {}, "now"))
    writer.close()
    resumed = store.ResultWriter(path, store.WriteMode.RESUME)
    assert resumed.resume_state().hung_engines == {keys[2]}
    resumed.close()


# ---- a point's candidates in one message (issue 39) ---------------------------------------------
def test_a_points_groups_go_in_one_message_and_a_fault_costs_its_own_group_only():
    """context_lost, hangs and quotes_a_fault are one point's three plain algorithms: one
    message carries their groups; the lost context and the hang each end their own group, and
    the groups after them are measured in fresh processes."""
    pool = WorkerPool(unit_timeout_s=3.0)
    try:
        requests = [Request([_point(name), _point(name, 0)])
                    for name in ("context_lost", "hangs", "quotes_a_fault")]
        lost, hung, quoted = pool.measure_groups(requests)
        assert [m.status for m in lost] == [Status.CRASHED] * 2 and lost[0].reason == LOST
        assert [m.reason for m in hung] == ["no result within 3 s: worker killed"] * 2
        assert [m.status for m in quoted] == [Status.FAILED] * 2
    finally:
        pool.close()


def test_the_runner_sends_each_process_a_points_candidates_at_once(monkeypatch):
    """Two timing processes: each gets the point's groups in one message (one round trip each,
    not one a group), and each group is marked done once its merged rows are out."""
    from harness import runner, worker
    sent: list = []
    measure_groups = worker.WorkerPool.measure_groups

    def recording(self, requests):
        sent.append([r.group[0].algorithm for r in requests])
        return measure_groups(self, requests)
    monkeypatch.setattr(worker.WorkerPool, "measure_groups", recording)
    timing = replace(FAST, gpu_processes=2, runoff=False)
    points = [replace(_point(name), timing=timing) for name in ("quotes_a_fault", "plans")]
    events: list = []
    runner.run_points(points, lambda m: events.append(m.point.algorithm),
                      on_group_done=lambda ids: events.append("done"))
    assert sent == [["quotes_a_fault", "plans"], ["plans"]]   # nothing ok to time again in the
    assert events == ["quotes_a_fault", "done", "plan_ok", "plan_faulty", "plan_after", "done"]


def test_the_idle_process_draws_test_data_ahead(monkeypatch):
    """While one timing process measures a point, the other draws test data: the second process
    this point's, the first the next point's."""
    from harness import runner, worker
    asked: list = []
    prefetch = worker.WorkerPool.prefetch

    def recording(self, group, ahead=None):
        asked.append((pools.index(self), group[0].problem.name))
        return prefetch(self, group, ahead)
    pools: list = []
    start = worker.WorkerPool.__init__

    def tracked(self, *args, **kwargs):
        pools.append(self)
        start(self, *args, **kwargs)
    monkeypatch.setattr(worker.WorkerPool, "prefetch", recording)
    monkeypatch.setattr(worker.WorkerPool, "__init__", tracked)
    timing = replace(FAST, gpu_processes=2, runoff=False)
    other = replace(PROBLEM, name="v", in_channels=8)
    points = [replace(_point("plans"), timing=timing),
              replace(_point("plans"), problem=other, timing=timing)]
    rows: list = []
    runner.run_points(points, rows.append)
    assert asked == [(1, "w"), (0, "v"), (1, "v")]
    assert {m.point.algorithm for m in rows if m.ok} == {"plan_ok", "plan_after"}


@pytest.mark.parametrize("processes", [2, 1])
def test_the_next_points_setup_starts_while_a_point_is_timed(processes):
    """While the second timing process times a point, the first is told of the points to come
    (batches.ahead_of) and starts their setup that needs no test data (Algorithm.ahead); a lone
    process is told before it measures. The first point's row had nothing started ahead, the
    later ones had."""
    from harness import runner
    backends.register("ahead_gpu", "planted_backends:AheadGpuBackend")
    timing = replace(FAST, gpu_processes=processes, runoff=False)
    points = [Point(replace(PROBLEM, name=name, in_channels=4 + i), "fwd", "fp32", "NCHW",
                    "ahead_gpu", "exact", None, timing) for i, name in enumerate("abc")]
    rows: list = []
    runner.run_points(points, rows.append)
    assert {m.point.problem.name: m.extras.get("rnn_build_ms") for m in rows if m.ok} == {
        "a": None, "b": 1.0, "c": 1.0}


def test_each_batch_comes_with_the_next_two_and_a_worker_hears_of_those_on_the_gpu():
    from harness.batches import ahead_of, with_next
    assert list(with_next(iter("abcd"), 2)) == [("a", ["b", "c"]), ("b", ["c", "d"]),
                                             ("c", ["d"]), ("d", [])]
    gpu = [[_point("plans")], [_point("quotes_a_fault")]]
    cpu = [[replace(_point("exact"), backend="fake")]]
    assert ahead_of([]) is None and ahead_of([cpu, gpu]) is None
    assert ahead_of([gpu, cpu]) == (gpu[0], [gpu[0][0], gpu[1][0]])


def test_a_prefetched_points_data_is_not_drawn_again(monkeypatch):
    from harness import draws
    executor = PointExecutor()
    group = [_point("quotes_a_fault")]
    executor.prefetch(group)
    calls: list = []
    monkeypatch.setattr(draws, "normal", lambda *args, **kwargs: calls.append(args))
    assert executor.cached_data(group[0]).x.shape == PROBLEM.input_shape and calls == []


def _sends_kill(pool: WorkerPool, times: int | None) -> None:
    """Each of the pool's next `times` workers (None: every one) dies as a message is sent."""
    start = pool._start
    left = [times]

    def start_gone() -> None:
        start()
        if left[0] == 0:
            return
        left[0] = None if left[0] is None else left[0] - 1
        real = pool._connection

        class Gone:
            def send(self, message):
                pool._process.kill()
                pool._process.join()
                raise BrokenPipeError

            def __getattr__(self, name):
                return getattr(real, name)
        pool._connection = Gone()
    pool._start = start_gone


def test_a_worker_that_dies_at_every_message_crashes_each_group_once_never_a_loop():
    """A send into a dead worker: the groups go once more, unranked (a ranking may have killed
    it); a worker that dies again makes the first group crashed, and so on: each group costs at
    most two fresh processes, never a retry loop."""
    pool = WorkerPool(unit_timeout_s=10.0)
    try:
        _sends_kill(pool, None)
        rows = pool.measure_groups([Request([_point("quotes_a_fault")]),
                                    Request([_point("context_lost")])])
        assert [[m.status for m in r] for r in rows] == [[Status.CRASHED]] * 2
        assert all("worker process died" in r[0].reason for r in rows)
    finally:
        pool.close()


def test_a_worker_gone_once_before_its_message_costs_no_row():
    pool = WorkerPool(unit_timeout_s=10.0)
    try:
        _sends_kill(pool, 1)
        (row,) = pool.measure([_point("quotes_a_fault")])
        assert row.status == Status.FAILED     # measured in the fresh process: its own row
    finally:
        pool.close()
