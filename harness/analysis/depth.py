"""3-D layers (video, volumes): per point, the fastest verified algorithm and each backend's best,
or why a backend has none. Which backends run 3-D at all is the first thing a user of 3-D
convolutions asks, so a backend's refusal is shown beside the others' times, not dropped."""
from __future__ import annotations

import pandas as pd

from harness.analysis.points import POINT_KEYS, fastest, ranked, with_candidate
from harness.problem import DEPTH_DEFAULTS


def is_3d(df: pd.DataFrame) -> pd.Series:
    """Rows of 3-D problems: any depth column off a flat problem's value (ConvProblem.is_3d)."""
    flat = pd.Series(True, index=df.index)
    for name, default in DEPTH_DEFAULTS.items():
        if name in df.columns:
            flat &= df[name].fillna(default) == default
    return ~flat


def point_backends(df: pd.DataFrame) -> pd.DataFrame:
    """One row per 3-D point: POINT_KEYS, the depth x height x width in and out, the fastest
    verified candidate (`best_candidate`, `best_ms`, `best_gflops`) and per backend a column
    `<backend>`: its fastest verified time in ms, or the most frequent reason of its rows there
    (str) where none verified."""
    rows = with_candidate(ranked(df[is_3d(df)]))
    if rows.empty:
        return pd.DataFrame(columns=[*POINT_KEYS, "shape"])
    points = rows.drop_duplicates(POINT_KEYS).set_index(POINT_KEYS)
    out = pd.DataFrame(index=points.index)
    out["shape"] = [f"{r.in_d}x{r.in_h}x{r.in_w} → {r.out_d}x{r.out_h}x{r.out_w}, "
                    f"k{r.kernel_d}x{r.kernel_h}x{r.kernel_w}" for r in points.itertuples()]
    best = fastest(rows, POINT_KEYS).set_index(POINT_KEYS)
    out = out.join(best[["candidate", "median_ms", "gflops"]].set_axis(
        ["best_candidate", "best_ms", "best_gflops"], axis=1))
    for backend, part in rows.groupby("backend", sort=False):
        column = fastest(part, POINT_KEYS).set_index(POINT_KEYS)["median_ms"].astype(object)
        reasons = part.groupby(POINT_KEYS, dropna=False)["reason"].agg(
            lambda r: r.fillna("").astype(str).value_counts().index[0] or "no verified row")
        out[str(backend)] = column.reindex(out.index).where(
            column.reindex(out.index).notna(), reasons.reindex(out.index))
    return out.reset_index()
