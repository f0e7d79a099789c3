"""The race among one point's candidates (harness/stopping.py says why and when one is raced
out): the bar each candidate's heat must beat to be timed in full, and what a raced-out row says.

The candidates are the execution plans of an expanding algorithm (one group) and, on a GPU, the
plain algorithms of one backend at one point (the legacy cuDNN algorithms: one group each, the
executor keeps their Race across groups). A candidate raced out in the first timing process is
not timed again by a later one (runner.Measurer, process_split.merge)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from harness.backends.base import Algorithm, context_lost, fits
from harness.stopping import (PROBE_RACE_FACTOR, PROBE_STREAM_ALLOWANCE_MS, RACE_MARGIN,
                              RACE_SAMPLES, RACED_OUT, REPLAY_FIRST_FACTOR, stopped_by_probe)
from harness.sweep import Point, TimingOptions
from harness.timer import Timing


@dataclass(frozen=True)
class _Timed:
    median_ms: float
    plan: str
    workspace_bytes: int


class Race:
    """The candidates timed in full so far, per precision delivered: rows are ranked on what
    they delivered (harness/analysis/points.py), so a plan that computes in fp32 never races one
    that computes at tf32. A candidate sets the bar for a group only if its workspace fits that
    group's tightest limit (the group's points differ in their limit alone): a faster plan over
    that limit is no rival at it."""

    def __init__(self) -> None:
        self._timed: dict[str | None, list[_Timed]] = {}

    def _best(self, delivered: str | None, tightest_limit: int | None) -> _Timed | None:
        rivals = [t for t in self._timed.get(delivered, ())
                  if fits(t.workspace_bytes, tightest_limit)]
        return min(rivals, key=lambda t: t.median_ms) if rivals else None

    def timing(self, options: TimingOptions, delivered: str | None,
               tightest_limit: int | None) -> TimingOptions:
        """`options` with the bar a candidate that delivered `delivered` must beat."""
        best = self._best(delivered, tightest_limit)
        if best is None:
            return options
        return replace(options, race_bar_ms=best.median_ms * (1 + RACE_MARGIN))

    def finished(self, plan: str, delivered: str | None, timing: Timing,
                 workspace_bytes: int) -> None:
        if timing.stop_reason == RACED_OUT or not timing.samples_ms:
            return
        self._timed.setdefault(delivered, []).append(
            _Timed(statistics.median(timing.samples_ms), plan, workspace_bytes))

    def row_notes(self, delivered: str | None, timing: Timing,
                  tightest_limit: int | None) -> tuple[dict[str, Any], str]:
        """A raced-out row's columns (how many times the fastest candidate so far it took, and
        which that was) and the sentence its reason carries; nothing for any other row."""
        best = self._best(delivered, tightest_limit)
        if timing.stop_reason != RACED_OUT or best is None:
            return {}, ""
        median = statistics.median(timing.samples_ms)
        lost = median / best.median_ms
        if timing.raced_on is not None:     # before its timer ran (harness/call_bound.py)
            how, within = f"on {timing.raced_on}", (
                f"a plan whose call may take under {(1 + RACE_MARGIN) * PROBE_RACE_FACTOR:.2g}x "
                f"of that plus {PROBE_STREAM_ALLOWANCE_MS * 1e3:.0f} us is timed")
        elif stopped_by_probe(timing.stop_reason, timing.samples_ms, timing.gpu_timer):
            how, within = "by its probe (its calls in stream order)", (
                f"a plan under {(1 + RACE_MARGIN) * PROBE_RACE_FACTOR:.2g}x of that plus "
                f"{PROBE_STREAM_ALLOWANCE_MS * 1e3:.0f} us in its probe is replayed")
        elif len(timing.samples_ms) < RACE_SAMPLES:     # its first replayed sample
            how = "on its first replayed sample"
            within = (f"a plan under {(1 + RACE_MARGIN) * REPLAY_FIRST_FACTOR:.3g}x of that "
                      f"there is timed on")
        else:
            how = f"after {len(timing.samples_ms)} samples"
            within = f"a plan within {RACE_MARGIN:.0%} of that is timed in full"
        return ({"raced_out_by": lost, "raced_against": best.plan},
                f"raced out {how}: {median:.4g} ms, {lost:.2f}x the fastest plan timed before "
                f"it ({best.plan}, {best.median_ms:.4g} ms); {within}")


def measuring_order(candidates: list[tuple[Algorithm, Point]]) -> list[int]:
    """The order to measure a point's candidates in (harness.worker gets them in one message):
    the library's likeliest fastest first (Algorithm.race_rank), unranked ones after in the
    order given. The first candidate timed in full sets the bar; in cuDNN's enum order that was
    often a slow one, timed in full because nothing had set a bar yet (bwd_data algo_0 on
    ResNet-50's strided 1x1 layers, ~0.9 s a row: 40 of the 237 s a selection sweep's time
    stage took: `evidence/runs/resnet50-gpu-selection-eb3dc29-stages-partial-...`)."""
    ranks = [_rank(algo, point) for algo, point in candidates]
    return sorted(range(len(candidates)), key=lambda i: (ranks[i] is None, ranks[i] or 0, i))


def _rank(algo: Algorithm, point: Point) -> int | None:
    """The candidate's place in its library's ranking; None where it has none, is refused,
    asking failed (its own measurement then meets and reports whatever went wrong), or in a
    later timing process, which times only what the first did not race out. The ranking only
    orders the candidates, so a failure to rank changes no row; a lost CUDA context is
    raised, so the worker is replaced (harness.worker)."""
    if point.timing.replicate > 0:
        return None
    try:
        return None if algo.refusal(point) else algo.race_rank(point)
    except Exception as err:
        if context_lost(err):
            raise
        return None


def tightest_fitting(points: list[Point], workspace_bytes: int) -> int | None:
    """The tightest of the group's limits that the candidate's workspace fits: the race's bar
    must fit it. Where the candidate does not fit, its row is over the limit
    whatever its time, so a rival that fits no tighter limit can still race it."""
    limits = [p.workspace_limit for p in points
              if p.workspace_limit is not None and fits(workspace_bytes, p.workspace_limit)]
    return min(limits) if limits else None
