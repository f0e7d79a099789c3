"""Settings (what a user fixes before choosing an algorithm), the verified rows, the fastest
verified algorithm per setting and by how much, and the per-GPU split of a mixed run."""
from __future__ import annotations

import pandas as pd

from harness.measurement import Status

# A "setting" is what a user fixes before choosing an algorithm. Ranking happens inside it, on the
# precision the result actually delivered (a plan asked for fp32 that computes at tf32 accuracy is
# ranked with tf32, never with fp32).
SETTING = ["layer", "batch", "direction", "effective_precision", "layout", "workspace_limit",
           "timing_mode"]


GPU = "env_gpu_name"    # what a mixed run is split by (rows carry their worker's fingerprint)


def by_gpu(df: pd.DataFrame) -> list[tuple[str | None, pd.DataFrame]]:
    """The frame split per GPU model when its rows come from more than one (a `--cluster` run
    with --allow-mixed, or files from several machines read together): the fastest algorithm
    on an H100 and on an H200 are two answers, and ranking them together would compare GPUs,
    not algorithms. One part, labelled None, when there is nothing to split. Rows measured
    without a GPU are the part labelled "no GPU"."""
    names = df[GPU].fillna("").astype(str) if GPU in df.columns else None
    if names is None or names.nunique() <= 1:
        return [(None, df)]
    return [(name or "no GPU", part) for name, part in df.groupby(names, sort=True)]


def verified(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose output matched the reference and were timed."""
    return df[(df["status"] == Status.OK) & df["median_ms"].notna()]


def best_per_setting(df: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: the fastest verified algorithm, its time, the runner-up and the
    speed-up over it. Wrong, failed or unsupported rows can never appear here."""
    ok = verified(df).copy()
    if ok.empty:
        return pd.DataFrame(columns=SETTING + ["backend", "algorithm", "median_ms", "gflops",
                                               "runner_up", "runner_up_ms", "speedup",
                                               "multiplicity", "candidates"])
    ok["candidate"] = ok["backend"] + ":" + ok["algorithm"]
    ok = ok.sort_values(SETTING + ["median_ms"], kind="stable")
    rows = []
    for key, group in ok.groupby(SETTING, sort=False, dropna=False):
        best = group.iloc[0]
        second = group.iloc[1] if len(group) > 1 else None
        rows.append({
            **dict(zip(SETTING, key)), "backend": best["backend"], "algorithm": best["algorithm"],
            "median_ms": best["median_ms"], "gflops": best["gflops"],
            "runner_up": None if second is None else second["candidate"],
            "runner_up_ms": None if second is None else second["median_ms"],
            "speedup": None if second is None else second["median_ms"] / best["median_ms"],
            "multiplicity": best["multiplicity"], "candidates": len(group),
        })
    return pd.DataFrame(rows)


def status_counts(df: pd.DataFrame) -> pd.Series:
    return df["status"].value_counts()
