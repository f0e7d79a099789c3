"""cuDNN legacy backend and the GPU timer, on a real GPU (marked `gpu`; skipped elsewhere)."""
from __future__ import annotations

import time

import pytest
from conv3d_gpu_cases import PROBLEMS_3D, check_3d, run_3d  # tests/ is on sys.path

from harness import backends, runner
from harness.precision import FLOATING
from harness.problem import ConvProblem
from harness.stopping import stopped_by_probe
from harness.stream_hold import UNHELD
from harness.sweep import DIRECTIONS, LAYOUTS, AlgorithmChoice, Point, Sweep, TimingOptions

pytestmark = pytest.mark.gpu
SMALL = ConvProblem(2, 16, 12, 12, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    name="small3x3")
STATUSES = {"ok", "unsupported", "workspace_exceeded", "failed", "wrong", "crashed",
            "not_tried"}


def _sweep(problem, **axes) -> Sweep:
    return Sweep("gpu-test", (problem,), backends=(AlgorithmChoice("cudnn"),), **axes)


@pytest.fixture(scope="module")
def floating_rows(run_fast) -> list:
    """SMALL in every direction, floating precision and layout: the rows of the first two tests."""
    # the floating precisions; the quantized ones have their own test below
    return run_fast(_sweep(SMALL, directions=DIRECTIONS, precisions=FLOATING, layouts=LAYOUTS))


def test_every_algorithm_precision_layout_gets_a_row(floating_rows):
    results = floating_rows
    expected = 2 * len(FLOATING) * (8 + 6 + 7)
    assert len(results) == expected
    assert {m.status for m in results} <= STATUSES
    for direction in DIRECTIONS:
        for precision in FLOATING:
            for layout in LAYOUTS:
                here = [m for m in results if (m.point.direction, m.point.precision,
                                               m.point.layout) == (direction, precision, layout)]
                # cuDNN 9.19 on Hopper runs no fp64 NHWC backward algorithm: those rows must
                # still exist, each with cuDNN's status as the reason (checked below).
                if (precision, layout) != ("fp64", "NHWC"):
                    assert any(m.ok for m in here), (direction, precision, layout,
                                                     [(m.point.algorithm, m.reason) for m in here])
    for m in results:
        if m.ok:
            assert m.rel_error <= m.tolerance and m.median_ms > 0
        elif m.status == "unsupported":
            assert m.reason.startswith(("CUDNN_STATUS_", "cuDNN")), m.reason
    assert not [m for m in results if m.status in ("wrong", "crashed")], \
        [(m.point.point_id, m.reason) for m in results if m.status in ("wrong", "crashed")]


def test_fp32_is_true_fp32_and_fp16_is_not(floating_rows):
    by = {(m.point.precision, m.point.algorithm): m for m in floating_rows
          if (m.point.direction, m.point.layout) == ("fwd", "NCHW")}
    gemm32 = by[("fp32", "implicit_gemm")]
    assert gemm32.ok and gemm32.rel_error < 1e-6 and gemm32.effective_precision == "fp32"
    assert by[("fp16", "implicit_precomp_gemm")].rel_error > 1e-5


def test_workspace_limit_and_cudnn_choices(run_fast):
    results = run_fast(_sweep(ConvProblem(8, 64, 28, 28, 64, 3, 3, pad_top=1, pad_left=1,
                                          pad_bottom=1, pad_right=1, name="res3x3"),
                              directions=("fwd",), workspace_limits=(0, None)))
    zero = [m for m in results if m.point.workspace_limit == 0]
    free = [m for m in results if m.point.workspace_limit is None]
    for m in zero:
        if m.workspace_bytes:
            assert m.status == "workspace_exceeded", m
    assert sum(bool(m.extras.get("heuristic_pick")) for m in free) == 1
    assert sum(bool(m.extras.get("heuristic_pick")) for m in zero if m.ok) == 1
    assert sum(bool(m.extras.get("find_pick")) for m in free) == 1
    assert any(m.status == "ok" and m.workspace_bytes > 0 for m in free)


def test_the_race_order_is_cudnns_heuristic_order(run_fast):
    """A point's algorithms are measured in cuDNN's _v7 order (race.measuring_order): its pick
    first, as the rows' heuristic_rank column says."""
    from harness.executor import PointExecutor
    problem = ConvProblem(32, 256, 56, 56, 128, 1, 1, stride_h=2, stride_w=2, name="strided1x1")
    rows = [m for m in run_fast(_sweep(problem, directions=("bwd_data",)))
            if m.point.algorithm in ("algo_0", "algo_1")]
    assert len(rows) == 2 and all(m.ok for m in rows)
    order = PointExecutor().race_order([[m.point] for m in rows])
    ranks = [rows[i].extras["heuristic_rank"] for i in order]
    assert ranks == sorted(ranks) and ranks[0] is not None


def test_int8_forward_runs_as_int8_ext_config_and_the_rest_is_refused(run_fast):
    """SMALL has 16 channels in and out (multiples of 4): NHWC implicit_precomp_gemm computes it
    exactly (int32 sums, fp32 y); every other algorithm and NCHW give a reason; fp8 is refused
    and no heuristic or Find answer for int8 breaks a row."""
    results = run_fast(_sweep(SMALL, directions=("fwd",), precisions=("int8", "fp8_e4m3"),
                              layouts=LAYOUTS))
    for m in results:
        print(m.point.precision, m.point.layout, m.point.algorithm, m.status, m.rel_error,
              m.tolerance, m.extras.get("heuristic_rank"), m.extras.get("find_ms"), m.reason)
    by = {(m.point.precision, m.point.layout, m.point.algorithm): m for m in results}
    ran = by[("int8", "NHWC", "implicit_precomp_gemm")]
    assert ran.ok, ran.reason
    assert ran.rel_error <= ran.tolerance and ran.effective_precision == "int8"
    assert ran.extras["math_type"] == "tensor_op" and ran.median_ms > 0
    for (name, layout, algorithm), m in by.items():
        if (name, layout, algorithm) == ("int8", "NHWC", "implicit_precomp_gemm"):
            continue
        assert m.status == "unsupported", (name, layout, algorithm, m.status, m.reason)
        if name != "int8":
            assert "no fp8 convolution" in m.reason
        elif layout == "NCHW":
            assert m.reason == "int8 needs NHWC (INT8_EXT_CONFIG)"
        else:
            assert m.reason == "cuDNN runs int8 only with IMPLICIT_PRECOMP_GEMM"


def test_asymmetric_padding_is_unsupported_with_reason(run_fast):
    problem = ConvProblem(2, 8, 9, 9, 8, 3, 3, pad_top=0, pad_left=1, pad_bottom=2, pad_right=1)
    results = run_fast(_sweep(problem))
    assert {m.status for m in results} == {"unsupported"}
    assert "asymmetric padding" in results[0].reason


def test_timers_keep_host_overhead_out():
    """A ~20 us kernel timed with a 1 ms host sleep in the launcher moves by less than 5%, with
    the held stream and with graph replay; the replay leaves out the stream-order gap."""
    import cupy
    from harness.graph_timer import time_cuda_graph
    from harness.timer import _spin, time_cuda
    stream = cupy.cuda.Stream(non_blocking=True)
    options = TimingOptions(budget_ms=50, min_samples=20, max_samples=40, noise_target=0.001)

    def launch():
        _spin(stream, 0.020)

    def slow_launch():
        time.sleep(0.001)
        _spin(stream, 0.020)

    def median(timing):
        return sorted(timing.samples_ms)[len(timing.samples_ms) // 2]

    for timer in (time_cuda, time_cuda_graph):
        fast, slow = timer(launch, stream, options), timer(slow_launch, stream, options)
        print(f"{timer.__name__}: spin 20 us: {median(fast) * 1e3:.2f} us; with 1 ms host "
              f"sleep: {median(slow) * 1e3:.2f} us; host cost {fast.host_ms * 1e3:.1f} / "
              f"{slow.host_ms * 1e3:.1f} us")
        assert 0.019 <= median(fast) <= 0.026
        assert abs(median(slow) / median(fast) - 1) < 0.05
        assert slow.host_ms > 1.0
    graph = median(time_cuda_graph(launch, stream, options))
    assert graph <= median(time_cuda(launch, stream, options))


def test_warm_rows_are_timed_by_graph_replay_cold_and_stream_rows_by_the_held_stream(run_fast):
    """Also the one GPU test on the default timing path: the warm rows are planned as a run
    plans them (the sample floor raises min_samples) and shared between two worker processes;
    every other GPU test times with conftest's FAST, one process, no floor."""
    fp16 = _sweep(SMALL, directions=("fwd",), precisions=("fp16",),
                  timing=TimingOptions(budget_ms=5, min_samples=3, max_samples=50))
    planned = runner.plan(fp16).points
    assert {p.timing.gpu_processes for p in planned} == {2}
    warm = run_fast.measure(planned)
    cold = run_fast(fp16, mode="cold")
    stream = run_fast(fp16, gpu_timer="stream")
    for m in warm:
        if m.ok and m.stop_reason == "raced_out":    # the first process raced it out, alone
            shares = m.extras["process_samples"].split()
            assert len(shares) == 1 and int(shares[0]) < m.point.timing.min_samples, m
            assert m.extras["raced_out_by"] > 1.2, m
        elif m.ok:   # each of the two processes took its share of the floor-raised samples,
            # and a finalist (harness/runoff.py) was prepared once more in each process
            shares = [int(n) for n in m.extras["process_samples"].split()]
            again = m.extras.get("runoff_preparations") or 0
            assert again in (0, 2) and len(shares) == 2 + again, m.extras["process_samples"]
            assert min(shares) >= 1, m.extras["process_samples"]
            assert sum(shares[:2]) >= m.point.timing.min_samples > 3, (shares, m.point.timing)
    # a candidate raced out by its probe was timed in stream order only (harness/race.py)
    assert {m.extras.get("gpu_timer") for m in warm if m.ok and not stopped_by_probe(
        m.stop_reason, m.samples_ms, m.extras.get("gpu_timer"))} == {"cuda_graph"}
    # ...or before it, on its verified call's events (harness/call_bound.py)
    for timed in (cold, stream):
        assert {m.extras.get("gpu_timer") for m in timed if m.ok and not stopped_by_probe(
            m.stop_reason, m.samples_ms, m.extras.get("gpu_timer"))} == {"held_stream"}
        assert {m.extras.get("gpu_timer") for m in timed if m.ok and stopped_by_probe(
            m.stop_reason, m.samples_ms, m.extras.get("gpu_timer"))} <= {"held_stream", UNHELD}
    # for the log: the stream timer also counts the gap between stream-ordered kernels
    by = {m.point.algorithm: m.median_ms for m in warm if m.ok}
    for m in stream:
        if m.ok and m.point.algorithm in by:
            print(f"{m.point.algorithm}: graph {by[m.point.algorithm] * 1e3:.2f} us, "
                  f"stream {m.median_ms * 1e3:.2f} us")


def test_poisoned_context_becomes_crashed_and_sweep_goes_on(run_fast):
    # A Measurer of its own (run_points): workers get the backend registry when they start, and
    # the session's may have started before gpu_fault was registered.
    backends.register("gpu_fault", "gpu_fault_backend:GpuFaultBackend")
    problem = ConvProblem(1, 4, 6, 6, 4, 3, 3)
    fast = run_fast.timing
    points = [Point(problem, "fwd", "fp32", "NCHW", "gpu_fault", name, None, fast)
              for name in ("harmless", "illegal_address", "harmless")]
    points[2] = Point(problem, "bwd_data", "fp32", "NCHW", "gpu_fault", "harmless", None, fast)
    results = []
    runner.run_points(points, results.append)
    assert [m.status for m in results] == ["ok", "crashed", "ok"], [m.reason for m in results]
    assert "illegal" in results[1].reason.lower()


@pytest.fixture(scope="module")
def rows_3d(run_fast) -> list:
    return run_3d(run_fast, "cudnn")


@pytest.mark.parametrize("problem", PROBLEMS_3D, ids=lambda p: p.name)
def test_3d_every_setting_has_a_verified_algorithm(rows_3d, problem):
    """The Nd descriptors: every direction, fp32 / fp16, NCDHW / NDHWC."""
    check_3d(rows_3d, problem)
