"""The report's figures, drawn with matplotlib's Agg canvas straight into PNG files.

matplotlib is imported inside these functions only: `import harness` must work without it
(architecture rule 4). No pyplot either: its global figure registry is state we do not need.
Each public function takes a prepared frame (analysis.prepare) and returns the files it wrote.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.report import analysis
from harness.report.tables import fmt_limit

DPI = 100
# Cells that hold no time: a letter, a colour and a hatch each, so none is ever blank or confused.
STATUS_MARKS: dict[str, tuple[str, str, str]] = {
    "unsupported": ("U", "#d4d4d4", "//"), "workspace_exceeded": ("W", "#9ecae1", "\\\\"),
    "wrong": ("X", "#e7298a", "xx"), "failed": ("F", "#8c8c8c", ".."),
    "crashed": ("C", "#3b3b3b", "++"), "": ("–", "#ffffff", ""),
}
STATUS_LABELS = {"": "not run"}
RATIO_CAP = 8.0           # colour scale saturates at 8x the best: beyond that it is simply slow
ZERO_ERROR = 1e-17        # where an exact result (error 0) is drawn on the log axis


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path


def slug(*parts: Any) -> str:
    text = "_".join(str(p) for p in parts)
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-")


def short_names(candidates: list[str]) -> dict[str, str]:
    """Algorithm names alone where they are unambiguous: axis labels stay short."""
    algos = [c.split(":", 1)[-1] for c in candidates]
    return {c: a if algos.count(a) == 1 else c for c, a in zip(candidates, algos)}


def family_colours(families: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return {f: cmap(i % 10) for i, f in enumerate(sorted(set(families)))}


def _grid(fig: Any, count: int, ncols: int) -> list[Any]:
    nrows = math.ceil(count / ncols)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return list(axes[:count])


# ---- 2. heatmap -------------------------------------------------------------------------------------
def heatmaps(df: pd.DataFrame, out: Path) -> list[tuple[dict[str, Any], Path]]:
    """One figure per precision x layout x workspace limit x timing mode; directions side by side."""
    written = []
    keys = ["precision", "layout", "workspace_limit", "timing_mode"]
    for values, part in df.groupby(keys, sort=False):
        info = dict(zip(keys, values))
        path = out / f"heatmap_{slug(*values[:2], fmt_limit(values[2]), values[3])}.png"
        written.append((info, _save(_heatmap_figure(part), path)))
    return written


def _heatmap_figure(part: pd.DataFrame) -> Any:
    directions = list(dict.fromkeys(part["direction"]))
    candidates = sorted(set(part["candidate"]))
    names = short_names(candidates)
    n_layers = part["layer_label"].nunique()
    longest = max(len(str(x)) for x in part["layer_label"].unique())
    width = 1.2 + 0.09 * longest + len(directions) * (0.5 * len(candidates) + 0.4)
    fig = _figure(min(max(width, 7.0), 22.0), 2.6 + 0.27 * n_layers)
    axes = fig.subplots(1, len(directions), sharey=True, squeeze=False)[0]
    image = None
    for ax, direction in zip(axes, directions):
        ratio, status = analysis.relative_matrix(part[part["direction"] == direction])
        ratio, status = ratio.reindex(columns=candidates), status.reindex(columns=candidates)
        image = _draw_heatmap(ax, ratio, status.fillna(""))
        ax.set_title(direction, fontsize=10)
        ax.set_xticks(range(len(candidates)), [names[c] for c in candidates], rotation=50,
                      ha="right", rotation_mode="anchor", fontsize=8)
    axes[0].set_yticks(range(n_layers), list(ratio.index), fontsize=8)
    _heatmap_legend(fig, image)
    fig.subplots_adjust(left=(0.2 + 0.075 * longest) / fig.get_figwidth(), right=0.99,
                        top=1 - 0.45 / fig.get_figheight(), wspace=0.05,
                        bottom=(0.9 + 0.055 * max(len(n) for n in names.values()) + 0.5)
                        / fig.get_figheight())
    return fig


def _draw_heatmap(ax: Any, ratio: pd.DataFrame, status: pd.DataFrame) -> Any:
    from matplotlib.patches import Rectangle
    values = np.log2(np.clip(ratio.to_numpy(dtype=float), 1.0, RATIO_CAP))
    image = ax.imshow(np.ma.masked_invalid(values), cmap="YlOrRd", vmin=0,
                      vmax=math.log2(RATIO_CAP), aspect="auto", interpolation="nearest")
    for (i, j), r in np.ndenumerate(ratio.to_numpy(dtype=float)):
        if not math.isnan(r):
            dark = math.log2(min(r, RATIO_CAP)) > 1.6
            ax.text(j, i, _ratio_label(r), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black", fontweight="bold" if r == 1.0 else None)
            continue
        letter, colour, hatch = STATUS_MARKS.get(status.iat[i, j], ("?", "#ffffff", ""))
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=colour, hatch=hatch,
                               edgecolor="#777777", linewidth=0))
        ax.text(j, i, letter, ha="center", va="center", fontsize=7, fontweight="bold",
                color="white" if status.iat[i, j] in ("crashed", "wrong") else "black",
                bbox={"facecolor": colour, "edgecolor": "none", "pad": 0.5})
    ax.set_xlim(-0.5, ratio.shape[1] - 0.5)
    ax.set_ylim(ratio.shape[0] - 0.5, -0.5)
    ax.tick_params(length=0)
    return image


def _ratio_label(r: float) -> str:
    return "1" if r == 1.0 else (f"{r:.1f}" if r < 9.95 else f"{r:.0f}")


def _heatmap_legend(fig: Any, image: Any) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=c, hatch=h, edgecolor="#777777",
                     label=f"{letter} {STATUS_LABELS.get(s, s.replace('_', ' '))}")
               for s, (letter, c, h) in STATUS_MARKS.items()]
    fig.legend(handles=handles, loc="lower left", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.0, 0.0))
    bar_ax = fig.add_axes((0.72, 0.012, 0.26, 0.018))
    bar = fig.colorbar(image, cax=bar_ax, orientation="horizontal")
    ticks = [0, 1, 2, math.log2(RATIO_CAP)]
    bar.set_ticks(ticks, labels=["best", "2×", "4×", f"≥{RATIO_CAP:g}×"], fontsize=7)


# ---- 3. workspace ---------------------------------------------------------------------------------
def pareto_figures(df: pd.DataFrame, out: Path) -> list[tuple[dict[str, Any], Path]]:
    """Per precision x layout x mode: a small panel per layer, time against workspace, with the
    front of each direction drawn as a staircase."""
    written = []
    keys = ["precision", "layout", "timing_mode"]
    colours = _direction_colours(df)
    for values, part in df.groupby(keys, sort=False):
        if analysis.verified(part).empty:
            continue
        path = out / f"pareto_{slug(*values)}.png"
        written.append((dict(zip(keys, values)), _save(_pareto_figure(part, colours), path)))
    return written


def _direction_colours(df: pd.DataFrame) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["Dark2"]
    return {d: cmap(i) for i, d in enumerate(dict.fromkeys(df["direction"]))}


def _pareto_figure(part: pd.DataFrame, colours: dict[str, Any]) -> Any:
    layers = list(dict.fromkeys(part["layer_label"]))
    ncols = min(5, len(layers))
    fig = _figure(2.8 * ncols, 0.6 + 2.3 * math.ceil(len(layers) / ncols))
    for ax, layer in zip(_grid(fig, len(layers), ncols), layers):
        at_layer = part[part["layer_label"] == layer]
        for direction, rows in at_layer.groupby("direction", sort=False):
            _pareto_axis(ax, rows, colours[direction])
        ax.set_title(layer, fontsize=8)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
    _legend_lines(fig, colours)
    fig.supxlabel("workspace (MiB, symlog)", fontsize=9)
    fig.supylabel("median time (ms)", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.6 / fig.get_figheight(),
                        bottom=0.5 / fig.get_figheight() + 0.03, hspace=0.45, wspace=0.3)
    return fig


def _pareto_axis(ax: Any, rows: pd.DataFrame, colour: Any) -> None:
    ok = analysis.verified(rows)
    mib = ok["workspace_bytes"].fillna(0).astype(float) / (1 << 20)
    ax.scatter(mib, ok["median_ms"], s=9, color=colour, alpha=0.35, linewidths=0)
    front = analysis.pareto_front(rows)
    ax.step(front["ws"] / (1 << 20), front["median_ms"], where="post", color=colour,
            marker="o", markersize=3, linewidth=1.2)


def _legend_lines(fig: Any, colours: dict[str, Any]) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", markersize=4, label=f"{d} front")
               for d, c in colours.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)


def workspace_totals_figure(totals: pd.DataFrame, out: Path) -> Path:
    """The oracle network total at each workspace limit, one panel per precision."""
    precisions = list(dict.fromkeys(totals["precision"]))
    ncols = min(5, len(precisions))
    fig = _figure(max(3.0 * ncols, 6.0), 3.2 * math.ceil(len(precisions) / ncols))
    for ax, precision in zip(_grid(fig, len(precisions), ncols), precisions):
        part = totals[totals["precision"] == precision]
        limits = list(dict.fromkeys(part["workspace_limit"]))
        for (layout, mode), line in part.groupby(["layout", "timing_mode"], sort=False):
            x = [limits.index(v) for v in line["workspace_limit"]]
            complete = line["missing_oracle"] == 0
            ax.plot(x, line["total_oracle"], marker="o", label=f"{layout} {mode}")
            ax.scatter(np.array(x)[~complete.to_numpy()], line["total_oracle"][~complete],
                       s=60, facecolors="none", edgecolors="red", zorder=3)
        ax.set_xticks(range(len(limits)), [fmt_limit(v) for v in limits], fontsize=7, rotation=20)
        ax.set_title(precision, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    fig.supylabel("network total (ms, Σ best × multiplicity)", fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.9, bottom=0.18, wspace=0.3, hspace=0.5)
    return _save(fig, out / "workspace_totals.png")


# ---- 4. accuracy vs speed ----------------------------------------------------------------------
def accuracy_figure(df: pd.DataFrame, out: Path) -> Path | None:
    rows = df[df["rel_error"].notna() & df["median_ms"].notna()]
    if rows.empty:
        return None
    precisions = list(dict.fromkeys(rows["precision"]))
    colours = family_colours(list(rows["family"]))
    ncols = min(3, len(precisions))
    fig = _figure(4.6 * ncols, 0.8 + 3.4 * math.ceil(len(precisions) / ncols))
    for ax, precision in zip(_grid(fig, len(precisions), ncols), precisions):
        _accuracy_axis(ax, rows[rows["precision"] == precision], colours)
        ax.set_title(precision, fontsize=9)
    _family_legend(fig, colours, extra_wrong=True)
    fig.supxlabel("median time (ms)", fontsize=9)
    fig.supylabel("relative L2 error vs float64", fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.99, top=1 - 0.6 / fig.get_figheight(),
                        bottom=0.5 / fig.get_figheight() + 0.04, wspace=0.25, hspace=0.35)
    return _save(fig, out / "accuracy_vs_speed.png")


def _accuracy_axis(ax: Any, rows: pd.DataFrame, colours: dict[str, Any]) -> None:
    error = rows["rel_error"].astype(float).clip(lower=ZERO_ERROR)
    for family, part in rows.groupby("family", sort=True):
        ok = part["status"] == "ok"
        ax.scatter(part["median_ms"][ok], error[part.index][ok], s=8, alpha=0.5,
                   color=colours[family], linewidths=0)
        ax.scatter(part["median_ms"][~ok], error[part.index][~ok], s=30, marker="x",
                   color=colours[family], linewidths=1.5)
    for tol in sorted(set(rows["tolerance"].dropna().astype(float))):
        ax.axhline(tol, color="black", linestyle="--", linewidth=0.9)
        ax.annotate(f"tolerance {tol:.0e}", (0.01, tol), xycoords=("axes fraction", "data"),
                    fontsize=7, va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _family_legend(fig: Any, colours: dict[str, Any], extra_wrong: bool = False) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", linestyle="", label=f)
               for f, c in colours.items()]
    if extra_wrong:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="",
                              label="not verified (wrong)"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)


# ---- 5. roofline ------------------------------------------------------------------------------------
def roofline_figure(df: pd.DataFrame, peaks: dict[str, float], out: Path) -> Path | None:
    rows = analysis.verified(df)
    rows = rows[rows["arithmetic_intensity"].notna() & rows["precision"].isin(list(peaks))]
    if rows.empty:
        return None
    precisions = list(dict.fromkeys(rows["precision"]))
    colours = family_colours(list(rows["family"]))
    ncols = min(3, len(precisions))
    fig = _figure(4.6 * ncols, 0.8 + 3.4 * math.ceil(len(precisions) / ncols))
    for ax, precision in zip(_grid(fig, len(precisions), ncols), precisions):
        part = rows[rows["precision"] == precision]
        _roofline_axis(ax, part, peaks[precision], peaks.get("bandwidth_gbps"), colours)
        ax.set_title(f"{precision} (peak {peaks[precision]:.4g} TFLOP/s)", fontsize=9)
    _family_legend(fig, colours)
    fig.supxlabel("arithmetic intensity (FLOP / byte of compulsory traffic)", fontsize=9)
    fig.supylabel("achieved TFLOP/s", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.6 / fig.get_figheight(),
                        bottom=0.5 / fig.get_figheight() + 0.04, wspace=0.25, hspace=0.35)
    return _save(fig, out / "roofline.png")


def _roofline_axis(ax: Any, rows: pd.DataFrame, peak: float, bandwidth_gbps: float | None,
                   colours: dict[str, Any]) -> None:
    tflops = analysis.achieved_tflops(rows)
    intensity = rows["arithmetic_intensity"].astype(float)
    for family, part in rows.groupby("family", sort=True):
        ax.scatter(intensity[part.index], tflops[part.index], s=8, alpha=0.5,
                   color=colours[family], linewidths=0)
    x = np.logspace(math.log10(intensity.min() / 2), math.log10(intensity.max() * 2), 200)
    ceiling = np.full_like(x, peak)
    if bandwidth_gbps:
        ceiling = np.minimum(ceiling, x * bandwidth_gbps / 1000.0)
    ax.plot(x, ceiling, color="black", linewidth=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", alpha=0.3)


# ---- 6. network totals --------------------------------------------------------------------------
def network_figure(totals: pd.DataFrame, policies: list[str], out: Path) -> Path | None:
    """Bars per precision and policy at the reference workspace limit; hatched = incomplete."""
    part = totals[totals["workspace_limit"] == analysis.reference_limit(totals)]
    panels = list(part.groupby(["layout", "timing_mode"], sort=False))
    if not panels:
        return None
    fig = _figure(max(6.0, 4.0 * len(panels)), 3.8)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, ((layout, mode), rows) in zip(axes, panels):
        _network_axis(ax, rows, policies)
        ax.set_title(f"{layout} · {mode} · {fmt_limit(analysis.reference_limit(totals))} workspace",
                     fontsize=9)
    axes[0].set_ylabel("network total (ms)", fontsize=9)
    axes[0].legend(fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.9, bottom=0.12, wspace=0.25)
    return _save(fig, out / "network_totals.png")


def _network_axis(ax: Any, rows: pd.DataFrame, policies: list[str]) -> None:
    width = 0.8 / len(policies)
    x = np.arange(len(rows))
    for i, policy in enumerate(policies):
        total = rows[f"total_{policy}"].astype(float).fillna(0).to_numpy()
        partial = (rows[f"missing_{policy}"] > 0).to_numpy()
        bars = ax.bar(x + i * width - 0.4 + width / 2, total, width, label=policy)
        for bar, incomplete in zip(bars, partial):
            if incomplete:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
    ax.set_xticks(x, list(rows["precision"]), fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)

