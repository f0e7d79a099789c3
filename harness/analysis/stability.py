"""Pick stability: how likely a rerun is to pick another algorithm at a point, and which
algorithms tie with the fastest there, so that the choice among them does not matter.

A point's reference is its fastest verified row (over every backend, or over the oracle's
backends where policies are judged). Each verified row's median is bootstrapped: RESAMPLES
resamples with replacement of its own raw samples (`samples_ms`), seeded, so one frame always
gives one answer. Then, per point:
- p_change: the share of resamples in which another row's median lies below the reference's,
  i.e. how often a rerun drawn from the same sample distributions picks another algorithm;
- a row ties the reference when the data cannot say the reference is faster: its resampled
  median is at or below the reference's in at least NEAR_TIE_P of the resamples, or its median
  lies within NOISE_K combined standard errors of the reference's (`noise`: the robust relative
  standard error of each median; rows without one are judged by the bootstrap alone);
- near_tie: p_change >= NEAR_TIE_P, or another row ties the reference.

Why 5% and 2 standard errors: both are the usual two-sided 5% level. Below it the samples say the
reference is faster; above it a rerun picks something else often enough (one time in twenty or
more) that calling the pick "the best" would claim more than the samples hold.

What this leaves out: the samples come from one window of one run. Run-to-run scatter (the
process a point runs in, clocks; evidence/diary.md) is not in them, so p_change is a lower bound
on how often a real rerun picks differently. A row whose fastest sample is slower than the
reference's slowest can win no resample; it is not resampled (its share is 0).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from harness import stats
from harness.analysis import policies
from harness.analysis.points import POINT_KEYS, STEP_KEYS, ranked, verified, with_candidate

RESAMPLES = 1000        # P(change) to about +-0.015 at 0.5, finer near 0 and 1
NEAR_TIE_P = 0.05
NOISE_K = 2.0
SEED = 0
POINT_COLUMNS = [*POINT_KEYS, "multiplicity", "candidates", "best_candidate", "best_ms",
                 "runner_candidate", "runner_ms", "p_change", "tied", "tie_candidates",
                 "near_tie"]


def _spread(samples: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Each row's fastest and slowest sample (NaN where it has none)."""
    ends = [(float(np.min(s)), float(np.max(s))) if len(s) else (np.nan, np.nan)
            for s in samples]
    low, high = np.array(ends, dtype=float).reshape(-1, 2).T
    return pd.Series(low, index=samples.index), pd.Series(high, index=samples.index)


def _contest(df: pd.DataFrame, backends: Iterable[str] | None) -> pd.DataFrame:
    """Every verified row at a point with a reference, in point order: `_row` (its label in
    df), `_point` (a code per point), `_is_ref`, `_share` (bootstrap share at or below the
    reference), `_ties`, `_beaten` (the point's p_change, on every row of the point) and
    `_seen` (the point's place in the frame's own order)."""
    best = policies.oracle(df, backends)
    rows = verified(with_candidate(ranked(df)))
    low, high = _spread(rows["samples_ms"])
    rows = rows.assign(_low=low, _high=high).reset_index(names="_row")
    ref = best[POINT_KEYS].assign(_ref=best.index, _ref_ms=best["median_ms"].to_numpy(),
                                  _ref_noise=best["noise"].astype(float).to_numpy(),
                                  _ref_high=high[best.index].to_numpy())
    rows = rows.merge(ref, on=POINT_KEYS, how="inner")
    # The resamples are drawn in this order: sorting by the data, never by the frame's row
    # order, gives the report's prepared frame and the CLI's raw one the same draws.
    rows["_point"] = rows.groupby(POINT_KEYS, dropna=False).ngroup()
    rows["_seen"] = rows.groupby(POINT_KEYS, sort=False, dropna=False).ngroup()  # for output
    rows = rows.sort_values(["_point", "median_ms", "backend", "algorithm", "precision"],
                            kind="stable").reset_index(drop=True)
    rows["_is_ref"] = rows["_row"] == rows["_ref"]
    share, beaten = _bootstrap(rows)
    rows["_share"], rows["_beaten"] = share, beaten
    noise = np.hypot(_finite(rows["noise"]), _finite(rows["_ref_noise"]))
    within = (rows["median_ms"] - rows["_ref_ms"]) / rows["_ref_ms"] <= NOISE_K * noise
    rows["_ties"] = rows["_is_ref"] | (rows["_share"] >= NEAR_TIE_P) | within
    return rows


def _finite(values: pd.Series) -> np.ndarray:
    noise = values.astype(float).to_numpy()
    return np.where(np.isfinite(noise), noise, 0.0)


def _bootstrap(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the share of resamples with its median at or below its reference's, and its
    point's share of resamples where some other row's median is below the reference's."""
    share, beaten = np.zeros(len(rows)), np.zeros(len(rows))
    contender = (rows["_is_ref"] | (rows["_low"] <= rows["_ref_high"])).to_numpy()
    index = np.flatnonzero(contender)
    if index.size == 0:
        return share, beaten
    medians = stats.bootstrap_medians(list(rows["samples_ms"].to_numpy()[index]), RESAMPLES,
                                      SEED)
    position = pd.Series(np.arange(index.size), index=rows["_row"].to_numpy()[index])
    reference = medians[position[rows["_ref"].to_numpy()[index]].to_numpy()]
    share[index] = (medians <= reference).mean(axis=1)
    below = (medians < reference) & ~rows["_is_ref"].to_numpy()[index, None]
    points = rows["_point"].to_numpy()[index]      # sorted: rows come in point order
    starts = np.flatnonzero(np.r_[True, points[1:] != points[:-1]])
    per_point = np.logical_or.reduceat(below, starts, axis=0).mean(axis=1)
    beaten_by_point = pd.Series(per_point, index=points[starts])
    beaten[:] = beaten_by_point.reindex(rows["_point"]).fillna(0.0).to_numpy()
    return share, beaten


def ties_best(df: pd.DataFrame, backends: Iterable[str] | None = None) -> pd.Series:
    """Per row of `df`: whether it ties its point's fastest verified row of `backends` (the
    reference itself included); False for rows that were not verified."""
    rows = _contest(df, backends)
    return pd.Series(rows["_ties"].to_numpy(), index=rows["_row"].to_numpy(), dtype=bool
                     ).reindex(df.index, fill_value=False)


def point_stability(df: pd.DataFrame, backends: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per point with a verified row: the best and the runner-up, how many candidates
    were verified, p_change, the candidates that tie the best (`tied`, `tie_candidates`, the
    best first) and `near_tie`."""
    rows = _contest(df, backends)
    if rows.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    grouped = rows.groupby("_point", sort=True)
    first = grouped.nth(0).set_index("_point")
    second = grouped.nth(1).set_index("_point")
    tied = rows[rows["_ties"]].groupby("_point")["candidate"]
    out = first[[*POINT_KEYS, "multiplicity", "_seen"]].assign(
        candidates=grouped.size(), best_candidate=first["candidate"], best_ms=first["median_ms"],
        runner_candidate=second["candidate"], runner_ms=second["median_ms"],
        p_change=first["_beaten"], tied=tied.size(), tie_candidates=tied.agg(", ".join))
    out["near_tie"] = (out["p_change"] >= NEAR_TIE_P) | (out["tied"] > 1)
    out = out.sort_values("_seen", kind="stable")
    return out[POINT_COLUMNS].reset_index(drop=True)


def stability_summary(points: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Per group of `keys` (default: what a training step keeps apart, without the batch):
    points (layer-directions), near-ties among them and their share, the median p_change and
    the points a rerun would more likely than not pick differently (p_change >= 0.5)."""
    keys = keys or [k for k in STEP_KEYS if k != "batch"]
    grouped = points.groupby(keys, sort=False, dropna=False)
    out = pd.DataFrame({"points": grouped.size(),
                        "near_ties": grouped["near_tie"].sum().astype(int),
                        "median_p_change": grouped["p_change"].median(),
                        "likely_change": grouped["p_change"].apply(
                            lambda p: int((p >= 0.5).sum()))})
    out["near_tie_pct"] = 100.0 * out["near_ties"] / out["points"]
    return out.reset_index()
