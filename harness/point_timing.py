"""How the executor times a verified point and what the row says about it: which timer ran (a CUDA
graph's replay, the held stream, or events call by call where the stream could not be held), the
CPU's share of the machine, the SM clock. harness/executor.py calls these; the timers themselves
are harness/timer.py's and harness/graph_timer.py's.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness import contention, host_cores, threads
from harness.backends.base import Prepared
from harness.call_bound import CallBound
from harness.host_cores import HostCores, Reading
from harness.stopping import REPLAYED, lost_in_probe
from harness.timer import CpuCacheFlusher, Timing, time_cpu


# Stream-ordered samples that check a self-capturing library's replay (time_gpu): the check's
# median decides only whether the full stream timing runs. At the regression floor (14-19
# samples) the check had cost as much as the replay itself. On one H100, PyTorch's rows' time
# stage fell from 152 to 83 ms a row (convolutions, quick) and from 1,363 to 1,090 ms (recurrent,
# rnn_quick), every row's time within 5% at 99.2% and 100% (evidence/runs/timer-check-*).
STREAM_CHECK_SAMPLES = 5


# A verified call that kept the GPU busy this long, or took the host this long to issue, needs no
# batch to amortise a timer's events: the graph timer's probe is that one call, held
# (graph_timer._probe). A host-heavy call (a grouped plan issuing a kernel per group: 12.6 ms of
# host time a call at efficientnet_b0's features.4.1.block.1.0) filled the launch queue in a
# held batch of three, missed the hold twice and paid 360-470 ms a probe, 13.7 of that layer's
# 13.9 s of bwd timing on an H200 (evidence/studies/probe_trace).
LONG_CALL_MS = 1.0


def time_gpu(prepared: Prepared, options, flush, bound: CallBound | None = None) -> Timing:
    """Warm points replay a CUDA graph of the calls unless the stream timer is asked for; cold
    points (an L2 flush between calls) and libraries whose calls cannot be captured use the held
    stream. The Timing says which, and why capture failed. A library that captures its own
    calls (PyTorch) is timed both ways: where the replay is slower, capture changed its kernels
    and the stream-ordered timing, what eager users get, is kept
    (graph_timer.capture_changed_kernels).
    A stream timing that could not hold the stream keeps the gpu_timer time_cuda gave it. A
    fresh preparation of a pick already checked so (TimingOptions.replay_checked, set by
    harness/runoff.py) is timed by replay alone. `bound`: the verified call's (call_bound)."""
    from harness.graph_timer import CaptureFailed, capture_changed_kernels, time_cuda_graph
    from harness.timer import time_cuda
    capture_error = None
    if flush is None and options.gpu_timer == "graph":
        try:
            timing = time_cuda_graph(prepared.launch, prepared.stream, options,
                                     capture=prepared.capture,
                                     long_call_host_ms=_long_call_host_ms(bound))
        except CaptureFailed as err:
            capture_error = str(err)[:300]
        else:
            if timing.gpu_timer is not None:   # raced out by its stream-ordered probe
                return timing
            if prepared.capture is None or options.replay_checked:
                return replace(timing, gpu_timer=REPLAYED)
            # The probe's batch of calls before the capture (Timing.probe) is a stream-ordered
            # sample already: a replay no slower than it (nearly every row) needs no other.
            if timing.probe is not None and capture_changed_kernels(timing, timing.probe) is None:
                return replace(timing, gpu_timer=REPLAYED)
            # Else a few stream-ordered samples tell a replay that is not slower from one that
            # may be; only the latter is timed in stream order in full.
            check = replace(options, min_samples=STREAM_CHECK_SAMPLES,
                            max_samples=STREAM_CHECK_SAMPLES, race_bar_ms=None)
            for stream_options in (check, options):
                streamed = time_cuda(prepared.launch, prepared.stream, stream_options,
                                     probed=timing.probe)
                capture_error = capture_changed_kernels(timing, streamed)
                if capture_error is None:
                    return replace(timing, gpu_timer=REPLAYED)
            return replace(streamed, gpu_timer=streamed.gpu_timer or "held_stream",
                           capture_error=capture_error)
    timing = time_cuda(prepared.launch, prepared.stream, options, flush)
    return replace(timing, gpu_timer=timing.gpu_timer or "held_stream",
                   capture_error=capture_error)


def _long_call_host_ms(bound: CallBound | None) -> float | None:
    """The host's cost of the verified call (the call alone, where that was read) where that
    call was long on the GPU or on the host (LONG_CALL_MS), else None."""
    if bound is None or bound.host_ms is None:
        return None
    if max(bound.at_least_ms, bound.host_ms) < LONG_CALL_MS:
        return None
    return bound.launch_ms if bound.launch_ms is not None else bound.host_ms


def time_cpu_alone(prepared: Prepared, options, flush, host: HostCores,
                   point_cores: int) -> Timing:
    """A CPU point timed between two readings of the host probe (contention.host_probe_ms). A
    multi-threaded point's readings also say whether the host gave it its `point_cores` cores
    (harness/host_cores.py); where it did not, the point is timed once more when the host
    gives them back, and a second timing whose reading after it finds them withheld again is
    contended and says why (the reading before it follows a wait that ended on a quiet one)."""
    cores = threads.available_cores()
    timing, readings = _between_readings(prepared, options, flush, host, cores, point_cores)
    if host.withheld(point_cores, *readings) is not None:
        first = timing
        host.wait(point_cores)
        timing, readings = _between_readings(prepared, options, flush, host, cores, point_cores)
        timing = _with_first_retakes(timing, first)
        again = host.withheld(point_cores, readings[1])
        if again is not None:
            why = (f"{again}; timed once more, the first timing: "
                   f"{statistics.median(first.samples_ms):.4g} ms")
            timing = replace(timing, contention="; ".join(filter(None, (timing.contention,
                                                                         why))))
    speedups = [r.speedup for r in readings if r.speedup is not None]
    return replace(timing, host_probe_ms=sum(r.probe_ms for r in readings) / 2,
                   host_speedup=max(speedups) if speedups else None)


def _between_readings(prepared: Prepared, options, flush, host: HostCores, cores: int,
                      point_cores: int) -> tuple[Timing, tuple[Reading, Reading]]:
    """The point timed (_timed_again_if_shared) between two readings of the host."""
    before = host.read(cores, point_cores)
    timing = _timed_again_if_shared(prepared, options, flush)
    return timing, (before, host.read(cores, point_cores))


def _with_first_retakes(timing: Timing, first: Timing) -> Timing:
    """`timing` counting the samples its discarded first timing retook too."""
    if timing.cpu_use is None or first.cpu_use is None:
        return timing
    return replace(timing, cpu_use=replace(
        timing.cpu_use, retaken=timing.cpu_use.retaken + first.cpu_use.retaken))


def _timed_again_if_shared(prepared: Prepared, options, flush) -> Timing:
    """A CPU point timed, and timed once more (same prepared object) when the first timing
    shared the cores with other work (harness/contention.py). The row keeps the second timing;
    if that shared them too, it says so (`contended`, and why in its reason) and `compare`
    never calls it SLOWER or FASTER. One retry: on a machine that stays busy, more cost time
    and would not give a clean number."""
    first = time_cpu(prepared.launch, options, flush)
    if first.cpu_use is None or contention.shared_cores(first.cpu_use) is None:
        return first
    again = time_cpu(prepared.launch, options, flush)
    why = contention.shared_cores(again.cpu_use, first.cpu_use)
    if why is not None:
        why += f"; re-measured once, the first timing: {contention.describe(first.cpu_use)}"
    # the retakes of both timings: what the row's `samples_retaken` counts
    use = replace(again.cpu_use, retaken=again.cpu_use.retaken + first.cpu_use.retaken)
    return replace(again, contention=why, cpu_use=use)


def sm_clock() -> tuple[int, int] | None:
    """SM clock read right after the timed batches, while the GPU is still busy-warm."""
    from harness.env import sm_clock_mhz
    return sm_clock_mhz()


def timing_extras(timing: Timing) -> dict[str, Any]:
    """A row's columns for how it was timed. A clock under 90% of its maximum flags the row as
    throttled, a CPU point that shared the cores as contended (either is kept, never
    discarded)."""
    extras: dict[str, Any] = {}
    use = timing.cpu_use
    if use is not None:
        extras.update(cpu_time_ratio=use.ratio, load_avg=use.load, cpu_steal=use.steal,
                      contended=timing.contention is not None, contention_check=use.check,
                      samples_retaken=use.retaken,
                      cpu_wait=contention.wait_share(use, timing.samples_ms),
                      host_probe_ms=timing.host_probe_ms, host_speedup=timing.host_speedup)
    if timing.capture_error is not None:
        extras["capture_error"] = timing.capture_error
    if timing.gpu_timer is not None:
        extras["gpu_timer"] = timing.gpu_timer
    if timing.timer_note is not None:
        extras["timer_fallback"] = timing.timer_note
    if timing.sm_clock_mhz is not None:
        current, maximum = timing.sm_clock_mhz
        extras.update(sm_clock_mhz=current, sm_clock_max_mhz=maximum,
                      throttled=current < 0.9 * maximum)
    return extras


def timing_notes(timing: Timing) -> list[str]:
    """What the row's reason says about how an ok point was timed: the CPU it shared, the stream
    it could not hold."""
    return [note for note in (timing.contention, timing.timer_note) if note]


class PointTimer:
    """Times a verified point on its device, keeping one cache flusher a device for cold
    timing."""

    def __init__(self, host: HostCores | None = None) -> None:
        self._flushers: dict[str, Callable[[], None]] = {}
        self._host = host         # None: the process's, made at its first CPU point

    def time(self, prepared: Prepared, options, bound: CallBound | None = None,
             cores: int = 1) -> Timing:
        """`bound`: how long the verified call kept the GPU busy at the least; a candidate
        that lost the race by that alone is not timed (harness/call_bound.py). `cores`: the
        cores a CPU point runs on (threads.cores_for)."""
        own = prepared.own_timing(options)
        if own is not None:
            return own
        flush = self._flusher(prepared.device) if options.mode == "cold" else None
        if prepared.device == "cuda":
            lost = bound is not None and lost_in_probe(bound.at_least_ms, options)
            timing = bound.raced_out() if lost else time_gpu(prepared, options, flush, bound)
            return replace(timing, sm_clock_mhz=sm_clock())
        return time_cpu_alone(prepared, options, flush,
                              self._host or host_cores.this_process(), cores)

    def _flusher(self, device: str) -> Callable[[], None]:
        if device not in self._flushers:
            if device == "cuda":
                import cupy
                from harness.timer import GpuL2Flusher
                l2 = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"]
                self._flushers[device] = GpuL2Flusher(l2)
            else:
                self._flushers[device] = CpuCacheFlusher()
        return self._flushers[device]
