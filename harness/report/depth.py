"""The report's "3-D layers" section and `convbench table --conv3d`: per 3-D point the fastest
verified algorithm and each backend's best time, or why it has none (harness/analysis/depth.py)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis import POINT_KEYS, depth, layer_labels
from harness.report.answers import HEADERS, shown_keys
from harness.report.document import Block, Table, Text
from harness.report.tables import DASH, fmt_candidate, fmt_key, fmt_ms, is_missing

TEXT = ("3-D convolutions (a depth axis: video frames, volume slices). Per point: the fastest "
        "verified algorithm with its rate, then each backend's fastest verified time, or the "
        "most frequent reason its rows give where none verified (a backend that does not run "
        "3-D says so there). Shapes are depth x height x width.")
_ALWAYS = ["layer_label", "direction", "effective_precision", "layout"]
REASON_CHARS = 60


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value if len(value) <= REASON_CHARS else value[:REASON_CHARS - 1] + "…"
    return fmt_ms(value)        # a dash where missing


def conv3d_blocks(df: pd.DataFrame) -> list[Block]:
    points = depth.point_backends(df)
    if points.empty:
        return [Text("No 3-D layer in these results.")]
    points = points.assign(layer_label=layer_labels(points))
    keys = shown_keys(points, _ALWAYS)
    backends = [c for c in points.columns if c not in
                {*keys, *POINT_KEYS, "shape", "best_candidate", "best_ms", "best_gflops"}]
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], r["shape"], fmt_candidate(r["best_candidate"]),
                  _cell(r["best_ms"]),
                  DASH if is_missing(r["best_gflops"]) else f"{r['best_gflops']:.1f}",
                  *[_cell(r[b]) for b in backends])
                 for _, r in points.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Shape", "Best", "ms", "GFLOP/s",
               *[f"{b} ms" for b in backends])
    numeric = (False,) * (len(keys) + 2) + (True, True) + (True,) * len(backends)
    return [Text(TEXT), Table(headers, rows, numeric, "3-D layers")]


def has_3d(df: pd.DataFrame) -> bool:
    return bool(depth.is_3d(df).any())
