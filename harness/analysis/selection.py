"""Selection analysis: how close each way of choosing a convolution algorithm comes to the best.

Per point (analysis.POINT_KEYS: layer, its shape and batch, direction, effective precision,
layout, workspace limit, timing mode) the ORACLE is the fastest verified row among the harness's
own cuDNN backends (legacy `cudnn` and graph-API `cudnn_graph`) at that effective precision and
workspace limit:
what an exhaustive search over cuDNN offers. PyTorch is never part of the oracle; it is one of
the policies (analysis/policies.py) measured against it:

  cudnn_heuristic  the legacy cuDNN heuristic's pick (`heuristic_pick` rows of backend cudnn)
  cudnn_find       cudnnFind's pick (`find_pick` rows)
  graph_heuristic  the graph API's heuristic mode A: the best-ranked verified plan
                   (`graph_heuristic_rank`; rank 0 is mode A's first plan, the next plan counts
                   when that one did not build, did not fit the limit or was not verified)
  pytorch          PyTorch's autotuner, cudnn.benchmark=True (backend torch_gpu)

A policy answers for the precision the user asked for, so its pick among rows of requested
precision P is compared with the oracle of effective precision P; `precision_kept` is False when
the pick actually computed at lower accuracy (a graph plan asked for fp32 that runs TF32). Such a
pick has no regret: it is faster because it computes less exactly, so a ratio to the fp32 oracle
would read as a win; the summaries count it as `precision_lowered` instead.

Tie-aware: `ties_oracle` says the pick is one of the algorithms whose samples cannot tell it from
the oracle (analysis/stability.py: a near-tie), and `tie_regret` is then at most 1, so a policy
is not blamed for losing a coin toss among algorithms that are equally fast.
Pure pandas; nothing here prints.
"""
from __future__ import annotations

import math

import pandas as pd

from harness.analysis import policies, stability
from harness.analysis.points import NETWORK_KEYS, POINT_KEYS
from harness.measurement import Status

# The oracle a policy is judged against: an exhaustive search over cuDNN itself.
ORACLE_BACKENDS = ("cudnn", "cudnn_graph")
POLICIES = tuple(policies.POLICIES)
# A pick within this fraction of the oracle's time counts as picking the oracle (timing noise).
ORACLE_SLACK = 0.01
PICK_STABLE = "torch_pick_stable"
_PICK = {"backend": "policy_backend", "algorithm": "policy_algorithm",
         "status": "policy_status", "effective_precision": "policy_effective_precision",
         "median_ms": "policy_ms", "ties_oracle": "ties_oracle",
         PICK_STABLE: "pick_stable"}
# pick_stable: every timing process ran the same pick (recorded for PyTorch's autotuner only;
# where it is False the row timed process 1's pick, harness/process_split.py)
COLUMNS = [*POINT_KEYS, "multiplicity", "policy", "policy_backend", "policy_algorithm",
           "policy_status", "policy_effective_precision", "precision_kept", "policy_ms",
           "oracle_backend", "oracle_algorithm", "oracle_ms", "regret", "picks_oracle",
           "ties_oracle", "tie_regret", "pick_stable"]


def _picks(df: pd.DataFrame, policy: str) -> pd.DataFrame:
    """One row per point as asked: the row this policy would run."""
    picked = policies.picks(df, policy)
    out = picked[[*_PICK, "multiplicity"]].rename(columns=_PICK).reset_index()
    out["policy_ms"] = out["policy_ms"].where(out["policy_status"] == Status.OK)
    return out.assign(policy=policy)


def oracle(results: pd.DataFrame) -> pd.DataFrame:
    """Per point, the fastest verified row of the harness's own cuDNN backends."""
    best = policies.oracle(results, ORACLE_BACKENDS)
    return best.rename(columns={"backend": "oracle_backend", "algorithm": "oracle_algorithm",
                                "median_ms": "oracle_ms"})[
        [*POINT_KEYS, "oracle_backend", "oracle_algorithm", "oracle_ms"]]


def selection(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, policy) with the pick's time, the oracle's, and their ratio
    (regret >= 1 unless the policy found something the harness's search did not)."""
    best = oracle(results)
    results = results.assign(ties_oracle=stability.ties_best(results, ORACLE_BACKENDS))
    parts = [p for p in (_picks(results, policy) for policy in POLICIES) if len(p)]
    if not parts or best.empty:   # without cuDNN rows there is nothing to judge a pick against
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.concat(parts, ignore_index=True).merge(best, on=POINT_KEYS, how="left")
    frame["policy_ms"] = pd.to_numeric(frame["policy_ms"], errors="coerce")
    frame["oracle_ms"] = pd.to_numeric(frame["oracle_ms"], errors="coerce")
    frame["precision_kept"] = policies.kept_precision(
        frame["policy_effective_precision"], frame["effective_precision"])
    lowered = frame["precision_kept"].fillna(True) == False  # noqa: E712 - nullable boolean
    frame["regret"] = (frame["policy_ms"] / frame["oracle_ms"]).mask(lowered)
    frame["picks_oracle"] = (frame["regret"] <= 1 + ORACLE_SLACK).astype("boolean").mask(
        frame["regret"].isna())
    ties = frame["ties_oracle"].astype(bool) & frame["regret"].notna()
    frame["ties_oracle"] = ties.astype("boolean").mask(frame["regret"].isna())
    frame["tie_regret"] = frame["regret"].mask(ties & (frame["regret"] > 1), 1.0)
    order = {p: i for i, p in enumerate(POLICIES)}
    frame = frame.sort_values([*POINT_KEYS, "policy"], key=lambda s: s.map(order)
                              if s.name == "policy" else s, kind="stable")
    return frame[COLUMNS].reset_index(drop=True)


# ---- summaries -----------------------------------------------------------------------------
def geometric_mean(values: pd.Series) -> float:
    positive = [float(v) for v in values if pd.notna(v) and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else math.nan


def _label(row: pd.Series) -> str:
    return (f"{row['layer']} {row['direction']} n{int(row['batch'])} "
            f"{row['effective_precision']} {row['layout']}")


def policy_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per policy: how many settings it answered, how often it picked the oracle, its regret."""
    rows = []
    for policy in POLICIES:
        mine = frame[frame["policy"] == policy]
        if mine.empty:
            continue
        timed = mine[mine["regret"].notna()]
        worst = timed.loc[timed["regret"].idxmax()] if len(timed) else None
        rows.append({
            "policy": policy, "settings": len(mine), "compared": len(timed),
            "picks_oracle_pct": 100.0 * timed["picks_oracle"].astype(bool).mean()
            if len(timed) else math.nan,
            "geomean_regret": geometric_mean(timed["regret"]),
            "picks_tie_pct": 100.0 * (timed["picks_oracle"].astype(bool)
                                      | timed["ties_oracle"].astype(bool)).mean()
            if len(timed) else math.nan,
            "geomean_tie_regret": geometric_mean(timed["tie_regret"]),
            "max_regret": worst["regret"] if worst is not None else math.nan,
            "worst_setting": _label(worst) if worst is not None else "",
            "precision_lowered": int((mine["precision_kept"] == False).sum()),  # noqa: E712
        })
    return pd.DataFrame(rows)


def network_totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Per network setting and policy: the time of one pass over the layers (each layer's time
    x its multiplicity), for the policy and for the oracle over the same layers."""
    keys = [*NETWORK_KEYS, "policy"]
    complete = frame["regret"].notna()   # lowered-precision picks are not comparable
    both = frame.assign(_policy=frame["policy_ms"].where(complete),
                        _oracle=frame["oracle_ms"].where(complete))
    mine = policies.weighted_totals(both, "_policy", keys)
    best = policies.weighted_totals(both, "_oracle", keys)
    out = mine[keys].assign(layers=mine["points"], layers_missing=mine["missing"],
                            policy_total_ms=mine["total"].fillna(0.0),
                            oracle_total_ms=best["total"].fillna(0.0))
    out["ratio"] = (out["policy_total_ms"] / out["oracle_total_ms"]).where(
        out["oracle_total_ms"] > 0)
    return out


def versus_pytorch(frame: pd.DataFrame, worst: int = 3) -> pd.DataFrame:
    """Per effective precision and layout (and all together): geometric mean of oracle time /
    PyTorch time (below 1: the harness's search beats PyTorch's autotuner), the points where
    it does worst, and `pytorch_unstable`: points whose PyTorch pick differed between timing
    processes (their time is process 1's pick)."""
    torch_rows = frame[(frame["policy"] == "pytorch") & frame["regret"].notna()]
    torch_rows = torch_rows.assign(ratio=1.0 / torch_rows["regret"])
    rows = []
    groups = list(torch_rows.groupby(["effective_precision", "layout"]))
    if len(groups) > 1:
        groups.append((("all", "all"), torch_rows))
    for (precision, layout), group in groups:
        bad = group.nlargest(worst, "ratio")
        rows.append({"effective_precision": precision, "layout": layout, "points": len(group),
                     "geomean_oracle_over_pytorch": geometric_mean(group["ratio"]),
                     "best": group["ratio"].min(), "worst": group["ratio"].max(),
                     "worst_points": "; ".join(f"{_label(r)} {r['ratio']:.2f}"
                                               for _, r in bad.iterrows()),
                     "pytorch_unstable": _unstable(group["pick_stable"])})
    return pd.DataFrame(rows, columns=["effective_precision", "layout", "points",
                                       "geomean_oracle_over_pytorch", "best", "worst",
                                       "worst_points", "pytorch_unstable"])


def _unstable(stable: pd.Series) -> int:
    """How many picks are known to have differed between timing processes (NA: not known)."""
    return int((stable.astype("boolean") == False).sum())  # noqa: E712 - nullable boolean


def pytorch_pick_counts(results: pd.DataFrame) -> tuple[int, int]:
    """In a results frame: (rows whose PyTorch pick differed between timing processes, rows
    where every process's pick was recorded)."""
    stable = results[PICK_STABLE].astype("boolean")
    return _unstable(stable), int(stable.notna().sum())


def format_selection(frame: pd.DataFrame) -> str:
    """Text for `convbench table --selection`: takes a results frame (or selection()'s)."""
    sel = frame if "regret" in frame.columns else selection(frame)
    if sel.empty:
        return "No policy picks in these results (need cudnn, cudnn_graph or torch_gpu rows)."
    blocks = [("Policies against the oracle (fastest verified cudnn / cudnn_graph row)",
               policy_summary(sel)),
              ("Network totals per policy (layer time x multiplicity)", network_totals(sel)),
              ("Oracle / PyTorch autotuner per precision and layout", versus_pytorch(sel))]
    text = []
    for title, table in blocks:
        body = table.to_string(index=False, float_format=lambda v: f"{v:.4g}") if len(
            table) else "(no rows)"
        text.append(f"{title}\n{body}")
    return "\n\n".join(text)
