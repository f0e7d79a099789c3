"""The report's figures, drawn with matplotlib's Agg canvas straight into PNG files.

matplotlib is imported inside these functions only: `import harness` must work without it
(architecture rule 4). No pyplot either: its global figure registry is state we do not need.
Each public function takes a prepared frame (analysis.prepare) and returns the files it wrote.
"""
from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from harness.measurement import Status
from harness.report import analysis, tables

DPI = 100
# Cells that hold no time: a letter, a colour and a hatch each, so none is ever blank or confused.
STATUS_MARKS: dict[str, tuple[str, str, str]] = {
    Status.UNSUPPORTED: ("U", "#d4d4d4", "//"), Status.WORKSPACE_EXCEEDED: ("W", "#9ecae1", "\\\\"),
    Status.WRONG: ("X", "#e7298a", "xx"), Status.FAILED: ("F", "#8c8c8c", ".."),
    Status.CRASHED: ("C", "#3b3b3b", "++"), "": ("–", "#ffffff", ""),
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


class Renderer:
    """Draws figures in this process, or in `jobs` worker processes.

    Figure functions below decide what to draw and where (so the page can be written around
    the file names at once) and hand the drawing to `submit`; `close` waits for every file and
    re-raises the first failure. Workers are spawned, not forked (the parent may hold threads of
    Arrow); spawned workers re-import `__main__`, so a library caller keeps the serial default
    and the CLI, whose entry point is guarded, asks for more.
    """

    def __init__(self, jobs: int = 1) -> None:
        self._pool: Any = None
        self._futures: list[Any] = []
        if jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            context = multiprocessing.get_context("spawn")
            try:
                self._pool = ProcessPoolExecutor(jobs, mp_context=context)
            except (OSError, NotImplementedError):   # no POSIX semaphores here: draw serially
                self._pool = None

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        if self._pool is None:
            job(*args)
        else:
            self._futures.append(self._pool.submit(job, *args))

    def close(self) -> None:
        try:
            for future in self._futures:
                future.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)
            self._pool, self._futures = None, []

    def __enter__(self) -> "Renderer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


SERIAL = Renderer()


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


def _panels(count: int, ncols: int, panel: tuple[float, float], labels: tuple[str, str],
            share: bool = False, gap: tuple[float, float] = (0.55, 0.6)) -> tuple[Any, list[Any]]:
    """A figure of `count` panels of `panel` inches, margins fixed in inches (not fractions) so
    one panel or twenty get the same room for the legend on top and the axis labels."""
    nrows = math.ceil(count / ncols)
    left, right, top, bottom = 0.95, 0.15, 0.6, 0.6
    width = max(left + right + ncols * panel[0] + (ncols - 1) * gap[0], 7.0)
    height = top + bottom + nrows * panel[1] + (nrows - 1) * gap[1]
    fig = _figure(width, height)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=share, sharey=share).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    panel_w = (width - left - right - (ncols - 1) * gap[0]) / ncols
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                        bottom=bottom / height, wspace=gap[0] / panel_w, hspace=gap[1] / panel[1])
    fig.supxlabel(labels[0], fontsize=9, y=0.06 / height)
    fig.supylabel(labels[1], fontsize=9, x=0.06 / width)
    return fig, list(axes[:count])


# ---- text drawn as paths -------------------------------------------------------------------------
def _labels(ax: Any, texts: list[str], xy: np.ndarray, colours: list[Any], size: float = 7,
            bold: bool = False) -> None:
    """Many short labels as one collection of glyph outlines, centred on data points.

    Thousands of Text artists made a 12,000-row report take minutes; one PathCollection with a
    path per distinct string draws in milliseconds and looks the same.
    """
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Affine2D
    if not texts:
        return
    paths = [_glyphs(t, size, bold) for t in texts]
    points_to_pixels = Affine2D().scale(ax.figure.dpi / 72.0)
    ax.add_collection(PathCollection(paths, offsets=xy,
                                     offset_transform=ax.transData, transform=points_to_pixels,
                                     facecolors=colours, edgecolors="none", zorder=4,
                                     snap=False),   # snapping erased the bars of an "F"
                      autolim=False)


@lru_cache(maxsize=4096)
def _glyphs(text: str, size: float, bold: bool) -> Any:
    """The outline of `text` in points, centred on the origin (cached: labels repeat a lot)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D
    weight = "bold" if bold else "normal"
    path = TextPath((0, 0), text, prop=FontProperties(size=size, weight=weight))
    box = path.get_extents()
    return path.transformed(Affine2D().translate(-(box.x0 + box.x1) / 2, -(box.y0 + box.y1) / 2))


def _log_axes(ax: Any, x: str = "log", y: str = "log") -> None:
    if x == "symlog":
        ax.set_xscale("symlog", linthresh=1.0)
    else:
        ax.set_xscale(x)
    ax.set_yscale(y)


def _tidy_ticks(ax: Any) -> None:
    """After the data is in: no minor ticks (each tick is four artists, and pages of small
    panels spent most of their drawing time on minor ticks nobody reads), and 1-2-5 labelled
    steps on log axes spanning under two decades, which would otherwise show one label or none."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_minor_locator(NullLocator())
        low, high = sorted(limits)
        if axis.get_scale() == "log" and low > 0 and high / low < 100:
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


# ---- 2. heatmap -------------------------------------------------------------------------------------
HEATMAP_COLUMNS = ["direction", "layer_label", "layer_order", "candidate", "status", "median_ms"]


def heatmaps(df: pd.DataFrame, out: Path,
             renderer: Renderer = SERIAL) -> list[tuple[dict[str, Any], Path]]:
    """A figure per precision x layout x workspace limit x timing mode; directions side by side."""
    written = []
    keys = ["precision", "layout", "workspace_limit", "timing_mode"]
    for values, part in df.groupby(keys, sort=False):
        path = out / f"heatmap_{slug(*values[:2], tables.fmt_limit(values[2]), values[3])}.png"
        renderer.submit(_heatmap_png, part[HEATMAP_COLUMNS], path)
        written.append((dict(zip(keys, values)), path))
    return written


def _heatmap_png(part: pd.DataFrame, path: Path) -> None:
    _save(_heatmap_figure(part), path)


GAP = "gap"     # the blank column between two directions' blocks


def _heatmap_figure(part: pd.DataFrame) -> Any:
    """The directions' matrices side by side in ONE axes with a blank column between them: a
    third of the axes (and their tick machinery) that separate panels cost, same picture. Each
    block has only the algorithms run in its direction (cuDNN's differ per direction)."""
    ratio, status = analysis.relative_matrix(part, ["direction", "layer_label"])
    directions = list(dict.fromkeys(ratio.index.get_level_values(0)))
    layers = list(dict.fromkeys(ratio.index.get_level_values(1)))
    blocks = {d: [c for c in status.columns if (status.loc[d][c] != "").any()]
              for d in directions}
    blocks, titles = _fastest_columns(ratio, blocks)
    values, states, labels = _side_by_side(ratio, status, blocks, layers)
    shown = display_names(layers)
    longest = max(len(shown[x]) for x in layers)
    longest_name = max(len(label) for label in labels)
    width = 1.3 + 0.075 * longest + 0.48 * len(labels)
    # Tall enough for the rotated column labels under the matrix, however few layers there are.
    height = max(2.4 + 0.26 * len(layers), 2.0 + 0.058 * longest_name)
    fig = _figure(min(max(width, 8.0), 24.0), height)
    ax = fig.add_subplot()
    image = _draw_heatmap(ax, values, states)
    start = 0
    for direction, columns in blocks.items():
        ax.text(start + (len(columns) - 1) / 2, -0.7, titles[direction], ha="center",
                va="bottom", fontsize=10, fontweight="bold")
        start += len(columns) + 1
    ticks = [j for j, label in enumerate(labels) if label]
    ax.set_xticks(ticks, [labels[j] for j in ticks], rotation=50, ha="right",
                  rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(len(layers)), [shown[x] for x in layers], fontsize=8)
    width, height = fig.get_figwidth(), fig.get_figheight()
    right = 1 - 0.75 / width                      # room for the colour bar
    fig.subplots_adjust(left=(0.25 + 0.068 * longest) / width, right=right,
                        top=1 - 0.4 / height, bottom=(0.5 + 0.058 * longest_name) / height)
    _heatmap_legend(fig, image, right)
    return fig


MAX_COLUMNS = 24   # per direction; graph-API sweeps offer ~90 plans, unreadable side by side


def _fastest_columns(ratio: pd.DataFrame, blocks: dict[str, list[str]]
                     ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Keep each direction's MAX_COLUMNS algorithms with the best median time relative to the
    best (those that never ran well sort last); the block title says how many were left out."""
    kept, titles = {}, {}
    for direction, columns in blocks.items():
        if len(columns) <= MAX_COLUMNS:
            kept[direction], titles[direction] = columns, direction
            continue
        order = ratio.loc[direction][columns].median(skipna=True).fillna(np.inf).sort_values()
        kept[direction] = [c for c in columns if c in set(order.index[:MAX_COLUMNS])]
        titles[direction] = f"{direction} (fastest {MAX_COLUMNS} of {len(columns)})"
    return kept, titles


def _side_by_side(ratio: pd.DataFrame, status: pd.DataFrame, blocks: dict[str, list[str]],
                  layers: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """One matrix of every block with a GAP column between blocks, and each column's label."""
    names = short_names(sorted({c for columns in blocks.values() for c in columns}))
    values, states, labels = [], [], []
    for k, (direction, columns) in enumerate(blocks.items()):
        if k:
            values.append(np.full((len(layers), 1), np.nan))
            states.append(np.full((len(layers), 1), GAP, dtype=object))
            labels.append("")
        values.append(ratio.loc[direction].reindex(index=layers, columns=columns)
                      .to_numpy(dtype=float))
        states.append(status.loc[direction].reindex(index=layers, columns=columns).fillna("")
                      .to_numpy(dtype=object))
        labels += [names[c] for c in columns]
    return np.hstack(values), np.hstack(states), labels


def display_names(layers: list[str]) -> dict[str, str]:
    """Layer labels without a prefix all of them share ("resnet_50:"): axis room is scarce and
    the tables beside the figures keep the full names."""
    prefix = os.path.commonprefix(layers)
    prefix = prefix[:prefix.rfind(":") + 1]
    return {layer: layer[len(prefix):] or layer for layer in layers}


def _draw_heatmap(ax: Any, values: np.ndarray, status: np.ndarray) -> Any:
    from matplotlib.patches import Rectangle
    image = ax.imshow(np.ma.masked_invalid(np.log2(np.clip(values, 1.0, RATIO_CAP))),
                      cmap="YlOrRd", vmin=0, vmax=math.log2(RATIO_CAP), aspect="auto",
                      interpolation="nearest")
    timed = ~np.isnan(values)
    _status_cells(ax, status, timed)
    ratios = [(_ratio_label(r), "white" if math.log2(min(r, RATIO_CAP)) > 1.6 else "black", (j, i))
              for (i, j), r in np.ndenumerate(values) if timed[i, j]]
    letters = [(STATUS_MARKS.get(state, ("?",))[0],
                "white" if state in (Status.CRASHED, Status.WRONG) else "black", (j, i))
               for (i, j), state in np.ndenumerate(status) if not timed[i, j] and state != GAP]
    for labels, bold in ((ratios, False), (letters, True)):
        if labels:
            texts, colours, xy = zip(*labels)
            _labels(ax, list(texts), np.array(xy, dtype=float), list(colours), bold=bold)
    rows, cols = values.shape
    gaps = [j for j in range(cols) if (status[:, j] == GAP).all()]
    for lo, hi in zip([-1, *gaps], [*gaps, cols]):   # a frame around each direction's block
        ax.add_patch(Rectangle((lo + 0.5, -0.5), hi - lo - 1, rows, fill=False, linewidth=0.8,
                               edgecolor="black", zorder=5))
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return image


def _status_cells(ax: Any, status: np.ndarray, timed: np.ndarray) -> None:
    """Colour and hatch each untimed cell by why it has no time: one collection per status."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle
    for state, (_, colour, hatch) in STATUS_MARKS.items():
        cells = np.argwhere((status == state) & ~timed)
        if len(cells) == 0:
            continue
        boxes = [Rectangle((j - 0.5, i - 0.5), 1, 1) for i, j in cells]
        ax.add_collection(PatchCollection(boxes, facecolor=colour, hatch=hatch,
                                          edgecolor="#9a9a9a", linewidth=0, zorder=2))
        # A plain patch under the letter so the hatch never crosses it.
        ax.scatter(cells[:, 1], cells[:, 0], marker="s", s=85, color=colour, linewidths=0,
                   zorder=3)


def _ratio_label(r: float) -> str:
    return "1" if r == 1.0 else (f"{r:.1f}" if r < 9.95 else f"{r:.0f}")


def _heatmap_legend(fig: Any, image: Any, right: float) -> None:
    """Status swatches along the bottom, the colour scale upright at the right."""
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=c, hatch=h, edgecolor="#9a9a9a",
                     label=f"{letter} {STATUS_LABELS.get(s, s.replace('_', ' '))}")
               for s, (letter, c, h) in STATUS_MARKS.items()]
    ncol = len(handles) if fig.get_figwidth() >= 8.5 else 3
    fig.legend(handles=handles, loc="lower left", ncol=ncol, fontsize=8, frameon=False,
               bbox_to_anchor=(0.0, 0.0), handlelength=1.6, columnspacing=1.0)
    box = fig.axes[0].get_position()
    bar_ax = fig.add_axes((right + 0.12 / fig.get_figwidth(), box.y0,
                           0.14 / fig.get_figwidth(), box.height))
    bar = fig.colorbar(image, cax=bar_ax)
    ticks = [0, 1, 2, math.log2(RATIO_CAP)]
    bar.set_ticks(ticks, labels=["best", "2×", "4×", f"≥{RATIO_CAP:g}×"], fontsize=7)
    bar.ax.tick_params(length=2)


# ---- 3. workspace ---------------------------------------------------------------------------------
PARETO_KEYS = ["layer_label", "direction", "precision", "layout", "timing_mode"]


def pareto_figures(df: pd.DataFrame, out: Path,
                   renderer: Renderer = SERIAL) -> list[tuple[dict[str, Any], Path]]:
    """Per precision x layout x mode: a small panel per layer, time against workspace, with the
    front of each direction drawn as a staircase."""
    written = []
    keys = ["precision", "layout", "timing_mode"]
    colours = _direction_colours(df)
    columns = ["layer_label", "direction", "workspace_bytes", "median_ms"]
    ok = analysis.verified(df)
    fronts = analysis.pareto_fronts(df, PARETO_KEYS)
    front_parts = dict(iter(fronts.groupby(keys, sort=False)))
    for values, part in ok.groupby(keys, sort=False):
        path = out / f"pareto_{slug(*values)}.png"
        renderer.submit(_pareto_png, part[columns], front_parts[values][columns + ["ws"]],
                        colours, path)
        written.append((dict(zip(keys, values)), path))
    return written


def _pareto_png(ok: pd.DataFrame, fronts: pd.DataFrame, colours: dict[str, Any],
                path: Path) -> None:
    _save(_pareto_figure(ok, fronts, colours), path)


def _direction_colours(df: pd.DataFrame) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["Dark2"]
    return {d: cmap(i) for i, d in enumerate(dict.fromkeys(df["direction"]))}


def _pareto_figure(ok: pd.DataFrame, fronts: pd.DataFrame, colours: dict[str, Any]) -> Any:
    """Shared axes: the panels compare across layers, and only the outer ones carry tick labels
    (per-panel tick labels were most of the drawing time)."""
    layers = list(dict.fromkeys(ok["layer_label"]))
    shown = display_names(layers)
    fig, axes = _panels(len(layers), min(5, len(layers)), (2.55, 1.75),
                        ("workspace (MiB, symlog)", "median time (ms)"), share=True,
                        gap=(0.08, 0.25))
    by_layer = dict(iter(ok.groupby("layer_label", sort=False)))
    fronts_by_layer = dict(iter(fronts.groupby("layer_label", sort=False)))
    _log_axes(axes[0], x="symlog")
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
    _tidy_ticks(axes[0])     # shared axes share their tickers
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
    precisions = list(dict.fromkeys(totals["precision"]))
    fig, axes = _panels(len(precisions), min(5, len(precisions)), (2.4, 2.2),
                        ("workspace limit", "network total (ms, Σ best × multiplicity)"))
    for ax, precision in zip(axes, precisions):
        part = totals[totals["precision"] == precision]
        limits = list(dict.fromkeys(part["workspace_limit"]))
        for (layout, mode), line in part.groupby(["layout", "timing_mode"], sort=False):
            x = [limits.index(v) for v in line["workspace_limit"]]
            complete = line["missing_oracle"] == 0
            ax.plot(x, line["total_oracle"], marker="o", label=f"{layout} {mode}")
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
    _save(fig, path)


# ---- 4. accuracy vs speed ----------------------------------------------------------------------
def accuracy_figure(df: pd.DataFrame, out: Path, renderer: Renderer = SERIAL) -> Path | None:
    rows = df[df["rel_error"].notna() & df["median_ms"].notna()]
    if rows.empty:
        return None
    path = out / "accuracy_vs_speed.png"
    columns = ["precision", "family", "status", "median_ms", "rel_error", "tolerance"]
    renderer.submit(_accuracy_png, rows[columns], path)
    return path


def _accuracy_png(rows: pd.DataFrame, path: Path) -> None:
    precisions = list(dict.fromkeys(rows["precision"]))
    colours = family_colours(list(rows["family"]))
    fig, axes = _panels(len(precisions), min(3, len(precisions)), (3.9, 2.9),
                        ("median time (ms)", "relative L2 error vs float64"))
    for ax, precision in zip(axes, precisions):
        _accuracy_axis(ax, rows[rows["precision"] == precision], colours)
        ax.set_title(precision, fontsize=9)
    _family_legend(fig, colours, extra_wrong=True)
    _save(fig, path)


def _accuracy_axis(ax: Any, rows: pd.DataFrame, colours: dict[str, Any]) -> None:
    error = rows["rel_error"].astype(float).clip(lower=ZERO_ERROR)
    for family, part in rows.groupby("family", sort=True):
        ok = part["status"] == Status.OK
        ax.scatter(part["median_ms"][ok], error[part.index][ok], s=8, alpha=0.5,
                   color=colours[family], linewidths=0)
        ax.scatter(part["median_ms"][~ok], error[part.index][~ok], s=30, marker="x",
                   color=colours[family], linewidths=1.5)
    _tolerance_lines(ax, sorted(set(rows["tolerance"].dropna().astype(float))))
    _log_axes(ax)
    _tidy_ticks(ax)
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


def _family_legend(fig: Any, colours: dict[str, Any], extra_wrong: bool = False) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", linestyle="", label=f)
               for f, c in colours.items()]
    if extra_wrong:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="",
                              label="not verified (wrong)"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)


# ---- 5. roofline ------------------------------------------------------------------------------------
def roofline_figure(df: pd.DataFrame, peaks: dict[str, float], out: Path,
                    renderer: Renderer = SERIAL) -> Path | None:
    rows = analysis.verified(df)
    rows = rows[rows["arithmetic_intensity"].notna() & rows["precision"].isin(list(peaks))]
    if rows.empty:
        return None
    path = out / "roofline.png"
    columns = ["precision", "family", "arithmetic_intensity", "achieved_tflops", "flops",
               "median_ms"]
    renderer.submit(_roofline_png, rows[columns], peaks, path)
    return path


def _roofline_png(rows: pd.DataFrame, peaks: dict[str, float], path: Path) -> None:
    precisions = list(dict.fromkeys(rows["precision"]))
    colours = family_colours(list(rows["family"]))
    fig, axes = _panels(len(precisions), min(3, len(precisions)), (3.9, 2.9),
                        ("arithmetic intensity (FLOP / byte of compulsory traffic)",
                         "achieved TFLOP/s"))
    for ax, precision in zip(axes, precisions):
        part = rows[rows["precision"] == precision]
        _roofline_axis(ax, part, peaks[precision], peaks.get("bandwidth_gbps"), colours)
        ax.set_title(f"{precision} (peak {peaks[precision]:.4g} TFLOP/s)", fontsize=9)
    _family_legend(fig, colours)
    _save(fig, path)


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
    _log_axes(ax)
    _tidy_ticks(ax)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", alpha=0.3)


# ---- 6. network totals --------------------------------------------------------------------------
def network_figure(totals: pd.DataFrame, policies: list[str], out: Path,
                   renderer: Renderer = SERIAL) -> Path | None:
    """Bars per precision and policy at the reference workspace limit, as multiples of the oracle
    total (precisions differ 10x in absolute time); hatched = the total misses points."""
    if totals.empty:
        return None
    path = out / "network_totals.png"
    renderer.submit(_network_png, totals, policies, path)
    return path


def _network_png(totals: pd.DataFrame, policies: list[str], path: Path) -> None:
    limit = analysis.reference_limit(totals)
    part = totals[totals["workspace_limit"] == limit]
    panels = list(part.groupby(["layout", "timing_mode"], sort=False))
    relative = len(policies) > 1 and "oracle" in policies
    fig = _figure(max(6.0, 1.2 + 0.45 * len(policies) * part["precision"].nunique() * len(panels)),
                  3.8)
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, ((layout, mode), rows) in zip(axes, panels):
        _network_axis(ax, rows, policies, relative)
        ax.text(0.5, 1.02, f"{layout} · {mode} · {tables.fmt_limit(limit)} workspace",
                transform=ax.transAxes, ha="center", fontsize=9)
    axes[0].set_ylabel("network total / oracle total" if relative else "network total (ms)",
                       fontsize=9)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=len(policies),
               fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.9 / fig.get_figwidth(), right=0.99, top=0.84, bottom=0.16,
                        wspace=0.08)
    _save(fig, path)


def _network_axis(ax: Any, rows: pd.DataFrame, policies: list[str], relative: bool) -> None:
    width = 0.8 / len(policies)
    x = np.arange(len(rows))
    oracle = rows["total_oracle"].astype(float).to_numpy() if relative else 1.0
    for i, policy in enumerate(policies):
        total = rows[f"total_{policy}"].astype(float).to_numpy() / oracle
        partial = (rows[f"missing_{policy}"] > 0).to_numpy()
        bars = ax.bar(x + i * width - 0.4 + width / 2, np.nan_to_num(total), width, label=policy)
        for bar, incomplete in zip(bars, partial):
            if incomplete:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        if relative and policy != "oracle":
            ax.bar_label(bars, [f"{v:.2f}" if v == v else "" for v in total], fontsize=6.5,
                         padding=1)
    labels = [f"{p}\noracle {tables.fmt_ms(t)} ms" if relative else p
              for p, t in zip(rows["precision"], rows["total_oracle"])]
    ax.set_xticks(x, labels, fontsize=8)
    if relative:
        ax.axhline(1.0, color="black", linewidth=0.8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
