"""How many CPU points shared the cores while they were timed (harness/contention.py), said the
same way by `convbench run`, `table` and the report: contended rows are never ranked (points.
verified), so every place that ranks must say how many it left out and why."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.contention import FALLBACK, FALLBACK_NOTE
from harness.measurement import Status


@dataclass(frozen=True)
class Sharing:
    cpu_points: int          # ok CPU rows that were timed (rows with a contention check)
    touched: int             # of them, rows with a sample taken again or left contended
    retaken: int             # samples discarded for waiting for a core, and taken again
    contended: int           # rows left contended: never ranked
    fallback: int            # rows judged without schedstat (CPU/wall and load only)

    def sentence(self) -> str | None:
        """"3 of 18 CPU points shared the CPU: 12 samples re-measured, 3 points left contended
        (never ranked; re-measure them on a quiet machine)", or None when none did."""
        if not self.cpu_points or not (self.touched or self.fallback):
            return None
        parts = []
        if self.touched:
            left = (f", {self.contended} point{'s' * (self.contended != 1)} left contended "
                    "(never ranked or picked; re-measure them on a quiet machine)"
                    if self.contended else ", every one re-measured clean")
            samples = f"{self.retaken} sample{'s' * (self.retaken != 1)}"
            parts.append(f"{self.touched} of {self.cpu_points} CPU points shared the CPU: "
                         f"{samples} re-measured{left}")
        if self.fallback:
            parts.append(f"{self.fallback} CPU points: {FALLBACK_NOTE}")
        return ". ".join(parts)


def sharing(df: pd.DataFrame) -> Sharing:
    """The Sharing of a results frame (rows without the columns: older files, GPU rows, count
    as not measured)."""
    if "contention_check" not in df.columns and "contended" not in df.columns:
        return Sharing(0, 0, 0, 0, 0)
    cpu = df[(df["status"] == Status.OK) & _column(df, "contended").notna()]
    contended = _column(cpu, "contended").fillna(False).astype(bool)
    retaken = pd.to_numeric(_column(cpu, "samples_retaken"), errors="coerce").fillna(0)
    return Sharing(len(cpu), int((contended | (retaken > 0)).sum()), int(retaken.sum()),
                   int(contended.sum()), int((_column(cpu, "contention_check") == FALLBACK).sum()))


def contended_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ok rows left contended, which the rankings leave out."""
    flags = _column(df, "contended").fillna(False).astype(bool)
    return df[(df["status"] == Status.OK) & flags]


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(pd.NA, index=df.index, dtype=object)
