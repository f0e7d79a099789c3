"""What a comparison answers with: the verdicts, the options, one result per row and per suite,
the suite-level rule, and the wording the verdicts and the Markdown summary share."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

import pandas as pd

from harness import stats
from harness.stats import CORRECTIONS, DEFAULT_ALPHA, smallest_p
from harness.store import ResultsError

DEFAULT_THRESHOLD = 0.05       # 5% change before anyone should care


DEFAULT_SUITE_THRESHOLD = 0.03  # the whole run: see the module docstring


DEFAULT_SUITE_CONFIDENCE = 0.99


class Verdict(StrEnum):
    SAME = "SAME"
    FASTER = "FASTER"
    SLOWER = "SLOWER"
    AMBIGUOUS = "AMBIGUOUS"
    BROKEN = "BROKEN"
    MISSING = "MISSING"
    NEW = "NEW"


# What a summary lists, most urgent first; NEW rows are counted but not listed (nothing to
# compare them with).
CHANGED = (Verdict.BROKEN, Verdict.SLOWER, Verdict.FASTER, Verdict.AMBIGUOUS, Verdict.MISSING)


MATCHED = (Verdict.SAME, Verdict.FASTER, Verdict.SLOWER, Verdict.AMBIGUOUS)


# The row (and suite) verdicts that fail a regression check under each --fail-on policy. A
# BROKEN or MISSING row is a regression of the candidate as much as a SLOWER one: it lost a point
# the baseline verified (MISSING fails unless CompareOptions.allow_missing says losing is fine).
FAILING: dict[str, tuple[Verdict, ...]] = {
    "slower": (Verdict.SLOWER, Verdict.BROKEN, Verdict.MISSING),
    "ambiguous": (Verdict.SLOWER, Verdict.BROKEN, Verdict.MISSING, Verdict.AMBIGUOUS),
    "never": (),
}


FAIL_ON = tuple(FAILING)


@dataclass(frozen=True)
class CompareOptions:
    alpha: float = DEFAULT_ALPHA
    threshold: float = DEFAULT_THRESHOLD               # fraction: 0.05 = 5%; the suite's value
    layer_thresholds: Mapping[str, float] = field(default_factory=dict)   # {layer name: fraction}
    correction: str = "bh"                             # "bh" (FDR), "holm" (FWER) or "none"
    allow_env_mismatch: bool = False
    # MISSING rows do not fail: a candidate that is meant to measure fewer points (a narrower
    # sweep, a machine without a backend) is not a regression. BROKEN rows still fail.
    allow_missing: bool = False
    suite_threshold: float = DEFAULT_SUITE_THRESHOLD   # fraction, for the geometric mean
    suite_confidence: float = DEFAULT_SUITE_CONFIDENCE
    labels: tuple[str, str] = ("the baseline", "the candidate")   # named in IncomparableResults

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha={self.alpha!r} must lie strictly between 0 and 1")
        if not 0.5 <= self.suite_confidence <= 0.999:     # where stats.t_quantile is exact
            raise ValueError(f"suite_confidence={self.suite_confidence!r} must lie between 0.5 "
                             "and 0.999")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"correction={self.correction!r} must be one of "
                             f"{', '.join(CORRECTIONS)}")
        thresholds = [("threshold", self.threshold), ("suite_threshold", self.suite_threshold),
                      *self.layer_thresholds.items()]
        for name, value in thresholds:
            if not (isinstance(value, (int, float)) and 0 <= value <= 1):
                raise ValueError(f"threshold for {name!r} is {value!r}: give a fraction such as "
                                 f"0.05 for 5%")

    def threshold_for(self, layer: str | None) -> float:
        return float(self.layer_thresholds.get(layer or "", self.threshold))


@dataclass(frozen=True)
class RowResult:
    point_id: str
    verdict: Verdict
    reason: str
    suite: str | None = None
    layer: str | None = None
    batch: int | None = None
    direction: str | None = None
    precision: str | None = None
    layout: str | None = None
    backend: str | None = None
    algorithm: str | None = None
    workspace_limit: int | None = None  # bytes; -1 = unlimited (store.UNLIMITED_BYTES)
    timing_mode: str | None = None
    threads: int | None = None          # CPU points: 0 = all cores (harness.threads)
    op: str | None = None               # what followed the convolution (harness.epilogue)
    output: str | None = None           # the result type asked for ("auto": the precision's own)
    base_median_ms: float | None = None
    new_median_ms: float | None = None
    ratio: float | None = None          # new / base medians
    p_value: float | None = None        # one-sided, in the direction of the ratio
    adjusted_p: float | None = None     # the same after the multiple-comparison correction
    threshold: float | None = None
    n_base: int = 0
    n_new: int = 0
    contended: bool = False             # a CPU timing shared the cores in either run: AMBIGUOUS
    host_spell: bool = False            # ... at the host: a slow spell (contention.HOST_SLOWER)
    raced: bool = False                 # raced out in either run: out of the suite estimate
    picked_again: bool = False          # PyTorch ran other kernels than in the baseline

    @property
    def effect(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0


@dataclass(frozen=True)
class EnvMismatch:
    field: str
    base: tuple[str, ...]       # distinct non-null values of env_<field> in the baseline
    new: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.field}: base {values_text(self.base)} vs new {values_text(self.new)}"


class EnvironmentMismatch(ValueError):
    """The two runs come from machines or libraries whose timings must not be compared."""

    def __init__(self, mismatches: Sequence[EnvMismatch]):
        self.mismatches = tuple(mismatches)
        lines = "\n".join(f"  {m.describe()}" for m in self.mismatches)
        super().__init__(
            "refusing to compare results from different environments:\n" + lines + "\n"
            "Measure the baseline on this machine, or pass --allow-env-mismatch "
            "(CompareOptions.allow_env_mismatch) to compare anyway; the report is then marked.")


class IncomparableResults(ResultsError):
    """Two results that cannot be compared at all (empty, other schema, nothing in common)."""


@dataclass(frozen=True)
class SuiteVerdict:
    """The run as a whole (module docstring). `verdict` is None when there is no interval (too
    few matched rows): then the per-row verdicts decide alone."""
    verdict: Verdict | None
    ratio: float | None                # geometric mean of new/base medians over the matched rows
    low: float | None                  # the confidence interval of `ratio`
    high: float | None
    n_rows: int                        # matched rows with a finite positive ratio
    threshold: float
    confidence: float
    reason: str


@dataclass(frozen=True)
class Comparison:
    rows: tuple[RowResult, ...]
    options: CompareOptions
    env_mismatches: tuple[EnvMismatch, ...] = ()
    confirmation_rounds: int = 0       # how many times flagged rows were re-measured
    suite: SuiteVerdict | None = None  # None: judged from `rows` (confirm() passes its own)
    scatter: float | None = None       # the pair's run-to-run scatter (log ratio; stats module)

    def __post_init__(self) -> None:
        if self.suite is None:
            object.__setattr__(self, "suite", judge_suite(self.rows, self.options, self.scatter))

    def fails(self, policy: str = "slower") -> bool:
        """Whether a regression check fails under `policy` (one of FAIL_ON)."""
        if policy not in FAIL_ON:
            raise ValueError(f"fail-on policy {policy!r} must be one of {', '.join(FAIL_ON)}")
        failing = set(FAILING[policy]) - ({Verdict.MISSING} if self.options.allow_missing
                                          else set())
        return self.suite.verdict in failing or any(r.verdict in failing for r in self.rows)

    @property
    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for row in self.rows:
            counts[row.verdict.value] += 1
        return counts

    @property
    def geomean_ratio(self) -> float | None:
        """Geometric mean of new/base medians over the matched rows; None when there are none."""
        return stats.geomean(_matched_ratios(self.rows))

    @property
    def has_regression(self) -> bool:
        """The default policy's failure: a SLOWER row or suite, a BROKEN row, or a MISSING row
        unless missing points are allowed."""
        return self.fails("slower")

    @property
    def underpowered(self) -> list[RowResult]:
        """Matched rows whose sample counts cannot reach p <= alpha/m even when every new sample
        is slower than every old one, so a regression there alone could never be SLOWER. A gate
        that cannot fire must say so (e.g. 5 samples a side: the smallest p is 0.004)."""
        matched = [r for r in self.rows if r.verdict in MATCHED]
        needed = self.options.alpha / max(len(matched), 1)
        return [r for r in matched if smallest_p(r.n_base, r.n_new) > needed]

    def of(self, verdict: Verdict) -> list[RowResult]:
        return [r for r in self.rows if r.verdict is verdict]

    def to_frame(self) -> pd.DataFrame:
        records = [{**asdict(r), "verdict": r.verdict.value} for r in self.rows]
        return pd.DataFrame(records, columns=[f for f in RowResult.__dataclass_fields__])


def interval_text(s: SuiteVerdict) -> str:
    """"+x% [lo, hi]": the suite ratio and its interval, as the verdicts and summary word it."""
    middle = "n/a" if s.ratio is None else f"{s.ratio - 1:+.1%}"
    if s.low is None or s.high is None:
        return middle
    return f"{middle} [{s.low - 1:+.1%}, {s.high - 1:+.1%}]"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"


def parse_threshold(text: str) -> float:
    """'5%', '2.5%' or '0.05' -> 0.05. A bare number of 1 or more is refused as ambiguous."""
    value = text.strip()
    percent = value.endswith("%")
    try:
        number = float(value[:-1] if percent else value)
    except ValueError:
        raise ValueError(f"threshold {text!r} is not a number, a fraction or a "
                         "percentage") from None
    if not percent and number >= 1:
        raise ValueError(f"threshold {text!r} is ambiguous: write {value}% or a fraction such as "
                         f"{number / 100:g}")
    fraction = number / 100 if percent else number
    if not 0 <= fraction <= 1:
        raise ValueError(f"threshold {text!r} must lie between 0% and 100%")
    return fraction


def parse_layer_thresholds(items: Iterable[str]) -> dict[str, float]:
    """['res2a_branch2b=2%', 'conv1=0.1'] -> {'res2a_branch2b': 0.02, 'conv1': 0.1}."""
    result = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise ValueError(f"layer threshold {item!r} must look like LAYER=PERCENT%, "
                             "e.g. conv1=2%")
        result[name] = parse_threshold(value)
    return result


def values_text(values: tuple[str, ...]) -> str:
    return " / ".join(repr(v) for v in values) if values else "(not recorded)"


def judge_suite(rows: Sequence[RowResult], options: CompareOptions,
                scatter: float | None = None) -> SuiteVerdict:
    """The suite verdict of the module docstring over the matched rows' ratios, given the pair's
    run-to-run scatter (None: no floor)."""
    ratios = _matched_ratios(rows)
    t, confidence = options.suite_threshold, options.suite_confidence
    contended = sum(r.verdict in MATCHED and r.contended for r in rows)
    raced = sum(r.verdict in MATCHED and r.raced and not r.contended for r in rows)
    left_out = sum(r.verdict in MATCHED for r in rows) - len(ratios) - contended - raced
    note = f"; {left_out} rows with a zero median left out" if left_out else ""
    note += f"; {contended} rows that shared the CPU left out" if contended else ""
    note += f"; {raced} raced-out rows left out" if raced else ""
    interval = stats.geomean_interval(ratios, confidence)
    if interval is None:
        reason = (f"only {len(ratios)} matched rows, a suite interval needs {stats.MIN_ROWS}: "
                  "the per-row verdicts decide")
        return SuiteVerdict(None, stats.geomean(ratios), None, None, len(ratios), t, confidence,
                            reason + note)
    verdict, reason = suite_rule(interval.low, interval.high, t,
                                  stats.scatter_floor(scatter, stats.SCATTER_SUITE_K))
    return SuiteVerdict(verdict, interval.ratio, interval.low, interval.high, interval.n, t,
                        confidence, reason + note)


def suite_rule(low: float, high: float, t: float, floor: float) -> tuple[Verdict, str]:
    """The suite verdict from its interval (ratios), the threshold t (a fraction) and the
    scatter floor (a log ratio): SLOWER and FASTER must clear both."""
    if low - 1 > t or high - 1 < -t:
        slower = low - 1 > t
        bound, sign = (low, "+") if slower else (high, "-")
        if abs(math.log(bound)) > floor:
            side = "above" if slower else "below"
            return (Verdict.SLOWER if slower else Verdict.FASTER,
                    f"the whole interval lies {side} {sign}{pct(t)}" + _floor_note(floor, t))
        return Verdict.AMBIGUOUS, (f"the whole interval lies beyond ±{pct(t)} but within "
                                   f"{floor_text(floor)}: two runs of unchanged code on this "
                                   "machine differ that much")
    if low - 1 >= -t and high - 1 <= t:
        return Verdict.SAME, f"the interval lies within ±{pct(t)}"
    return Verdict.AMBIGUOUS, (f"the interval crosses ±{pct(t)}: measure more samples per "
                               "point or more points")


def _floor_note(floor: float, t: float) -> str:
    """Said only where the floor, not the threshold, was the bar that had to be cleared."""
    return f" and beyond {floor_text(floor)}" if math.expm1(floor) > t else ""


def floor_text(floor: float) -> str:
    return f"±{math.expm1(floor):.1%}, the run-to-run noise floor"


def _matched_ratios(rows: Iterable[RowResult]) -> list[float]:
    """The ratios the suite estimate is made of: matched rows with a finite positive ratio,
    except those whose CPU timing shared the cores (they measure the neighbours) and those a
    race stopped early in either run (a few samples, a probe's in stream order: harness/race.py;
    they lost to a faster candidate, and no answer rests on their time)."""
    return [r.ratio for r in rows if r.verdict in MATCHED and not r.contended and not r.raced
            and r.ratio is not None and 0 < r.ratio < math.inf]


def confirmed_suite(first: SuiteVerdict, again: SuiteVerdict) -> SuiteVerdict:
    before = f"first run {interval_text(first)}"
    if again.verdict is None:
        return replace(again, verdict=Verdict.AMBIGUOUS,
                       reason=f"SLOWER at first ({before}) but the rerun has only "
                              f"{again.n_rows} matched rows, too few for a suite interval")
    if again.verdict is Verdict.SLOWER:
        return replace(again, reason=f"confirmed on a rerun of every row: {again.reason} "
                                     f"({before})")
    return replace(again, reason=f"not confirmed ({before}); rerun: {again.reason}")
