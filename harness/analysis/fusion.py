"""What fusing the epilogue into the convolution saves (the op axis, harness/epilogue.py).

At a point whose op is not plain `conv`, three ways to compute it are compared, each by its
fastest verified row:
- fused: one cuDNN graph of convolution, bias, residual add and ReLU (a `cudnn_graph` plan);
- unfused: the graph heuristic's own convolution plan, then each pointwise op as its own kernel
  (`cudnn_graph`'s UNFUSED algorithm), as a framework without fusion runs it;
- eager: PyTorch as a user calls it (bias in the conv call, then `+=` and an in-place ReLU).
Savings are the other's time - the fused time, in ms and % of the other's. `epilogue_ms` is what
the epilogue adds to the fastest plain convolution of the same layer (the point with op conv).
"""
from __future__ import annotations

import pandas as pd

from harness.analysis.points import (POINT_KEYS, STEP_KEYS, fastest, network_split, own_output,
                                     ranked, with_candidate)
from harness.epilogue import CONV
from harness.precision import QUANTIZED

FUSING_BACKEND = "cudnn_graph"
UNFUSED = "unfused"              # cudnn_graph's algorithm: conv plan + separate pointwise kernels
# PyTorch on the device the fused graph runs on (torch_cpu rows share the point key but would
# compare a GPU graph with oneDNN on the CPU)
EAGER_BACKENDS = ("torch_gpu",)
WAYS = ("fused", "unfused", "eager")
POINT_COLUMNS = ["multiplicity", "conv_ms",
                 *[f"{w}_{c}" for w in WAYS for c in ("candidate", "ms")],
                 "epilogue_ms", *[f"saves_vs_{w}_{u}" for w in WAYS[1:] for u in ("ms", "pct")]]


def _fastest(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The fastest verified row per `keys` (candidate, median_ms), indexed by them."""
    return fastest(rows, keys).set_index(keys)[["candidate", "median_ms"]]


def _way(df: pd.DataFrame) -> pd.Series:
    """Which of WAYS a row is (None: none of them)."""
    graph = df["backend"] == FUSING_BACKEND
    unfused = graph & (df["algorithm"] == UNFUSED)
    way = pd.Series(None, index=df.index, dtype=object)
    way[graph & ~unfused] = "fused"
    way[unfused] = "unfused"
    way[df["backend"].isin(EAGER_BACKENDS)] = "eager"
    return way


def point_savings(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point with an epilogue (op other than conv) and a verified row: the network
    split columns present, POINT_KEYS and POINT_COLUMNS (NaN where a way or the plain
    convolution was not measured or not verified)."""
    df = with_candidate(ranked(df))
    keys = [*network_split(df), *POINT_KEYS]
    fused_points = df[df["op"] != CONV]
    points = fused_points.drop_duplicates(keys).set_index(keys)[["multiplicity"]]
    way = _way(fused_points)
    for name in WAYS:
        best = _fastest(fused_points[way == name], keys)
        points = points.join(best.set_axis([f"{name}_candidate", f"{name}_ms"], axis=1))
    plain_keys = [k for k in keys if k != "op"]
    conv = _fastest(df[df["op"] == CONV], plain_keys)["median_ms"].rename("conv_ms")
    points = points.reset_index().join(conv, on=plain_keys)
    points["epilogue_ms"] = points["fused_ms"] - points["conv_ms"]
    for name in WAYS[1:]:
        saved = points[f"{name}_ms"] - points["fused_ms"]
        points[f"saves_vs_{name}_ms"] = saved
        points[f"saves_vs_{name}_pct"] = 100.0 * saved / points[f"{name}_ms"]
    has_any = points[[f"{w}_ms" for w in WAYS]].notna().any(axis=1)
    return points[has_any][[*keys, *POINT_COLUMNS]].reset_index(drop=True)


def network_savings(points: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Per group of `keys` (by default one network's forward pass at one op: the network split
    and STEP_KEYS): each way's total
    (ms x multiplicity) over the points where all three ways were verified (`points_compared`,
    of `points`), and what fusion saves over the other two there. At a precision PyTorch has
    no convolution for (fp8, int8) fused is compared against unfused, and the eager columns
    stay empty; elsewhere a point without a verified eager row is not compared."""
    keys = [*network_split(points), *STEP_KEYS] if keys is None else keys
    if "output" not in keys:                  # a total over result types adds each point once
        points = points[own_output(points)]
    no_peer = points["effective_precision"].isin(QUANTIZED)
    complete = (points[["fused_ms", "unfused_ms"]].notna().all(axis=1)
                & (points["eager_ms"].notna() | no_peer))
    weighted = points[complete].assign(**{
        f"{w}_total": points[f"{w}_ms"] * points["multiplicity"] for w in WAYS})
    grouped = weighted.groupby(keys, dropna=False, sort=False)
    out = grouped[[f"{w}_total" for w in WAYS]].sum(min_count=1)   # no eager rows: NaN, not 0
    out["points_compared"] = grouped.size()
    out = (points.groupby(keys, dropna=False, sort=False).size().rename("points").to_frame()
           .join(out))
    out["points_compared"] = out["points_compared"].fillna(0).astype(int)
    for name in WAYS[1:]:
        saved = out[f"{name}_total"] - out["fused_total"]
        out[f"saves_vs_{name}_ms"], out[f"saves_vs_{name}_pct"] = (
            saved, 100.0 * saved / out[f"{name}_total"])
    return out.reset_index()
