"""What the quantized precisions (fp8_e4m3, fp8_e5m2, int8: harness/precision.py) buy over fp16.

At each point with rows at a quantized precision, its fastest verified row is compared with the
fastest verified fp16 row of the same point but for the precision (same layer, direction, op,
layout, workspace limit, timing, threads and network): speed-up = fp16 ms / quantized ms. The
error shown is that quantized row's relative L2 error. A point whose quantized rows were all
refused, wrong or failed stays, as "no verified plan" with its most common reason: how much of
the library lacks plans is part of the answer, not a gap in it. A point whose result was asked
in another type (the `output` axis: fp8 into fp8, int8 into int8) is also compared with the same
point written in the precision's own type: speedup_vs_own = own ms / this ms.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from harness.analysis.points import (NETWORK_KEYS, POINT_KEYS, fastest, network_split, own_output,
                                     ranked, verified, with_candidate)
from harness.measurement import Status
from harness.precision import QUANTIZED, refusal

BASELINE = "fp16"          # what a quantized precision is measured against
PRECISION = "effective_precision"
NO_PLAN = "no verified plan"
# Row counts a summary shows per status; the rest (failed, workspace_exceeded, not_tried) is
# `other_rows`.
COUNTED = {"ok_rows": Status.OK, "unsupported_rows": Status.UNSUPPORTED,
           "wrong_rows": Status.WRONG, "crashed_rows": Status.CRASHED}
POINT_COLUMNS = ["multiplicity", "rows", *COUNTED, "other_rows", "quantized_candidate",
                 "quantized_ms", "quantized_rel_error", "max_rel_error", "fp16_candidate",
                 "fp16_ms", "speedup", "own_output_ms", "speedup_vs_own", "reason"]


def _fastest(rows: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """The fastest verified row per `keys` (its `keys` and `columns`)."""
    return fastest(rows, keys)[[*keys, *columns]]


def _most_common(texts: pd.Series) -> str:
    """Each backend's most frequent reason (ties: the first met), backends in the order met:
    counted over all rows, one backend's many per-algorithm refusals (legacy cuDNN: "no fp8")
    would hide another's one library status (the graph API: "no valid engine configs")."""
    by_backend: dict[str, Counter] = {}
    for text in texts:
        backend, _, reason = text.partition(": ")
        by_backend.setdefault(backend, Counter())[reason] += 1
    return "; ".join(f"{backend}: {counts.most_common(1)[0][0]}"
                     for backend, counts in by_backend.items())


def point_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point with a row at a quantized precision (`effective_precision` names it):
    the network split columns present, POINT_KEYS and POINT_COLUMNS. `rows` counts the
    quantized rows there and COUNTED and `other_rows` split them by status; the quantized and
    fp16 columns are each precision's fastest verified row (NaN where none), `max_rel_error`
    the largest error of any verified quantized row there, `speedup` = fp16_ms / quantized_ms,
    and `reason` is NO_PLAN with the most common reason of the quantized rows (their status
    where they give none) at a point where none verified, else missing."""
    df = with_candidate(ranked(df))
    keys = [*network_split(df), *POINT_KEYS]
    # int8 backward is no point: the precision has no such direction (its rows say so)
    exists = np.array([refusal(name, direction) is None
                       for name, direction in zip(df[PRECISION], df["direction"])], dtype=bool)
    quantized = df[df[PRECISION].isin(QUANTIZED) & exists]
    if quantized.empty:
        return pd.DataFrame(columns=[*keys, *POINT_COLUMNS])
    # points by number: index alignment on keys that hold NA (no suite, an unnamed layer) fails
    given = quantized["reason"].notna() & (quantized["reason"] != "")
    statuses = quantized["status"].astype(str)
    quantized = quantized.assign(
        point=quantized.groupby(keys, sort=False, dropna=False).ngroup(),
        why=quantized["backend"].astype(str) + ": "
        + quantized["reason"].astype(object).where(given, statuses).astype(str),
        **{column: statuses == status for column, status in COUNTED.items()})
    grouped = quantized.groupby("point", sort=False)
    points = quantized.drop_duplicates("point").set_index("point")[[*keys, "multiplicity"]]
    points["rows"] = grouped.size()
    points = points.join(grouped[list(COUNTED)].sum())
    points["other_rows"] = points["rows"] - points[list(COUNTED)].sum(axis=1)
    best = _fastest(quantized, ["point"], ["candidate", "median_ms", "rel_error"])
    points = points.join(best.set_index("point").set_axis(
        ["quantized_candidate", "quantized_ms", "quantized_rel_error"], axis=1))
    points["max_rel_error"] = verified(quantized).groupby("point")["rel_error"].max()
    points["reason"] = (NO_PLAN + ": " + grouped["why"].agg(_most_common)).where(
        points["quantized_ms"].isna(), None)
    # the fp16 point is the quantized point at another precision (and so another result type):
    # match by every other key
    others = [k for k in keys if k not in (PRECISION, "output")]
    fp16 = _fastest(df[df[PRECISION] == BASELINE], others, ["candidate", "median_ms"])
    points = points.merge(fp16.rename(columns={"candidate": "fp16_candidate",
                                               "median_ms": "fp16_ms"}), on=others, how="left")
    points["speedup"] = points["fp16_ms"] / points["quantized_ms"]
    return _against_own_output(points, keys)[[*keys, *POINT_COLUMNS]].reset_index(drop=True)


def _against_own_output(points: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each point asked in another result type beside the same point in the precision's own."""
    others = [k for k in keys if k != "output"]
    own = points[own_output(points)][[*others, "quantized_ms"]]
    points = points.merge(own.rename(columns={"quantized_ms": "own_output_ms"}), on=others,
                          how="left")
    points["own_output_ms"] = points["own_output_ms"].where(~own_output(points))
    points["speedup_vs_own"] = points["own_output_ms"] / points["quantized_ms"]
    return points


def summary(points: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Per group of `keys` (by default the network split and NETWORK_KEYS: one quantized
    precision at one direction, op, layout, ... of one network): `points` with quantized rows,
    `points_compared` (a verified quantized and a verified fp16 row), `no_plan` (no verified
    quantized row), the geometric mean, min and max speed-up over fp16 at the compared points,
    `vs_own_geomean` the geometric mean of speedup_vs_own (NaN where the result type is the
    precision's own), the largest error of the fastest quantized rows (`max_rel_error_fastest`,
    at every point with one) and of every verified quantized row (`max_rel_error`), and the
    quantized rows' counts by status (`rows`, COUNTED, `other_rows`)."""
    keys = [*network_split(points), *NETWORK_KEYS] if keys is None else keys
    points = points.assign(log_speedup=np.log(points["speedup"].astype(float)),
                           log_vs_own=np.log(points["speedup_vs_own"].astype(float)))
    grouped = points.groupby(keys, dropna=False, sort=False)
    out = grouped.size().rename("points").to_frame()
    out["points_compared"] = grouped["speedup"].count()
    out["no_plan"] = grouped["quantized_ms"].size() - grouped["quantized_ms"].count()
    out["speedup_geomean"] = np.exp(grouped["log_speedup"].mean())
    out["speedup_min"] = grouped["speedup"].min()
    out["speedup_max"] = grouped["speedup"].max()
    out["vs_own_geomean"] = np.exp(grouped["log_vs_own"].mean())
    out["max_rel_error_fastest"] = grouped["quantized_rel_error"].max()
    out["max_rel_error"] = grouped["max_rel_error"].max()
    out = out.join(grouped[["rows", *COUNTED, "other_rows"]].sum())
    return out.reset_index()
