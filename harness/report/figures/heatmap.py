"""The heatmap: each candidate's time over the best at every point, statuses as marked cells."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.measurement import Status
from harness.report import computed
from harness.report.figures.common import (FIGURE_KEYS, OPTIONAL_MARKS, RATIO_CAP, SERIAL,
                                           STATUS_LABELS, STATUS_MARKS, Renderer, figure,
                                           figure_parts, glyph_labels, save, short_names, slug)

# `contended` too: without it, the worker's slice would time (and rank) rows the tables never do
HEATMAP_COLUMNS = ["direction", "layer_label", "layer_order", "candidate", "status", "median_ms",
                   "contended"]


def heatmaps(df: pd.DataFrame, out: Path,
             renderer: Renderer = SERIAL) -> list[tuple[dict[str, Any], Path]]:
    """A figure per kind of point (FIGURE_KEYS: precision, op, result type, layout, workspace
    limit, timing mode, thread count); directions side by side."""
    written = []
    for values, part in df.groupby(FIGURE_KEYS, sort=False):
        info = dict(zip(FIGURE_KEYS, values))
        path = out / f"heatmap_{slug(*figure_parts(info))}.png"
        renderer.submit(_heatmap_png, part[HEATMAP_COLUMNS], path)
        written.append((info, path))
    return written


def _heatmap_png(part: pd.DataFrame, path: Path) -> None:
    save(heatmap_figure(part), path)


GAP = "gap"     # the blank column between two directions' blocks


def heatmap_figure(part: pd.DataFrame) -> Any:
    """The directions' matrices side by side in ONE axes with a blank column between them: a
    third of the axes (and their tick machinery) that separate panels cost, same picture. Each
    block has only the algorithms run in its direction (cuDNN's differ per direction)."""
    ratio, status = computed.relative_matrix(part, ["direction", "layer_label"])
    directions = list(dict.fromkeys(ratio.index.get_level_values(0)))
    layers = list(dict.fromkeys(ratio.index.get_level_values(1)))
    blocks = {d: [c for c in status.columns if (status.loc[d][c] != "").any()]
              for d in directions}
    blocks, titles = _fastest_columns(ratio, blocks)
    values, states, labels = _side_by_side(ratio, status, blocks, layers)
    shown = display_names(layers)
    longest = max(len(shown[x]) for x in layers)
    width = 1.3 + 0.075 * longest + 0.48 * len(labels)
    fig = figure(min(max(width, 8.0), 24.0), 0.25 * len(layers) + 2.0)   # height set by _fit
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
    legend = _status_legend(fig, set(states.ravel()))
    right = _fit(fig, ax, legend, matrix_height=0.25 * len(layers) + 0.8,
                 left=0.25 + 0.068 * longest)
    _colour_bar(fig, image, right)
    return fig


def _fit(fig: Any, ax: Any, legend: Any, matrix_height: float, left: float) -> float:
    """Margins measured, not guessed: the rotated algorithm names under the matrix reach down as
    far as the longest is long, and the legend goes below the lowest of them. (A margin guessed
    from the name lengths let a three-row legend cover the names.) Returns the matrix's right
    edge as a figure fraction."""
    top, pad = 0.4, 0.12                          # inches: room for the direction titles
    width = fig.get_figwidth()
    right = 1 - 0.75 / width                      # room for the colour bar
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    names = ax.xaxis.get_tightbbox(renderer) or box
    rows = ax.yaxis.get_tightbbox(renderer) or box
    dpi = fig.dpi
    below = max(box.y0 - names.y0, 0.0) / dpi     # tick labels are sized in points, so these
    beside = max(box.x0 - min(names.x0, rows.x0), 0.0) / dpi    # hold at any figure size
    bottom = legend.get_window_extent(renderer).height / dpi + pad + below
    left = max(left, beside + pad)
    height = top + matrix_height + bottom
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=left / width, right=right, top=1 - top / height,
                        bottom=bottom / height)
    return right


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
            glyph_labels(ax, list(texts), np.array(xy, dtype=float), list(colours), bold=bold)
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


def _status_legend(fig: Any, states: set[str]) -> Any:
    """Status swatches along the bottom, in as many columns as the figure's width holds."""
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=c, hatch=h, edgecolor="#9a9a9a",
                     label=f"{letter} {STATUS_LABELS.get(s, s.replace('_', ' '))}")
               for s, (letter, c, h) in STATUS_MARKS.items()
               if s not in OPTIONAL_MARKS or s in states]
    renderer = fig.canvas.get_renderer()

    def legend(ncol: int) -> Any:
        return fig.legend(handles=handles, loc="lower left", ncol=ncol, fontsize=8,
                          frameon=False, bbox_to_anchor=(0.0, 0.0), handlelength=1.6,
                          columnspacing=1.0)
    for ncol in range(len(handles), 1, -1):
        wide = legend(ncol)
        if wide.get_window_extent(renderer).width <= fig.bbox.width:
            return wide
        wide.remove()
    return legend(1)


def _colour_bar(fig: Any, image: Any, right: float) -> None:
    """The colour scale upright at the right of the matrix."""
    box = fig.axes[0].get_position()
    bar_ax = fig.add_axes((right + 0.12 / fig.get_figwidth(), box.y0,
                           0.14 / fig.get_figwidth(), box.height))
    bar = fig.colorbar(image, cax=bar_ax)
    ticks = [0, 1, 2, math.log2(RATIO_CAP)]
    bar.set_ticks(ticks, labels=["best", "2×", "4×", f"≥{RATIO_CAP:g}×"], fontsize=7)
    bar.ax.tick_params(length=2)
