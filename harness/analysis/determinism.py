"""The cost of determinism: what a user who needs reproducible results (PyTorch's
`torch.use_deterministic_algorithms(True)`, `cudnn.deterministic`) pays, per point and per
training step, and whether cuDNN's heuristic and PyTorch's autotuner pick a nondeterministic
algorithm where they are left alone.

How a row's `deterministic` is established (harness/executor.py `_run_twice`): before timing,
the algorithm runs twice on the same inputs into an output poisoned with NaN before each run;
the row is deterministic when the two outputs are equal element for element (`array_equal`;
NaN never equals NaN, so an unwritten element counts as a difference). With several worker
processes a row is deterministic only if every process saw equal outputs. Two equal runs are
evidence, not proof: an algorithm whose reduction order depends on timing (atomics) can agree
twice by chance, more easily on small outputs. A row that was never checked (status other than
ok, or files older than the column) counts as not deterministic: it cannot be chosen in
deterministic mode.

The deterministic best is the policy `policies.DETERMINISTIC` (the oracle over deterministic
rows), so its per-network totals are those of every other policy (policies.network_totals).
"""
from __future__ import annotations

import pandas as pd

from harness.analysis import policies
from harness.analysis.points import POINT_KEYS, STEP_KEYS, ranked

# Policies whose nondeterministic picks are marked (they run what they pick unless told not to).
MARKED = ("cudnn_heuristic", "pytorch")
POINT_COLUMNS = [*POINT_KEYS, "multiplicity", "best_candidate", "best_ms", "best_deterministic",
                 "det_candidate", "det_ms", "cost_ms", "cost_pct",
                 *[f"{p}_{c}" for p in MARKED for c in ("candidate", "deterministic")]]


def _cost(best_ms: pd.Series, det_ms: pd.Series) -> tuple[pd.Series, pd.Series]:
    """What the deterministic best costs over the best: ms, and % of the best's time."""
    cost = det_ms - best_ms
    return cost, 100.0 * cost / best_ms


def point_cost(df: pd.DataFrame) -> pd.DataFrame:
    """Per point with a verified row: the best and the best deterministic row (NaN where no
    verified row was deterministic), the cost, and the picks of the MARKED policies with their
    `deterministic` flag (NA where the policy has no verified pick there)."""
    df = ranked(df)
    best = policies.picks(df, policies.ORACLE)
    det = policies.picks(df, policies.DETERMINISTIC)
    out = best[["multiplicity", "candidate", "median_ms", "deterministic"]].set_axis(
        ["multiplicity", "best_candidate", "best_ms", "best_deterministic"], axis=1)
    out = out.join(det[["candidate", "median_ms"]].set_axis(["det_candidate", "det_ms"], axis=1))
    out["cost_ms"], out["cost_pct"] = _cost(out["best_ms"], out["det_ms"])
    for name in MARKED:
        if name in policies.available(df):
            picked = policies.picks(df, name)
            picked = picked[policies.comparable(picked)]
            out = out.join(picked[["candidate", "deterministic"]].add_prefix(f"{name}_"))
        else:
            out[f"{name}_candidate"], out[f"{name}_deterministic"] = None, pd.NA
    return out.reset_index()[POINT_COLUMNS]


def network_cost(df: pd.DataFrame, keys: list[str] = STEP_KEYS,
                 points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group of `keys` (default one training step): the best and the deterministic totals
    (ms x multiplicity; `missing_*` points without one), and what deterministic mode costs,
    in ms and % of the best (NaN where either total misses points: a partial sum would flatter
    it); `nondeterministic_<policy>`: points where that policy's pick was nondeterministic.
    `points`: point_cost(df), where the caller has it already."""
    names = [policies.ORACLE, policies.DETERMINISTIC]
    out = policies.network_totals(df, names, keys)
    complete = (out[f"missing_{policies.ORACLE}"] == 0) & (
        out[f"missing_{policies.DETERMINISTIC}"] == 0)
    cost, pct = _cost(out[f"total_{policies.ORACLE}"], out[f"total_{policies.DETERMINISTIC}"])
    out["cost_ms"], out["cost_pct"] = cost.where(complete), pct.where(complete)
    points = point_cost(df) if points is None else points
    for name in MARKED:
        flagged = points[f"{name}_deterministic"].astype("boolean") == False  # noqa: E712
        counts = flagged.fillna(False).groupby([points[k] for k in keys], dropna=False).sum()
        column = f"nondeterministic_{name}"
        out[column] = out.join(counts.rename(column), on=keys)[column].fillna(0).astype(int)
    return out
