"""Speed against workspace: the Pareto front per point, and network totals per workspace limit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.report import computed, tables
from harness.report.figures.common import (FIGURE_KEYS, SERIAL, Renderer, figure_parts, log_axes,
                                           panels, save, slug, threads_text, tidy_ticks)
from harness.report.figures.heatmap import display_names

# A Pareto front trades workspace for time: every key of the point but the workspace limit.
PARETO_KEYS = [k for k in computed.LABELLED_KEYS if k != "workspace_limit"]


def pareto_figures(df: pd.DataFrame, out: Path,
                   renderer: Renderer = SERIAL) -> list[tuple[dict[str, Any], Path]]:
    """Per kind of point (FIGURE_KEYS but the workspace limit, which the x axis spans): a small
    panel per layer, time against workspace, with the front of each direction drawn as a
    staircase."""
    written = []
    keys = [k for k in FIGURE_KEYS if k != "workspace_limit"]
    colours = _direction_colours(df)
    columns = ["layer_label", "direction", "workspace_bytes", "median_ms"]
    ok = computed.verified(df)
    fronts = computed.pareto_fronts(df, PARETO_KEYS)
    front_parts = dict(iter(fronts.groupby(keys, sort=False)))
    for values, part in ok.groupby(keys, sort=False):
        info = dict(zip(keys, values))
        path = out / f"pareto_{slug(*figure_parts(info))}.png"
        renderer.submit(_pareto_png, part[columns], front_parts[values][columns + ["ws"]],
                        colours, path)
        written.append((info, path))
    return written


def _pareto_png(ok: pd.DataFrame, fronts: pd.DataFrame, colours: dict[str, Any],
                path: Path) -> None:
    save(_pareto_figure(ok, fronts, colours), path)


def _direction_colours(df: pd.DataFrame) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["Dark2"]
    return {d: cmap(i) for i, d in enumerate(dict.fromkeys(df["direction"]))}


def _pareto_figure(ok: pd.DataFrame, fronts: pd.DataFrame, colours: dict[str, Any]) -> Any:
    """Shared axes: the panels compare across layers, and only the outer ones carry tick labels
    (per-panel tick labels were most of the drawing time)."""
    layers = list(dict.fromkeys(ok["layer_label"]))
    shown = display_names(layers)
    fig, axes = panels(len(layers), min(5, len(layers)), (2.55, 1.75),
                        ("workspace (MiB, symlog)", "median time (ms)"), share=True,
                        gap=(0.08, 0.25))
    by_layer = dict(iter(ok.groupby("layer_label", sort=False)))
    fronts_by_layer = dict(iter(fronts.groupby("layer_label", sort=False)))
    log_axes(axes[0], x="symlog")
    # Fixed limits: autoscaling twenty shared axes re-walks every sibling and was slow.
    mib = ok["workspace_bytes"].astype(float).fillna(0.0) / (1 << 20)
    axes[0].set_xlim(-0.3, max(float(mib.max()), 1.0) * 2.5)
    axes[0].set_ylim(float(ok["median_ms"].min()) / 1.6, float(ok["median_ms"].max()) * 1.6)
    axes[0].set_autoscale_on(False)
    for ax, layer in zip(axes, layers):
        ax.set_autoscale_on(False)
        _pareto_axis(ax, by_layer[layer], fronts_by_layer.get(layer), colours)
        ax.text(0.5, 1.02, shown[layer], transform=ax.transAxes, fontsize=7.5, ha="center",
                va="bottom")
    tidy_ticks(axes[0])     # shared axes share their tickers
    for ax in axes:
        ax.tick_params(labelsize=7)
        # Inner panels drop their axes outright, not just the labels: invisible ticks are still
        # built and drawn, and they were most of the drawing time.
        spec = ax.get_subplotspec()
        ax.xaxis.set_visible(spec.is_last_row() or ax is axes[-1])
        ax.yaxis.set_visible(spec.is_first_col())
    _legend_lines(fig, colours)
    return fig


def _pareto_axis(ax: Any, ok: pd.DataFrame, fronts: pd.DataFrame | None,
                 colours: dict[str, Any]) -> None:
    for direction, rows in ok.groupby("direction", sort=False):
        ax.plot(rows["workspace_bytes"].astype(float).fillna(0.0) / (1 << 20), rows["median_ms"],
                linestyle="none", marker="o", markersize=2.5, alpha=0.3, markeredgewidth=0,
                color=colours[direction])
    if fronts is None:
        return
    for direction, front in fronts.groupby("direction", sort=False):
        ax.step(front["ws"] / (1 << 20), front["median_ms"], where="post",
                color=colours[direction], marker="o", markersize=2.5, linewidth=1.1)


def _legend_lines(fig: Any, colours: dict[str, Any]) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", markersize=4, label=f"{d} front")
               for d, c in colours.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)


def workspace_totals_figure(totals: pd.DataFrame, out: Path,
                            renderer: Renderer = SERIAL) -> Path:
    """The oracle network total at each workspace limit, one panel per precision."""
    path = out / "workspace_totals.png"
    renderer.submit(_workspace_totals_png, totals, path)
    return path


def _workspace_totals_png(totals: pd.DataFrame, path: Path) -> None:
    precisions = list(dict.fromkeys(totals["effective_precision"]))
    fig, axes = panels(len(precisions), min(5, len(precisions)), (2.4, 2.2),
                        ("workspace limit", "network total (ms, Σ best × multiplicity)"))
    for ax, precision in zip(axes, precisions):
        part = totals[totals["effective_precision"] == precision]
        limits = list(dict.fromkeys(part["workspace_limit"]))
        for (layout, mode, threads), line in part.groupby(["layout", "timing_mode", "threads"],
                                                          sort=False):
            x = [limits.index(v) for v in line["workspace_limit"]]
            complete = line["missing_oracle"] == 0
            ax.plot(x, line["total_oracle"], marker="o",
                    label=f"{layout} {mode}{threads_text(threads, ' ')}")
            if not complete.all():
                ax.scatter(np.array(x)[~complete.to_numpy()], line["total_oracle"][~complete],
                           s=70, facecolors="none", edgecolors="red", linewidths=1.5, zorder=3,
                           label="misses points (lower bound)")
        ax.set_xticks(range(len(limits)), [tables.fmt_limit(v) for v in limits], fontsize=7)
        ax.set_title(precision, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    legend = {}
    for ax in fig.axes:     # one legend for all panels; a label once even if many panels have it
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(list(legend.values()), list(legend), loc="upper center", ncol=len(legend),
               fontsize=8, frameon=False)
    save(fig, path)
