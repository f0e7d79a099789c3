"""The race among one point's execution plans (harness/stopping.py says why and when a plan is
raced out): the bar each plan's heat must beat to be timed in full, and what a raced-out row
says. The executor keeps one Race per group of points it measures plan by plan."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from harness.backends.base import fits
from harness.stopping import RACE_MARGIN, RACED_OUT
from harness.sweep import TimingOptions
from harness.timer import Timing


@dataclass(frozen=True)
class _Best:
    median_ms: float
    plan: str


class Race:
    """The fastest plan timed in full so far, per precision delivered: rows are ranked on what
    they delivered (harness/analysis/points.py), so a plan that computes in fp32 never races one
    that computes at tf32. Only a plan within the group's tightest workspace limit sets the bar
    (the group's points differ in their limit alone): a faster plan over that limit is no rival
    at it."""

    def __init__(self, tightest_limit: int | None):
        self._tightest = tightest_limit
        self._best: dict[str | None, _Best] = {}

    def timing(self, options: TimingOptions, delivered: str | None) -> TimingOptions:
        """`options` with the bar a plan that delivered `delivered` must beat."""
        best = self._best.get(delivered)
        if best is None:
            return options
        return replace(options, race_bar_ms=best.median_ms * (1 + RACE_MARGIN))

    def finished(self, plan: str, delivered: str | None, timing: Timing,
                 workspace_bytes: int) -> None:
        if (timing.stop_reason == RACED_OUT or not timing.samples_ms
                or not fits(workspace_bytes, self._tightest)):
            return
        median = statistics.median(timing.samples_ms)
        best = self._best.get(delivered)
        if best is None or median < best.median_ms:
            self._best[delivered] = _Best(median, plan)

    def row_notes(self, delivered: str | None, timing: Timing) -> tuple[dict[str, Any], str]:
        """A raced-out row's columns (how many times the fastest plan so far it took, and which
        plan that was) and the sentence its reason carries; nothing for any other row."""
        best = self._best.get(delivered)
        if timing.stop_reason != RACED_OUT or best is None:
            return {}, ""
        median = statistics.median(timing.samples_ms)
        lost = median / best.median_ms
        return ({"raced_out_by": lost, "raced_against": best.plan},
                f"raced out after {len(timing.samples_ms)} samples: {median:.4g} ms, "
                f"{lost:.2f}x the fastest plan timed before it ({best.plan}, "
                f"{best.median_ms:.4g} ms); a plan within {RACE_MARGIN:.0%} of that is timed "
                f"in full")
