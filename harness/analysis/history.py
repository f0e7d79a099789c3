"""A history of runs (`convbench history`): steps and drift in a series of results.

`compare` judges two runs. Teams track a series (a run per commit on CI), and want to be told
when it stepped, by how much, how sure that is, and not to be told about one noisy run. Here:
- Runs are the results' run ids, ordered by when they finished (their commit is the label of a
  step's range); a series is the runs of one suite on one machine and library stack
  (env.COMPARABILITY_FIELDS: the fields `compare` refuses to mix), each series judged alone.
- Per run, each point's figure is the median of its samples; the run's suite figure is the mean
  over its points of log(median / the point's median over the series): missing points do not
  move it, and it reads as a geometric-mean ratio.
- Steps by the project's own windowed test with binary segmentation (the Hunter/Otava and
  Perfherder family): in a segment, among the splits whose `window` runs after differ from the
  `window` runs before, in median log figure, by more than a bar of max(threshold, NOISE_K x the
  before window's robust sd), the one that explains most of the two windows' spread; then each
  side is searched again. Its confirmation is a rank test (below).
  Why not E-divisive (MongoDB's signal-processing-algorithms) or ruptures: both need a runtime
  dependency, and E-divisive's permutation test needs tens of runs before it can call anything,
  where a CI series needs an answer two runs after a regression. Why ranks: one run in a slow
  spell of the host (20-90% on the 2-core VM) cannot carry a window.
- A step with one run after it is "suspected"; it is "confirmed" once a later run agrees: at
  least two runs after it, each beyond the bar on the same side, and the one-sided Mann-Whitney
  p-value of the after window against the before window at most `alpha` (with a window of 10
  runs before and 2 after, all after beyond all before gives p = 1/66). Per point the same test
  is corrected across points (Bonferroni): a point's step needs more runs after it (4 with 10
  before and 18 points: p = 1/1001) than the suite's.
- Runs timed in a slow spell of the host (their CPU rows' host probe read over
  contention.HOST_SLOWER slower than the series' median probe) are labelled and left out of the
  steps: the spell is the host, not the code. So are runs most of whose rows shared the CPU
  with other work (`contended`: harness/contention.py), and, in the other runs, each row that
  did: its time measures the neighbour.
- Drift: a monotone trend over the whole series (Kendall's tau of the suite figure against the
  run order, normal approximation) that moved the figure beyond the threshold between the first
  and last `window` runs, reported apart from steps, where no confirmed step lies in between.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness import stats
from harness.contention import HOST_SLOWER
from harness.env import COMPARABILITY_FIELDS, GPU_FIELDS

WINDOW = 10          # runs on each side of a candidate step
MIN_BEFORE = 5       # runs before a step, at least, for a spread to hold it to
NOISE_K = 3.0        # the bar: this many robust sds of the runs before a step
DEFAULT_ALPHA = 0.05
SUSPECTED, CONFIRMED = "suspected", "confirmed"
SHARED_RUN = 0.5     # a run with this share of its rows contended is left out


@dataclass(frozen=True)
class Run:
    run_id: str
    finished: str            # the last row's finished_at (ISO 8601, sorts)
    commit: str | None
    spell: float | None = None   # how much slower the host ran (a slow spell), else None
    shared: float = 0.0          # the share of its rows that shared the CPU (contended)

    @property
    def label(self) -> str:
        return f"{self.commit or self.run_id[:16]}"

    @property
    def noise(self) -> str | None:
        """Why the run is left out of the steps, or None (module docstring)."""
        if self.spell is not None:
            return f"a slow spell of the host (+{self.spell:.0%})"
        if self.shared >= SHARED_RUN:
            return f"{self.shared:.0%} of its rows shared the CPU"
        return None


@dataclass(frozen=True)
class Step:
    series: str              # "suite" or a point's description
    at: int                  # index of the first run after the step
    ratio: float             # median after / median before
    p_value: float | None    # one-sided Mann-Whitney, after vs before (None: one run after)
    state: str               # SUSPECTED or CONFIRMED
    runs_after: int
    bar: float               # the ratio it had to clear, as a fraction

    @property
    def verdict(self) -> str:
        return "SLOWER" if self.ratio > 1.0 else "FASTER"


@dataclass(frozen=True)
class Drift:
    series: str
    ratio: float             # median of the last window over the first
    tau: float
    p_value: float


@dataclass
class SeriesHistory:
    """One series: its runs in order, the suite figure per run, and what was found."""
    key: dict[str, str]
    suite: str
    runs: list[Run]
    suite_figure: list[float]                 # geometric-mean ratio to the series, per run
    point_figures: pd.DataFrame               # runs x points: medians (ms), NaN where absent
    steps: list[Step] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)

    def newest_confirms_regression(self) -> list[Step]:
        """SLOWER steps the newest run just confirmed (the CI gate: exit 1)."""
        last = len(self.runs) - 1
        return [s for s in self.steps if s.state == CONFIRMED and s.verdict == "SLOWER"
                and s.at + s.runs_after - 1 == last and s.runs_after == 2]


def series_of(df: pd.DataFrame) -> list[tuple[dict[str, str], pd.DataFrame]]:
    """The frame split by suite and environment fingerprint (module docstring). A row measured
    without a GPU (no env_gpu_name) is not split by the GPU libraries it happened to have
    installed (env.GPU_FIELDS: PyTorch's wheel brings a cuDNN), as `compare` does not."""
    keys = ["suite", *[f"env_{f}" for f in COMPARABILITY_FIELDS if f"env_{f}" in df.columns]]
    filled = df.assign(**{k: df[k].astype("string").fillna("") for k in keys})
    if "env_gpu_name" in filled.columns:
        no_gpu = filled["env_gpu_name"] == ""
        for field in GPU_FIELDS:
            if f"env_{field}" in filled.columns:
                filled.loc[no_gpu, f"env_{field}"] = ""
    return [({k.removeprefix("env_"): v for k, v in zip(keys, values) if v}, part)
            for values, part in filled.groupby(keys, sort=True, dropna=False)]


# Quiet reruns of `quick` on the 2-core CI VM sat at two levels 5% apart for minutes at a time
# (evidence/logs/history-quick-planted15-cpu-2026-11-27.txt, runs 1-4 and 9-11): a step smaller
# than that is the host, so the default is 10%; on a quiet GPU machine pass --threshold 3%.
DEFAULT_THRESHOLD = 0.10


def analyse(df: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
            window: int = WINDOW) -> list[SeriesHistory]:
    """Every series of `df` (module docstring); the two sides of an `ab` run are no part of a
    series (harness.ab.is_side_run): left out."""
    from harness.ab import is_side_run
    df = df[~df["run_id"].map(is_side_run)]
    return [_series(key, part, threshold, alpha, window) for key, part in series_of(df)]


def _series(key: dict[str, str], df: pd.DataFrame, threshold: float, alpha: float,
            window: int) -> SeriesHistory:
    ok = df[df["status"] == "ok"]
    shared = (ok["contended"].astype("boolean").fillna(False) if "contended" in ok.columns
              else pd.Series(False, index=ok.index))
    runs = _runs(df, shared.groupby(ok["run_id"]).mean())
    ok = ok[~shared.to_numpy(dtype=bool)]
    medians = (ok.assign(median=[statistics.median(s) if len(s) else math.nan
                                 for s in ok["samples_ms"]])
               .pivot_table(index="run_id", columns="point_id", values="median", aggfunc="first")
               .reindex([r.run_id for r in runs]))
    logs = np.log(medians.to_numpy(dtype=float))
    centred = logs - np.nanmedian(logs, axis=0)
    suite = [float(np.nanmean(row)) if np.isfinite(row).any() else math.nan for row in centred]
    history = SeriesHistory(key, str(df["suite"].iloc[0]), runs, [math.exp(v) for v in suite],
                            medians)
    quiet = [i for i, r in enumerate(runs) if r.noise is None and math.isfinite(suite[i])]
    values = np.array([suite[i] for i in quiet])
    steps, history.drifts = judged_series(values, "suite", threshold, alpha, window)
    history.steps = [_at_run(s, quiet) for s in steps]
    family = max(len(medians.columns), 1)
    for column, point in enumerate(medians.columns):
        kept = [i for i in quiet if math.isfinite(logs[i, column])]
        steps, drifts = judged_series(np.array([logs[i, column] for i in kept]),
                                      _describe(ok, point), threshold, alpha / family, window)
        history.steps += [_at_run(s, kept) for s in steps if s.state == CONFIRMED]
        history.drifts += drifts
    return history


def _at_run(step: Step, kept: list[int]) -> Step:
    """A step found among the kept runs, placed at its run in the whole series."""
    return Step(step.series, kept[step.at], step.ratio, step.p_value, step.state,
                step.runs_after, step.bar)


def _runs(df: pd.DataFrame, shared: pd.Series) -> list[Run]:
    """The runs in the order they finished, each with its commit, any slow spell and the share
    of its rows that shared the CPU (`shared`, by run id)."""
    grouped = df.groupby("run_id", sort=False)
    finished = grouped["finished_at"].max().astype(str)
    commits = (grouped["env_git_commit"].first() if "env_git_commit" in df.columns
               else pd.Series(None, index=finished.index))
    probes = (grouped["host_probe_ms"].median() if "host_probe_ms" in df.columns
              else pd.Series(math.nan, index=finished.index))
    typical = float(probes.median()) if probes.notna().any() else math.nan
    runs = []
    for run_id in finished.sort_values().index:
        probe = float(probes.get(run_id, math.nan))
        slower = probe / typical - 1.0 if typical > 0 and math.isfinite(probe) else math.nan
        commit = commits.get(run_id)
        runs.append(Run(str(run_id), str(finished[run_id]),
                        None if commit is None or pd.isna(commit) else str(commit),
                        slower if slower > HOST_SLOWER else None,
                        float(shared.get(run_id, 0.0))))
    return runs


def _describe(df: pd.DataFrame, point_id: str) -> str:
    row = df[df["point_id"] == point_id].iloc[0]
    return (f"{row['layer']} {row['direction']} {row['precision']} {row['layout']} "
            f"{row['backend']}:{row['algorithm']}")


def find_steps(values: np.ndarray, series: str, threshold: float, alpha: float,
               window: int = WINDOW) -> list[Step]:
    """Steps in one series of log figures, by binary segmentation (module docstring), in order."""
    steps: list[Step] = []
    _segment(values, 0, len(values), series, threshold, alpha, window, steps)
    return sorted(steps, key=lambda s: s.at)


def _segment(values: np.ndarray, lo: int, hi: int, series: str, threshold: float, alpha: float,
             window: int, steps: list[Step]) -> None:
    best = None
    for k in range(lo + MIN_BEFORE, hi):
        before, after = values[max(lo, k - window):k], values[k:min(hi, k + window)]
        shift = float(np.median(after) - np.median(before))
        bar = max(math.log1p(threshold), NOISE_K * stats.robust_sd(before))
        # Windows that straddle a step also show its shift; the split that explains most of
        # the windows' spread (between-segment sum of squares, as least-squares segmentation
        # places a change) is where the step is: a rank statistic would favour the split with
        # more runs after it and place a step one run early.
        score = _explained(before, after)
        if abs(shift) > bar and (best is None or score > best[0]):
            best = (score, k, shift, bar, before, after)
    if best is None:
        return
    _, k, shift, bar, before, after = best
    steps.append(_judged(series, k, shift, bar, before, after, alpha))
    _segment(values, lo, k, series, threshold, alpha, window, steps)
    _segment(values, k, hi, series, threshold, alpha, window, steps)


def _judged(series: str, k: int, shift: float, bar: float, before: np.ndarray,
            after: np.ndarray, alpha: float) -> Step:
    centre = float(np.median(before))
    agree = int(np.sum((after - centre) * math.copysign(1.0, shift) > bar))
    p = None
    if after.size >= 2:
        u = stats.mann_whitney_u(after.tolist(), before.tolist())
        p = float(u[1] if shift > 0 else u[2])
    confirmed = after.size >= 2 and agree >= 2 and p is not None and p <= alpha
    return Step(series, k, math.exp(shift), p, CONFIRMED if confirmed else SUSPECTED,
                int(after.size), math.expm1(bar))


def _explained(before: np.ndarray, after: np.ndarray) -> float:
    """The between-segment sum of squares of a split: n_b n_a / (n_b + n_a) x (mean gap)^2."""
    nb, na = before.size, after.size
    return nb * na / (nb + na) * float(after.mean() - before.mean()) ** 2


def judged_series(values: np.ndarray, series: str, threshold: float, alpha: float,
                  window: int = WINDOW) -> tuple[list[Step], list[Drift]]:
    """A series' steps, or its drift where a straight line explains it better than any one
    step: a ramp (a slow leak over many commits) is not a staircase of steps."""
    drift = _drift(values, series, threshold, alpha)
    if drift is not None:
        return [], [drift]
    return find_steps(values, series, threshold, alpha, window), []


def _drift(values: np.ndarray, series: str, threshold: float, alpha: float) -> Drift | None:
    """A monotone trend: Kendall's tau significant, the fitted line moved beyond the threshold
    over the series, and it fits better (least squares) than the best single step."""
    n = values.size
    if n < 2 * MIN_BEFORE:
        return None
    x = np.arange(n, dtype=float)
    slope, intercept = np.polyfit(x, values, 1)
    moved = float(slope * (n - 1))
    line = float(np.sum((values - (slope * x + intercept)) ** 2))
    step = min(float(np.sum((values[:k] - values[:k].mean()) ** 2)
                     + np.sum((values[k:] - values[k:].mean()) ** 2)) for k in range(2, n - 1))
    tau, p = _kendall(values)
    if abs(moved) > math.log1p(threshold) and p <= alpha and line < step:
        return Drift(series, math.exp(moved), tau, p)
    return None


def _kendall(values: np.ndarray) -> tuple[float, float]:
    """Kendall's tau of the values against their order, two-sided p (normal approximation;
    ties ignored: the figures are medians of floats)."""
    n = values.size
    signs = [np.sign(values[j] - values[i]) for i in range(n) for j in range(i + 1, n)]
    s = float(np.sum(signs))
    tau = s / (n * (n - 1) / 2)
    sd = math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    z = (abs(s) - 1.0) / sd if sd > 0 else 0.0
    return tau, float(2.0 * (1.0 - statistics.NormalDist().cdf(max(z, 0.0))))
