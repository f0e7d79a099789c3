"""Timers: CPU wall clock and CUDA events. They return raw samples and why they stopped; they know
nothing of problems, files or printing (shared/design/measurement.md).

The CUDA timers keep launch overhead out of the number. A legacy cuDNN call costs ~77 us of host
time, more than many of its kernels, so events recorded around calls issued one by one would
measure the host. time_cuda holds the stream with a spin kernel while the host enqueues a whole
batch; the GPU then runs it back to back between one pair of events. If the hold ends before the
host has finished enqueueing, the batch is thrown away and the hold or the batch resized, within
bounds (harness/stream_hold.py). time_cuda_graph (the default for warm points) captures the
calls into a CUDA graph and times its replays the same way, which also leaves out the ~1 us the
GPU spends between stream-ordered kernels (harness/graph_timer.py).
"""
from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import contention
from harness.contention import load_average, stolen_ms
from harness.stopping import RACE_SAMPLES, StoppingRule
from harness.stream_hold import UNHELD, Hold, measure_host_ms, unheld_samples, warm_pairs
from harness.sweep import TimingOptions
from harness.threads import available_cores


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]
    stop_reason: str
    host_ms: float | None = None     # host time to issue one call (GPU timers only)
    # How a GPU point was timed, set by the executor where time_cuda left None; the row's columns:
    gpu_timer: str | None = None      # "cuda_graph", "held_stream" or stream_hold.UNHELD
    timer_note: str | None = None     # why the stream could not be held (stream_hold.Hold.missed)
    capture_error: str | None = None  # why the calls could not be captured into a graph
    sm_clock_mhz: tuple[int, int] | None = None   # (current, max) right after the timed batches
    cpu_use: contention.CpuUse | None = None   # CPU timers: what the process got
    contention: str | None = None     # set by the executor: why the point shared the CPU
    host_probe_ms: float | None = None  # set by the executor: contention.host_probe_ms around it
    host_speedup: float | None = None   # set by the executor: host_cores.Reading.speedup (higher)
    raced_on: str | None = None       # what raced it out before the timer ran (call_bound)
    probe: Timing | None = None       # time_cuda_graph's probe (a later time_cuda's `probed`)


# ---- CPU ----------------------------------------------------------------------------------------
# A CPU point's warm-up lasts at least this long (and at least `warmup` launches; none where that
# is 0): the library worker threads that the verified runs and the float64 reference just woke
# keep spinning after their last call (OpenBLAS for 2^28 cycles, ~110 ms; Intel OpenMP's
# KMP_BLOCKTIME 200 ms) and take a core from whatever runs next: a point timed in that window
# read nearly twice its time (evidence/notes/constants.md#timer-cpu_settle_ms).
CPU_SETTLE_MS = 250.0
def time_cpu(launch: Callable[[], None], options: TimingOptions,
             flush: Callable[[], None] | None = None) -> Timing:
    """Time `launch` with perf_counter_ns; GC off while timing; `flush` (cold mode) runs untimed
    before each sample. Each sample's threads' run-queue waits are read around it: one that
    waited (or lay on a scheduler tick) is taken again (harness/contention.py). Also reports the
    process CPU time over the loop and the load average around it, which judge the point where
    the waits cannot be read."""
    _warm_up(launch, options.warmup)
    waits = contention.ThreadWaits()
    check = contention.SCHEDSTAT if waits.read() is not None else contention.FALLBACK
    load_before, steal_before = load_average(), stolen_ms()
    # CPU and wall time over the whole loop, not summed over the samples: a sample far shorter
    # than a scheduler slice is seldom preempted, so the wait for the cores falls between
    # samples (on the 2-core Xeon VM a 0.13 ms point beside 4 spinners read CPU/wall 1.01 over
    # its samples while a one-thread spin read 0.41). Between samples the loop only computes
    # (stopping rule, flush), so alone the ratio stays >= 1 all the same.
    cpu_start, wall_start = time.process_time_ns(), time.perf_counter_ns()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        loop = _judged_samples(launch, options, flush,
                               waits if check == contention.SCHEDSTAT else None)
    finally:
        if gc_was_enabled:
            gc.enable()
    cpu_ms = (time.process_time_ns() - cpu_start) / 1e6
    wall_ms = (time.perf_counter_ns() - wall_start) / 1e6
    steal_after = stolen_ms()
    steal = None if steal_before is None or steal_after is None else steal_after - steal_before
    use = contention.CpuUse(cpu_ms, wall_ms, load_before, load_average(), available_cores(),
                            steal, os.cpu_count() or 1, check, loop.retaken,
                            loop.waited, len(loop.samples),
                            loop.wait_ms if check == contention.SCHEDSTAT else None)
    return Timing(tuple(loop.samples), loop.reason, cpu_use=use)


@dataclass
class _Loop:
    samples: list[float]
    reason: str
    retaken: int
    waited: int          # kept samples that waited: the retakes ran out
    wait_ms: float       # the kept samples' summed waits


def _judged_samples(launch, options: TimingOptions, flush, waits) -> _Loop:
    """Samples until the stopping rule is met on clean ones; a sample that waited (`waits`: a
    ThreadWaits, None where it cannot be read) or, at the end, lies on a tick is taken again while
    retakes last; after that it is kept and marked (_settled decides what stays)."""
    rule = StoppingRule(options)
    retakes = contention.Retakes(options.min_samples)
    samples: list[float] = []
    waited: list[bool] = []
    waits_ms: list[float] = []
    while True:
        reason = rule.reason_to_stop(samples)
        if reason is not None:
            ticks = [i for i in contention.tick_quantized(samples) if not waited[i]]
            if ticks and retakes.take(launch, len(ticks)):
                keep = [i for i in range(len(samples)) if i not in ticks]
                samples, waited, waits_ms = ([seq[i] for i in keep]
                                             for seq in (samples, waited, waits_ms))
                continue
            waited = [w or i in ticks for i, w in enumerate(waited)]
            return _settled(samples, waited, waits_ms, reason, retakes.taken,
                            options.min_samples)
        if flush is not None:
            flush()
        before = waits.read() if waits is not None else None
        start = time.perf_counter_ns()
        launch()
        wall_ns = time.perf_counter_ns() - start
        after = waits.read() if before is not None else None
        ns = contention.waited_ns(before, after) if after is not None else 0
        shared = contention.sample_waited(wall_ns, ns)
        if shared and retakes.take(launch):
            continue
        samples.append(wall_ns / 1e6)
        waited.append(shared)
        waits_ms.append(ns / 1e6)


def _settled(samples: list[float], waited: list[bool], waits_ms: list[float], reason: str,
             retaken: int, floor: int) -> _Loop:
    """The loop's result. Samples that waited after the retakes ran out are dropped where the
    clean ones alone make the sample floor (the point is then clean); else every sample stays
    and the point is contended (harness/contention.py)."""
    clean = [i for i, w in enumerate(waited) if not w]
    if len(clean) < len(samples) and len(clean) >= floor:
        retaken += len(samples) - len(clean)        # discarded, as a retake discards
        samples, waits_ms = [samples[i] for i in clean], [waits_ms[i] for i in clean]
        waited = [False] * len(clean)
    return _Loop(samples, reason, retaken, sum(waited), sum(waits_ms))


def _warm_up(launch: Callable[[], None], launches: int) -> None:
    """`launches` launches, then more until CPU_SETTLE_MS have passed since the first."""
    started = time.perf_counter()
    for _ in range(launches):
        launch()
    while launches and (time.perf_counter() - started) * 1e3 < CPU_SETTLE_MS:
        launch()


class CpuCacheFlusher:
    """Evicts the CPU caches by writing a buffer larger than any last-level cache."""

    def __init__(self, size_bytes: int = 256 << 20):
        import numpy as np
        self._buffer = np.empty(size_bytes // 8, dtype=np.float64)

    def __call__(self) -> None:
        self._buffer.fill(1.0)


# ---- CUDA ---------------------------------------------------------------------------------------
_SPIN_SOURCE = r"""
extern "C" __global__ void spin_ns(unsigned long long duration_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < duration_ns);
}
"""
_spin_kernel = None


def _spin(stream: Any, duration_ms: float) -> None:
    """Occupy `stream` for `duration_ms` of GPU time (one thread; the GPU's clock, not the SM's)."""
    global _spin_kernel
    import cupy
    if _spin_kernel is None:
        _spin_kernel = cupy.RawKernel(_SPIN_SOURCE, "spin_ns")
    with stream:
        _spin_kernel((1,), (1,), (cupy.uint64(int(duration_ms * 1e6)),))


class GpuL2Flusher:
    """Evicts the GPU's L2 by writing a buffer of twice its size (cold mode)."""

    def __init__(self, l2_bytes: int):
        import cupy
        self._buffer = cupy.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=cupy.float32)

    def __call__(self) -> None:
        self._buffer.fill(0.0)


def time_cuda(launch: Callable[[], None], stream: Any, options: TimingOptions,
              flush: Callable[[], None] | None = None, batch_calls: int = 20,
              host_probe_calls: int = 5, probed: Timing | None = None,
              host_ms: float | None = None) -> Timing:
    """GPU time per call from CUDA events, with the stream held while each batch is enqueued.

    Warm mode brackets a whole batch of back-to-back calls with one pair of events and records the
    mean per call: bracketing each call would add the event and dispatch latency (~2-3 us on an
    H100, 10-30% of a 10 us kernel) to every sample. Cold mode must flush the L2 between calls,
    outside the timed region, so there each call gets its own pair of events. Where the stream
    cannot be held (stream_hold.Hold.missed), every call gets its own pair and the Timing says
    why (gpu_timer UNHELD, timer_note).

    `probed`: time_cuda_graph's probe of the same calls; its host cost stands for this timer's
    probe, and where it could not hold the stream for them this timer does not try (five probe
    calls of a 750-step GRU's training step were 13% of its time stage on an H200). `host_ms`:
    the host's cost of a call, read by the caller already (no host probe then)."""
    import cupy
    if host_ms is None:
        host_ms = measure_host_ms(launch, stream, host_probe_calls) if probed is None \
            else probed.host_ms
    for _ in range(options.warmup):
        launch()
    stream.synchronize()
    rule = StoppingRule(options)
    samples: list[float] = []
    hold = Hold(host_ms + (0.02 if flush else 0.0))
    per_call_estimate = None
    if (note := hold.unreachable() or _found_unheld(probed)) is not None:
        samples, reason = unheld_samples(launch, stream, rule, flush, cupy)
        return Timing(tuple(samples), reason, host_ms, gpu_timer=UNHELD, timer_note=note)
    while (reason := rule.reason_to_stop(samples)) is None:
        per_sample = _batch_size(batch_calls, per_call_estimate, options, len(samples), flush)
        # the first batch alone: until one batch was held, a call's cost is not known
        pairs = 1 if flush is not None or per_call_estimate is None else warm_pairs(
            options, len(samples))
        calls, hold_ms = hold.size(per_sample * pairs)
        pairs = max(1, min(pairs, calls // per_sample))   # the hold may have cut the batch
        calls = calls if pairs == 1 else per_sample * pairs
        batch, enqueue_ms = _timed_batch(launch, stream, calls, hold_ms, flush, cupy, pairs)
        if batch is None:           # the hold ran out while enqueueing: the GPU waited on the host
            note = hold.missed(calls, hold_ms, enqueue_ms)
            if note is None:
                continue
            # all over again under a fresh rule: a row's samples are all timed one way
            samples, reason = unheld_samples(launch, stream, StoppingRule(options), flush, cupy)
            return Timing(tuple(samples), reason, host_ms, gpu_timer=UNHELD, timer_note=note)
        hold.held()
        samples.extend(batch)
        per_call_estimate = sorted(samples)[len(samples) // 2]
    return Timing(tuple(samples), reason, host_ms)


def _found_unheld(probed: Timing | None) -> str | None:
    """Why `probed` timed its calls without a hold (stream_hold's verdict), or None."""
    return probed.timer_note if probed is not None and probed.gpu_timer == UNHELD else None


def _batch_size(default: int, per_call_ms: float | None, options: TimingOptions,
                have: int, flush: Callable[[], None] | None) -> int:
    """Enough calls per batch to amortise the hold, few enough that min_samples batches (each
    one sample) fit in the budget: the sample floor costs more samples, not more time."""
    if per_call_ms is None:
        size = min(default, max(options.min_samples, 3))
    else:
        by_budget = int(options.budget_ms / max(options.min_samples, 4) / max(per_call_ms, 1e-3))
        limit = options.max_samples - have if flush is not None else default
        size = max(1, min(default, by_budget, limit))
    if flush is not None and options.race_bar_ms is not None and have < RACE_SAMPLES:
        size = min(size, RACE_SAMPLES - have)    # a cold batch is its samples: the heat first
    return size


def _timed_batch(launch, stream, calls, hold_ms, flush, cupy,
                 pairs: int = 1) -> tuple[list[float] | None, float]:
    """Warm: `pairs` samples, each the mean over its calls // pairs back-to-back calls; with a
    flush, one sample per call. None where the hold ran out first; and the host's time to
    enqueue them."""
    pairs = calls if flush is not None else pairs
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(pairs)]
    _spin(stream, hold_ms)
    started = time.perf_counter()
    if flush is None:
        for start, end in events:
            start.record(stream)
            for _ in range(calls // pairs):
                launch()
            end.record(stream)
    else:
        for start, end in events:
            with stream:
                flush()
            start.record(stream)
            launch()
            end.record(stream)
    enqueue_ms = (time.perf_counter() - started) * 1e3
    held = not events[0][0].done   # still queued behind the spin: the hold covered the enqueue
    events[-1][1].synchronize()
    if not held:
        return None, enqueue_ms
    per_pair = calls // pairs
    return [cupy.cuda.get_elapsed_time(s, e) / per_pair for s, e in events], enqueue_ms
