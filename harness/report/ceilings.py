"""The report's "CPU algorithms against their ceilings" section and `convbench table
--ceilings` (harness/analysis/ceilings.py)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis import ceilings, layer_labels
from harness.report.answers import HEADERS, shown_keys
from harness.report.document import Block, Table, Text
from harness.report.tables import DASH, fmt_candidate, fmt_key, fmt_ms, fmt_ratio, is_missing

TEXT = ("Per CPU point: the fastest own algorithm and oneDNN (PyTorch's conv2d) with the share "
        "of this machine's fused multiply-add peak each reached (`convbench peaks`, stored with "
        "the run), the first over the second, and im2col over its own GEMM floor: the time of "
        "the product it reduces to, operands ready, at the same threads. A row over its floor "
        "pays for gathers and copies; a floor far under the peak is BLAS's on that shape. Rates "
        "count a direct convolution's multiply-adds, so Winograd and FFT, which do fewer, can "
        "pass 100%.")
_ALWAYS = ["layer_label", "direction", "effective_precision", "threads"]


def _pct(value: Any) -> str:
    return DASH if is_missing(value) else f"{value:.0f}%"


def ceiling_blocks(df: pd.DataFrame) -> list[Block]:
    table = ceilings.ceilings(df)
    if table.empty:
        return [Text("No verified CPU row of the own algorithms in these results.")]
    table = table.assign(layer_label=layer_labels(table))
    keys = shown_keys(table, _ALWAYS)
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], fmt_candidate(r["own_candidate"]),
                  fmt_ms(r["own_ms"]), _pct(r["own_peak_pct"]), fmt_ms(r["onednn_ms"]),
                  _pct(r["onednn_peak_pct"]), fmt_ratio(r["own_over_onednn"]),
                  fmt_ms(r["im2col_ms"]), fmt_ms(r["floor_ms"]),
                  fmt_ratio(r["im2col_over_floor"]))
                 for _, r in table.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Best own", "ms", "of peak", "oneDNN ms",
               "of peak", "own / oneDNN", "im2col ms", "GEMM floor ms", "im2col / floor")
    numeric = (False,) * (len(keys) + 1) + (True,) * 8
    return [Text(TEXT), Table(headers, rows, numeric, "CPU algorithms against their ceilings")]
