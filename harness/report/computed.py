"""What the report says, computed from a results frame with pandas alone (no figures, no text).

Every number a table or figure shows comes from a function here or in harness.analysis (the one
point key, verified rows, best per point, policies and the oracle), so a test can check it once.
(This module was harness/report/analysis.py: two modules named `analysis` made every import of
one a guess at which.) A *point* is one measured situation (harness.analysis.POINT_KEYS: layer,
direction, delivered precision, layout, workspace limit, timing mode); the *candidates* at a
point are the backend:algorithm pairs that ran there.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from harness import epilogue
from harness.analysis import LAYER_KEYS, POINT_KEYS, layer_labels, policies, ranked, verified
from harness.analysis import best_per_point as _best
from harness.analysis.sharing import contended_rows, sharing
from harness.measurement import RANKABLE
from harness.workspace_limit import UNLIMITED_BYTES, limit_from_column
from harness.sweep import ALL_DIRECTIONS, LAYOUTS, PRECISIONS
from harness.threads import ALL as ALL_THREADS

# The point key with each layer told by its readable label (one label per LAYER_KEYS value).
LABELLED_KEYS = ["layer_label", *[k for k in POINT_KEYS if k not in LAYER_KEYS]]

_ORDER = {"direction": ALL_DIRECTIONS, "op": epilogue.OPS, "effective_precision": PRECISIONS,
          "layout": LAYOUTS,
          "timing_mode": ("warm", "cold")}


# ---- preparing the frame -------------------------------------------------------------------------
def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Add the report's derived columns and drop repeated measurements of the same point.

    Repeats happen when several result files of one run (or a resumed run) are passed together;
    the latest wins, as in store.ResultWriter.
    """
    out = df.reset_index(drop=True).copy()
    for name in ("direction", "precision", "layout", "backend", "algorithm", "family", "status"):
        out[name] = out[name].astype("string").fillna("?")
    out["timing_mode"] = out["timing_mode"].astype("string").fillna("warm")
    out["threads"] = out["threads"].fillna(ALL_THREADS).astype("int64")
    out["op"] = out["op"].astype("string").fillna(epilogue.CONV)
    out["workspace_limit"] = out["workspace_limit"].fillna(UNLIMITED_BYTES).astype("int64")
    out["multiplicity"] = out["multiplicity"].fillna(1).astype("int64")
    for flag in ("heuristic_pick", "find_pick", "throttled"):
        out[flag] = out[flag].astype("boolean").fillna(False).astype(bool)
    out = _plain_columns(ranked(out))
    out["candidate"] = _candidates(out)
    out["layer_label"] = layer_labels(out)
    out["layer_order"] = out.groupby("layer_label", sort=False).ngroup()
    if out["finished_at"].notna().any():
        out = out.sort_values("finished_at", kind="stable", na_position="first")
    out = out.drop_duplicates(POINT_KEYS + ["candidate"], keep="last")
    return sort_points(out)


def _candidates(df: pd.DataFrame) -> pd.Series:
    """backend:algorithm; a verified row that delivered a lower precision than asked (a graph plan
    asked for fp32 that computes at TF32 accuracy) competes at the precision it delivers, and its
    name says what was asked, so it is never taken for the plan asked at that precision."""
    names = df["backend"] + ":" + df["algorithm"]
    lowered = ((df["status"] == RANKABLE) & (df["effective_precision"] != df["precision"]))
    return names.where(~lowered, names + " [asked " + df["precision"] + "]")


def _plain_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Arrow-backed strings and nullable numbers to plain object/float columns: the report filters
    and groups small slices thousands of times, where the plain types are several times faster."""
    for name, dtype in df.dtypes.items():
        if isinstance(dtype, pd.StringDtype):
            df[name] = df[name].astype(object).where(df[name].notna(), None)
        elif isinstance(dtype, (pd.Int64Dtype, pd.Float64Dtype)):
            df[name] = df[name].astype("float64")
    return df


def sort_points(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: network order of layers, then the sweep's own axis orders."""
    keys = [k for k in ["layer_order", "direction", "op", "effective_precision", "layout",
                        "workspace_limit", "timing_mode", "threads"] if k in df.columns]
    return df.sort_values(keys, key=_rank, kind="stable").reset_index(drop=True)


def _rank(column: pd.Series) -> pd.Series:
    if column.name == "workspace_limit":  # unlimited reads last, after every real limit
        return column.map(lambda v: np.inf if limit_from_column(v) is None else float(v))
    order = _ORDER.get(str(column.name))
    if order is None:
        return column
    rank = {value: i for i, value in enumerate(order)}
    return column.map(lambda v: rank.get(v, len(rank))).astype("int64")


def varying(df: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The keys that take more than one value here: only those earn a table column."""
    return [k for k in keys if df[k].nunique(dropna=False) > 1]


def reference_limit(df: pd.DataFrame) -> int:
    """The limit whose rows show every algorithm at its best: unlimited, else the largest."""
    limits = set(df["workspace_limit"])
    return UNLIMITED_BYTES if UNLIMITED_BYTES in limits else max(limits)


# ---- ranking -------------------------------------------------------------------------------------
def best_per_point(df: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """One row per point: the fastest verified candidate, the runner-up and the baseline's pick."""
    labels = df.drop_duplicates(POINT_KEYS).set_index(POINT_KEYS)[["layer_label", "layer_order"]]
    out = _best(df).set_index(POINT_KEYS).join(labels).join(sharing_per_point(df))
    if baseline is not None:
        picks = policies.picks(df, baseline)
        picks = picks.assign(comparable=policies.comparable(picks))[
            ["candidate", "median_ms", "status", "effective_precision", "comparable"]]
        out = out.join(picks.add_prefix("base_"))
        base_ok = (out["base_status"] == RANKABLE) & out["base_comparable"].fillna(False)
        out["speedup_base"] = (out["base_median_ms"] / out["best_median_ms"]).where(base_ok)
    return sort_points(out.reset_index())


def sharing_per_point(df: pd.DataFrame) -> pd.Series:
    """Each point's Sharing (harness/analysis/sharing.py) over its candidates' rows, column
    `sharing`; absent for points without a CPU row checked for contention."""
    # sharing() counts nothing for rows without a check (GPU rows, older files): leaving them
    # out first only spares calling it once per GPU point of a large sweep.
    checked = df[df["contended"].notna()]
    ids = checked.groupby(POINT_KEYS, sort=False, dropna=False).ngroup()
    counted = {i: sharing(part) for i, part in checked.groupby(ids, sort=False)}
    # Indexed like best_per_point's own join (drop_duplicates, set_index), so that keys with a
    # missing value (no descriptor) match the same way.
    firsts = checked.assign(_point=ids).drop_duplicates(POINT_KEYS).set_index(POINT_KEYS)
    return firsts["_point"].map(counted).astype(object).rename("sharing")


# ---- selection policies --------------------------------------------------------------------------
def default_baseline(df: pd.DataFrame) -> str | None:
    found = policies.available(df)
    return found[0] if found else None


def network_totals(df: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """policies.network_totals over one training step, in the report's reading order."""
    return sort_points(policies.network_totals(df, names))


# A heatmap cell's state for an ok row left contended: not a status (its output was right), but
# a reason the cell has no time, like the statuses' own (never ranked: points.verified).
CONTENDED = "contended"


# ---- heatmap, Pareto fronts ----------------------------------------------------------------------
def relative_matrix(df: pd.DataFrame, index: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows of `index` (in network order) x candidates: time / the row's best time, and the status
    of every cell ("" where that candidate was not run there, CONTENDED where it shared the CPU)."""
    order = pd.MultiIndex.from_frame(df.sort_values("layer_order", kind="stable")[index]
                                     .drop_duplicates())
    candidates = sorted(set(df["candidate"]))
    state = df.assign(status=df["status"].mask(df.index.isin(contended_rows(df).index),
                                               CONTENDED))
    status = (state.pivot_table(index=index, columns="candidate", values="status",
                                aggfunc="first")
              .reindex(index=order, columns=candidates).fillna(""))
    times = (verified(df).pivot_table(index=index, columns="candidate", values="median_ms",
                                      aggfunc="min")
             .reindex(index=order, columns=candidates))
    return times.div(times.min(axis=1), axis=0), status


def pareto_fronts(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of `keys`, the verified candidates no other beats on both workspace and time,
    by rising workspace (column `ws`, bytes). Unknown workspace counts as zero: CPU algorithms
    allocate what they need and report none."""
    rows = verified(df).assign(ws=lambda d: d["workspace_bytes"].astype(float).fillna(0.0))
    rows = rows.sort_values([*keys, "ws", "median_ms"], kind="stable")
    rows = rows.drop_duplicates([*keys, "candidate"])       # a candidate once, at its fastest
    groups = [rows[k] for k in keys]
    fastest_before = (rows["median_ms"].groupby(groups, sort=False).cummin()
                      .groupby(groups, sort=False).shift(fill_value=np.inf))
    return rows[rows["median_ms"] < fastest_before]


# ---- roofline ------------------------------------------------------------------------------------
def achieved_tflops(df: pd.DataFrame) -> pd.Series:
    """Stored achieved TFLOP/s where the runner recorded it, else FLOPs over the median time."""
    derived = df["flops"].astype(float) / (df["median_ms"] * 1e-3) / 1e12
    return df["achieved_tflops"].astype(float).fillna(derived)


def implied_ceilings(df: pd.DataFrame) -> dict[str, float]:
    """Peaks reconstructed from `roofline_pct` when no peaks table was given.

    roofline_pct = achieved / min(peak, intensity x bandwidth): the largest implied ceiling of a
    precision is its compute peak; points whose ceiling lies below it were bandwidth-bound and
    give bandwidth = ceiling / intensity (bytes counted as in the schema's bytes_moved).
    """
    rows = verified(df)
    rows = rows[rows["roofline_pct"].astype(float) > 0]
    if rows.empty:
        return {}
    ceiling = achieved_tflops(rows) * 100.0 / rows["roofline_pct"].astype(float)
    peaks: dict[str, float] = {p: float(c.max()) for p, c in ceiling.groupby(rows["precision"])}
    peak_of_row = rows["precision"].map(peaks)
    bound = ceiling < 0.98 * peak_of_row
    if bound.any():
        tbps = ceiling[bound] / rows.loc[bound, "arithmetic_intensity"].astype(float)
        peaks["bandwidth_gbps"] = float(np.median(tbps)) * 1000.0
    return peaks


# ---- environment and method ---------------------------------------------------------------------
def distinct_values(df: pd.DataFrame, column: str) -> list[tuple[str, int]]:
    """Each recorded value of a column with its row count, most common first."""
    counts = df[column].dropna().astype(str).value_counts()
    return [(str(v), int(n)) for v, n in counts.items()]


def machines(df: pd.DataFrame) -> int:
    """How many distinct machines the rows come from (mixing them in one ranking misleads)."""
    cols = ["env_hostname", "env_gpu_name", "env_cpu_model"]
    return int(len(df[cols].astype(str).drop_duplicates()))


def noise_stats(df: pd.DataFrame) -> dict[str, float]:
    """Median and 90th percentile of the relative noise of the timed medians."""
    noise = verified(df)["noise"].astype(float)
    noise = noise[np.isfinite(noise)]
    if noise.empty:
        return {}
    return {"median": float(noise.median()), "p90": float(noise.quantile(0.9))}
