"""What every figure shares: the canvas, saving, the parallel renderer, colours, names, panels,
text drawn as paths and log axes."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.epilogue import CONV
from harness.measurement import Status
from harness.precision import AUTO_OUTPUT
from harness.report.computed import CONTENDED
from harness.threads import ALL as ALL_THREADS

DPI = 100
# Cells that hold no time: a letter, a colour and a hatch each, so none is ever blank or confused.
STATUS_MARKS: dict[str, tuple[str, str, str]] = {
    Status.UNSUPPORTED: ("U", "#d4d4d4", "//"), Status.WORKSPACE_EXCEEDED: ("W", "#9ecae1", "\\\\"),
    Status.WRONG: ("X", "#e7298a", "xx"), Status.FAILED: ("F", "#8c8c8c", ".."),
    Status.CRASHED: ("C", "#3b3b3b", "++"), Status.NOT_TRIED: ("N", "#737373", "--"),
    CONTENDED: ("S", "#bcbddc", "||"), "": ("–", "#ffffff", ""),
}
STATUS_LABELS = {"": "not run", CONTENDED: "shared the CPU"}
# Shown in a legend only where a cell has it: no GPU figure ever shared a CPU.
OPTIONAL_MARKS = (CONTENDED,)
RATIO_CAP = 8.0           # colour scale saturates at 8x the best: beyond that it is simply slow
ZERO_ERROR = 1e-17        # where an exact result (error 0) is drawn on the log axis


def figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, facecolor="white")
    compact_png(path)
    return path


def compact_png(path: Path) -> None:
    """Rewrite a PNG with a palette of at most 256 colours, in place.

    Why: matplotlib writes RGBA; the committed evidence reports reached 35 MB of such PNGs, and
    the whole tree must fit the 64 MiB a lent GPU machine takes. The figures are flat colours,
    text and colour-mapped cells, so an adaptive palette (no dithering) looks the same at about
    a third of the bytes (a 2400x1384 heatmap: 771 kB -> 232 kB).
    """
    from PIL import Image  # matplotlib's own dependency
    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE)
    palette.save(path, "PNG", optimize=True)


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

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


SERIAL = Renderer()


def slug(*parts: Any) -> str:
    text = "_".join(str(p) for p in parts)
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-")


# What one figure holds: points alike in all of these; layers and directions are drawn inside it.
# A fused op or an asked result type is a different point (a figure that mixed them would show,
# per cell, the fastest of conv and conv+bias+ReLU, or of an fp8 and an fp32 result).
FIGURE_KEYS = ["effective_precision", "op", "output", "layout", "workspace_limit", "timing_mode",
               "threads"]


def figure_parts(info: dict[str, Any], limit_prefix: str = "") -> list[str]:
    """The words that name a figure's points, in FIGURE_KEYS order; the default op, result type
    and thread count say nothing, so a sweep without those axes keeps its figure names."""
    from harness.report.tables import fmt_limit
    parts = [str(info["effective_precision"]),
             "" if info.get("op", CONV) == CONV else str(info["op"]),
             "" if info.get("output", AUTO_OUTPUT) == AUTO_OUTPUT else f"into {info['output']}",
             str(info["layout"]),
             limit_prefix + fmt_limit(info["workspace_limit"]) if "workspace_limit" in info else "",
             str(info["timing_mode"]), threads_text(info.get("threads", ALL_THREADS))]
    return [p for p in parts if p]


def threads_text(threads: Any, prefix: str = "") -> str:
    """A thread count where the row set one (--threads); nothing for the default, so the figures
    of a sweep without the axis keep their names and labels."""
    return "" if int(threads) == ALL_THREADS else f"{prefix}{int(threads)} threads"


def short_names(candidates: list[str]) -> dict[str, str]:
    """Algorithm names alone where they are unambiguous: axis labels stay short."""
    algos = [c.split(":", 1)[-1] for c in candidates]
    return {c: a if algos.count(a) == 1 else c for c, a in zip(candidates, algos)}


def family_colours(families: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return {f: cmap(i % 10) for i, f in enumerate(sorted(set(families)))}


def panels(count: int, ncols: int, panel: tuple[float, float], labels: tuple[str, str],
            share: bool = False, gap: tuple[float, float] = (0.55, 0.6)) -> tuple[Any, list[Any]]:
    """A figure of `count` panels of `panel` inches, margins fixed in inches (not fractions) so
    one panel or twenty get the same room for the legend on top and the axis labels."""
    nrows = math.ceil(count / ncols)
    left, right, top, bottom = 0.95, 0.15, 0.6, 0.6
    width = max(left + right + ncols * panel[0] + (ncols - 1) * gap[0], 7.0)
    height = top + bottom + nrows * panel[1] + (nrows - 1) * gap[1]
    fig = figure(width, height)
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
def glyph_labels(ax: Any, texts: list[str], xy: np.ndarray, colours: list[Any], size: float = 7,
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


def log_axes(ax: Any, x: str = "log", y: str = "log") -> None:
    if x == "symlog":
        ax.set_xscale("symlog", linthresh=1.0)
    else:
        ax.set_xscale(x)
    ax.set_yscale(y)


def tidy_ticks(ax: Any) -> None:
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


def family_legend(fig: Any, colours: dict[str, Any], extra_wrong: bool = False) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", linestyle="", label=f)
               for f, c in colours.items()]
    if extra_wrong:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="",
                              label="not verified (wrong)"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
