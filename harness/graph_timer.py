"""The graph timer (the default for warm GPU points): a held-stream probe of the calls, then the
calls captured into a CUDA graph and its replays timed by harness/timer.time_cuda, which leaves
out the ~1 us the GPU spends between stream-ordered kernels. A plan far behind its point's race
is raced out on the probe, before its capture, or on its first replayed sample
(harness/stopping.py).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness import timer
from harness.stopping import RACED_OUT, lost_in_probe
from harness.stream_hold import calls_per_graph
from harness.sweep import TimingOptions
from harness.timer import Timing


class CaptureFailed(RuntimeError):
    """The calls could not be captured into a CUDA graph (the caller times the held stream)."""


def capture_calls(launch: Callable[[], None], stream: Any, calls: int) -> Any:
    """`calls` back-to-back launches captured into one instantiated CUDA graph on `stream`."""
    stream.synchronize()
    stream.begin_capture()
    try:
        for _ in range(calls):
            launch()
    except Exception as err:
        _end_capture_quietly(stream)
        raise CaptureFailed(f"{type(err).__name__}: {err}") from err
    try:
        graph = stream.end_capture()
        graph.upload(stream)
    except Exception as err:
        raise CaptureFailed(f"{type(err).__name__}: {err}") from err
    return graph


def _end_capture_quietly(stream: Any) -> None:
    try:
        stream.end_capture()
    except Exception:  # the capture is already broken; leaving it is what matters
        pass


def time_cuda_graph(launch: Callable[[], None], stream: Any, options: TimingOptions,
                    max_calls_per_graph: int = 20,
                    capture: Callable[[int], Callable[[], None]] | None = None,
                    long_call_host_ms: float | None = None) -> Timing:
    """GPU time per call from replays of a CUDA graph of back-to-back calls (warm mode).

    Stream order costs about a microsecond between one call's last kernel and the next call's
    first, which the held-stream timer counts (5-15% of a 10-25 us kernel on an H100); inside a
    graph the GPU resolves the dependency itself and the replay agrees with the kernel durations
    CUPTI records (benchmarks/gpu_fidelity.py). `capture(calls)`, when given, captures with the
    library's own machinery (PyTorch needs its allocator's graph pool) and returns the replay.
    `long_call_host_ms`: the host's cost of a call the caller knows to be long (point_timing:
    a verified call that kept the GPU busy, or the host issuing it, a millisecond or more),
    read around that call.
    Raises CaptureFailed when the library's calls cannot be captured."""
    probe = _probe(launch, stream, options, long_call_host_ms)
    if probe.gpu_timer is None and lost_in_probe(probe.samples_ms[0], options):
        # raced out before its capture: the row's one sample is the probe's, in stream order
        return replace(probe, stop_reason=RACED_OUT, gpu_timer="held_stream")
    calls = calls_per_graph(probe.samples_ms[0], options, max_calls_per_graph)
    if options.race_bar_ms is not None:         # the replays' samples are `calls` calls each
        options = replace(options, race_bar_ms=options.race_bar_ms * calls,
                          race_first_replay=True)
    if capture is None:
        graph = capture_calls(launch, stream, calls)
        replay_graph = lambda: graph.launch(stream)  # noqa: E731 - one line, named for the timer
    else:
        replay_graph = capture(calls)
    # A replay's host cost is one graph launch whatever it holds: one replay tells it (five
    # would run 5 x `calls` calls on the GPU before the first sample, per row).
    replay = timer.time_cuda(replay_graph, stream, _after_host_probe(options, 1), batch_calls=4,
                       host_probe_calls=1)
    note = replay.timer_note and f"graph replays: {replay.timer_note}"  # a "call" is a replay
    return Timing(tuple(s / calls for s in replay.samples_ms), replay.stop_reason,
                  probe.host_ms, timer_note=note, probe=probe)


# Calls the graph timer's probe issues to measure a call's host cost: they also warm it up.
PROBE_HOST_CALLS = 3


def _probe(launch: Callable[[], None], stream: Any, options: TimingOptions,
           long_call_host_ms: float | None) -> Timing:
    """The graph timer's probe: one held batch in stream order, its one sample a per-call
    estimate (the race's first look, the calls per graph). A batch of 3 calls, after a host
    probe of 3 more whose calls are the warm-up (the verified runs have just run the plan).
    A call known to be long needs neither the batch nor the probe: one held call, its hold
    sized by the host cost read around the verified call. The plans raced out by the probe
    at efficientnet_b0's depthwise points (4.7 ms calls, 11.2 ms of host time each) paid
    101.7 ms a plan for the six calls and their holds (1,290 plans, 228 s of a 1,194 s run on
    an H200: evidence/studies/effb0_stages.py); one held call costs about 22 ms."""
    one = replace(options, min_samples=1, max_samples=1)
    if long_call_host_ms is not None:
        return timer.time_cuda(launch, stream, replace(one, warmup=0), batch_calls=1,
                         host_ms=long_call_host_ms)
    return timer.time_cuda(launch, stream, _after_host_probe(one, PROBE_HOST_CALLS), batch_calls=3,
                     host_probe_calls=PROBE_HOST_CALLS)


def _after_host_probe(options: TimingOptions, probe_calls: int) -> TimingOptions:
    """`options` for a timer whose host probe's `probe_calls` untimed calls count towards the
    warm-up."""
    return replace(options, warmup=max(0, options.warmup - probe_calls))


# A graph replay runs the calls without stream order's ~1 us between kernels, so it is never
# slower than the held stream for the same kernels. A library that captures itself (PyTorch) may
# run other kernels under capture than eagerly (an H100 showed res2a_branch2a bwd_data fp16 NHWC
# at 11.7 us replayed, 8.0 us in stream order and in an independent measurement): a replay this
# much slower than the stream means capture changed what it runs, and its eager time is the
# honest one.
CAPTURE_SLOWER_MARGIN = 0.05


def capture_changed_kernels(replayed: Timing, streamed: Timing) -> str | None:
    """Why the replayed timing of a self-capturing library is not what its users get (its
    median over the stream-ordered one's by more than CAPTURE_SLOWER_MARGIN), or None."""
    graph_ms = statistics.median(replayed.samples_ms)
    stream_ms = statistics.median(streamed.samples_ms)
    if graph_ms <= stream_ms * (1 + CAPTURE_SLOWER_MARGIN):
        return None
    return (f"graph replay {graph_ms * 1e3:.1f} us vs stream order {stream_ms * 1e3:.1f} us: "
            "capture changed the library's kernels, so it is timed in stream order")

