"""How long one verified call kept the GPU busy at the least, and the race it can lose before it
is timed (issue 40).

A recurrent candidate far behind its point's best still paid for every stage of the timer: the
host probe (three calls), the probe (three more; one held call for a call of a millisecond or
more since stop 64), a capture and replays. On an H200 a GRU of 750
steps spent 10.4 s timing PERSIST_DYNAMIC (1.73 s a call, 55x the best) and 24 s timing the
plain loop (13.8x), whose calls are host-bound, so the probe was never held and never raced it
out (evidence/logs/issue40-stop58-nvidia-h200-2026-11-28.txt). Yet the calls already made say
enough. Two readings bound a call's device time from below:

- events around the second verified call, in stream order without a hold: between them the GPU
  can only have waited for the host while the host was still issuing the call, so the call kept
  the GPU busy at least `events - host` ms (`from_events`);
- the union of the intervals of the kernels one call ran, where the backend recorded them
  (PyTorch's profiler for torch_gpu's recurrent layers: Prepared.device_ms_at_least). On one
  stream a replay runs the same kernels one after another, so for the plain loop and PyTorch's
  cuDNN-off path it is a bound (over 700 such rows on H100s and H200s their sum stayed under
  0.98x the replayed median). cuDNN's RNN forks streams, and a replay may overlap its kernels
  more than the profiled call did: there it is an estimate, which the race's factor covers.

A candidate whose bound is over the race's bar by stopping.PROBE_RACE_FACTOR (the bar the graph
timer's probe must beat) cannot be the point's best, and is raced out with no further call. Its
row's one sample is the profiled kernels' busy time where they were recorded (gpu_timer
PROFILED_KERNELS), which leaves out the gaps between kernels a replay keeps (0.82-0.98x a
replayed median on DeepBench's and rnn_quick's layers, 0.84x on a 200-step GRU of 256 units:
tests/test_torch_gpu_rnn), else the verified call's events (stream_hold.UNHELD: the host's gaps
counted, as for any unheld row). Its reason says which bound decided and by how much it lost; a
raced-out row never sets a bar or enters `compare`'s estimate (analysis.points.raced_out).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from harness.stopping import RACED_OUT
from harness.stream_hold import UNHELD
from harness.timer import Timing

PROFILED_KERNELS = "profiled_kernels"   # the gpu_timer of a row whose sample is its kernels' span


@dataclass(frozen=True)
class CallBound:
    at_least_ms: float      # the call kept the GPU busy at least this long
    sample_ms: float        # the reading, the row's one sample if it is raced out on it
    gpu_timer: str
    host_ms: float | None   # the host's time to issue the call, where it was read
    words: str              # how it was read, for the row's reason
    # the host's time in the call alone, without the two events' records around it: what a
    # timer's host probe reads (graph_timer._probe's hold and the row's host_ms)
    launch_ms: float | None = None

    def raced_out(self) -> Timing:
        """The Timing of a candidate raced out on this bound."""
        return Timing((self.sample_ms,), RACED_OUT, self.host_ms, gpu_timer=self.gpu_timer,
                      raced_on=self.words)


def from_events(events_ms: float, host_ms: float, launch_ms: float | None = None) -> CallBound:
    return CallBound(max(0.0, events_ms - host_ms), events_ms, UNHELD, host_ms,
                     f"its second verified call ({events_ms:.4g} ms between events in stream "
                     f"order, {host_ms:.4g} ms of it the host issuing the call)", launch_ms)


def from_kernels(busy_ms: float, host_ms: float | None,
                 launch_ms: float | None = None) -> CallBound:
    return CallBound(busy_ms, busy_ms, PROFILED_KERNELS, host_ms,
                     f"its profiled call (its kernels kept the GPU busy {busy_ms:.4g} ms)",
                     launch_ms)


def combined(events: CallBound, kernels: CallBound | None) -> CallBound:
    """The bound that says most (the longer) with the reading a row keeps: the kernels' span
    where it was recorded (one timer for every such row of a backend), else the events'."""
    if kernels is None:
        return events
    decided = max((events, kernels), key=lambda b: b.at_least_ms)
    return replace(kernels, at_least_ms=decided.at_least_ms, words=decided.words)


def busy(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals (in their unit): the time at least one
    ran. Kernels
    of a library that forks streams (cuDNN's RNN backward) overlap, and their plain sum read up
    to 1.9x the call's replayed time."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
