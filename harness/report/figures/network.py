"""Network totals per policy (one training step), absolute and relative to the best."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.report import computed, tables
from harness.report.figures.common import SERIAL, Renderer, figure, save, threads_text


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
    limit = computed.reference_limit(totals)
    part = totals[totals["workspace_limit"] == limit]
    panels = list(part.groupby(["layout", "timing_mode", "threads"], sort=False))
    relative = len(policies) > 1 and "oracle" in policies
    columns = len(policies) * part["effective_precision"].nunique() * len(panels)
    fig = figure(max(6.0, 1.2 + 0.45 * columns), 3.8)
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, ((layout, mode, threads), rows) in zip(axes, panels):
        _network_axis(ax, rows, policies, relative)
        ax.text(0.5, 1.02, f"{layout} · {mode}{threads_text(threads, ' · ')} · "
                           f"{tables.fmt_limit(limit)} workspace",
                transform=ax.transAxes, ha="center", fontsize=9)
    axes[0].set_ylabel("network total / oracle total" if relative else "network total (ms)",
                       fontsize=9)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=len(policies),
               fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.9 / fig.get_figwidth(), right=0.99, top=0.84, bottom=0.16,
                        wspace=0.08)
    save(fig, path)


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
              for p, t in zip(rows["effective_precision"], rows["total_oracle"])]
    ax.set_xticks(x, labels, fontsize=8)
    if relative:
        ax.axhline(1.0, color="black", linewidth=0.8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
