"""Accuracy against speed: every verified candidate's error and time, with the tolerances."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.measurement import Status
from harness.report.figures.common import (SERIAL, ZERO_ERROR, Renderer, family_colours,
                                           family_legend, log_axes, panels, save, tidy_ticks)


def accuracy_figure(df: pd.DataFrame, out: Path, renderer: Renderer = SERIAL) -> Path | None:
    rows = df[df["rel_error"].notna() & df["median_ms"].notna()]
    if rows.empty:
        return None
    path = out / "accuracy_vs_speed.png"
    columns = ["effective_precision", "family", "status", "median_ms", "rel_error", "tolerance"]
    renderer.submit(_accuracy_png, rows[columns], path)
    return path


def _accuracy_png(rows: pd.DataFrame, path: Path) -> None:
    precisions = list(dict.fromkeys(rows["effective_precision"]))
    colours = family_colours(list(rows["family"]))
    fig, axes = panels(len(precisions), min(3, len(precisions)), (3.9, 2.9),
                        ("median time (ms)", "relative L2 error vs float64"))
    for ax, precision in zip(axes, precisions):
        _accuracy_axis(ax, rows[rows["effective_precision"] == precision], colours)
        ax.set_title(precision, fontsize=9)
    family_legend(fig, colours, extra_wrong=True)
    save(fig, path)


def _accuracy_axis(ax: Any, rows: pd.DataFrame, colours: dict[str, Any]) -> None:
    error = rows["rel_error"].astype(float).clip(lower=ZERO_ERROR)
    for family, part in rows.groupby("family", sort=True):
        ok = part["status"] == Status.OK
        ax.scatter(part["median_ms"][ok], error[part.index][ok], s=8, alpha=0.5,
                   color=colours[family], linewidths=0)
        ax.scatter(part["median_ms"][~ok], error[part.index][~ok], s=30, marker="x",
                   color=colours[family], linewidths=1.5)
    _tolerance_lines(ax, sorted(set(rows["tolerance"].dropna().astype(float))))
    log_axes(ax)
    tidy_ticks(ax)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _tolerance_lines(ax: Any, tolerances: list[float]) -> None:
    """A line per tolerance; where the runner set one per point (it grows with the reduction
    length) a band from the smallest to the largest, as dozens of lines would hide the data."""
    if len(tolerances) > 3:
        low, high = tolerances[0], tolerances[-1]
        ax.axhspan(low, high, color="grey", alpha=0.15, linewidth=0)
        labelled = [(high, f"tolerance {low:.0e} to {high:.0e} (per point)"), (low, "")]
    else:
        labelled = [(tol, f"tolerance {tol:.0e}") for tol in tolerances]
    for tol, label in labelled:
        ax.axhline(tol, color="black", linestyle="--", linewidth=0.9)
        if label:
            ax.annotate(label, (0.01, tol), xycoords=("axes fraction", "data"), fontsize=7,
                        va="bottom")


