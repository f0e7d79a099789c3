"""How the held-stream timer (harness/timer.time_cuda) sizes its hold and its batches (calls,
samples, graph replays), and when it stops holding.

A spin kernel holds the stream while the host enqueues a batch; the batch counts only if the hold
outlasted the enqueue. A miss whose enqueue took most of the hold means the host waited on the GPU
(a call that synchronizes, or a launch queue filled by a call of many kernels): a longer hold
cannot help, since the host waits for it too, so the batch is made smaller. Any other miss means
the hold was short of the host's overhead around the launches, so it is doubled. Neither may go
on for ever (issue 38: an fft_tiling call missed every hold and the worker's 120 s watchdog
recorded a working algorithm as crashed): after MAX_MISSES misses in a row, or a miss of a single
blocking call, the point is timed call by call without a hold, and the row says why.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.sweep import TimingOptions

MIN_HOLD_MS = 0.1     # the hold also covers recording the events and Python's loop overhead
# The usual need is 1.5 x 20 calls x 77 us (a legacy cuDNN call's host cost) ~ 2.3 ms; a hold
# 40 times that is no longer waiting for a slow host.
MAX_HOLD_MS = 100.0
MAX_MISSES = 8        # misses in a row; with the cap on the hold, the worst case is about a second
# A miss whose calls each took this many times their unhindered host cost to enqueue (measured
# before, without a hold): the host was made to wait for the GPU. Any miss took about the hold to
# enqueue (that is what a miss is), so the hold itself cannot tell a blocked host from a slow one.
BLOCKED_FACTOR = 4.0
UNHELD = "unheld_events"    # the gpu_timer of a point timed call by call without a hold
_COUNTED = "timed call by call without a hold; host gaps inside the call are counted"


@dataclass(frozen=True)
class Miss:
    calls: int
    enqueue_ms: float
    hold_ms: float
    per_call_ms: float      # the host's unhindered cost of one call

    @property
    def blocked(self) -> bool:
        return self.enqueue_ms / self.calls >= BLOCKED_FACTOR * self.per_call_ms

    def __str__(self) -> str:
        return (f"{self.calls} call{'s' if self.calls > 1 else ''} took {self.enqueue_ms:.3g} ms "
                f"to enqueue against a {self.hold_ms:.3g} ms hold")


class Hold:
    """The hold and the most calls per batch, adjusted after each miss."""

    def __init__(self, enqueue_ms_per_call: float):
        self.per_call = enqueue_ms_per_call   # the host's cost to enqueue one call
        self.ms = MIN_HOLD_MS
        self.most_calls: int | None = None
        self.misses: list[Miss] = []          # since the last batch the hold covered

    def size(self, calls: int) -> tuple[int, float]:
        """The calls of the next batch (at most `calls`) and the hold to enqueue them under:
        half again their enqueue cost, never shorter than the last hold, never over the cap."""
        if self.most_calls is not None:
            calls = min(calls, self.most_calls)
        self.ms = min(MAX_HOLD_MS, max(self.ms, self._needed(calls)))
        return calls, self.ms

    def _needed(self, calls: int) -> float:
        """The hold that covers enqueueing `calls` calls: half again their host cost."""
        return 1.5 * calls * self.per_call + MIN_HOLD_MS

    def unreachable(self) -> str | None:
        """Why no hold can cover even one call, known before holding: its host cost alone needs
        a hold over the longest (the misses would end in the same verdict after up to a second
        of holds: a plain Python loop of PyTorch ops, 67 ms of host time a call, paid that at
        every probe and check on an H200); None otherwise."""
        if self._needed(1) <= MAX_HOLD_MS:
            return None
        return (f"one call takes longer to enqueue than the longest hold (its host cost "
                f"{self.per_call:.3g} ms, measured unheld, against a {MAX_HOLD_MS:g} ms hold): "
                f"{_COUNTED}")

    def held(self) -> None:
        self.misses.clear()

    def missed(self, calls: int, hold_ms: float, enqueue_ms: float) -> str | None:
        """Adjusts to a batch the hold did not cover; returns why to stop holding, or None."""
        miss = Miss(calls, enqueue_ms, hold_ms, self.per_call)
        previous = self.misses[-1] if self.misses else None
        self.misses.append(miss)
        # One call blocked twice in a row: it waits for the GPU whatever the hold (a hiccup of
        # the host, which also reads as blocked, does not come back at once).
        if miss.blocked and calls == 1 and previous is not None and previous.blocked and \
                previous.calls == 1:
            first = next(m for m in self.misses if m.blocked)
            return f"the call blocks the host while the stream is held ({first}; {miss}): " \
                   f"{_COUNTED}"
        if len(self.misses) >= MAX_MISSES:
            return (f"the stream hold ran out {len(self.misses)} times in a row before the host "
                    f"had enqueued the batch (last: {miss}): {_COUNTED}")
        at_cap = hold_ms >= MAX_HOLD_MS
        if (miss.blocked or at_cap) and calls > 1:
            self.most_calls = max(1, calls // 2)     # a longer hold cannot help: fewer calls
        elif at_cap:
            return (f"one call takes longer to enqueue than the longest hold ({miss}): "
                    f"{_COUNTED}")
        else:
            self.ms = min(MAX_HOLD_MS, 2 * hold_ms)
        return None


def measure_host_ms(launch: Callable[[], None], stream: Any, calls: int = 5) -> float:
    """Host time per call, issued back to back without synchronizing (a few calls never fill
    the launch queue, so the host is not made to wait for the GPU): what a hold must cover."""
    start = time.perf_counter()
    for _ in range(calls):
        launch()
    host_ms = (time.perf_counter() - start) * 1e3 / calls
    stream.synchronize()
    return host_ms


def unheld_samples(launch: Callable[[], None], stream: Any, rule: Any,
                   flush: Callable[[], None] | None, cupy: Any) -> tuple[list[float], str]:
    """One sample per call between its own pair of events, the stream idle before each (a sync
    between samples); `flush` (cold mode) runs before each call, outside the events. `rule` is
    the timer's stopping rule; returns the samples and why they stopped."""
    samples: list[float] = []
    while (reason := rule.reason_to_stop(samples)) is None:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        if flush is not None:
            with stream:
                flush()
        start.record(stream)
        launch()
        end.record(stream)
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end))
    return samples, reason


# ---- how many samples and calls a held batch carries ----------------------------------------
def warm_pairs(options: TimingOptions, have: int) -> int:
    """Warm samples one held batch brackets, each between its own events: as many as the sample
    floor still needs, at most WARM_SAMPLES_PER_BATCH, then one at a time for the stopping rule.
    Each held batch costs a hold and a synchronisation (~2 ms on an H100 whatever the kernels),
    which at a floor of 17 was most of a small row's time."""
    return max(1, min(WARM_SAMPLES_PER_BATCH, options.min_samples - have))


WARM_SAMPLES_PER_BATCH = 4


def calls_per_graph(per_call_ms: float, options: TimingOptions, most: int) -> int:
    """Enough calls per graph to amortise the replay's start, few enough that the sample floor's
    samples (four replays each) fit in the budget: the floor costs more samples, not more time
    (a ResNet-50 row of 70 us kernels at a floor of 17 ran 1,360 calls)."""
    replays = 4 * max(options.min_samples, 4)
    return max(1, min(most, int(options.budget_ms / replays / max(per_call_ms, 1e-3))))
