"""Baseline vs candidate: one noise-aware verdict per point (shared/design/measurement.md).

Rows are matched by `point_id`. Only rows with status "ok" carry timings.

Verdicts, with r = median(new) / median(base), effect = r - 1, t the row's practical threshold
(`CompareOptions.threshold`, or `layer_thresholds[layer]`):

  SLOWER     effect > +t  and the one-sided Mann-Whitney U test "new is slower" is significant
             (p after Holm/BH correction across all matched rows <= alpha), and |log r| clears
             the pair's run-to-run scatter floor (below).
             A GPU row also needs every worker process's median on the new side to be above
             every one on the base side by more than t (the process rule, below).
  FASTER     effect < -t  and the one-sided test "new is faster" is significant likewise.
  AMBIGUOUS  |effect| > t  but the test in that direction is not significant: the samples are too
             few or too noisy to call it; rerun with more samples (or `--confirm`). Or it is
             significant but within the scatter floor: two runs of unchanged code on this
             machine differ that much.
  SAME       |effect| <= t, significant or not. A significant effect below the threshold is real
             but too small to matter; with enough samples every run-to-run drift is significant,
             so significance alone must never produce a verdict.
  MISSING    ok in the baseline, but absent from the candidate or not ok there (reason: its status).
  NEW        ok in the candidate only.

Why two one-sided families: "new is slower" is tested for every matched row and the correction
is applied to that family, so in an A/A comparison (no real change anywhere) the chance of any
false SLOWER is at most alpha, with Holm and with Benjamini-Hochberg alike. The "faster" family is
corrected separately and never changes a SLOWER verdict.

Why Benjamini-Hochberg by default: a real regression usually slows many rows at once (a library
update, one algorithm family); BH accepts the k-th smallest p-value at k*alpha/m where Holm needs
alpha/(m-k+1). Holm ("holm") bounds the chance of any false SLOWER even when other
rows really changed; use it when a single false alarm is expensive.

p-values are exact when the samples have no ties and at most 50 x 50 of them (the usual case), else
from the normal approximation with tie and continuity corrections. Either way, the smallest p a
row can reach depends on its sample counts: 5.4e-6 with 10 samples a side (exact), which just
passes alpha/m for m = 200 rows; with 5 samples a side it is 0.004, never significant. Rows with
few samples therefore come out AMBIGUOUS, not SLOWER: regression runs need 15-30 samples a point.

Why a scatter floor as well as the rank test: the test sees the noise inside each row's window
only, and on a shared machine the rows of two runs of unchanged code disagree by far more than
that (8-13% on the 2-core CI VM against ~2% inside a window; harness/stats.py). The rows of the
pair itself measure that: their log ratios' robust spread about the median (stats.
run_to_run_scatter), and a row must move stats.SCATTER_ROW_K of them before it can be SLOWER or
FASTER. Re-judging a subset (confirm) keeps the first comparison's scatter.

Why the process rule: a GPU point's time can depend on the process it runs in (where its buffers
land in memory), by 5-16% for a few cuDNN points of 3,646, each process's samples tight, so the
rank test calls such a jump significant at any sample count. GPU rows share their samples among
worker processes (harness/process_split.py, `process_samples`), and a row is SLOWER only if the
fastest process of the new run is slower than the slowest process of the base run by more than
t; otherwise some process of the new run measured no regression: AMBIGUOUS, with both sets of
medians. A real regression moves every process (their medians agree to 0.2%, 1.2% at the 90th
percentile on an H100). Rows measured in one process (CPU rows, older files) give one median a
side, and the rule is then the ratio rule itself.

The suite verdict (`Comparison.suite`) asks the same question of the run as a whole, because a
uniform slowdown that no row can prove alone (3-5 samples a point) is still a regression: the
geometric-mean ratio of the matched rows with a bootstrap interval over rows (harness/stats.py),
at `suite_confidence` (99%: it is one test, not a family of many), against `suite_threshold`:
SLOWER when the whole interval lies above +threshold and above stats.SCATTER_SUITE_K scatters,
FASTER likewise below, SAME inside ±threshold, AMBIGUOUS otherwise; no verdict (None) with fewer
than stats.MIN_ROWS rows.
Why a 3% default suite threshold, below the 5% row threshold: averaging many rows removes most
row noise, so a 3-5% suite-wide shift is measurable and worth a look; but a whole run also drifts
as a unit (clocks, thermals, neighbours: ~1% on a GPU, as the A/A self-tests model it), which the
interval over rows cannot see, and 3% keeps that drift 3 sigma away from a false SLOWER where 2%
would leave ~2% of A/A comparisons of large suites failing. Where the machine drifts far more
(the CI VM: up to 37% between two runs), the scatter floor is what holds.

`Comparison.fails(policy)` is what a regression check exits on (FAIL_ON): "slower" any SLOWER row
or a SLOWER suite; "ambiguous" also any AMBIGUOUS or MISSING row or an AMBIGUOUS suite; "never".

Pure logic: nothing here prints or decides exit codes (harness/cli/ does).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from harness import stats
from harness.env import COMPARABILITY_FIELDS
from harness.measurement import Status
from harness.process_split import process_groups
from harness.stats import CORRECTIONS, DEFAULT_ALPHA, adjust_p_values, mann_whitney_u, smallest_p
from harness.store import ResultsError

DEFAULT_THRESHOLD = 0.05       # 5% change before anyone should care
DEFAULT_SUITE_THRESHOLD = 0.03  # the whole run: see the module docstring
DEFAULT_SUITE_CONFIDENCE = 0.99
FAIL_ON = ("slower", "ambiguous", "never")


class Verdict(StrEnum):
    SAME = "SAME"
    FASTER = "FASTER"
    SLOWER = "SLOWER"
    AMBIGUOUS = "AMBIGUOUS"
    MISSING = "MISSING"
    NEW = "NEW"


# What a summary lists; NEW rows are counted but not listed (nothing to compare them with).
CHANGED = (Verdict.SLOWER, Verdict.FASTER, Verdict.AMBIGUOUS, Verdict.MISSING)
MATCHED = (Verdict.SAME, Verdict.FASTER, Verdict.SLOWER, Verdict.AMBIGUOUS)


# ---- options and results ------------------------------------------------------------------------
@dataclass(frozen=True)
class CompareOptions:
    alpha: float = DEFAULT_ALPHA
    threshold: float = DEFAULT_THRESHOLD               # fraction: 0.05 = 5%; the suite's value
    layer_thresholds: Mapping[str, float] = field(default_factory=dict)   # {layer name: fraction}
    correction: str = "bh"                             # "bh" (FDR), "holm" (FWER) or "none"
    allow_env_mismatch: bool = False
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
    base_median_ms: float | None = None
    new_median_ms: float | None = None
    ratio: float | None = None          # new / base medians
    p_value: float | None = None        # one-sided, in the direction of the ratio
    adjusted_p: float | None = None     # the same after the multiple-comparison correction
    threshold: float | None = None
    n_base: int = 0
    n_new: int = 0

    @property
    def effect(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0


@dataclass(frozen=True)
class EnvMismatch:
    field: str
    base: tuple[str, ...]       # distinct non-null values of env_<field> in the baseline
    new: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.field}: base {_values_text(self.base)} vs new {_values_text(self.new)}"


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
        slower = self.suite.verdict is Verdict.SLOWER or bool(self.of(Verdict.SLOWER))
        unsure = (self.suite.verdict is Verdict.AMBIGUOUS
                  or any(r.verdict in (Verdict.AMBIGUOUS, Verdict.MISSING) for r in self.rows))
        return policy != "never" and (slower or (policy == "ambiguous" and unsure))

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
        """A SLOWER row or a SLOWER suite: the default policy's failure."""
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


# ---- the comparison ------------------------------------------------------------------------------
def compare(base: pd.DataFrame, new: pd.DataFrame,
            options: CompareOptions | None = None) -> Comparison:
    """Judge every point of `base` and `new` (frames of store.COLUMNS); see the module docstring.

    Raises IncomparableResults when no verdict can come from the two (an empty frame, other
    schema versions, no point with timings on both sides), and EnvironmentMismatch when the
    COMPARABILITY_FIELDS differ, unless allowed."""
    options = options or CompareOptions()
    shared = _refuse_incomparable(base, new, options.labels)
    comparison = _judge_frames(base, new, options)
    if not any(r.verdict in MATCHED for r in comparison.rows):
        raise IncomparableResults(
            f"no point has timings in both {options.labels[0]} and {options.labels[1]}: none of "
            f"their {shared} common points is ok on both sides, so there is nothing to compare")
    return comparison


_ESTIMATE = object()     # _judge_frames: estimate the scatter from the rows being judged


def _judge_frames(base: pd.DataFrame, new: pd.DataFrame, options: CompareOptions,
                  scatter: Any = _ESTIMATE) -> Comparison:
    mismatches = environment_mismatches(base, new)
    if mismatches and not options.allow_env_mismatch:
        raise EnvironmentMismatch(mismatches)
    base_pts, new_pts = _points(base), _points(new)
    matched = [pid for pid, p in base_pts.items() if p.samples.size and _has_samples(new_pts, pid)]
    if scatter is _ESTIMATE:
        scatter = _scatter(matched, base_pts, new_pts)
    rows = dict(zip(matched, _judge_matched(matched, base_pts, new_pts, options, scatter)))
    for pid, point in base_pts.items():
        if point.samples.size and pid not in rows:
            rows[pid] = _missing(point, new_pts.get(pid))
    for pid, point in new_pts.items():
        if point.samples.size and pid not in rows:
            rows[pid] = _new(point, base_pts.get(pid))
    return Comparison(tuple(rows.values()), options, tuple(mismatches), scatter=scatter)


def _refuse_incomparable(base: pd.DataFrame, new: pd.DataFrame, labels: tuple[str, str]) -> int:
    """IncomparableResults naming the file for inputs no verdict can come from; else the number
    of point ids the two share."""
    for df, label in zip((base, new), labels):
        if not len(df):
            raise IncomparableResults(f"{label} has no rows")
        if "samples_ms" not in df.columns:     # store.load refuses it; frames made in code may not
            raise IncomparableResults(f"{label} has no samples_ms column (no raw samples)")
    versions = _distinct(base, "schema_version"), _distinct(new, "schema_version")
    if all(versions) and versions[0] != versions[1]:
        raise IncomparableResults(
            f"{labels[0]} has schema version {_values_text(versions[0])} and {labels[1]} "
            f"{_values_text(versions[1])}: re-measure the older one with this convbench")
    shared = len(set(base["point_id"].astype(str)) & set(new["point_id"].astype(str)))
    if not shared:
        suites = _distinct(base, "suite"), _distinct(new, "suite")
        which = (f" ({labels[0]} is suite {_values_text(suites[0])}, {labels[1]} suite "
                 f"{_values_text(suites[1])})" if suites[0] != suites[1] else "")
        raise IncomparableResults(f"{labels[0]} and {labels[1]} have no point in common{which}: "
                                  "compare two runs of the same suite")
    return shared


def flagged_point_ids(comparison: Comparison) -> list[str]:
    """The points a `--confirm` round must re-measure: every SLOWER row, and every matched row
    when the suite is SLOWER (a suite verdict can only be re-judged on a rerun of all of it)."""
    if comparison.suite.verdict is Verdict.SLOWER:
        return [r.point_id for r in comparison.rows if r.verdict in MATCHED]
    return [r.point_id for r in comparison.rows if r.verdict is Verdict.SLOWER]


def confirm(first: Comparison, rerun_base: pd.DataFrame, rerun_new: pd.DataFrame,
            options: CompareOptions | None = None) -> Comparison:
    """Merge a confirmation round: a flagged row stays SLOWER only if the rerun flags it again,
    and a SLOWER suite stays SLOWER only if the rerun of all its rows is SLOWER as a suite.

    The rerun is judged on its own samples (never pooled with the first run's, which were selected
    for looking slow); the correction family of the rows is just the SLOWER rows. Other rows keep
    their first verdict, even where a suite rerun re-measured them."""
    options = options or first.options
    slower = [r.point_id for r in first.rows if r.verdict is Verdict.SLOWER]
    reruns = [_judge_frames(_only(rerun_base, slower), _only(rerun_new, slower), options,
                            first.scatter)]
    suite = first.suite
    if suite.verdict is Verdict.SLOWER:
        every = flagged_point_ids(first)
        reruns.append(_judge_frames(_only(rerun_base, every), _only(rerun_new, every), options))
        suite = _confirmed_suite(suite, reruns[-1].suite)
    again = {r.point_id: r for r in reruns[0].rows}
    rows = tuple(_confirmed(r, again.get(r.point_id)) if r.verdict is Verdict.SLOWER else r
                 for r in first.rows)
    seen = first.env_mismatches + tuple(m for rerun in reruns for m in rerun.env_mismatches)
    return Comparison(rows, first.options, tuple(dict.fromkeys(seen)),
                      first.confirmation_rounds + 1, suite, first.scatter)


def judge_suite(rows: Sequence[RowResult], options: CompareOptions,
                scatter: float | None = None) -> SuiteVerdict:
    """The suite verdict of the module docstring over the matched rows' ratios, given the pair's
    run-to-run scatter (None: no floor)."""
    ratios = _matched_ratios(rows)
    t, confidence = options.suite_threshold, options.suite_confidence
    left_out = sum(r.verdict in MATCHED for r in rows) - len(ratios)
    note = f"; {left_out} rows with a zero median left out" if left_out else ""
    interval = stats.geomean_interval(ratios, confidence)
    if interval is None:
        reason = (f"only {len(ratios)} matched rows, a suite interval needs {stats.MIN_ROWS}: "
                  "the per-row verdicts decide")
        return SuiteVerdict(None, stats.geomean(ratios), None, None, len(ratios), t, confidence,
                            reason + note)
    verdict, reason = _suite_rule(interval.low, interval.high, t,
                                  stats.scatter_floor(scatter, stats.SCATTER_SUITE_K))
    return SuiteVerdict(verdict, interval.ratio, interval.low, interval.high, interval.n, t,
                        confidence, reason + note)


def _suite_rule(low: float, high: float, t: float, floor: float) -> tuple[Verdict, str]:
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
                                   f"{_floor_text(floor)}: two runs of unchanged code on this "
                                   "machine differ that much")
    if low - 1 >= -t and high - 1 <= t:
        return Verdict.SAME, f"the interval lies within ±{pct(t)}"
    return Verdict.AMBIGUOUS, (f"the interval crosses ±{pct(t)}: measure more samples per "
                               "point or more points")


def _floor_text(floor: float) -> str:
    return f"±{math.expm1(floor):.1%}, this pair's run-to-run scatter floor"


def _floor_note(floor: float, t: float) -> str:
    """Said only where the floor, not the threshold, was the bar that had to be cleared."""
    return f" and beyond {_floor_text(floor)}" if math.expm1(floor) > t else ""


def _confirmed_suite(first: SuiteVerdict, again: SuiteVerdict) -> SuiteVerdict:
    before = f"first run {interval_text(first)}"
    if again.verdict is None:
        return replace(again, verdict=Verdict.AMBIGUOUS,
                       reason=f"SLOWER at first ({before}) but the rerun has only "
                              f"{again.n_rows} matched rows, too few for a suite interval")
    if again.verdict is Verdict.SLOWER:
        return replace(again, reason=f"confirmed on a rerun of every row: {again.reason} "
                                     f"({before})")
    return replace(again, reason=f"not confirmed ({before}); rerun: {again.reason}")


def _matched_ratios(rows: Iterable[RowResult]) -> list[float]:
    return [r.ratio for r in rows
            if r.verdict in MATCHED and r.ratio is not None and 0 < r.ratio < math.inf]


# How the times were taken: a change of GPU timer moves small kernels by ~5% (graph replay leaves
# out the stream-order gap the held stream counts), which is not the code getting faster.
METHOD_COLUMNS = ("gpu_timer",)


def environment_mismatches(base: pd.DataFrame, new: pd.DataFrame) -> list[EnvMismatch]:
    """The COMPARABILITY_FIELDS (and timing methods) whose recorded values differ between the
    two frames."""
    found = []
    columns = [(name, f"env_{name}") for name in COMPARABILITY_FIELDS]
    columns += [(name, name) for name in METHOD_COLUMNS]
    for name, column in columns:
        b, n = _distinct(base, column), _distinct(new, column)
        if b != n:
            found.append(EnvMismatch(name, b, n))
    return found


# ---- judging rows --------------------------------------------------------------------------------
@dataclass
class _Point:
    """One point of one frame: its description, ok samples pooled, and its last non-ok status."""
    pid: str
    meta: dict[str, Any]
    samples: np.ndarray
    status: str = Status.OK
    reason: str = ""
    process_medians: list[float] = field(default_factory=list)   # one per worker process


def _points(df: pd.DataFrame) -> dict[str, _Point]:
    """point_id -> _Point. A point measured in several runs (a folder of results) is judged on
    all its ok samples together."""
    points: dict[str, _Point] = {}
    wanted = [c for c in ("point_id", "status", "reason", "samples_ms", "process_samples", *_META)
              if c in df.columns]
    for rec in df[wanted].to_dict("records"):     # only what is read: result files are wide
        pid = str(rec["point_id"])
        point = points.setdefault(pid, _Point(pid, _meta(rec), np.empty(0)))
        status = _text(rec.get("status")) or "unknown"
        samples = np.asarray(_samples(rec), dtype=float) if status == Status.OK else np.empty(0)
        if samples.size:
            point.samples = np.concatenate([point.samples, samples])
            point.process_medians += [statistics.median(g) for g in process_groups(
                samples.tolist(), _text(rec.get("process_samples")))]
        else:
            point.status = status
            point.reason = "no samples stored" if status == Status.OK else _text(rec.get("reason")) or ""
    return points


def _judge_matched(ids: list[str], base: dict[str, _Point], new: dict[str, _Point],
                   options: CompareOptions, scatter: float | None) -> list[RowResult]:
    tests = [mann_whitney_u(new[pid].samples, base[pid].samples) for pid in ids]
    floor = stats.scatter_floor(scatter, stats.SCATTER_ROW_K)
    slower_adj = adjust_p_values([t[1] for t in tests], options.correction)
    faster_adj = adjust_p_values([t[2] for t in tests], options.correction)
    rows = []
    for i, pid in enumerate(ids):
        b, n = base[pid], new[pid]
        base_med, new_med = _median(b.samples), _median(n.samples)
        ratio = _ratio(base_med, new_med)
        slower = ratio >= 1.0
        p, adj = (tests[i][1], slower_adj[i]) if slower else (tests[i][2], faster_adj[i])
        threshold = options.threshold_for(b.meta.get("layer"))
        verdict, reason = _verdict(ratio, slower_adj[i], faster_adj[i], threshold, options.alpha,
                                   (b.samples.size, n.samples.size), floor,
                                   _process_overlap(b, n, slower, threshold))
        rows.append(RowResult(pid, verdict, reason, **b.meta, base_median_ms=base_med,
                              new_median_ms=new_med, ratio=ratio, p_value=float(p),
                              adjusted_p=float(adj), threshold=threshold,
                              n_base=b.samples.size, n_new=n.samples.size))
    return rows


def _process_overlap(base: _Point, new: _Point, slower: bool, threshold: float) -> str | None:
    """The two runs' worker-process medians when even the least changed pairing of processes
    stays within the threshold (the process rule of the module docstring), else None."""
    if not base.process_medians or not new.process_medians or min(base.process_medians) <= 0:
        return None          # a zero median: the ratio rule has already said what it can
    if slower:
        change = min(new.process_medians) / max(base.process_medians) - 1.0
    else:
        change = max(new.process_medians) / min(base.process_medians) - 1.0
    if abs(change) > threshold and (change > 0) == slower:
        return None
    return f"base {_ms_list(base.process_medians)}, new {_ms_list(new.process_medians)} ms"


def _ms_list(values: list[float]) -> str:
    return "/".join(f"{v:.4g}" for v in values)


def _verdict(ratio: float, p_slower: float, p_faster: float, threshold: float, alpha: float,
             sizes: tuple[int, int], floor: float = 0.0,
             overlap: str | None = None) -> tuple[Verdict, str]:
    """The rules of the module docstring, with a reason a person can act on; `floor` is the
    scatter floor as a log ratio (0: none); `overlap` the process medians where the two runs'
    worker processes overlap (None: they do not)."""
    effect = ratio - 1.0
    if abs(effect) <= threshold:
        return Verdict.SAME, f"{effect:+.1%} within ±{threshold:.1%}"
    slower = effect > 0
    p, p_other = (p_slower, p_faster) if slower else (p_faster, p_slower)
    if p <= alpha and 0 < ratio < math.inf and abs(math.log(ratio)) <= floor:
        return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} and significant "
                                   f"(adjusted p {p:.2g}) but within {_floor_text(floor)}: two "
                                   "runs of unchanged code on this machine differ that much")
    if p <= alpha and overlap:
        return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} and significant "
                                   f"(adjusted p {p:.2g}) but not in every worker process "
                                   f"(medians {overlap}): the point's time depends on the process "
                                   "it runs in; `convbench check` re-measures it")
    if p <= alpha:
        return (Verdict.SLOWER if slower else Verdict.FASTER,
                f"{effect:+.1%} beyond ±{threshold:.1%}, adjusted p {p:.2g} <= {alpha:g}")
    if p_other <= alpha:    # medians and ranks point opposite ways: odd, multi-modal samples
        return Verdict.AMBIGUOUS, (f"median {effect:+.1%} but the rank test says the other way "
                                   f"(adjusted p {p_other:.2g}): look at the samples")
    return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} but not significant "
                               f"(adjusted p {p:.2g} > {alpha:g}, {sizes[0]}/{sizes[1]} "
                               f"samples): re-measure with more samples")


def _missing(point: _Point, new: _Point | None) -> RowResult:
    if new is None:
        reason = "not in the new results"
    else:
        reason = f"new status {new.status}" + (f": {new.reason}" if new.reason else "")
    return RowResult(point.pid, Verdict.MISSING, reason, **point.meta,
                     base_median_ms=_median(point.samples), n_base=point.samples.size)


def _new(point: _Point, base: _Point | None) -> RowResult:
    if base is None:
        reason = "not in the baseline"
    else:
        reason = f"baseline status {base.status}" + (f": {base.reason}" if base.reason else "")
    return RowResult(point.pid, Verdict.NEW, reason, **point.meta,
                     new_median_ms=_median(point.samples), n_new=point.samples.size)


def _confirmed(first: RowResult, again: RowResult | None) -> RowResult:
    before = f"first run {first.effect:+.1%}, adjusted p {first.adjusted_p:.2g}"
    if again is None:
        return replace(first, verdict=Verdict.AMBIGUOUS,
                       reason=f"flagged SLOWER ({before}) but the confirmation run has no timing")
    if again.verdict is Verdict.SLOWER:
        return replace(again, reason=f"confirmed: {again.reason} ({before})")
    return replace(again, reason=f"not confirmed ({before}); rerun: {again.reason}")


def interval_text(s: SuiteVerdict) -> str:
    """"+x% [lo, hi]": the suite ratio and its interval, as the verdicts and summary word it."""
    middle = "n/a" if s.ratio is None else f"{s.ratio - 1:+.1%}"
    if s.low is None or s.high is None:
        return middle
    return f"{middle} [{s.low - 1:+.1%}, {s.high - 1:+.1%}]"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"


# ---- parsing helpers for the CLI -----------------------------------------------------------------
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


# ---- small helpers -------------------------------------------------------------------------------
_META = ("suite", "layer", "batch", "direction", "precision", "layout", "backend", "algorithm",
         "workspace_limit", "timing_mode")


def _meta(rec: dict[str, Any]) -> dict[str, Any]:
    meta = {name: _text(rec.get(name)) for name in _META}
    for name in ("batch", "workspace_limit"):
        meta[name] = None if meta[name] is None else int(float(meta[name]))
    return meta


def _scatter(ids: list[str], base: dict[str, _Point], new: dict[str, _Point]) -> float | None:
    """The pair's run-to-run scatter over the matched rows `ids` (harness/stats.py)."""
    ratios = [_ratio(_median(base[pid].samples), _median(new[pid].samples)) for pid in ids]
    sampling = [math.hypot(stats.log_median_se(base[pid].samples),
                           stats.log_median_se(new[pid].samples)) for pid in ids]
    return stats.run_to_run_scatter(ratios, sampling)


def _ratio(base_median: float, new_median: float) -> float:
    """median(new) / median(base); infinite when the baseline's median is 0."""
    return new_median / base_median if base_median > 0 else math.inf


def _median(samples: np.ndarray) -> float:
    return float(statistics.median(samples.tolist()))   # 10x quicker than np.median on ~20 values


def _has_samples(points: dict[str, _Point], pid: str) -> bool:
    return pid in points and points[pid].samples.size > 0


def _samples(rec: dict[str, Any]) -> list[float]:
    value = rec.get("samples_ms")
    if value is None or isinstance(value, str) or not hasattr(value, "__len__"):
        return []
    return [float(v) for v in value]


def _only(df: pd.DataFrame, point_ids: list[str]) -> pd.DataFrame:
    return df[df["point_id"].isin(point_ids)] if len(df) else df


def _distinct(df: pd.DataFrame, column: str) -> tuple[str, ...]:
    if column not in df.columns:
        return ()
    return tuple(sorted({str(v) for v in df[column] if _text(v) is not None}))


def _text(value: Any) -> str | None:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def _values_text(values: tuple[str, ...]) -> str:
    return " / ".join(repr(v) for v in values) if values else "(not recorded)"
