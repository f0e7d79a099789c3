"""CPU algorithms against their ceilings (issue 42): per CPU point, the fastest own algorithm
(the `cpu` backend's) and oneDNN (torch_cpu's conv2d), each with its share of the machine's FMA
peak (the rows' `peak_pct`, harness/cpu_peaks.py), the first over the second, and im2col over
its own GEMM floor (`gemm_floor_ms`, harness/backends/cpu/gemm_floor.py): which part of a gap
is the algorithm's (im2col's gathers over its product), which the implementation's (the
product over the peak) and which the machine's."""
from __future__ import annotations

import pandas as pd

from harness.analysis.points import POINT_KEYS, fastest, verified, with_candidate

OWN, PEER = "cpu", "torch_cpu"


def has_ceilings(df: pd.DataFrame) -> bool:
    """Whether any verified CPU row carries a peak or a GEMM floor."""
    ok = verified(df)
    return any(c in ok.columns and ok[c].notna().any() for c in ("peak_pct", "gemm_floor_ms"))


def ceilings(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point where the own algorithms have a verified row: POINT_KEYS, own
    (candidate, ms, peak_pct), onednn (ms, peak_pct), own_over_onednn, im2col (ms,
    floor_ms, over_floor)."""
    ok = with_candidate(verified(df))
    own = fastest(ok[ok["backend"] == OWN], POINT_KEYS)
    if own.empty:
        return pd.DataFrame(columns=[*POINT_KEYS, "own_candidate"])
    table = own[[*POINT_KEYS, "candidate", "median_ms", "peak_pct"]].rename(columns={
        "candidate": "own_candidate", "median_ms": "own_ms", "peak_pct": "own_peak_pct"})
    peer = fastest(ok[ok["backend"] == PEER], POINT_KEYS)
    table = table.merge(peer[[*POINT_KEYS, "median_ms", "peak_pct"]].rename(columns={
        "median_ms": "onednn_ms", "peak_pct": "onednn_peak_pct"}), on=POINT_KEYS, how="left")
    im2col = fastest(ok[(ok["backend"] == OWN) & (ok["algorithm"] == "im2col")], POINT_KEYS)
    table = table.merge(im2col[[*POINT_KEYS, "median_ms", "gemm_floor_ms"]].rename(columns={
        "median_ms": "im2col_ms", "gemm_floor_ms": "floor_ms"}), on=POINT_KEYS, how="left")
    table = table.assign(own_over_onednn=table["own_ms"] / table["onednn_ms"],
                         im2col_over_floor=table["im2col_ms"] / table["floor_ms"])
    return table.sort_values(["layer", "direction", "threads"], kind="stable", ignore_index=True)
