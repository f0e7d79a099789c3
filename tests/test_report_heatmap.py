"""The heatmap's layout: its status legend sits clear of every tick label and axis label, measured
with matplotlib's own renderer on the drawn figure (the legend once covered the rotated
algorithm names under the matrix)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.report import computed, figures
from harness.report.figures import heatmap

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import cpu_frame, gpu_frame
except ImportError:
    from tests.report_fixtures import cpu_frame, gpu_frame


class _Capture(figures.Renderer):
    """Keeps what each heatmap was handed instead of drawing it."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, pd.DataFrame] = {}

    def submit(self, job, *args) -> None:
        self.parts[args[-1].name] = args[0]


def _parts(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    capture = _Capture()
    heatmap.heatmaps(computed.prepare(df), Path("unused"), capture)
    return capture.parts


def _label_boxes(fig, renderer) -> list[tuple[str, object]]:
    """Every visible tick label and axis label of every axes (the colour bar's included)."""
    boxes = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            texts = [*axis.get_ticklabels(), axis.label]
            boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in texts
                      if t.get_visible() and t.get_text()]
    boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in fig.texts if t.get_text()]
    return boxes


# A narrow figure (a CPU run: few columns, the legend in rows) and wide ones (a GPU run).
# Not named "gpu": conftest skips tests with that keyword where no GPU is.
CASES = {"narrow": cpu_frame, "wide": lambda: gpu_frame("small")}


@pytest.mark.parametrize("source", sorted(CASES))
def test_the_legend_overlaps_no_tick_or_axis_label(source: str) -> None:
    parts = _parts(CASES[source]())
    assert parts
    for name, part in parts.items():
        assert part["layer_label"].nunique() >= 4, name       # several layers, as asked
        fig = heatmap.heatmap_figure(part)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = fig.legends
        assert len(legends) == 1, name
        legend = legends[0].get_window_extent(renderer)
        labels = _label_boxes(fig, renderer)
        assert len(labels) > part["layer_label"].nunique(), name    # the check saw the labels
        hits = [text for text, box in labels if box.overlaps(legend)]
        assert not hits, f"{name}: the legend covers {hits}"
        # ...and stays inside the picture, where a reader can see all of it
        width, height = fig.canvas.get_width_height()
        assert legend.x0 >= 0 and legend.y0 >= 0 and legend.x1 <= width \
            and legend.y1 <= height, (name, legend, width, height)
