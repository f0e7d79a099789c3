"""The roofline: achieved rate against arithmetic intensity under the measured peaks."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.report import computed
from harness.report.figures.common import (SERIAL, Renderer, family_colours, family_legend,
                                           log_axes, panels, save, tidy_ticks)


def roofline_figure(df: pd.DataFrame, peaks: dict[str, float], out: Path,
                    renderer: Renderer = SERIAL) -> Path | None:
    rows = computed.verified(df)
    rows = rows[rows["arithmetic_intensity"].notna()
                & rows["effective_precision"].isin(list(peaks))]
    if rows.empty:
        return None
    path = out / "roofline.png"
    columns = ["effective_precision", "family", "arithmetic_intensity", "achieved_tflops", "flops",
               "median_ms"]
    renderer.submit(_roofline_png, rows[columns], peaks, path)
    return path


def _roofline_png(rows: pd.DataFrame, peaks: dict[str, float], path: Path) -> None:
    precisions = list(dict.fromkeys(rows["effective_precision"]))
    colours = family_colours(list(rows["family"]))
    fig, axes = panels(len(precisions), min(3, len(precisions)), (3.9, 2.9),
                        ("arithmetic intensity (FLOP / byte of compulsory traffic)",
                         "achieved TFLOP/s"))
    for ax, precision in zip(axes, precisions):
        part = rows[rows["effective_precision"] == precision]
        _roofline_axis(ax, part, peaks[precision], peaks.get("bandwidth_gbps"), colours)
        ax.set_title(f"{precision} (peak {peaks[precision]:.4g} TFLOP/s)", fontsize=9)
    family_legend(fig, colours)
    save(fig, path)


def _roofline_axis(ax: Any, rows: pd.DataFrame, peak: float, bandwidth_gbps: float | None,
                   colours: dict[str, Any]) -> None:
    tflops = computed.achieved_tflops(rows)
    intensity = rows["arithmetic_intensity"].astype(float)
    for family, part in rows.groupby("family", sort=True):
        ax.scatter(intensity[part.index], tflops[part.index], s=8, alpha=0.5,
                   color=colours[family], linewidths=0)
    x = np.logspace(math.log10(intensity.min() / 2), math.log10(intensity.max() * 2), 200)
    ceiling = np.full_like(x, peak)
    if bandwidth_gbps:
        ceiling = np.minimum(ceiling, x * bandwidth_gbps / 1000.0)
    ax.plot(x, ceiling, color="black", linewidth=1.2)
    log_axes(ax)
    tidy_ticks(ax)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", alpha=0.3)
