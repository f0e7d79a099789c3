"""Statistics over a whole comparison (pure functions of numbers; shared/design/architecture.md).

This holds the per-row rank test (exact Mann-Whitney U where it is cheap), the p-value
adjustment across rows, the sample floor that makes one regressed row provable, the suite-level
interval and the pair's run-to-run scatter. Verdicts and their wording stay in harness/compare/.

The suite-level question: over the rows matched between two runs, is the run as a whole slower?
The figure is the geometric mean of the per-row ratios new/base of medians, i.e. exp(mean of the
log ratios), and its confidence interval comes from a bootstrap over rows.

Why a bootstrap over rows of the mean log ratio (and not a Wilcoxon signed-rank test):
- it is an interval for exactly the figure people read, the geometric-mean ratio, so the printed
  estimate always lies inside its own interval; the signed-rank test's interval is one for the
  Hodges-Lehmann pseudo-median, which a few regressed rows pull apart from the geometric mean;
- it assumes nothing about the shape of the log ratios (a regression that slows one algorithm
  family makes them bimodal), only that rows are independent draws;
- one wild row cannot carry the suite: it is left out of about a third of the resamples, so the
  interval stretches to cover the suite without it.

Why "expanded" percentiles (Hesterberg, "What teachers should know about the bootstrap", 2015):
the plain percentile interval is too narrow for few rows: it behaves like mean +- z * s / sqrt(n)
with the plug-in s, where Student's t with n - 1 degrees of freedom is due (at n = 8 and 99% it
covers ~95%). Reading the bootstrap distribution at the tail probability where a normal
quantile equals sqrt(n / (n - 1)) * t fixes both, and costs nothing but more resamples.

Why MIN_ROWS = 8: a bootstrap cannot reach beyond the range of its rows, and for fewer than about
8 rows the honest (Student t) 99% interval of a mean is wider than the rows' range; the interval
would then claim more than the data hold. With fewer rows there is no suite-level verdict and the
per-row verdicts decide.

What rows being independent leaves out: a whole-run drift (clocks, thermals, a busy neighbour)
moves every row together, so the interval is narrow around the drift. The scatter floor below,
not the interval, is what keeps an A/A pair with drift from being called slower.

The run-to-run scatter of a pair (`run_to_run_scatter`): how much more the rows' log ratios
spread about their median (robust sd, 1.4826 x MAD) than their own sampling noise explains
(sqrt of the difference of the squares, with the median row's sampling variance). A row's samples
come from one window of one run, so its rank test sees only the noise inside that window; what
else differs between two runs of unchanged code (a neighbour on a shared host, the memory the
buffers landed in) moves each row by its own amount and shows up only as rows disagreeing with
each other by more than their samples can. On the 2-core CI VM rows moved 8-13% (sd) between
runs while their medians' standard errors inside a run were ~2%, so a quarter of A/A rows came
out "significantly" slower; on an H100 it is well under 1%
(evidence/notes/constants.md#stats-run_to_run_scatter). The median and MAD ignore up to half
of the rows, so a regression in a minority of rows does not hide itself by widening the
scatter; a shift of every row moves the median, not the MAD.
Verdicts (harness/compare/) must clear a multiple of it:
- a row: |log ratio| > SCATTER_ROW_K x scatter. 8 because row noise has heavy tails: the worst
  of 360 A/A rows lay 7.5 scatters from no change (evidence/notes/constants.md#stats-scatter_row_k).
  On a GPU pair with a 0.5% scatter the floor is 4%, below the 5% threshold, so it costs nothing
  there.
- the suite: the interval must clear SCATTER_SUITE_K x scatter as well as the suite threshold:
  A/A drift moved the geometric mean by up to 2 scatters
  (evidence/notes/constants.md#stats-scatter_suite_k).
With fewer than MIN_ROWS rows there is no estimate and no floor.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from harness.student_t import t_quantile

DEFAULT_ALPHA = 0.002           # asv's default significance level
CORRECTIONS = ("bh", "holm", "none")
MIN_ROWS = 8                    # fewer rows: no suite-level interval (module docstring)
BOOTSTRAP_SEED = 0              # fixed: the same rows always give the same interval
_TAIL_RESAMPLES = 50            # resamples expected beyond each end of the interval
_MIN_RESAMPLES, _MAX_RESAMPLES = 2_000, 1_000_000
_CHUNK_CELLS = 4_000_000        # resampled values held at once (32 MB of float64)
SCATTER_ROW_K = 8.0             # a row must move this many scatters (module docstring)
SCATTER_SUITE_K = 2.5           # the suite's interval must clear this many
_MAD_TO_SD = 1.4826             # MAD of a normal sample x this = its standard deviation


@dataclass(frozen=True)
class RatioInterval:
    """The geometric-mean ratio of n rows and its confidence interval (ratios, not logs)."""
    ratio: float
    low: float
    high: float
    n: int
    confidence: float


def geomean(ratios: Sequence[float]) -> float | None:
    """exp(mean(log r)) over the finite positive ratios; None when there are none."""
    logs = _logs(ratios)
    return math.exp(float(logs.mean())) if logs.size else None


def geomean_interval(ratios: Sequence[float], confidence: float,
                     seed: int = BOOTSTRAP_SEED) -> RatioInterval | None:
    """The geometric-mean ratio with an expanded-percentile bootstrap interval over rows;
    None with fewer than MIN_ROWS finite positive ratios (the others are left out: a zero or
    infinite ratio has no logarithm). Rows are sorted first, so their order does not matter."""
    logs = np.sort(_logs(ratios))
    n = logs.size
    if n < MIN_ROWS:
        return None
    tail = expanded_tail(n, confidence)
    means = _bootstrap_means(logs, _resamples(tail), seed)
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return RatioInterval(math.exp(float(logs.mean())), math.exp(float(low)),
                         math.exp(float(high)), n, confidence)


def run_to_run_scatter(ratios: Sequence[float], sampling_sd: Sequence[float]) -> float | None:
    """The scatter of the log ratios beyond their sampling noise (module docstring), a log-ratio
    standard deviation; `sampling_sd[i]` is the standard error of log(ratios[i]) that its samples
    alone explain (log_median_se of each side, combined). None with fewer than MIN_ROWS finite
    positive ratios."""
    r = np.asarray(ratios, dtype=float)
    keep = np.isfinite(r) & (r > 0)
    if keep.sum() < MIN_ROWS:
        return None
    logs = np.log(r[keep])
    spread = robust_sd(logs)
    sampling = float(np.median(np.square(np.asarray(sampling_sd, dtype=float)[keep])))
    return math.sqrt(max(spread ** 2 - sampling, 0.0))


def replicate_sd(replicate_medians: Sequence[Sequence[float]]) -> float | None:
    """One run's noise between its own replicates (a CPU point's rounds, a GPU point's worker
    processes), as the standard deviation of one replicate's log median about its row's mean:
    the deviations of every row's log medians from their row's mean, scaled by sqrt(k / (k - 1))
    for the mean they were taken from, and their robust sd about 0 (1.4826 x median |.|). None
    with fewer than MIN_ROWS rows of at least two positive replicates.

    Why replicates and not the rows of the pair being judged (run_to_run_scatter): a regression
    that slows rows by different amounts spreads the pair's log ratios and raises the very bar it
    must clear (+74% on every row of a CPU run, +36% to +143%, was called within a +-264% floor);
    it moves every replicate of a row together, so it cannot widen this."""
    residuals, rows = [], 0
    for medians in replicate_medians:
        logs = np.log([m for m in medians if m > 0])
        if logs.size >= 2:
            rows += 1
            scale = math.sqrt(logs.size / (logs.size - 1))
            residuals.extend(np.abs(logs - logs.mean()) * scale)
    if rows < MIN_ROWS:
        return None
    return _MAD_TO_SD * float(np.median(residuals))


def replicate_scatter(base_sd: float, base_k: float, new_sd: float, new_k: float) -> float:
    """The scatter (a log-ratio sd) that two runs' replicate noise predicts for one row's ratio of
    medians: each run's median pools its k replicates, so its variance is sd^2 / k."""
    return math.sqrt(base_sd ** 2 / base_k + new_sd ** 2 / new_k)


def log_median_se(samples: Sequence[float]) -> float:
    """Standard error of log(median) of positive samples: sqrt(pi/2) x robust sd / sqrt(n), the
    median's large-sample efficiency against the mean (0 for fewer than 2 samples)."""
    x = np.asarray(samples, dtype=float)
    x = np.log(x[np.isfinite(x) & (x > 0)])
    if x.size < 2:
        return 0.0
    return math.sqrt(math.pi / 2) * robust_sd(x) / math.sqrt(x.size)


def robust_sd(x: np.ndarray) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal values, and
    blind to up to half of them being wild."""
    return _MAD_TO_SD * float(np.median(np.abs(x - np.median(x))))


def scatter_floor(scatter: float | None, k: float) -> float:
    """The smallest |log ratio| that k scatters allow to be a change; 0 without an estimate."""
    return 0.0 if scatter is None else k * scatter


def expanded_tail(n: int, confidence: float) -> float:
    """The bootstrap tail probability that gives a Student-t sized interval for a mean of n
    values: Phi(-sqrt(n / (n - 1)) * t(1 - (1 - confidence) / 2, n - 1))."""
    t = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1)
    return NormalDist().cdf(-math.sqrt(n / (n - 1)) * t)


def _resamples(tail: float) -> int:
    """Enough resamples that each end of the interval is read from ~50 of them."""
    return int(min(max(math.ceil(_TAIL_RESAMPLES / tail), _MIN_RESAMPLES), _MAX_RESAMPLES))


def _bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of `resamples` resamples with replacement, drawn in chunks to bound memory."""
    rng = np.random.default_rng(seed)
    n = values.size
    means = np.empty(resamples)
    step = max(1, _CHUNK_CELLS // n)
    for start in range(0, resamples, step):
        stop = min(start + step, resamples)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def bootstrap_medians(samples: Sequence[Sequence[float]], resamples: int,
                      seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Medians of `resamples` resamples with replacement of each row's samples: shape (rows,
    resamples), NaN for a row without samples. Rows of one sample count are drawn together, in
    chunks that bound memory; the same rows in the same order always give the same medians."""
    rng = np.random.default_rng(seed)
    sizes = np.array([len(s) for s in samples], dtype=int)
    medians = np.full((sizes.size, resamples), np.nan)
    for n in np.unique(sizes[sizes > 0]):
        rows = np.flatnonzero(sizes == n)
        values = np.array([np.asarray(samples[i], dtype=float) for i in rows])
        step = max(1, _CHUNK_CELLS // (int(n) * resamples))
        for start in range(0, rows.size, step):
            block = values[start:start + step]
            drawn = rng.integers(0, n, size=(block.shape[0], resamples, n))
            picked = block[np.arange(block.shape[0])[:, None, None], drawn]
            medians[rows[start:start + step]] = np.median(picked, axis=2)
    return medians


def _logs(ratios: Sequence[float]) -> np.ndarray:
    r = np.asarray(ratios, dtype=float)
    r = r[np.isfinite(r) & (r > 0)]
    return np.log(r)


# ---- the per-row rank test (moved from harness/compare/) ---------------------------------------
def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """(U of x, p for "x tends to be larger than y", p for "x tends to be smaller").

    Exact when there are no ties and at most EXACT_MAX_PAIRS pairs (scipy's method="exact"),
    else the normal approximation with tie and continuity corrections (method="asymptotic").
    The exact test matters here: at 10 samples a side it reaches p = 5e-6 where the normal
    approximation stops at 9e-5, the difference between passing a Holm correction over 200 rows
    or not."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        return math.nan, 1.0, 1.0
    ranks, tie_counts = _average_ranks(np.concatenate([x, y]))
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    if tie_counts.max() == 1 and n1 * n2 <= EXACT_MAX_PAIRS:
        cdf = _u_cdf(min(n1, n2), max(n1, n2))
        return u, float(cdf[n1 * n2 - int(u)]), float(cdf[int(u)])
    n = n1 + n2
    ties = float((tie_counts.astype(float) ** 3 - tie_counts).sum())
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:        # every value equal: no evidence either way
        return u, 1.0, 1.0
    mean, sd = n1 * n2 / 2, math.sqrt(variance)
    return u, _normal_sf((u - mean - 0.5) / sd), _normal_sf((mean - u - 0.5) / sd)


EXACT_MAX_PAIRS = 2500      # up to 50 x 50 samples: the exact distribution costs well under 1 ms


@lru_cache(maxsize=1024)
def _u_cdf(n1: int, n2: int) -> np.ndarray:
    """P(U <= u) for u = 0..n1*n2 under the null hypothesis, without ties.

    The number of arrangements with U = u is the coefficient of q^u in the Gaussian binomial
    prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i). Each coefficient depends only on lower ones, so
    the small left-tail counts stay exact in float64; callers read only the left tail (the right
    one by symmetry, P(U >= u) = P(U <= n1*n2 - u))."""
    size = n1 * n2 + 1
    counts = np.zeros(size)
    counts[0] = 1.0
    for i in range(1, n1 + 1):
        shift = n2 + i
        if shift < size:                                  # times (1 - q^shift)
            counts[shift:] = counts[shift:] - counts[:-shift].copy()
        pad = (-size) % i                                 # divided by (1 - q^i): running sums
        strided = np.concatenate([counts, np.zeros(pad)]).reshape(-1, i)
        counts = strided.cumsum(axis=0).ravel()[:size]
    return np.minimum(np.cumsum(counts) / math.comb(n1 + n2, n1), 1.0)


def smallest_p(n1: int, n2: int) -> float:
    """The smallest one-sided p-value n1 vs n2 samples can give: complete separation, no ties."""
    return 1.0 / math.comb(n1 + n2, n1) if n1 and n2 else 1.0


def samples_floor(rows: int, alpha: float = DEFAULT_ALPHA) -> int:
    """The fewest samples a point needs (the same count in base and new) for a single regressed
    row among `rows` matched rows to be called SLOWER even when one stray sample overlaps.

    With one regressed row, Benjamini-Hochberg (and Holm) accept it only at p <= alpha / rows.
    Complete separation reaches that once 1/C(2n, n) <= alpha / rows (smallest_p): 8 samples for
    18 rows, 12 for 3,646. But real samples overlap: one slow hiccup in the baseline (a context
    switch, a page fault, a clock step) ranks above all n new samples and costs n inversions,
    U = n instead of 0. So the floor is the smallest n with P(U <= n) <= alpha / rows under the
    exact null distribution of U: 12 samples for 18 rows, 15 for 200, 17 for 3,646, 19 for
    21,487. It grows with the logarithm of the rows (one sample more per 2-6 times as many), so
    a row count estimated a few times too high or too low moves it by a sample or two."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} must lie strictly between 0 and 1")
    needed = alpha / max(rows, 1)
    most = math.isqrt(EXACT_MAX_PAIRS)     # beyond it compare() leaves the exact distribution
    for n in range(1, most + 1):
        if _u_cdf(n, n)[n] <= needed:
            return n
    raise ValueError(f"{rows} rows at alpha {alpha:g} need more than {most} samples a point")


def adjust_p_values(p: Sequence[float], method: str) -> np.ndarray:
    """Holm step-down (family-wise error) or Benjamini-Hochberg step-up (false discovery rate)."""
    p = np.asarray(p, dtype=float)
    m = p.size
    if m == 0 or method == "none":
        return p.copy()
    if method == "holm":
        order = np.argsort(p, kind="stable")
        steps = np.maximum.accumulate((m - np.arange(m)) * p[order])
    elif method == "bh":
        order = np.argsort(p, kind="stable")[::-1]
        steps = np.minimum.accumulate(p[order] * m / np.arange(m, 0, -1))
    else:
        raise ValueError(f"unknown correction {method!r}; use one of {', '.join(CORRECTIONS)}")
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(steps, 1.0)
    return adjusted


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks with ties sharing their average rank, and the size of every tie group."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
    counts = np.bincount(group)
    average = np.cumsum(counts) - (counts - 1) / 2
    ranks = np.empty(values.size)
    ranks[order] = average[group]
    return ranks, counts


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


# ---- the spread of one row's samples (moved from harness/measurement.py) ------------------------
def interquartile_range(samples: tuple[float, ...] | list[float]) -> float:
    ordered = sorted(samples)
    return quantile(ordered, 0.75) - quantile(ordered, 0.25)


def relative_noise(samples: tuple[float, ...] | list[float]) -> float:
    """Relative standard error of the median, estimated robustly from the IQR.

    For normal data sigma ~= IQR / 1.349, and the median's standard error is ~1.2533 sigma/sqrt(n).
    """
    if len(samples) < 2:
        return math.inf
    med = statistics.median(samples)
    if med <= 0:
        return math.inf
    sigma = interquartile_range(samples) / 1.349
    return 1.2533 * sigma / math.sqrt(len(samples)) / med


def quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated linearly (numpy's default method)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
