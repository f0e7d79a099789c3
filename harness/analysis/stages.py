"""Where a run's time went, row by row (issue 39): the stage columns (measurement.STAGE_COLUMNS:
list plans, prepare, verify against float64, time) summed per backend and direction, and the
rows that cost most. `convbench run` prints the one-line total; `run --profile` and
`table --profile` this."""
from __future__ import annotations

import pandas as pd

from harness.analysis.points import raced_out
from harness.measurement import STAGE_COLUMNS, Status
from harness.stopping import RACE_MARGIN

GROUP = ["backend", "direction"]


def _stages(df: pd.DataFrame) -> pd.DataFrame:
    """The rows' stage seconds (0 where a row has none: rows from before the columns, or that
    stopped before a stage), with their total."""
    present = [c for c in STAGE_COLUMNS if c in df.columns]
    seconds = pd.DataFrame({c.removeprefix("stage_").removesuffix("_ms"):
                            pd.to_numeric(df[c], errors="coerce").fillna(0.0) / 1e3
                            for c in present}, index=df.index)
    return seconds.assign(total=seconds.sum(axis=1))


def profile(df: pd.DataFrame) -> pd.DataFrame:
    """Per backend and direction: rows, each stage's seconds, the total, ms a row and the share
    of the run's staged time; most costly first. Empty where the rows have no stage columns."""
    seconds = _stages(df)
    if seconds.empty or seconds["total"].sum() <= 0:
        return pd.DataFrame()
    grouped = seconds.join(df[GROUP]).groupby(GROUP, dropna=False)
    table = grouped.sum().assign(rows=grouped.size())
    table["ms_per_row"] = 1e3 * table["total"] / table["rows"]
    table["share"] = table["total"] / table["total"].sum()
    columns = ["rows", *[c for c in seconds.columns if c != "total"], "total", "ms_per_row",
               "share"]
    return table[columns].sort_values("total", ascending=False).reset_index()


def costliest_rows(df: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The n rows whose stages took longest, with what they are."""
    seconds = _stages(df)
    if seconds.empty:
        return pd.DataFrame()
    described = df[["layer", "direction", "precision", "layout", "backend", "algorithm",
                    "status"]].join(seconds)
    return described.sort_values("total", ascending=False).head(n).reset_index(drop=True)


def race_line(df: pd.DataFrame) -> str | None:
    """What the race saved, in a sentence (harness/stopping.py): how many of the raced
    backends' timed rows stopped after the heat, and by how much they lost; None where no row
    was raced out."""
    raced = raced_out(df)
    if not raced.any():
        return None
    timed = df["backend"].isin(df.loc[raced, "backend"].unique()) & (df["status"] == Status.OK)
    lost = pd.to_numeric(df.loc[raced, "raced_out_by"], errors="coerce").median() \
        if "raced_out_by" in df.columns else float("nan")
    return (f"raced out: {int(raced.sum())} of {int(timed.sum())} timed plans stopped after "
            f"their first samples, each over {1 + RACE_MARGIN:g}x the fastest plan of its point "
            f"timed before it (median {lost:.2f}x); --no-race times every plan in full")


def runoff_line(df: pd.DataFrame) -> str | None:
    """What the runoff did, in a sentence (harness/runoff.py); None where it did nothing."""
    if "runoff_preparations" not in df.columns:
        return None
    again = pd.to_numeric(df["runoff_preparations"], errors="coerce").fillna(0)
    if not (again > 0).any():
        return None
    from harness.runoff import RUNOFF_MARGIN
    return (f"runoff: {int((again > 0).sum())} rows within {RUNOFF_MARGIN:.0%} of their point's "
            f"fastest were prepared afresh {int(again.sum())} more times and timed again "
            f"(where buffers land moves a ~10 us kernel by up to 8%); --no-runoff decides each "
            f"point on its first measurement")


def plan_limit_line(df: pd.DataFrame) -> str | None:
    """What a plan limit left out, in a sentence (TimingOptions.plan_limit): the points whose
    heuristics offered more plans than were measured; None where every offered plan has a row."""
    if "plans_offered" not in df.columns or "planned_point_id" not in df.columns:
        return None
    offered = pd.to_numeric(df["plans_offered"], errors="coerce")
    expanded = df[offered.notna()].assign(offered=offered)
    if expanded.empty:
        return None
    per_point = expanded.groupby("planned_point_id").agg(
        offered=("offered", "max"), measured=("algorithm", "nunique"))
    cut = per_point[per_point["offered"] > per_point["measured"]]
    if cut.empty:
        return None
    return (f"plan limit: {len(cut)} of {len(per_point)} points measured only their first "
            f"{int(cut['measured'].max())} plans in the heuristics' order, leaving "
            f"{int((cut['offered'] - cut['measured']).sum())} plans unmeasured (up to "
            f"{int(cut['offered'].max())} offered a point); without --plan-limit every plan "
            f"is measured")
