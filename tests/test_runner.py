"""The runner on the fake backend: one row per point, planted faults reported and never ranked,
workspace limits, resume after a kill."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import analysis, env, executor, point_timing, runner, store
from harness.backends.base import Prepared
from harness.problem import ConvProblem
from harness.sweep import AlgorithmChoice, Point, Sweep, TimingOptions

MiB = 1 << 20
PROBLEMS = (
    ConvProblem(2, 8, 10, 10, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                name="s1"),
    ConvProblem(2, 8, 10, 10, 16, 3, 3, 2, 2, name="s2", multiplicity=3),
)


def _run(sweep: Sweep) -> list:
    results = []
    runner.run_points(runner.plan(sweep).points, results.append)
    return results


def _fake_sweep(**axes) -> Sweep:
    return Sweep("t", PROBLEMS, directions=("fwd", "bwd_data", "bwd_filter"),
                 backends=(AlgorithmChoice("fake"),), **axes)


def test_every_point_gets_exactly_one_row_with_a_status():
    sweep = _fake_sweep(workspace_limits=(0, 64 * MiB, None))
    points = runner.plan(sweep).points
    results = _run(sweep)
    assert len(results) == len(points) == 2 * 3 * 6 * 3
    assert sorted(m.point.point_id for m in results) == sorted(p.point_id for p in points)
    assert all(m.reason for m in results if m.status != "ok")


def test_planted_wrong_result_is_wrong_and_never_the_best():
    results = _run(_fake_sweep())
    wrong = [m for m in results if m.point.algorithm == "wrong_fast"]
    assert {m.status for m in wrong} == {"wrong"}
    assert all(m.rel_error > m.tolerance and not m.samples_ms for m in wrong)
    rows = [store.to_row(m, "r", "t", env.fingerprint(False), "now") for m in results]
    best = analysis.best_per_point(store.frame(rows))
    assert len(best) == 2 * 3
    assert "wrong_fast" not in set(best["best_algorithm"]) and "wrong_fast" not in " ".join(
        best["runner_candidate"].dropna())


def test_planted_crash_is_failed_and_the_sweep_finishes():
    results = _run(_fake_sweep())
    crashed = [m for m in results if m.point.algorithm == "crash"]
    assert {m.status for m in crashed} == {"failed"}
    assert "planted crash" in crashed[0].reason
    assert sum(m.ok for m in results) == 2 * 3 * 3 + 3  # exact, slow, hungry; stride1 on s1


def test_unsupported_and_workspace_limits_are_rows_with_reasons():
    results = _run(_fake_sweep(workspace_limits=(0, None)))
    stride = [m for m in results if m.point.algorithm == "stride1_only"
              and m.point.problem.name == "s2"]
    assert {m.status for m in stride} == {"unsupported"}
    hungry = {m.point.workspace_limit: m for m in results if m.point.algorithm == "hungry"
              and m.point.problem.name == "s1" and m.point.direction == "fwd"}
    assert hungry[0].status == "workspace_exceeded" and "limit is 0" in hungry[0].reason
    assert hungry[0].workspace_bytes == 64 * MiB
    assert hungry[None].ok


def test_cpu_timer_stops_for_a_stated_reason():
    from harness.timer import time_cpu
    timing = time_cpu(lambda: None, TimingOptions(budget_ms=20, min_samples=5, max_samples=50))
    assert timing.stop_reason in {"noise_target", "budget", "max_samples"}
    assert 5 <= len(timing.samples_ms) <= 50


def test_cpu_warm_up_outlasts_the_libraries_spinning_threads():
    """Worker threads woken by the verified runs spin for ~110-200 ms after their last call and
    slow what runs next (timer.CPU_SETTLE_MS): the first timed launch starts no sooner than that
    after the first warm-up launch, whatever the warm-up count; a warm-up of 0 launches none."""
    from harness import timer
    calls: list[float] = []

    def launch() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.005)

    timing = timer.time_cpu(launch, TimingOptions(budget_ms=0, min_samples=1, max_samples=1,
                                                  warmup=1))
    assert len(timing.samples_ms) == 1 and len(calls) > 2
    assert (calls[-1] - calls[0]) * 1e3 >= timer.CPU_SETTLE_MS
    calls.clear()
    timer.time_cpu(launch, TimingOptions(budget_ms=0, min_samples=1, max_samples=1, warmup=0))
    assert len(calls) == 1


def test_run_point_measures_one_point():
    m = runner.run_point(Point(PROBLEMS[0], "fwd", "fp64", "NCHW", "fake", "exact"))
    assert m.ok and m.rel_error == 0 and m.gflops > 0


def _convbench(args: list[str], cwd: Path) -> subprocess.Popen:
    tests = Path(__file__).parent
    code = ("import sys; from harness import backends; "
            "backends.register('slow', 'planted_backends:SlowBackend'); "
            "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _suite(tmp_path: Path) -> Path:
    layers = ", ".join(f"'mb2ic4ih{6 + i}oc4oh{6 + i}kh3ph1n\"l{i}\"'" for i in range(10))
    path = tmp_path / "slow.toml"
    path.write_text(f"layers = [{layers}]\n[sweep]\ndirections = ['fwd', 'bwd_data', "
                    "'bwd_filter']\nprecisions = ['fp32', 'fp64']\n"
                    "[[sweep.backends]]\nname = 'slow'\n")
    return path


def test_a_resumed_run_measures_only_the_plans_a_killed_group_missed(tmp_path):
    """A killed run left plan_fast's rows of a two-plan point and no mark that the group was
    whole: --resume measures plan_slow alone (plan_fast's rows keep their old stamp). The same
    rows in a journal of an older run (no marks at all: it wrote groups whole) are finished."""
    import json
    from harness import backends
    from harness.cli import main
    backends.register("plans", "planted_backends:PlansBackend")
    suite = tmp_path / "plans.toml"
    suite.write_text("layers = ['mb2ic4ih6oc4oh6kh3ph1n\"a\"']\n[sweep]\ndirections = ['fwd']\n"
                     "precisions = ['fp32']\n[[sweep.backends]]\nname = 'plans'\n")
    full = tmp_path / "full.parquet"
    assert main(["run", str(suite), "--out", str(full)]) == 0
    fast = store.load(full).query("algorithm == 'plan_fast'").assign(
        finished_at="2000-01-01T00:00:00+00:00")
    lines = [json.dumps(row, default=str) for row in fast.to_dict("records")]
    for marked in (True, False):
        killed = tmp_path / f"killed-{marked}.parquet"
        head = [json.dumps({store.GROUPS_DONE: []})] if marked else []
        store.journal_path(killed).write_text("\n".join(head + lines) + "\n")
        assert main(["run", str(suite), "--out", str(killed), "--resume"]) == 0
        rows = store.load(killed).set_index("algorithm")
        if marked:
            assert sorted(rows.index) == ["plan_fast", "plan_slow"]
            assert rows.loc["plan_slow", "finished_at"] > "2000"     # measured now
        else:
            assert list(rows.index) == ["plan_fast"]                 # finished, as written
        assert rows.loc["plan_fast", "finished_at"] == "2000-01-01T00:00:00+00:00"


def _rows_in(journal: Path) -> int:
    """Journal lines that are rows (not the lines marking groups whole)."""
    return sum(store.GROUPS_DONE not in line for line in journal.read_text().splitlines())


@pytest.mark.slow
def test_killed_sweep_resumed_equals_uninterrupted(tmp_path):
    suite = _suite(tmp_path)
    full = tmp_path / "full.parquet"
    assert _convbench(["run", str(suite), "--out", str(full)], tmp_path).wait(120) == 0

    killed = tmp_path / "killed.parquet"
    process = _convbench(["run", str(suite), "--out", str(killed)], tmp_path)
    journal = store.journal_path(killed)
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or _rows_in(journal) < 15):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert not killed.exists(), "the run finished before it could be killed"
    partial = store.load(killed)            # the journal of the killed run is readable
    assert 15 <= len(partial) < 60

    resumed = _convbench(["run", str(suite), "--out", str(killed), "--resume"], tmp_path)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert "already done" in out
    a, b = store.load(full), store.load(killed)
    assert len(b) == 60 and b["point_id"].is_unique
    assert set(a["point_id"]) == set(b["point_id"])


def test_expanding_algorithm_yields_a_row_per_variant_and_resumes(tmp_path):
    from harness import backends
    backends.register("plans", "planted_backends:PlansBackend")
    sweep = Sweep("t", PROBLEMS[:1], backends=(AlgorithmChoice("plans"),),
                  workspace_limits=(0, None))
    points = runner.plan(sweep).points
    results = _run(sweep)
    assert len(points) == 2 and len(results) == 4
    assert {m.point.algorithm for m in results} == {"plan_fast", "plan_slow"}
    assert {m.planned_point_id for m in results} == {p.point_id for p in points}
    writer = store.ResultWriter(tmp_path / "r.parquet")
    for m in results:
        writer.append(store.to_row(m, "r", "t", {}, "now"))
    planned = {p.point_id for p in points}
    # rows alone could be a group cut short: its plans are known, the point is not finished
    assert not planned & writer.resume_state().finished
    assert writer.resume_state().measured_variants == {
        p: {"plan_fast", "plan_slow"} for p in planned}
    writer.mark_done(sorted(planned))
    assert planned <= writer.resume_state().finished and not writer.resume_state().measured_variants
    best = analysis.best_per_point(store.frame(
        [store.to_row(m, "r", "t", {}, "now") for m in results]))
    assert set(best["best_algorithm"]) == {"plan_fast"}


class _CapturelessGpuWork(Prepared):
    """Stands in for a GPU library whose calls cannot be captured into a CUDA graph."""
    device = "cuda"
    stream = None
    workspace_bytes = 0

    def __init__(self):
        self.extras = {}

    def launch(self):
        pass

    def poison(self):
        pass

    def output(self):
        return None

    def release(self):
        pass


def test_gpu_timer_falls_back_to_the_held_stream_and_says_why(monkeypatch):
    from harness import graph_timer, timer

    def refuse_capture(*args, **kwargs):
        raise graph_timer.CaptureFailed(
            "cudaErrorStreamCaptureUnsupported: operation not permitted")

    held = timer.Timing((0.01, 0.011), "budget", 0.05)
    monkeypatch.setattr(graph_timer, "time_cuda_graph", refuse_capture)
    monkeypatch.setattr(timer, "time_cuda", lambda *args, **kwargs: held)
    work = _CapturelessGpuWork()
    timing = point_timing.time_gpu(work, TimingOptions(), None)
    assert timing.samples_ms == held.samples_ms and timing.host_ms == held.host_ms
    assert timing.gpu_timer == "held_stream"
    assert "not permitted" in timing.capture_error
    assert work.extras == {}     # the backend's own columns are never written by the executor
    assert point_timing.timing_extras(timing) == {"capture_error": timing.capture_error,
                                                   "gpu_timer": "held_stream"}


@pytest.mark.parametrize("options, flush", [
    (TimingOptions(mode="cold"), lambda: None),      # an L2 flush between calls: no graph
    (TimingOptions(gpu_timer="stream"), None),       # --gpu-timer stream asked for
], ids=["cold", "stream_timer"])
def test_gpu_points_that_need_the_held_stream_never_try_capture(monkeypatch, options, flush):
    from harness import graph_timer, timer

    def must_not_capture(*args, **kwargs):
        raise AssertionError("this point must not be timed by graph replay")

    held = timer.Timing((0.02,), "budget", 0.05)
    monkeypatch.setattr(graph_timer, "time_cuda_graph", must_not_capture)
    monkeypatch.setattr(timer, "time_cuda", lambda *args, **kwargs: held)
    work = _CapturelessGpuWork()
    timing = point_timing.time_gpu(work, options, flush)
    assert timing.samples_ms == held.samples_ms and timing.host_ms == held.host_ms
    assert (timing.gpu_timer, timing.capture_error) == ("held_stream", None)
    assert point_timing.timing_extras(timing) == {"gpu_timer": "held_stream"}
    assert work.extras == {}


def test_the_stream_timer_is_part_of_the_point_id_and_the_default_ids_are_unchanged():
    default = Point(PROBLEMS[0], "fwd", "fp32", "NCHW", "cudnn", "gemm")
    stream = Point(PROBLEMS[0], "fwd", "fp32", "NCHW", "cudnn", "gemm",
                   timing=TimingOptions(gpu_timer="stream"))
    assert default.point_id.endswith("|inf|warm")
    assert stream.point_id.endswith("|inf|warm+stream")


def test_measure_one_runs_a_named_variant_of_an_expanding_algorithm():
    from harness import backends
    backends.register("plans", "planted_backends:PlansBackend")
    variant = Point(PROBLEMS[0], "fwd", "fp64", "NCHW", "plans", "plan_slow")
    assert executor.algorithm_for(variant).expands
    m = executor.PointExecutor().measure_one(variant)
    assert m.ok and m.point.algorithm == "plan_slow"
    plain = executor.PointExecutor().measure_one(
        Point(PROBLEMS[0], "fwd", "fp64", "NCHW", "fake", "exact"))
    assert plain.ok and plain.rel_error == 0
    with pytest.raises(KeyError, match="no algorithm 'bogus'"):
        executor.algorithm_for(Point(PROBLEMS[0], "fwd", "fp64", "NCHW", "fake", "bogus"))


def test_each_cpu_library_runs_in_a_phase_of_its_own_gpu_backends_together():
    """Threads one CPU library leaves spinning slow the next library's call, so a plan runs all
    of one CPU backend's points before the next one's; GPU points keep their locality order."""
    from harness.problem import ConvProblem
    from harness.sweep import AlgorithmChoice, Sweep
    problems = (ConvProblem(1, 4, 8, 8, 4, 3, 3, name="a"), ConvProblem(1, 8, 6, 6, 8, 1, 1,
                                                                         name="b"))
    sweep = Sweep("phases", problems, directions=("fwd", "bwd_data"),
                  backends=(AlgorithmChoice("cpu", ("im2col",)), AlgorithmChoice("fake"),
                            AlgorithmChoice("faulty_gpu", ("quotes_a_fault",))))
    from harness import backends
    backends.register("faulty_gpu", "planted_backends:FaultyGpuBackend")
    order = [p.backend for p in runner.plan(sweep).points]
    runs = [b for i, b in enumerate(order) if i == 0 or order[i - 1] != b]
    assert runs == ["faulty_gpu", "cpu", "fake"]
    assert order.count("cpu") == 4 and order.count("faulty_gpu") == 4


def test_a_group_shares_only_the_workspace_limit():
    """A group is measured once and its row copied to each member: points that differ in their
    thread count or op (not just the limit) must each get a group of their own."""
    sweep = Sweep("groups", (ConvProblem(1, 8, 8, 8, 8, 3, 3),),
                  backends=(AlgorithmChoice("cpu", ("direct",)),), threads=(1, 2),
                  ops=("conv", "conv_bias_relu"), workspace_limits=(0, None))
    found = [[(p.threads, p.op, p.workspace_limit) for p in g]
             for g in runner.groups(runner.plan(sweep).points)]
    expected = [((t, op, 0), (t, op, None)) for t in (1, 2) for op in ("conv", "conv_bias_relu")]
    assert len(found) == len(expected) and set(map(tuple, found)) == set(expected)


def test_cpu_points_are_measured_in_rounds_over_the_points_sharing_test_data(monkeypatch):
    """Round 1 over every group of a problem, then round 2 over them again (each prepared
    afresh): the row keeps both rounds' samples, split in `process_samples`, the replicates
    `convbench compare` takes its noise floor from."""
    order = []
    units = executor.PointExecutor.units

    def recording(self, group, skip=frozenset()):
        order.append((group[0].problem.name, group[0].direction, group[0].algorithm))
        return units(self, group, skip)
    monkeypatch.setattr(executor.PointExecutor, "units", recording)
    sweep = _fake_sweep(timing=TimingOptions(min_samples=6, max_samples=6, cpu_rounds=2))
    rows = [m for m in _run(sweep) if m.ok]
    assert rows and all(len(set(m.extras["process_samples"].split())) == 1 for m in rows)
    assert all(len(m.extras["process_samples"].split()) == 2 for m in rows)
    first = [g for g in order if g[0] == "s1"]
    half = len(first) // 2
    assert first[:half] == first[half:] and len(set(first[:half])) == half     # A B C, A B C
    single = _run(_fake_sweep(timing=TimingOptions(min_samples=6, max_samples=6, cpu_rounds=1)))
    assert all("process_samples" not in m.extras for m in single if m.ok)
