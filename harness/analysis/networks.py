"""The network table: one row per network (suite or imported model) at one precision, layout
and machine, each policy's forward, backward and total convolution time of one training step
(the policies' network totals of policies.py, split by direction), and what the best saves over
each. convnet-benchmarks' table, with verified algorithms and the policies a user can follow.

Rows are never summed across machines, suites or sources (results files read one by one carry
a `source` column): two runs of one suite are two measurements of it, not one network twice.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from harness.analysis import policies
from harness.analysis.points import GPU, NETWORK_KEYS, STEP_KEYS, one_step_per_layer, own_output
from harness.sweep import LAYOUTS, PRECISIONS, TRAINING_FORWARD, TRAINING_STEP

SOURCE = "source"                       # which results file a row came from, where told
MACHINE = "machine"
BACKWARD = ("bwd_data", "bwd_filter")   # one training step's backward pass: both gradients
FORWARD = ("fwd", TRAINING_FORWARD)     # ... and its forward pass (a recurrent layer's own)
# A recurrent layer measured as one whole training step (train_step) cannot be split into its
# forward and backward passes: it is a part of its own, so that fwd + bwd + step = total.
STEP = "step"
PARTS = ("fwd", "bwd", STEP)


def machine_names(df: pd.DataFrame) -> pd.Series:
    """The machine a row ran on, as people name it: the GPU, else the CPU model."""
    names = [df[c].astype("string") for c in (GPU, "env_cpu_model") if c in df.columns]
    out = pd.Series(pd.NA, index=df.index, dtype="string")
    for name in names:
        out = out.fillna(name.where(name != ""))
    return out.fillna("unknown machine").astype(str)


def table_policies(df: pd.DataFrame) -> list[str]:
    """The columns of the network table: the best verified, the chooser policies the data can
    answer, then each backend's best. (The deterministic best has its own table, analysis/
    determinism.py: its cost reads as % of the best, where a saving here is % of the policy.)"""
    chosen = policies.available(df)
    # PyTorch's policy is already its backends' best: one column, not two equal ones
    bests = [b for b in policies.backend_bests(df) if "pytorch" not in chosen or not
             b.removeprefix(policies.BEST_PREFIX).startswith(policies.TORCH_PREFIX)]
    return [policies.ORACLE, *chosen, *bests]


def _split(df: pd.DataFrame) -> list[str]:
    return [k for k in (SOURCE, "suite") if k in df.columns] + [MACHINE]


def network_table(df: pd.DataFrame, names: Iterable[str] | None = None) -> pd.DataFrame:
    """Long form, one row per network setting and policy: `fwd_ms`, `bwd_ms`, `step_ms` (layers
    timed as one whole training step), `total_ms` (each layer's pick x multiplicity; NaN where
    nothing was comparable), `fwd_missing` ... `missing` (points without a comparable pick: the
    sum is then a lower bound), `fwd_points` ... `points`, and `saves_ms`, `saves_pct`: what
    the best saves over the policy (NaN where either total misses points)."""
    df = df.assign(**{MACHINE: machine_names(df)})
    names = table_policies(df) if names is None else list(names)
    # the oracle's total is what every saving is measured from
    names = [policies.ORACLE, *[n for n in names if n != policies.ORACLE]]
    split = _split(df)
    parts = [_one_network(part, names).assign(**dict(zip(split, values)))
             for values, part in df.groupby(split, sort=False, dropna=False)]
    if not parts:
        return pd.DataFrame(columns=[*split, *STEP_KEYS, "policy", "total_ms"])
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values([*split, "effective_precision", "layout"], key=_reading_order,
                          kind="stable")
    return out[[*split, *[c for c in out.columns if c not in split]]].reset_index(drop=True)


def _reading_order(column: pd.Series) -> pd.Series:
    """Sources and networks as given, precisions and layouts in the sweep's order."""
    order = {"effective_precision": PRECISIONS, "layout": LAYOUTS}.get(str(column.name))
    if order is None:
        return column.map({v: i for i, v in enumerate(dict.fromkeys(column))})
    return column.map({v: i for i, v in enumerate(order)}).fillna(len(order))


def _one_network(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    # one forward pass of each layer, as the step total counts (a recurrent layer's fwd_train)
    per_direction = policies.network_totals(one_step_per_layer(df), names, NETWORK_KEYS)
    per_direction = per_direction[own_output(per_direction)]    # as the step total counts
    step = policies.network_totals(df, names, STEP_KEYS).set_index(STEP_KEYS)
    part = per_direction["direction"].map(lambda d: "fwd" if d in FORWARD else
                                          "bwd" if d in BACKWARD else
                                          STEP if d == TRAINING_STEP else "other")
    rows = []
    for policy in names:
        sums = {}
        for name in PARTS:
            mine = per_direction[part == name].groupby(STEP_KEYS, dropna=False)
            sums[f"{name}_ms"] = mine[f"total_{policy}"].sum(min_count=1)
            sums[f"{name}_missing"] = mine[f"missing_{policy}"].sum()
            sums[f"{name}_points"] = mine["points"].sum()
        frame = pd.DataFrame(sums).reindex(step.index)
        frame = frame.assign(total_ms=step[f"total_{policy}"], missing=step[f"missing_{policy}"],
                             points=step["points"], policy=policy)
        saved = [policies.saving(r, policy) if policy != policies.ORACLE else (0.0, 0.0)
                 for _, r in step.iterrows()]
        frame["saves_ms"] = [s[0] if s else float("nan") for s in saved]
        frame["saves_pct"] = [s[1] if s else float("nan") for s in saved]
        rows.append(frame.reset_index())
    return pd.concat(rows, ignore_index=True)
