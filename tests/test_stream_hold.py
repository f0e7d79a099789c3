"""The held-stream timer never tries for ever (issue 38): a call that blocks the host, or a hold
that keeps running out, ends in a bounded number of holds with the point timed call by call and
the row saying why; a hold that is merely short at first still ends held. Runs without a GPU: a
fake stream in virtual time stands in for CuPy and the spin kernel, and raises once the timer has
held it GUARD times, so a timer that never gives up fails here instead of hanging the suite."""
from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest

from harness import graph_timer, point_timing, schema, stream_hold, timer
from harness.executor import PointExecutor
from harness.problem import ConvProblem
from harness.stream_hold import MAX_HOLD_MS, MAX_MISSES, UNHELD, Hold
from harness.sweep import Point, TimingOptions
from harness.timer import Timing

OPTIONS = TimingOptions(budget_ms=5, min_samples=5, max_samples=50, warmup=1)
GUARD = 200


class _Clock:
    """The host's perf_counter, in virtual seconds: only the fakes move it."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1e3


class _Stream:
    """One CUDA stream in virtual time: work runs in order, none before the host issued it."""

    def __init__(self, clock: _Clock, spin_host_ms: float = 0.0):
        self.clock = clock
        self.free_at = 0.0          # when the work enqueued so far ends
        self.spin_host_ms = spin_host_ms    # the host's time to issue the spin, after it starts
        self.spins = 0
        self.log: list[str] = []

    def run(self, ms: float, what: str) -> None:
        self.free_at = max(self.clock.now, self.free_at) + ms / 1e3
        self.log.append(what)

    def spin(self, stream, hold_ms: float) -> None:
        self.spins += 1
        if self.spins > GUARD:
            raise RuntimeError(f"the timer held the stream {self.spins} times: it never stops")
        self.run(hold_ms, "spin")
        self.clock.advance_ms(self.spin_host_ms)

    def synchronize(self) -> None:
        self.clock.now = max(self.clock.now, self.free_at)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    def __init__(self, stream: _Stream):
        self.stream, self.at = stream, None

    def record(self, stream) -> None:
        self.at = max(self.stream.clock.now, self.stream.free_at)   # when the GPU reaches it

    @property
    def done(self) -> bool:
        return self.stream.clock.now >= self.at

    def synchronize(self) -> None:
        self.stream.clock.now = max(self.stream.clock.now, self.at)


@pytest.fixture
def gpu(monkeypatch):
    """A fake stream (spin_host_ms settable) installed as CuPy, the spin kernel and the clock."""
    clock = _Clock()
    stream = _Stream(clock)
    fake_cupy = SimpleNamespace(cuda=SimpleNamespace(
        Event=lambda: _Event(stream),
        get_elapsed_time=lambda start, end: (end.at - start.at) * 1e3))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(timer, "_spin", stream.spin)
    monkeypatch.setattr(timer, "time", clock)
    monkeypatch.setattr(stream_hold, "time", clock)
    return stream


def _launch(stream: _Stream, host_ms: float, kernel_ms: float, waits: bool = False):
    """A call costing `host_ms` of host time and `kernel_ms` of GPU time; `waits`: it first
    waits for the stream to drain (a call that synchronizes, or a full launch queue)."""
    def launch() -> None:
        if waits:
            stream.synchronize()
        stream.clock.advance_ms(host_ms)
        stream.run(kernel_ms, "launch")
    return launch


def test_the_sample_floor_is_taken_a_few_samples_a_hold_each_between_its_own_events(gpu):
    """A floor of 17 warm samples costs five held batches, not 17 (each a hold and a sync, ~2 ms
    on an H100): the first alone, then four samples a batch, each its own calls' mean."""
    options = TimingOptions(budget_ms=50, min_samples=17, max_samples=50, warmup=1)
    timing = timer.time_cuda(_launch(gpu, 0.01, 0.02), gpu, options)
    assert timing.gpu_timer is None and len(timing.samples_ms) >= 17
    assert gpu.spins == 1 + -(-16 // stream_hold.WARM_SAMPLES_PER_BATCH)
    assert timing.samples_ms == pytest.approx([0.02] * len(timing.samples_ms))


@pytest.mark.parametrize("host_ms, waits, why", [
    (0.05, True, r"blocks the host while the stream is held \(\d+ calls took [\d.e+]+ ms to "
                 r"enqueue against a [\d.]+ ms hold; 1 call took"),
    (150.0, False, r"one call takes longer to enqueue than the longest hold \(its host cost 150 "
                   r"ms, measured unheld, against a 100 ms hold\)")],
    ids=["syncs_with_the_stream", "host_slower_than_any_hold"])
def test_a_call_that_blocks_the_host_is_timed_call_by_call_within_a_bound(gpu, host_ms, waits,
                                                                          why):
    timing = timer.time_cuda(_launch(gpu, host_ms, 0.5, waits), gpu, OPTIONS)
    assert gpu.spins <= (MAX_MISSES if waits else 0)     # no hold can cover 150 ms: none tried
    assert timing.gpu_timer == UNHELD and len(timing.samples_ms) >= OPTIONS.min_samples
    assert re.search(why, timing.timer_note), timing.timer_note
    assert "host gaps inside the call are counted" in timing.timer_note
    # one call per pair of events, its host time inside: what the note warns of
    assert timing.samples_ms == pytest.approx([host_ms + 0.5] * len(timing.samples_ms))
    # about a second of holds at worst, beside the calls' own time (5 + 1 set-up calls, 3 + 1
    # under holds, 5 samples)
    assert gpu.clock.now < 1.0 + 20 * (host_ms + 0.5) / 1e3


def test_a_hold_that_keeps_running_out_gives_up_after_max_misses(gpu):
    gpu.spin_host_ms = 500.0      # the host returns from issuing the spin after any hold ended
    timing = timer.time_cuda(_launch(gpu, 0.01, 0.5), gpu, OPTIONS)
    assert gpu.spins == MAX_MISSES and timing.gpu_timer == UNHELD
    assert f"ran out {MAX_MISSES} times in a row" in timing.timer_note


def test_a_hold_short_at_first_is_lengthened_and_the_point_stays_held(gpu):
    gpu.spin_host_ms = 0.3        # Python's overhead after issuing the spin outlasts the 1st hold
    timing = timer.time_cuda(_launch(gpu, 0.01, 0.02), gpu, OPTIONS)
    held = 1 + -(-(len(timing.samples_ms) - 1) // stream_hold.WARM_SAMPLES_PER_BATCH)
    assert gpu.spins > held                            # some batches missed ...
    assert (timing.gpu_timer, timing.timer_note) == (None, None)   # ... and then it held
    assert timing.samples_ms == pytest.approx([0.02] * len(timing.samples_ms))


def test_cold_mode_falls_back_with_a_flush_before_every_call(gpu):
    flush = lambda: gpu.run(0.2, "flush")     # noqa: E731 - the L2 flush, a kernel of its own
    timing = timer.time_cuda(_launch(gpu, 0.05, 0.5, waits=True), gpu,
                             TimingOptions(mode="cold", budget_ms=5, min_samples=5), flush)
    assert gpu.spins <= MAX_MISSES and timing.gpu_timer == UNHELD
    after_the_last_hold = gpu.log[len(gpu.log) - gpu.log[::-1].index("spin"):]
    # the missed batch of one call, then one call per sample, each after its flush
    assert after_the_last_hold == ["flush", "launch"] * (1 + len(timing.samples_ms))
    assert timing.samples_ms == pytest.approx([0.55] * len(timing.samples_ms))  # flush left out


def test_graph_replays_that_block_the_host_carry_the_note(gpu):
    launch = _launch(gpu, 0.05, 0.5, waits=True)
    replay = _launch(gpu, 0.05, 0.5 * 3, waits=True)     # the captured calls, as one launch
    timing = graph_timer.time_cuda_graph(launch, gpu, OPTIONS, capture=lambda calls: replay)
    assert timing.timer_note.startswith("graph replays: the call blocks the host")
    assert gpu.spins <= 2 * MAX_MISSES       # the probe's holds and the replays'


def _graph_timing(gpu, kernel_ms: float, bar_ms: float | None,
                  replicate: int = 0) -> tuple[Timing, list[int]]:
    """time_cuda_graph of a call of `kernel_ms` against a race bar; the calls of each capture."""
    from dataclasses import replace
    captured: list[int] = []

    def capture(calls: int):
        captured.append(calls)
        return _launch(gpu, 0.01, kernel_ms * calls)
    options = replace(TimingOptions(budget_ms=5, min_samples=8, max_samples=50, warmup=1),
                      race_bar_ms=bar_ms, replicate=replicate)
    return graph_timer.time_cuda_graph(_launch(gpu, 0.01, kernel_ms), gpu, options,
                                 capture=capture), captured


def _probe_limit(bar_ms: float) -> float:
    from harness import stopping
    return bar_ms * stopping.PROBE_RACE_FACTOR + stopping.PROBE_STREAM_ALLOWANCE_MS


def test_a_plan_far_over_the_bar_in_its_probe_is_raced_out_before_its_capture(gpu):
    """The probe's held batch (stream order) reads a plan far over the race's bar: it is raced
    out there, its one sample the probe's, with nothing captured or replayed."""
    from harness import stopping
    bar = 0.1
    raced, captured = _graph_timing(gpu, _probe_limit(bar) + 0.01, bar)
    assert raced.stop_reason == stopping.RACED_OUT and raced.gpu_timer == "held_stream"
    assert captured == [] and len(raced.samples_ms) == 1
    assert gpu.log.count("launch") == graph_timer.PROBE_HOST_CALLS + 3   # no other warm-up


@pytest.mark.parametrize("kernel, bar, replicate, raced_after", [
    (lambda bar: _probe_limit(bar) - 0.01, 0.1, 0, 1),
    (lambda bar: 3 * _probe_limit(bar), 0.1, 1, 1),
    (lambda bar: 1.1 * bar, 0.1, 0, 5),
    (lambda bar: 1.0, None, 0, None)],
    ids=["inside_the_stream_allowance", "later_process", "within_the_first_replay_factor",
         "no_race"])
def test_a_plan_the_probe_cannot_rule_out_is_replayed(gpu, kernel, bar, replicate, raced_after):
    """Under PROBE_RACE_FACTOR x the bar plus the stream allowance (or in a later timing
    process, or with no race) the plan is captured and replayed: stream order may read a plan
    slower than its replays, and a later process meets the candidates in another order. A first
    replayed sample over the bar by REPLAY_FIRST_FACTOR ends the race there; one within it
    runs the heat (the first held batch, then four samples), and one with no bar the floor."""
    from harness import stopping
    timing, captured = _graph_timing(gpu, kernel(bar or 0.1), bar, replicate)
    assert captured and timing.gpu_timer is None
    if raced_after is None:
        assert len(timing.samples_ms) >= 8 and timing.stop_reason != stopping.RACED_OUT
    else:
        assert timing.stop_reason == stopping.RACED_OUT
        assert len(timing.samples_ms) == raced_after


# ---- the rule itself (harness/stream_hold.Hold) --------------------------------------------------
def test_a_blocked_miss_halves_the_batch_at_the_same_hold_and_says_so_at_one_call():
    hold = Hold(0.1)
    calls, ms = hold.size(20)
    assert (calls, ms) == (20, pytest.approx(3.1))
    assert hold.missed(20, ms, 12.3) is None
    sizes = [hold.size(20)]
    while (note := hold.missed(*sizes[-1], 12.3)) is None:
        sizes.append(hold.size(20))
    # halved at the same hold down to one call; one blocked call gets a longer hold once (a
    # hiccup of the host reads as blocked too), a second in a row ends holding
    assert [c for c, _ in sizes] == [10, 5, 2, 1, 1]
    assert {h for _, h in sizes[:-1]} == {ms} and sizes[-1][1] == pytest.approx(2 * ms)
    assert note.startswith("the call blocks the host while the stream is held (20 calls took "
                           "12.3 ms to enqueue against a 3.1 ms hold; 1 call took 12.3 ms")


def test_a_miss_by_a_host_a_little_slower_than_measured_lengthens_the_hold():
    """Every miss took about the hold to enqueue; what tells a blocked host is each call taking
    far over its measured cost (20 calls at 0.16 ms against 0.1 ms measured is a slow host)."""
    hold = Hold(0.1)
    calls, ms = hold.size(20)
    assert hold.missed(calls, ms, 3.2) is None
    assert hold.size(20) == (20, pytest.approx(2 * ms))


def test_a_host_hiccup_at_one_call_is_not_called_blocking():
    hold = Hold(0.02)
    calls, ms = hold.size(1)
    assert hold.missed(calls, ms, 1.5) is None          # one slow enqueue: a longer hold
    calls, ms2 = hold.size(1)
    assert ms2 == pytest.approx(2 * ms)
    hold.held()                                          # the next batch was held
    assert hold.missed(*hold.size(1), 1.5) is None       # a later hiccup starts over


def test_an_unblocked_miss_doubles_the_hold_up_to_the_cap_then_halves_the_calls():
    hold = Hold(0.1)
    seen = []
    for _ in range(MAX_MISSES - 1):
        calls, ms = hold.size(20)
        seen.append(ms)
        assert hold.missed(calls, ms, 0.1) is None and calls == 20
    assert max(seen) == MAX_HOLD_MS and seen[1] == pytest.approx(2 * seen[0])
    hold.held()                              # a covered batch: the misses in a row start over
    calls_seen, note = [], None
    while note is None:                      # at the cap a longer hold cannot help
        calls, ms = hold.size(20)
        calls_seen.append(calls)
        note = hold.missed(calls, ms, 0.1)
    assert calls_seen == [10, 5, 2, 1] and ms == MAX_HOLD_MS
    assert note.startswith("one call takes longer to enqueue than the longest hold")


# ---- into the row (harness/point_timing.py, harness/executor.py) ---------------------------------
NOTE = "the call blocks the host while the stream is held (3 calls took 9 ms ...)"
UNHELD_TIMING = Timing((0.5, 0.5, 0.5), "budget", 0.05, gpu_timer=UNHELD, timer_note=NOTE)


def _prepared(capture=None):
    return SimpleNamespace(launch=lambda: None, stream=None, capture=capture, extras={},
                           workspace_bytes=0, extras_for_limit=lambda limit: {})


@pytest.mark.parametrize("options, flush, captures_itself", [
    (TimingOptions(gpu_timer="stream"), None, False),
    (TimingOptions(mode="cold"), lambda: None, False),
    (TimingOptions(), None, True),      # PyTorch: replay slower, the stream timing kept
], ids=["stream", "cold", "torch_stream_order"])
def test_a_stream_timing_that_could_not_hold_keeps_its_timer_and_note(monkeypatch, options,
                                                                       flush, captures_itself):
    slow_replay = Timing((0.9,) * 3, "budget", 0.05)
    monkeypatch.setattr(timer, "time_cuda", lambda *args, **kwargs: UNHELD_TIMING)
    monkeypatch.setattr(graph_timer, "time_cuda_graph", lambda *args, **kwargs: slow_replay)
    capture = (lambda calls: (lambda: None)) if captures_itself else None
    timing = point_timing.time_gpu(_prepared(capture), options, flush)
    assert (timing.gpu_timer, timing.timer_note) == (UNHELD, NOTE)
    assert point_timing.timing_extras(timing)["timer_fallback"] == NOTE


@pytest.mark.parametrize("captures_itself", [False, True], ids=["cudnn", "torch"])
def test_a_plan_raced_out_by_its_probe_keeps_the_stream_timer_unchecked(monkeypatch,
                                                                          captures_itself):
    """A probe's race-out is a stream-ordered sample: the row says so, and a self-capturing
    library's replay check (which would time it in stream order again) does not run."""
    from harness import stopping
    probe = Timing((0.5,), stopping.RACED_OUT, 0.01, gpu_timer="held_stream")
    monkeypatch.setattr(graph_timer, "time_cuda_graph", lambda *args, **kwargs: probe)
    monkeypatch.setattr(timer, "time_cuda", lambda *args, **kwargs: pytest.fail("timed again"))
    capture = (lambda calls: (lambda: None)) if captures_itself else None
    assert point_timing.time_gpu(_prepared(capture), TimingOptions(), None) == probe


def test_the_note_is_a_column_and_part_of_the_reason():
    point = Point(ConvProblem(2, 8, 10, 10, 8, 3, 3, name="s"), "fwd", "fp32", "NCHW", "fake",
                  "exact")
    common = dict(family="f", workspace_bytes=0, rel_error=0.0, max_abs_error=0.0,
                  tolerance=1e-5, setup_ms=1.0, effective_precision="fp32", deterministic=True)
    m = PointExecutor()._row(point, _prepared(), UNHELD_TIMING, 1.0, common)
    assert m.ok and m.reason == NOTE and m.extras["gpu_timer"] == UNHELD
    row = schema.to_row(m, "run", "suite", {}, "2026-11-27T00:00:00+00:00")
    assert row["timer_fallback"] == NOTE


def test_the_sample_floor_of_graph_replays_fits_the_budget():
    """A row's graph replays at the sample floor (four replays a sample) take about the budget,
    whatever the floor: more samples, not more time (a ResNet-50 row of 70 us kernels at a
    floor of 17 ran 1,360 calls under a 200 ms budget)."""
    from harness.sweep import TimingOptions
    for floor, per_call_ms in ((5, 0.07), (17, 0.07), (17, 0.5), (19, 0.01)):
        options = TimingOptions(budget_ms=25, min_samples=floor)
        calls = stream_hold.calls_per_graph(per_call_ms, options, 20)
        assert 1 <= calls <= 20
        assert calls == 1 or 4 * floor * calls * per_call_ms <= options.budget_ms
    assert stream_hold.calls_per_graph(0.001, TimingOptions(budget_ms=25, min_samples=17), 20) == 20


def test_a_cold_plan_that_lost_its_heat_stops_after_it(gpu):
    """Cold samples come a batch at a time, one per call: with a race bar the first batch is
    the heat alone, so a plan over the bar stops after RACE_SAMPLES (harness/stopping.py)."""
    from dataclasses import replace

    from harness import stopping
    options = TimingOptions(budget_ms=50, min_samples=12, max_samples=50, warmup=1)
    launch = _launch(gpu, 0.01, 0.3)
    raced = timer.time_cuda(launch, gpu, replace(options, race_bar_ms=0.12), flush=lambda: None)
    assert raced.stop_reason == stopping.RACED_OUT
    assert len(raced.samples_ms) == stopping.RACE_SAMPLES
    within = timer.time_cuda(launch, gpu, replace(options, race_bar_ms=0.5), flush=lambda: None)
    assert len(within.samples_ms) >= 12 and within.stop_reason != stopping.RACED_OUT


def _counting_host_probes(monkeypatch) -> list[int]:
    """timer.measure_host_ms, counting the calls each host probe issues."""
    probes: list[int] = []
    real = timer.measure_host_ms

    def counted(launch, stream, calls=5):
        probes.append(calls)
        return real(launch, stream, calls)
    monkeypatch.setattr(timer, "measure_host_ms", counted)
    return probes


def test_a_stream_timing_after_a_probe_of_the_same_calls_takes_its_verdicts(gpu, monkeypatch):
    """A call the probe could not hold (a 750-step GRU fills the launch queue) is not held
    again, and the probe's host cost stands: no probe calls, no spins, the same note."""
    probes = _counting_host_probes(monkeypatch)
    launch = _launch(gpu, 0.05, 0.5, waits=True)
    probe = timer.time_cuda(launch, gpu, OPTIONS)
    assert probe.gpu_timer == UNHELD and probes == [5]
    spins = gpu.spins
    again = timer.time_cuda(launch, gpu, OPTIONS, probed=probe)
    assert (gpu.spins, probes) == (spins, [5])
    assert (again.gpu_timer, again.timer_note, again.host_ms) == \
        (UNHELD, probe.timer_note, probe.host_ms)
    assert len(again.samples_ms) >= OPTIONS.min_samples


def test_a_self_capturing_librarys_stream_check_reuses_the_graph_probe(gpu, monkeypatch):
    """point_timing's check of a PyTorch replay in stream order: one host probe in all (the
    graph timer's), and the check held as any stream timing where the probe could hold."""
    probes = _counting_host_probes(monkeypatch)
    launch = _launch(gpu, 0.01, 0.02)
    prepared = _prepared(capture=lambda calls: _launch(gpu, 0.01, 0.02 * calls))
    prepared.launch, prepared.stream = launch, gpu
    timing = point_timing.time_gpu(prepared, TimingOptions(min_samples=5, budget_ms=5), None)
    assert timing.gpu_timer == "cuda_graph" and timing.capture_error is None
    assert probes == [graph_timer.PROBE_HOST_CALLS, 1]     # the calls' probe, the replays' probe
    assert timing.probe.gpu_timer is None            # the check could hold the stream


@pytest.mark.parametrize("at_least_ms, host_ms, one_held_call", [
    (2.0, 0.5, True), (point_timing.LONG_CALL_MS, 0.5, True), (0.1, 1.5, True),
    (0.9, 0.5, False), (2.0, None, False)],
    ids=["long", "at_the_line", "host_heavy", "short", "no_host"])
def test_a_long_verified_calls_probe_is_one_held_call_on_its_host_cost(
        gpu, monkeypatch, at_least_ms, host_ms, one_held_call):
    """A verified call that kept the GPU busy a millisecond or more, or took the host that long
    to issue (harness/call_bound.py), needs no batch and no host probe: the graph timer's probe
    is that call once, held for the host cost read around the verified call, and a plan far
    over the bar is raced out on it."""
    from dataclasses import replace

    from harness import call_bound, stopping
    probes = _counting_host_probes(monkeypatch)
    launch = _launch(gpu, 0.4, 5.0)
    prepared = _prepared(capture=None)
    prepared.launch, prepared.stream = launch, gpu
    bound = call_bound.CallBound(at_least_ms, 5.0, UNHELD, host_ms, "its second verified call",
                                 None if host_ms is None else 0.9 * host_ms)
    options = replace(TimingOptions(budget_ms=5, min_samples=8, max_samples=50, warmup=1),
                      race_bar_ms=1.0)
    raced = point_timing.time_gpu(prepared, options, None, bound)
    assert raced.stop_reason == stopping.RACED_OUT and raced.gpu_timer == "held_stream"
    assert raced.samples_ms == pytest.approx([5.0])
    calls, probed = (1, []) if one_held_call else (2 * graph_timer.PROBE_HOST_CALLS,
                                                   [graph_timer.PROBE_HOST_CALLS])
    assert (gpu.log.count("launch"), probes, gpu.spins) == (calls, probed, 1)
    # the call alone, without the events around the verified call: what a host probe reads
    assert raced.host_ms == pytest.approx(0.9 * host_ms if one_held_call else 0.4)
