"""When a timer stops taking samples of a point (shared/design/measurement.md): at least
min_samples, then low noise or the budget spent; under min_samples only at SAFETY_LIMIT_MS, or
when the point was raced out.

Racing (issue 39): most execution plans of a point are far slower than its best, and timing each
to the full sample floor was most of a sweep's time (ResNet-50 on an H100: 78% of the graph-API
plans were over 1.2x the fastest plan met before them). A plan is raced out when, after a first
held batch (RACE_SAMPLES samples), even its fastest sample is over RACE_MARGIN above the fastest
median among the plans of its point timed before it (harness/race.py keeps that bar). Such a plan
cannot be the point's best, so its row keeps the samples it has (`stop_reason` "raced_out");
every plan that could still win is timed in full. A plan far over the bar already in the graph
timer's probe (PROBE_RACE_FACTOR) is raced out there, before its calls are captured, and one
whose first replayed sample is over it by REPLAY_FIRST_FACTOR on that sample
(harness/graph_timer.py).
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from harness.stats import relative_noise
from harness.sweep import TimingOptions

# min_samples is a floor the regression verdicts depend on (runner.with_samples_floor), so the
# budget never cuts a point short of it; only a point whose samples alone take this long does, and
# its row says so (stop_reason "safety_limit"). A minute keeps a sweep with a few huge CPU layers
# finite while leaving every layer of the committed suites its full floor (the slowest CPU sample
# there, VGG-16 conv1_1 at batch 8, is ~1 s).
SAFETY_LIMIT_MS = 60_000.0

RACED_OUT = "raced_out"
# The heat: a held GPU batch brackets up to four samples (stream_hold.WARM_SAMPLES_PER_BATCH).
# The median of a graph-API row's first four samples lay within 0.8% of its full median at 98%
# of 6,118 ResNet-50 rows (H100), so four samples place a plan well inside the margin.
RACE_SAMPLES = 4
# How far over the fastest plan so far a plan's fastest sample must be to stop timing it. On the
# same rows no plan whose final median was within 2% of its point's best was raced out at margins
# of 10-30%; 20% leaves room for a clock step in a whole heat.
RACE_MARGIN = 0.2
# A graph's replays need no heat to place a plan far behind: the first replayed sample (four
# replays of up to 20 calls, the first held batch) read at most 1.031x its row's median at 15,884
# timed rows of efficientnet_b0 on an H200 (1.062x at 6,125 rows of its second run), where a
# stream-ordered or CPU sample carries the first batch's gaps. A plan whose first replayed sample
# is over the bar by this factor (1.44x the fastest so far) is raced out there: 96.6% of the
# 14,419 plans that run's heats raced out, each of which had paid a second held batch of 16
# replays (320 calls) for its heat (evidence/studies/effb0_stages.py: 9.3 ms a plan, 240 s).
REPLAY_FIRST_FACTOR = 1 + RACE_MARGIN
REPLAYED = "cuda_graph"     # the gpu_timer of a row whose samples are a graph's replays


# A GPU plan this many times over the bar in the graph timer's probe (one held batch in stream
# order, before anything is captured: graph_timer._probe) is raced out there: over 2.4x the fastest
# plan so far. Stream order adds time between kernels that a replay leaves out, so the probe may
# read a plan slower than its replays, never faster: on an H200 (ResNet-50, fp16 and fp32 NHWC)
# the probe read a median 1.02x, at most 1.54x, its plan's replayed median (2,291 plans; multi-
# kernel eng65 plans 26-38 us over), so the factor is well beyond the worst seen. On an
# H100 selection sweep 62% of the raced-out graph-API plans lost by 2x or more and still paid the
# probe, a capture and five replays: 72 of those rows' 98 s timing were plans of 0.3 ms and more
# (evidence/runs/resnet50-gpu-selection-b461897-...).
PROBE_RACE_FACTOR = 2.0
# ...and first less this much, which stream order may add to a call of any size: the eng65 plans
# read 26-38 us more in stream order than replayed, which on a 15 us point would be 3x.
PROBE_STREAM_ALLOWANCE_MS = 0.05


def lost_in_probe(probe_ms: float, options: TimingOptions) -> bool:
    """Whether a plan's probe (a held stream-ordered batch's mean per call) is so far over the
    race's bar that its replays could not be within it. Only in the first timing process: a
    later one meets the candidates in another order (unranked), and a candidate the first
    timed in full must be timed the same way there (its rows merge)."""
    bar = options.race_bar_ms
    return (bar is not None and options.replicate == 0
            and probe_ms - PROBE_STREAM_ALLOWANCE_MS > bar * PROBE_RACE_FACTOR)


def raced_out(samples: Sequence[float], options: TimingOptions) -> bool:
    """Whether the heat is over and even its fastest sample lost to the bar (options.race_bar_ms,
    set per plan by harness/race.py; None: no race), or, for a graph's replays, whether the first
    replayed sample alone lost to it by REPLAY_FIRST_FACTOR."""
    bar = options.race_bar_ms
    if bar is None or not samples or len(samples) >= options.min_samples:
        return False
    if len(samples) >= RACE_SAMPLES:
        return min(samples) > bar
    return (options.race_first_replay and len(samples) == 1
            and samples[0] > bar * REPLAY_FIRST_FACTOR)


def stopped_by_probe(stop_reason: str | None, samples: Sequence[float],
                     gpu_timer: str | None) -> bool:
    """Whether a timed candidate was raced out by its probe (graph_timer.time_cuda_graph) or before
    it, on its verified call (harness/call_bound.py): fewer samples than a heat, none of them
    replayed (stream order, or the profiled kernels)."""
    return (stop_reason == RACED_OUT and len(samples) < RACE_SAMPLES
            and gpu_timer != REPLAYED)


class StoppingRule:
    """Adaptive stopping: at least min_samples, then low noise or the budget spent; under
    min_samples only at SAFETY_LIMIT_MS or when raced out."""

    def __init__(self, options: TimingOptions):
        self.options = options
        self.started = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1e3

    def reason_to_stop(self, samples: list[float]) -> str | None:
        o = self.options
        n = len(samples)
        if n >= o.max_samples:
            return "max_samples"
        if raced_out(samples, o):
            return RACED_OUT
        if n >= o.min_samples and relative_noise(samples) <= o.noise_target:
            return "noise_target"
        elapsed = self.elapsed_ms()
        if n >= o.min_samples and elapsed >= o.budget_ms:
            return "budget"
        if n >= 1 and elapsed >= SAFETY_LIMIT_MS:
            return "safety_limit"
        return None
