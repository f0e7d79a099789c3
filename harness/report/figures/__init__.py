"""The report's figures, drawn with matplotlib's Agg canvas straight into PNG files.

matplotlib is imported inside these functions only: `import harness` must work without it
(architecture rule 4). No pyplot either: its global figure registry is state we do not need.
Each public function takes a prepared frame (computed.prepare) and returns the files it wrote.
"""
from harness.report.figures.accuracy import accuracy_figure
from harness.report.figures.common import (CONTENDED, DPI, FIGURE_KEYS, RATIO_CAP, SERIAL,
                                           STATUS_LABELS, STATUS_MARKS, ZERO_ERROR, Renderer,
                                           family_colours, figure_parts, short_names, slug)
from harness.report.figures.heatmap import (GAP, HEATMAP_COLUMNS, MAX_COLUMNS, display_names,
                                            heatmaps)
from harness.report.figures.network import network_figure
from harness.report.figures.recurrent import recurrent_figure
from harness.report.figures.roofline import roofline_figure
from harness.report.figures.workspace import PARETO_KEYS, pareto_figures, workspace_totals_figure

__all__ = [
    "CONTENDED", "DPI", "RATIO_CAP", "SERIAL", "STATUS_LABELS", "STATUS_MARKS", "ZERO_ERROR",
    "Renderer",
    "family_colours", "short_names", "slug", "heatmaps", "display_names", "HEATMAP_COLUMNS", "GAP",
    "MAX_COLUMNS", "pareto_figures", "workspace_totals_figure", "PARETO_KEYS", "accuracy_figure",
    "roofline_figure", "network_figure", "FIGURE_KEYS", "figure_parts", "recurrent_figure"
]
