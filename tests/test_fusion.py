"""What fusion saves (harness/analysis/fusion.py), on a hand-made frame whose answers are known."""
from __future__ import annotations

import math

import pandas as pd

from harness.analysis import fusion


def _row(layer, op, backend, algorithm, ms, status="ok", multiplicity=1):
    return {"layer": layer, "descriptor": f"d-{layer}", "batch": 32, "direction": "fwd", "op": op,
            "precision": "fp16", "effective_precision": "fp16", "layout": "NHWC",
            "workspace_limit": -1, "timing_mode": "warm", "threads": 0,
            "multiplicity": multiplicity, "backend": backend, "algorithm": algorithm,
            "status": status, "median_ms": ms}


FRAME = pd.DataFrame([
    _row("a", "conv", "cudnn_graph", "eng1", 1.0),
    _row("a", "conv", "torch_gpu", "cudnn_benchmark", 1.1),
    _row("a", "conv_bias_relu", "cudnn_graph", "eng1", 1.05),
    _row("a", "conv_bias_relu", "cudnn_graph", "eng2", 1.5),
    _row("a", "conv_bias_relu", "cudnn_graph", "eng3", 0.5, status="wrong"),   # never counts
    _row("a", "conv_bias_relu", "cudnn_graph", "unfused", 1.3),
    _row("a", "conv_bias_relu", "torch_gpu", "cudnn_benchmark", 1.4),
    _row("b", "conv", "cudnn_graph", "eng1", 2.0, multiplicity=3),
    _row("b", "conv_bias_relu", "cudnn_graph", "eng4", 2.1, multiplicity=3),
    _row("b", "conv_bias_relu", "cudnn_graph", "unfused", 2.5, multiplicity=3),
    _row("b", "conv_bias_relu", "torch_gpu", "cudnn_benchmark", 2.0, multiplicity=3),
    _row("c", "conv_bias_relu", "cudnn_graph", "eng1", 4.0),              # no unfused, no eager
])


def test_each_way_is_its_fastest_verified_row_and_savings_follow():
    points = fusion.point_savings(FRAME).set_index("layer")
    a = points.loc["a"]
    assert (a["fused_candidate"], a["fused_ms"]) == ("cudnn_graph:eng1", 1.05)
    assert (a["unfused_candidate"], a["unfused_ms"]) == ("cudnn_graph:unfused", 1.3)
    assert (a["eager_candidate"], a["eager_ms"]) == ("torch_gpu:cudnn_benchmark", 1.4)
    assert math.isclose(a["epilogue_ms"], 0.05) and math.isclose(a["conv_ms"], 1.0)
    assert math.isclose(a["saves_vs_unfused_ms"], 0.25)
    assert math.isclose(a["saves_vs_unfused_pct"], 100 * 0.25 / 1.3)
    assert math.isclose(points.loc["b", "saves_vs_eager_ms"], -0.1)   # eager wins: negative
    assert math.isnan(points.loc["c", "unfused_ms"]) and math.isnan(points.loc["c", "conv_ms"])
    assert set(points.index) == {"a", "b", "c"}                        # plain points are not rows


def test_network_totals_sum_only_points_where_every_way_was_verified():
    totals = fusion.network_savings(fusion.point_savings(FRAME))
    assert len(totals) == 1
    t = totals.iloc[0]
    assert (t["points"], t["points_compared"]) == (3, 2)
    assert math.isclose(t["fused_total"], 1.05 + 3 * 2.1)
    assert math.isclose(t["unfused_total"], 1.3 + 3 * 2.5)
    assert math.isclose(t["saves_vs_eager_ms"], (1.4 + 3 * 2.0) - (1.05 + 3 * 2.1))


def test_the_blocks_show_the_totals_and_every_point():
    from harness.report import fusion as section
    from harness.report import text
    out = text.render(section.fusion_blocks(FRAME))
    assert "2 of 3" in out                                      # points compared
    assert "cudnn_graph:unfused" in out and "torch_gpu:cudnn_benchmark" in out
    saved = (1.3 + 3 * 2.5) - (1.05 + 3 * 2.1)
    assert f"{saved:.4g} ms" in out or f"{saved:.3g} ms" in out, out
    assert section.has_epilogues(FRAME)
    assert not section.has_epilogues(FRAME[FRAME["op"] == "conv"])


def test_eager_is_pytorch_on_the_gpu_and_networks_stay_apart():
    cpu_peer = pd.DataFrame([_row("a", "conv_bias_relu", "torch_cpu", "conv2d", 0.01)])
    points = fusion.point_savings(pd.concat([FRAME, cpu_peer], ignore_index=True))
    assert points.set_index("layer").loc["a", "eager_ms"] == 1.4     # not oneDNN's 0.01
    two = pd.concat([FRAME.assign(suite="net1"), FRAME.assign(suite="net2")], ignore_index=True)
    totals = fusion.network_savings(fusion.point_savings(two))
    assert sorted(totals["suite"]) == ["net1", "net2"]
    assert list(totals["points_compared"]) == [2, 2]


def test_a_precision_without_an_eager_peer_is_compared_fused_against_unfused():
    """fp8 and int8 have no PyTorch convolution: their totals compare fused with unfused over
    the points where both verified, with the eager columns empty (not 0, not 'not compared')."""
    fp8 = FRAME[FRAME["backend"] != "torch_gpu"].assign(precision="fp8_e4m3",
                                                         effective_precision="fp8_e4m3")
    totals = fusion.network_savings(fusion.point_savings(pd.concat([FRAME, fp8])))
    t = totals.set_index("effective_precision").loc["fp8_e4m3"]
    assert (t["points"], t["points_compared"]) == (3, 2)
    assert math.isclose(t["saves_vs_unfused_ms"], (1.3 + 3 * 2.5) - (1.05 + 3 * 2.1))
    assert math.isnan(t["eager_total"]) and math.isnan(t["saves_vs_eager_ms"])
    fp16 = totals.set_index("effective_precision").loc["fp16"]       # unchanged beside it
    assert (fp16["points"], fp16["points_compared"]) == (3, 2)


def test_an_fp16_network_without_eager_rows_is_not_compared():
    """No eager peer is a property of the precision (fp8, int8), not of missing data: fp16
    points whose PyTorch rows failed stay 'not compared' (review of 2026-11-24)."""
    no_torch = FRAME[FRAME["backend"] != "torch_gpu"]
    t = fusion.network_savings(fusion.point_savings(no_torch)).iloc[0]
    assert (t["points"], t["points_compared"]) == (3, 0)
