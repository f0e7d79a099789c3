"""What happened at one point: status, raw samples, errors. Statistics are derived, never stored
inside the object, so a new statistic never needs a rerun."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import mean, median
from typing import Any

from harness.sweep import Point

class Status(StrEnum):
    """What happened at a point; the one home of these words (a StrEnum: it is the text stored
    in the `status` column, and compares equal to it)."""
    OK = "ok"                                   # verified, then timed: the only rankable rows
    UNSUPPORTED = "unsupported"                 # the backend cannot run this point
    WORKSPACE_EXCEEDED = "workspace_exceeded"   # runs, but needs more workspace than the limit
    FAILED = "failed"                           # the backend raised while preparing or running
    WRONG = "wrong"                             # output outside the tolerance: never timed
    CRASHED = "crashed"                         # took the process or its CUDA context down


STATUSES = tuple(Status)
RANKABLE = Status.OK


@dataclass(frozen=True)
class Measurement:
    point: Point
    status: str
    reason: str = ""
    family: str = ""
    samples_ms: tuple[float, ...] = ()      # device (or CPU) time per call, one entry per sample
    stop_reason: str = ""
    workspace_bytes: int | None = None
    rel_error: float | None = None
    max_abs_error: float | None = None
    tolerance: float | None = None
    setup_ms: float | None = None           # prepare + first call: plan building, compilation
    host_ms: float | None = None            # host cost of issuing one call
    effective_precision: str | None = None  # what the result's accuracy shows it computed at
    deterministic: bool | None = None       # two runs bitwise equal (None: not checked)
    extras: dict[str, Any] = field(default_factory=dict)
    planned_point_id: str = ""              # set when an expanding algorithm produced this row

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == RANKABLE

    @property
    def median_ms(self) -> float | None:
        return median(self.samples_ms) if self.samples_ms else None

    @property
    def min_ms(self) -> float | None:
        return min(self.samples_ms) if self.samples_ms else None

    @property
    def mean_ms(self) -> float | None:
        return mean(self.samples_ms) if self.samples_ms else None

    @property
    def iqr_ms(self) -> float | None:
        return interquartile_range(self.samples_ms) if self.samples_ms else None

    @property
    def gflops(self) -> float | None:
        """Achieved rate, padding-inclusive FLOPs over the median time."""
        med = self.median_ms
        if not med:
            return None
        return self.point.problem.flops / (med * 1e-3) / 1e9


def interquartile_range(samples: tuple[float, ...] | list[float]) -> float:
    ordered = sorted(samples)
    return _quantile(ordered, 0.75) - _quantile(ordered, 0.25)


def relative_noise(samples: tuple[float, ...] | list[float]) -> float:
    """Relative standard error of the median, estimated robustly from the IQR.

    For normal data sigma ~= IQR / 1.349, and the median's standard error is ~1.2533 sigma/sqrt(n).
    """
    if len(samples) < 2:
        return math.inf
    med = median(samples)
    if med <= 0:
        return math.inf
    sigma = interquartile_range(samples) / 1.349
    return 1.2533 * sigma / math.sqrt(len(samples)) / med


def _quantile(ordered: list[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
