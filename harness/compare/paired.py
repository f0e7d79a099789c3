"""Verdicts for a paired A/B run (`convbench ab`, harness/ab.py): the same words, rows, suite
verdict and exit codes as `compare`, from the per-round ratios instead of two pooled samples.

Each round measured a point in both environments back to back, so the round's ratio new/base of
medians carries the change and little of the machine's drift (both sides share it); the rounds
are the replicates. Per point, the log ratios d_1..d_R of the R rounds are judged by a one-sided
paired t-test (is their mean above 0? below?), the p-values corrected across points as compare
corrects its rank tests, and the verdict rules are compare's (rows._verdict): SAME within the
threshold, SLOWER/FASTER beyond it and significant, AMBIGUOUS beyond it but not.

Why a t-test on the rounds and not a rank test on the samples: the samples inside a round share
its moment of the machine, so pooling them would count a drift that hit one side of one pair as
many independent observations (p-values far too small); the round is the unit that was
replicated. Why not a sign or signed-rank test on the rounds: with 8 rounds their smallest
p-value is 1/256, which no correction across 18 points at alpha 0.002 can accept. A round that
landed in a slow spell on one side only widens the spread of d, so it makes a row AMBIGUOUS,
never SLOWER.

One round can still land in a slow spell on one side only (the spell began between the two
halves of the pair): on the 2-core VM, runs of 8 rounds had rounds of -24% among seven of +44% to
+56%, and such a round alone widens the spread until a +50% row is not significant. So a round
whose log ratio lies over OUTLIER_K robust sds (1.4826 x MAD, at least OUTLIER_FLOOR) from the
rounds' median is left out, at most a quarter of the rounds, and the reason says which; the
same for the suite's rounds. An A/A pair cannot gain a SLOWER row by it: what remains must
still lie beyond the threshold and be significant.

Contended rows (a neighbour on the cores, a slow spell) are not set apart as compare sets them
apart: both sides of each pair shared the same machine, which is what pairing is for; a
neighbour that comes and goes between the two halves of a pair widens the rounds' spread instead.
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd

from harness import stats, student_t
from harness.compare.rows import (PointSamples, has_samples, points_by_id, row_verdict,
                                  with_unmatched)
from harness.compare.verdicts import (CompareOptions, Comparison, RowResult, SuiteVerdict,
                                      Verdict, suite_rule)


OUTLIER_K = 4.0
OUTLIER_FLOOR = 0.01      # log ratio: rounds this close to the median are never outliers


def judge_paired(base: pd.DataFrame, new: pd.DataFrame,
                 options: CompareOptions | None = None) -> Comparison:
    """Every point of two sides of one `ab` run (frames of store.COLUMNS whose ok rows keep one
    sample group per round in `process_samples`)."""
    options = options or CompareOptions()
    base_pts, new_pts = points_by_id(base), points_by_id(new)
    matched = [pid for pid, p in base_pts.items() if p.samples.size and has_samples(new_pts, pid)]
    logs = [paired_logs(base_pts[pid], new_pts[pid]) for pid in matched]
    kept = [inlying_rounds(d) for d in logs]
    tests = [_paired_t(d[k]) for d, k in zip(logs, kept)]
    slower_adj = stats.adjust_p_values([t[0] for t in tests], options.correction)
    faster_adj = stats.adjust_p_values([t[1] for t in tests], options.correction)
    rows: dict[str, RowResult] = {}
    for i, pid in enumerate(matched):
        rows[pid] = _row(base_pts[pid], new_pts[pid], logs[i], kept[i], tests[i],
                         (float(slower_adj[i]), float(faster_adj[i])), options)
    return Comparison(with_unmatched(rows, base_pts, new_pts), options,
                      suite=_paired_suite(logs, options))


def _paired_suite(logs: list[np.ndarray], options: CompareOptions) -> SuiteVerdict:
    """The run as a whole, over the rounds: each round's suite ratio is the geometric mean of
    its points' paired ratios, and the interval is Student's t over the rounds. (compare's
    interval over rows assumes rows independent; here a spell that hit one round moves every
    point of it together, so the round, not the row, is what was replicated.)"""
    t, confidence = options.suite_threshold, options.suite_confidence
    rounds = min((d.size for d in logs), default=0)
    if not logs or rounds < 2:
        return SuiteVerdict(None, None, None, None, len(logs), t, confidence,
                            f"{rounds} paired rounds: a suite interval needs at least 2")
    every_round = np.mean([d[:rounds] for d in logs], axis=0)
    per_round = every_round[inlying_rounds(every_round)]
    rounds = per_round.size
    mean, sd = float(per_round.mean()), float(per_round.std(ddof=1))
    half = student_t.t_isf((1.0 - confidence) / 2.0, rounds - 1) * sd / math.sqrt(rounds)
    low, high = math.exp(mean - half), math.exp(mean + half)
    verdict, reason = suite_rule(low, high, t, 0.0)
    spread = _spread(every_round, inlying_rounds(every_round))
    return SuiteVerdict(verdict, math.exp(mean), low, high, len(logs), t, confidence,
                        f"{reason} (Student t over {rounds} paired rounds, {spread})")


def paired_logs(base: PointSamples, new: PointSamples) -> np.ndarray:
    """log(new / base) of each round's medians, rounds paired in order."""
    pairs = [(b, n) for b, n in zip(base.process_medians, new.process_medians)
             if b > 0 and n > 0]
    return np.array([math.log(n / b) for b, n in pairs])


def inlying_rounds(d: np.ndarray) -> np.ndarray:
    """Indices of the rounds kept: all but those over OUTLIER_K robust sds from the median,
    the farthest first, at most a quarter of them (module docstring)."""
    if d.size < 4:
        return np.arange(d.size)
    centre = float(np.median(d))
    scale = max(stats.robust_sd(d), OUTLIER_FLOOR)
    distance = np.abs(d - centre)
    far = [i for i in np.argsort(-distance) if distance[i] > OUTLIER_K * scale][:d.size // 4]
    return np.array([i for i in range(d.size) if i not in far], dtype=int)


def _paired_t(d: np.ndarray) -> tuple[float, float]:
    """One-sided p-values (mean above 0, mean below 0) of the rounds' log ratios."""
    if d.size < 2:
        return 1.0, 1.0
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        t = math.copysign(math.inf, mean) if mean else 0.0
    else:
        t = mean / (sd / math.sqrt(d.size))
    return student_t.t_sf(t, d.size - 1), student_t.t_sf(-t, d.size - 1)


def _row(base: PointSamples, new: PointSamples, every: np.ndarray, kept: np.ndarray,
         test: tuple[float, float], adjusted: tuple[float, float],
         options: CompareOptions) -> RowResult:
    threshold = options.threshold_for(base.meta.get("layer"))
    d = every[kept]
    ratio = math.exp(float(d.mean())) if d.size else math.nan
    slower = ratio >= 1.0
    if d.size < 2:
        verdict, reason = Verdict.AMBIGUOUS, (f"{d.size} paired round(s): a paired verdict "
                                              "needs at least 2")
    else:
        verdict, reason = row_verdict(ratio, adjusted[0], adjusted[1], threshold, options.alpha,
                                      (d.size, d.size), unit="rounds")
        reason += f"; {_spread(every, kept)}"
    p, adj = (test[0], adjusted[0]) if slower else (test[1], adjusted[1])
    return RowResult(base.pid, verdict, reason, **base.meta,
                     base_median_ms=statistics.median(base.samples.tolist()),
                     new_median_ms=statistics.median(new.samples.tolist()), ratio=ratio,
                     p_value=float(p), adjusted_p=float(adj), threshold=threshold,
                     n_base=int(base.samples.size), n_new=int(new.samples.size))


def _spread(every: np.ndarray, kept: np.ndarray) -> str:
    """The kept rounds' ratios, lowest and highest, and the rounds left out: what a reader
    checks a verdict against."""
    d = every[kept]
    text = f"rounds {math.expm1(float(d.min())):+.1%} to {math.expm1(float(d.max())):+.1%}"
    out = [math.expm1(float(v)) for i, v in enumerate(every) if i not in set(kept.tolist())]
    if out:
        text += (f", {len(out)} of {every.size} left out as outliers "
                 f"({', '.join(f'{v:+.1%}' for v in out)})")
    return text
