"""What happened at one point: status, raw samples, errors. Statistics are derived, never stored
inside the object, so a new statistic never needs a rerun."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from statistics import mean, median
from typing import Any

from harness.epilogue import labelled
from harness.precision import AUTO_OUTPUT
from harness.stats import interquartile_range
from harness.sweep import Point

# Which engines hung in a run: an engine's number names different kernels per backend and
# direction, per op (a fused graph's engine is not the plain convolution's) and per precision and
# result type (eng4 at fp8 into fp8 is not eng4 at fp16), so a hang on one never caps the others.
HungKey = tuple[str, str, str, str, str]


def hung_key(backend: str, direction: str, op: str | None, precision: str, output: str | None,
             engine: str) -> HungKey:
    """The one key for a hung engine, from a point's fields or a stored row's columns (rows
    older than the op and output columns hold None: the plain convolution, the own type)."""
    return backend, labelled(direction, op), precision, output or AUTO_OUTPUT, engine


class Status(StrEnum):
    """What happened at a point; the one home of these words (a StrEnum: it is the text stored
    in the `status` column, and compares equal to it)."""
    OK = "ok"                                   # verified, then timed: the only rankable rows
    UNSUPPORTED = "unsupported"                 # the backend cannot run this point
    WORKSPACE_EXCEEDED = "workspace_exceeded"   # runs, but needs more workspace than the limit
    FAILED = "failed"                           # the backend raised while preparing or running
    WRONG = "wrong"                             # output outside the tolerance: never timed
    CRASHED = "crashed"                         # took the process or its CUDA context down
    NOT_TRIED = "not_tried"     # an engine's knob setting where it hung; a setup over budget


STATUSES = tuple(Status)
RANKABLE = Status.OK


class ReadOnlyDict(dict):
    """A dict that refuses changes, so a frozen Measurement's extras stay as measured. A dict
    subclass rather than MappingProxyType because rows cross processes by pickle
    (multiprocessing, Dask), which a mapping proxy refuses."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Measurement.extras is read-only: dataclasses.replace the Measurement "
                        "with a new dict")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple:
        # pickle would otherwise rebuild it item by item through the refused __setitem__
        return (type(self), (dict(self),))


# Where a row's wall time went, host clock, in its worker process(es): listing an expanding
# algorithm's variants (a graph-API point's plans: its share of the point's listing), building
# the algorithm's call (plan, workspace, descriptors), running it twice and checking the output
# against the float64 reference, and timing it (host probes, warm-up, samples, the SM clock
# read). Summed over a row's processes or rounds (harness/process_split.py); `convbench run`
# prints their totals.
STAGE_COLUMNS = ("stage_list_ms", "stage_prepare_ms", "stage_verify_ms", "stage_time_ms")


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
    extras: dict[str, Any] = field(default_factory=ReadOnlyDict)   # a given dict is copied
    planned_point_id: str = ""              # set when an expanding algorithm produced this row

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if type(self.extras) is not ReadOnlyDict:   # object.__setattr__: the class is frozen
            object.__setattr__(self, "extras", ReadOnlyDict(self.extras))

    @property
    def planned_id(self) -> str:
        """The point the plan named: for a variant of an expanding algorithm, the one it came
        from; otherwise the row's own."""
        return self.planned_point_id or self.point.point_id

    @property
    def of_variant(self) -> bool:
        """A row of one concrete variant (a graph plan) of an expanding algorithm."""
        return self.planned_id != self.point.point_id

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
        return self.point.problem.flops_of(self.point.direction) / (med * 1e-3) / 1e9
