"""Time against error for recurrent layers (issue 40): per layer, every verified algorithm's
time for a pass (inference, one training step) and its largest relative error, so a reader sees
whether the faster algorithm paid for its speed in accuracy (harness/analysis/recurrent.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import recurrent
from harness.report.figures.common import (SERIAL, ZERO_ERROR, Renderer, log_axes, panels, save,
                                           tidy_ticks)

MARKERS = {"inference": "o", "training step": "s"}
# More layers than this make a figure no one reads: the first ones, in suite order, are drawn
# and the caption says how many were left out.
MOST_PANELS = 12


def recurrent_figure(df: pd.DataFrame, out: Path,
                     renderer: Renderer = SERIAL) -> tuple[Path, int] | None:
    """The figure's path and how many layers it leaves out; None without a verified row."""
    points = recurrent.per_algorithm(df)
    if points.empty:
        return None
    layers = list(dict.fromkeys(points["layer"].astype(str)))
    drawn = points[points["layer"].astype(str).isin(layers[:MOST_PANELS])]
    path = out / "recurrent_time_vs_error.png"
    renderer.submit(_png, drawn, path)
    return path, max(0, len(layers) - MOST_PANELS)


def _png(points: pd.DataFrame, path: Path) -> None:
    from matplotlib import colormaps
    layers = list(dict.fromkeys(points["layer"].astype(str)))
    candidates = sorted(set(points["candidate"]))
    palette = colormaps["tab10"]
    colours = {c: palette(i % 10) for i, c in enumerate(candidates)}
    fig, axes = panels(len(layers), min(3, len(layers)), (3.6, 2.7),
                       ("time of the pass (ms)", "largest relative L2 error vs float64"))
    for ax, layer in zip(axes, layers):
        _axis(ax, points[points["layer"].astype(str) == layer], colours)
        ax.set_title(layer, fontsize=8)
    handles = [_handle(fig, colours[c], "o", c) for c in candidates]
    handles += [_handle(fig, "grey", m, name) for name, m in MARKERS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=min(4, len(handles)), fontsize=7,
               frameon=False)
    save(fig, path)


def _axis(ax: Any, rows: pd.DataFrame, colours: dict[str, Any]) -> None:
    for (candidate, name), part in rows.groupby(["candidate", "passes"], sort=True):
        ax.scatter(part["ms"], part["error"].astype(float).clip(lower=ZERO_ERROR), s=28,
                   marker=MARKERS.get(str(name), "o"), color=colours[candidate], alpha=0.8,
                   linewidths=0)
    log_axes(ax)
    tidy_ticks(ax)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _handle(fig: Any, colour: Any, marker: str, label: str) -> Any:
    from matplotlib.lines import Line2D
    return Line2D([], [], linestyle="", marker=marker, color=colour, label=label, markersize=5)
