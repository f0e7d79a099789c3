"""The report's "Fused epilogues" section and `convbench table --fusion`: what fusing bias, ReLU
and the residual add into the convolution saves over running them as separate kernels and over
eager PyTorch (numbers from harness/analysis/fusion.py)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis import fusion, layer_labels
from harness.analysis.networks import SOURCE
from harness.epilogue import CONV
from harness.report.answers import HEADERS, SHOWN_WHEN_VARYING, shown_keys
from harness.report.document import Block, Fold, Table, Text
from harness.report.tables import DASH, fmt_candidate, fmt_key, fmt_ms, is_missing

TEXT = (
    "At each point whose op adds an epilogue to the convolution (bias, ReLU, residual add), the "
    "fastest verified row of three ways to run it: fused (one cuDNN graph: a cudnn_graph plan), "
    f"unfused (cudnn_graph's `{fusion.UNFUSED}`: the graph heuristic's own convolution plan, "
    "then each pointwise op as its own kernel) and eager PyTorch (bias in the conv call, then "
    "the add and an in-place ReLU, on the same GPU). Saves = the other way's time - the fused "
    "time (negative: fusion is slower there); network totals weigh each point by its "
    "multiplicity and count only points where all three ways were verified (fused and unfused "
    "at a precision PyTorch has no convolution for: fp8, int8). Epilogue = fused time - the "
    "fastest plain convolution of the layer. FLOP counts are the convolution's.")
_ALWAYS = ["op", "effective_precision", "layout"]
_OPTIONAL = [SOURCE, "suite", *SHOWN_WHEN_VARYING]     # a network's name where several are read


def _saves(ms: Any, pct: Any) -> str:
    return DASH if is_missing(ms) else f"{fmt_ms(ms)} ms ({pct:.1f}%)"


def fusion_blocks(df: pd.DataFrame) -> list[Block]:
    points = fusion.point_savings(df)
    if points.empty:
        return [Text("No point with an epilogue (--op conv_bias, conv_bias_relu, "
                     "conv_bias_add_relu) has a verified row.")]
    totals = fusion.network_savings(points)
    keys = shown_keys(totals, _ALWAYS, _OPTIONAL)
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], f"{r['points_compared']} of {r['points']}",
                  *[fmt_ms(r[f"{w}_total"])
                    for w in fusion.WAYS],
                  *[_saves(r[f"saves_vs_{w}_ms"], r[f"saves_vs_{w}_pct"])
                    for w in fusion.WAYS[1:]])
                 for _, r in totals.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Points compared", "Fused ms",
               "Unfused ms", "Eager PyTorch ms", "Fusion saves vs unfused",
               "Fusion saves vs eager")
    table = Table(headers, rows, (False,) * len(keys) + (True,) * 6,
                  "Fused epilogues, forward pass")
    return [Text(TEXT), table, _point_table(points)]


def _point_table(points: pd.DataFrame) -> Block:
    shown = points.assign(layer_label=layer_labels(points))
    keys = ["layer_label", *shown_keys(shown, _ALWAYS, _OPTIONAL)]
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["multiplicity"]),
                  fmt_ms(r["conv_ms"]),
                  *[part for w in fusion.WAYS for part in
                    (fmt_candidate(r[f"{w}_candidate"]), fmt_ms(r[f"{w}_ms"]))],
                  fmt_ms(r["epilogue_ms"]),
                  *[_saves(r[f"saves_vs_{w}_ms"], r[f"saves_vs_{w}_pct"])
                    for w in fusion.WAYS[1:]])
                 for _, r in shown.iterrows())
    headers = (*[HEADERS[k] for k in keys],
               "Mult.", "Plain conv ms", "Fused", "ms", "Unfused", "ms", "Eager", "ms",
               "Epilogue ms", "Saves vs unfused", "Saves vs eager")
    numeric = (False,) * len(keys) + (True, True) + (False, True) * 3 + (True, True, True)
    return Fold(f"Fused epilogues per point ({len(rows)})", (Table(headers, rows, numeric),))


def has_epilogues(df: pd.DataFrame) -> bool:
    """Whether the frame holds rows of an op other than plain convolution (the section's cue)."""
    return "op" in df.columns and bool((df["op"].astype(str) != CONV).any())
