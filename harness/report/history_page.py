"""What `convbench history` writes: Markdown (also printed), JSON, and a static HTML page with a
trend figure per series (the suite's figure and its worst points, steps marked with the range of
commits they lie between, runs in a slow spell of the host hollow)."""
from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.history import CONFIRMED, SeriesHistory, Step
from harness.report.figures.common import figure

WORST_POINTS = 4     # points drawn beside the suite: those that moved most, first to last


def markdown(histories: list[SeriesHistory]) -> str:
    lines = ["## convbench history", ""]
    for h in histories:
        lines += [f"### {_title(h)}", "", f"{len(h.runs)} runs, {_first_last(h)}.", ""]
        noisy = [f"run {i + 1} {r.label} ({r.noise})" for i, r in enumerate(h.runs) if r.noise]
        if noisy:
            lines += [f"Left out of the steps: {'; '.join(noisy)}.", ""]
        if not h.steps and not h.drifts:
            lines += ["No step and no drift.", ""]
        if h.steps:
            lines += ["| state | verdict | where | between | change | p | runs after | bar |",
                      "|---|---|---|---|---:|---:|---:|---:|"]
            lines += [_step_line(h, s) for s in h.steps]
            lines.append("")
        for d in h.drifts:
            lines += [f"Drift of the {d.series}: {d.ratio - 1:+.1%} from the first runs to the "
                      f"last (Kendall tau {d.tau:+.2f}, p {d.p_value:.2g}), no step explains "
                      "it.", ""]
        gate = h.newest_confirms_regression()
        if gate:
            lines += [f"**The newest run confirms a regression** ({len(gate)} step(s)).", ""]
    return "\n".join(lines)


def to_json(histories: list[SeriesHistory]) -> str:
    return json.dumps([{
        "series": h.key, "suite": h.suite,
        "runs": [{"run_id": r.run_id, "finished": r.finished, "commit": r.commit,
                  "spell": r.spell, "shared": r.shared, "left_out": r.noise,
                  "suite_ratio": _number(f)}
                 for r, f in zip(h.runs, h.suite_figure)],
        "steps": [{"series": s.series, "state": s.state, "verdict": s.verdict,
                   "after_run": h.runs[s.at].run_id, "before_run": h.runs[s.at - 1].run_id,
                   "ratio": s.ratio, "p_value": s.p_value, "runs_after": s.runs_after,
                   "bar": s.bar} for s in h.steps],
        "drifts": [{"series": d.series, "ratio": d.ratio, "tau": d.tau, "p_value": d.p_value}
                   for d in h.drifts],
        "newest_confirms_regression": bool(h.newest_confirms_regression()),
    } for h in histories], indent=2)


def write_html(histories: list[SeriesHistory], folder: Path) -> Path:
    """history.html with one figure (PNG beside it) per series."""
    parts = ["<!doctype html><meta charset='utf-8'><title>convbench history</title>",
             "<style>body{font-family:sans-serif;max-width:72em;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
             "</style><h1>convbench history</h1>"]
    for number, h in enumerate(histories, start=1):
        name = f"history-{number}.png"
        _trend_figure(h).savefig(folder / name)
        parts += [f"<h2>{html.escape(_title(h))}</h2>",
                  f"<p>{len(h.runs)} runs, {html.escape(_first_last(h))}.</p>",
                  f"<img src='{name}' alt='trend of {html.escape(h.suite)}'>",
                  _steps_table(h)]
    path = folder / "history.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _trend_figure(h: SeriesHistory) -> Any:
    fig = figure(10, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(1, len(h.runs) + 1)
    ax.plot(x, h.suite_figure, "o-", color="black", label="suite (geometric mean)", zorder=3)
    noisy = [i for i, r in enumerate(h.runs) if r.noise]
    ax.plot(x[noisy], np.array(h.suite_figure)[noisy], "o", mfc="white", color="black",
            label="slow spell or shared CPU (left out)", zorder=4)
    for point, values in _worst_points(h):
        ax.plot(x, values, ".-", alpha=0.6, label=point[:60])
    for s in h.steps:
        colour = "#d62728" if s.verdict == "SLOWER" else "#2ca02c"
        if s.series != "suite":      # a point's step: a tick at the foot, counted in the table
            ax.plot([s.at + 0.5], [0.0], marker="^", color=colour, alpha=0.5,
                    transform=ax.get_xaxis_transform(), clip_on=False)
            continue
        ax.axvline(s.at + 0.5, color=colour, linestyle="-" if s.state == CONFIRMED else ":")
        ax.annotate(f"suite {s.ratio - 1:+.0%} {s.state}\n{_between(h, s)}",
                    (s.at + 0.55, 0.98), xycoords=("data", "axes fraction"), va="top",
                    fontsize=7, color=colour)
    ax.set_xticks(x)
    ax.set_xlabel("run (oldest first; a triangle at the foot: a point's step)")
    ax.set_ylabel("time / the series' median")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _worst_points(h: SeriesHistory) -> list[tuple[str, np.ndarray]]:
    medians = h.point_figures
    if medians.empty or len(medians) < 2:
        return []
    relative = medians / medians.median()
    half = max(len(relative) // 2, 1)
    moved = (relative.iloc[-half:].median() / relative.iloc[:half].median()).abs()
    worst = moved.sort_values(ascending=False).index[:WORST_POINTS]
    return [(str(pid).split("|")[0] + " " + str(pid).split("|")[2], relative[pid].to_numpy())
            for pid in worst]


def _steps_table(h: SeriesHistory) -> str:
    if not h.steps:
        return "<p>No step.</p>"
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _step_cells(h, s))
                   + "</tr>" for s in h.steps)
    head = "".join(f"<th>{c}</th>" for c in ("state", "verdict", "where", "between", "change",
                                               "p", "runs after", "bar"))
    return f"<table><tr>{head}</tr>{rows}</table>"


def _step_line(h: SeriesHistory, s: Step) -> str:
    return "| " + " | ".join(_step_cells(h, s)) + " |"


def _step_cells(h: SeriesHistory, s: Step) -> list[str]:
    p = "n/a" if s.p_value is None else f"{s.p_value:.2g}"
    return [s.state, s.verdict, s.series, _between(h, s), f"{s.ratio - 1:+.1%}", p,
            str(s.runs_after), f"±{s.bar:.1%}"]


def _between(h: SeriesHistory, s: Step) -> str:
    """The step's range: the last run before it and the first after it (commit, else run id),
    with their positions in the series."""
    before, after = h.runs[s.at - 1], h.runs[s.at]
    return f"{before.label} (run {s.at}) .. {after.label} (run {s.at + 1})"


def _title(h: SeriesHistory) -> str:
    machine = ", ".join(f"{k} {v}" for k, v in h.key.items() if k != "suite")
    return f"suite {h.suite}" + (f" on {machine}" if machine else "")


def _first_last(h: SeriesHistory) -> str:
    return f"{h.runs[0].finished} to {h.runs[-1].finished}" if h.runs else "none"


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None
