"""What the report says, computed from a results frame with pandas alone (no figures, no text).

Every number a table or figure shows comes from a function here, so a test can check it once.
A *point* is one measured situation (layer, direction, precision, layout, workspace limit, timing
mode); the *candidates* at a point are the backend:algorithm pairs that ran there.
"""
from __future__ import annotations

import difflib
from typing import Iterable

import numpy as np
import pandas as pd

from harness.analysis import verified
from harness.measurement import RANKABLE
from harness.store import UNLIMITED_BYTES, limit_from_column
from harness.sweep import DIRECTIONS, LAYOUTS, PRECISIONS

POINT_KEYS = ["layer_label", "direction", "precision", "layout", "workspace_limit", "timing_mode"]
# What one network total sums over (layers and directions); the rest of the keys split it.
TOTAL_KEYS = ["precision", "layout", "workspace_limit", "timing_mode"]
TORCH_PREFIX = "torch"     # backends torch_gpu, torch_cpu: what PyTorch would run
BUILTIN_POLICIES = ("heuristic", "find", "torch")
ORACLE = "oracle"

_ORDER = {"direction": DIRECTIONS, "precision": PRECISIONS, "layout": LAYOUTS,
          "timing_mode": ("warm", "cold")}


class PolicyError(ValueError):
    """A baseline policy that names nothing in the data; the message lists what does exist."""


# ---- preparing the frame --------------------------------------------------------------------------
def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Add the report's derived columns and drop repeated measurements of the same point.

    Repeats happen when several result files of one run (or a resumed run) are passed together;
    the latest wins, as in store.ResultWriter.
    """
    out = df.reset_index(drop=True).copy()
    for name in ("direction", "precision", "layout", "backend", "algorithm", "family", "status"):
        out[name] = out[name].astype("string").fillna("?")
    out["timing_mode"] = out["timing_mode"].astype("string").fillna("warm")
    out["workspace_limit"] = out["workspace_limit"].fillna(UNLIMITED_BYTES).astype("int64")
    out["multiplicity"] = out["multiplicity"].fillna(1).astype("int64")
    for flag in ("heuristic_pick", "find_pick", "throttled"):
        out[flag] = out[flag].astype("boolean").fillna(False).astype(bool)
    out = _plain_columns(out)
    out["candidate"] = out["backend"] + ":" + out["algorithm"]
    out = _rank_by_delivered_precision(out)
    out["layer_label"] = _layer_labels(out)
    out["layer_order"] = out.groupby("layer_label", sort=False).ngroup()
    if out["finished_at"].notna().any():
        out = out.sort_values("finished_at", kind="stable", na_position="first")
    out = out.drop_duplicates(POINT_KEYS + ["candidate"], keep="last")
    return sort_points(out)


def _rank_by_delivered_precision(df: pd.DataFrame) -> pd.DataFrame:
    """A verified row whose error shows a lower precision than asked (a graph plan asked for
    fp32 that computes at TF32 accuracy) competes at the precision it delivers, never as the
    one asked for, like selection.py's oracle; its candidate name says what was asked."""
    delivered = df["effective_precision"].astype("string")
    lowered = ((df["status"] == RANKABLE) & delivered.notna()
               & (delivered != df["precision"])).fillna(False).astype(bool)
    out = df.assign(asked_precision=df["precision"])
    out.loc[lowered, "candidate"] = (out.loc[lowered, "candidate"] + " [asked "
                                     + out.loc[lowered, "precision"] + "]")
    out.loc[lowered, "precision"] = delivered[lowered]
    return out


def _plain_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Arrow-backed strings and nullable numbers to plain object/float columns: the report filters
    and groups small slices thousands of times, where the plain types are several times faster."""
    for name, dtype in df.dtypes.items():
        if isinstance(dtype, pd.StringDtype):
            df[name] = df[name].astype(object).where(df[name].notna(), None)
        elif isinstance(dtype, (pd.Int64Dtype, pd.Float64Dtype)):
            df[name] = df[name].astype("float64")
    return df


def _layer_labels(df: pd.DataFrame) -> pd.Series:
    """The layer name, made unique where one name was run at several shapes (e.g. batch sizes)."""
    name = df["layer"].astype("string")
    name = name.where(name.notna() & (name != ""), df["descriptor"].astype("string")).fillna("?")
    shapes = df.groupby(name, sort=False)["descriptor"].transform("nunique")
    batch = "n" + df["batch"].astype("string").fillna("?")
    return name.where(shapes <= 1, name + " " + batch).astype(str)


def sort_points(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: network order of layers, then the sweep's own axis orders."""
    keys = [k for k in ["layer_order", "direction", "precision", "layout", "workspace_limit",
                        "timing_mode"] if k in df.columns]
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


# ---- ranking ---------------------------------------------------------------------------------------
def best_per_point(df: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """One row per point: the fastest verified candidate, the runner-up and the baseline's pick."""
    points = df.drop_duplicates(POINT_KEYS)[POINT_KEYS + ["layer_order", "multiplicity"]]
    tried = df.groupby(POINT_KEYS, sort=False).size().rename("n_tried")
    ranked = verified(df).sort_values("median_ms", kind="stable")
    n_ok = ranked.groupby(POINT_KEYS, sort=False).size().rename("n_ok")
    first = ranked.drop_duplicates(POINT_KEYS)
    second = ranked[ranked.duplicated(POINT_KEYS)].drop_duplicates(POINT_KEYS)
    cols = ["candidate", "median_ms", "workspace_bytes", "effective_precision"]
    out = (points.set_index(POINT_KEYS).join(tried).join(n_ok)
           .join(first.set_index(POINT_KEYS)[cols].add_prefix("best_"))
           .join(second.set_index(POINT_KEYS)[["candidate", "median_ms"]].add_prefix("runner_")))
    if baseline is not None:
        picks = policy_picks(df, baseline)[["candidate", "median_ms", "status"]]
        out = out.join(picks.add_prefix("base_"))
    out["n_ok"] = out["n_ok"].fillna(0).astype(int)
    out["speedup_runner"] = out["runner_median_ms"] / out["best_median_ms"]
    if baseline is not None:
        base_ok = out["base_status"] == RANKABLE
        out["speedup_base"] = (out["base_median_ms"] / out["best_median_ms"]).where(base_ok)
    return sort_points(out.reset_index())


# ---- selection policies ---------------------------------------------------------------------------
def available_policies(df: pd.DataFrame) -> list[str]:
    """The built-in baseline policies this data can answer, in order of preference."""
    return [p for p in BUILTIN_POLICIES if _policy_mask(df, p).any()]


def default_baseline(df: pd.DataFrame) -> str | None:
    found = available_policies(df)
    return found[0] if found else None


def check_policy(df: pd.DataFrame, policy: str) -> None:
    """Refuse a policy that matches no row, naming what the data does have."""
    if policy == ORACLE or _policy_mask(df, policy).any():
        return
    names = available_policies(df) + sorted(set(df["backend"])) + sorted(set(df["candidate"]))
    close = difflib.get_close_matches(policy, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise PolicyError(f"baseline policy {policy!r} matches no row{hint} Known: "
                      f"{', '.join(names[:40])}{' ...' if len(names) > 40 else ''}")


def _policy_mask(df: pd.DataFrame, policy: str) -> pd.Series:
    if policy == ORACLE:
        return (df["status"] == RANKABLE) & df["median_ms"].notna()
    if policy == "heuristic":
        return df["heuristic_pick"]
    if policy == "find":
        return df["find_pick"]
    if policy == "torch":
        return df["backend"].str.startswith(TORCH_PREFIX)
    if ":" in policy:
        return df["candidate"] == policy
    return df["backend"] == policy


def policy_picks(df: pd.DataFrame, policy: str) -> pd.DataFrame:
    """Per point, the row a user following `policy` would get, indexed by POINT_KEYS.

    Where a policy offers several rows at one point (two backends both flag a heuristic pick, or a
    backend name matches many algorithms) the verified and fastest stands for it. A pick that was
    not verified keeps its status: following that policy there gives a wrong or failed call.
    """
    rows = df[_policy_mask(df, policy)]
    bad = rows["status"] != RANKABLE
    rows = rows.assign(_bad=bad).sort_values(["_bad", "median_ms"], kind="stable")
    return rows.drop_duplicates(POINT_KEYS).set_index(POINT_KEYS)


def network_totals(df: pd.DataFrame, policies: Iterable[str],
                   keys: list[str] = TOTAL_KEYS) -> pd.DataFrame:
    """Sum over layers (x multiplicity) and the rest of the point keys of each policy's pick time.

    `missing_<policy>` counts points where the policy had no verified pick: such a total is a
    lower bound and says so.
    """
    points = df.drop_duplicates(POINT_KEYS)[POINT_KEYS + ["multiplicity"]].set_index(POINT_KEYS)
    out = points.groupby(keys).size().rename("points").to_frame()
    for policy in policies:
        picks = policy_picks(df, policy)
        ms = picks["median_ms"].where(picks["status"] == RANKABLE)
        timed = points.join(ms.rename("ms"))
        timed["weighted"] = timed["ms"] * timed["multiplicity"]
        grouped = timed.groupby(keys)
        out[f"total_{policy}"] = grouped["weighted"].sum(min_count=1)
        out[f"missing_{policy}"] = grouped["ms"].apply(lambda s: int(s.isna().sum()))
    return sort_points(out.reset_index())


# ---- heatmap, Pareto fronts -------------------------------------------------------------------------
def relative_matrix(df: pd.DataFrame, index: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows of `index` (in network order) x candidates: time / the row's best time, and the status
    of every cell ("" where that candidate was not run there)."""
    order = pd.MultiIndex.from_frame(df.sort_values("layer_order", kind="stable")[index]
                                     .drop_duplicates())
    candidates = sorted(set(df["candidate"]))
    status = (df.pivot_table(index=index, columns="candidate", values="status", aggfunc="first")
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
