"""The 3-D layers view (analysis/depth.py, report/depth.py): each backend's best or its reason."""
from __future__ import annotations

from harness import runner, schema
from harness.analysis import depth
from harness.problem import ConvProblem
from harness.report import depth as section
from harness.report import text
from harness.sweep import Point, TimingOptions

FAST = TimingOptions(budget_ms=2, min_samples=3, max_samples=10)
CUBE = ConvProblem(1, 4, 6, 6, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                   in_d=4, kernel_d=3, pad_front=1, pad_back=1, name="cube")
FLAT = ConvProblem(1, 4, 6, 6, 4, 3, 3, name="flat")


def _frame(points):
    rows = [schema.to_row(runner.run_point(p), "r", "s", {}, schema.finished_now())
            for p in points]
    return schema.frame(rows)


def _point(problem, backend, algorithm):
    return Point(problem, "fwd", "fp32", "NCHW", backend, algorithm, timing=FAST)


def test_each_backend_shows_its_best_or_why_it_has_none():
    df = _frame([_point(CUBE, "cpu", "direct"), _point(CUBE, "cpu", "im2col"),
                 _point(CUBE, "fake", "exact"), _point(FLAT, "cpu", "direct")])
    assert list(depth.is_3d(df)) == [True, True, True, False]
    points = depth.point_backends(df)
    assert len(points) == 1 and points.loc[0, "layer"] == "cube"
    row = points.iloc[0]
    assert row["shape"] == "4x6x6 → 4x6x6, k3x3x3"
    assert isinstance(row["cpu"], float) and row["cpu"] > 0   # direct ran; im2col's refusal hidden
    assert row["best_candidate"] in ("cpu:direct", "fake:exact")
    only_refused = depth.point_backends(df[df["algorithm"] != "direct"]).iloc[0]
    assert only_refused["cpu"].startswith("3-D convolution: not yet supported by cpu")
    out = text.render(section.conv3d_blocks(df))
    assert "3-D convolution: not yet" not in out and "cube" in out
    assert section.has_3d(df) and not section.has_3d(df[~depth.is_3d(df)])


def test_a_2d_frame_has_no_3d_section():
    out = text.render(section.conv3d_blocks(_frame([_point(FLAT, "cpu", "direct")])))
    assert out.strip() == "No 3-D layer in these results."
