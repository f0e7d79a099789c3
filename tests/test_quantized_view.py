"""What fp8 and int8 buy over fp16 (harness/analysis/quantized.py, report/quantized.py and
`convbench table --quantized`), on a hand-made frame whose answers are worked out by hand."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import store
from harness.analysis import quantized
from harness.cli import main
from harness.report import quantized as section
from harness.report import render_report, text

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame, row
except ImportError:
    from tests.report_fixtures import frame, row

NOT_SUPPORTED = "CUDNN_STATUS_NOT_SUPPORTED: no engine for this graph"


def _q(layer, precision, algorithm, ms, rel_error=None, status="ok", reason=None, **extras):
    return row(layer=layer, backend="cudnn_graph", algorithm=algorithm, ms=ms,
               precision=precision, status=status, reason=reason, rel_error=rel_error,
               descriptor=f"d-{layer}", suite="net", **extras)


def _fp16(layer, ms, backend="cudnn", algorithm="implicit_gemm", **extras):
    return row(layer=layer, backend=backend, algorithm=algorithm, ms=ms, precision="fp16",
               descriptor=f"d-{layer}", rel_error=1e-4, suite="net", **extras)


ROWS = [
    # a: fp8 0.01 ms (the faster of two verified) against fp16 0.02 ms -> 2.0x
    _fp16("a", 0.02), _fp16("a", 0.03, "torch_gpu", "cudnn_benchmark"),
    _fp16("a", 0.001, algorithm="fft", status="wrong"),       # fast but wrong: never counts
    _fp16("a", 0.001, layout="NHWC"),                         # another layout: another point
    row(layer="a", ms=0.001, precision="fp32", descriptor="d-a", suite="net"),  # not fp16
    _q("a", "fp8_e4m3", "eng1", 0.01, 0.004), _q("a", "fp8_e4m3", "eng2", 0.012, 0.006),
    _q("a", "fp8_e4m3", "eng3", None, status="unsupported", reason=NOT_SUPPORTED),
    # b: fp8 0.02 ms against fp16 0.01 ms -> 0.5x; a crashed and a failed row beside it
    _fp16("b", 0.01), _q("b", "fp8_e4m3", "eng1", 0.02, 0.003),
    _q("b", "fp8_e4m3", "eng2", None, status="crashed", reason="illegal address"),
    _q("b", "fp8_e4m3", "eng4", None, status="failed", reason="CUDNN_STATUS_EXECUTION_FAILED"),
    # c: no verified fp8 plan: two refusals and a wrong result
    _fp16("c", 0.05),
    _q("c", "fp8_e4m3", "eng1", None, status="unsupported", reason=NOT_SUPPORTED),
    _q("c", "fp8_e4m3", "eng2", None, status="wrong", reason="rel error 0.3 > tolerance 0.01"),
    _q("c", "fp8_e4m3", "eng3", None, status="unsupported", reason=NOT_SUPPORTED),
    # d: a verified fp8 plan but no fp16 row to compare with
    _q("d", "fp8_e4m3", "eng1", 0.01, 0.002),
    # int8 at a: 0.005 ms -> 4.0x; int8's backward does not exist
    _q("a", "int8", "eng9", 0.005, 0.0),
    _fp16("a", 0.04, direction="bwd_data"),
    _q("a", "int8", "eng9", None, status="unsupported", direction="bwd_data",
       reason="int8 is forward-only"),
]
FRAME = frame(*ROWS)


def _points():
    points = quantized.point_speedups(FRAME)
    return points.set_index(["layer", "effective_precision", "direction"])


def test_each_point_compares_its_fastest_verified_quantized_row_with_fp16():
    points = _points()
    a = points.loc[("a", "fp8_e4m3", "fwd")]
    assert (a["quantized_candidate"], a["quantized_ms"]) == ("cudnn_graph:eng1", 0.01)
    assert a["quantized_rel_error"] == 0.004 and a["max_rel_error"] == 0.006
    assert (a["fp16_candidate"], a["fp16_ms"]) == ("cudnn:implicit_gemm", 0.02)
    assert a["speedup"] == pytest.approx(2.0)                       # 0.02 / 0.01
    assert (a["rows"], a["ok_rows"], a["unsupported_rows"]) == (3, 2, 1)
    assert points.loc[("b", "fp8_e4m3", "fwd"), "speedup"] == pytest.approx(0.5)
    assert points.loc[("a", "int8", "fwd"), "speedup"] == pytest.approx(4.0)
    d = points.loc[("d", "fp8_e4m3", "fwd")]
    assert d["quantized_ms"] == 0.01 and math.isnan(d["fp16_ms"]) and math.isnan(d["speedup"])
    # a, b, c, d at fp8; a fwd at int8 (int8 backward is no point: the precision has none)
    assert len(points) == 5 and ("a", "int8", "bwd_data") not in points.index


def test_a_point_without_a_verified_quantized_row_is_kept_with_its_most_common_reason():
    points = _points()
    c = points.loc[("c", "fp8_e4m3", "fwd")]
    assert c["reason"] == f"no verified plan: cudnn_graph: {NOT_SUPPORTED}"   # 2 of its 3 rows
    assert math.isnan(c["quantized_ms"]) and c["fp16_ms"] == 0.05
    assert (c["rows"], c["ok_rows"], c["unsupported_rows"], c["wrong_rows"]) == (3, 0, 2, 1)
    assert pd.isna(points.loc[("a", "fp8_e4m3", "fwd"), "reason"])


def test_the_summary_per_precision_and_direction():
    totals = quantized.summary(quantized.point_speedups(FRAME)).set_index(
        ["effective_precision", "direction"])
    fp8 = totals.loc[("fp8_e4m3", "fwd")]
    assert (fp8["points"], fp8["points_compared"], fp8["no_plan"]) == (4, 2, 1)
    assert fp8["speedup_geomean"] == pytest.approx(1.0)            # sqrt(2.0 x 0.5)
    assert (fp8["speedup_min"], fp8["speedup_max"]) == pytest.approx((0.5, 2.0))
    assert fp8["max_rel_error_fastest"] == 0.004                    # of a, b, d's fastest
    assert fp8["max_rel_error"] == 0.006                            # a's slower plan
    counts = [fp8[c] for c in ("rows", "ok_rows", "unsupported_rows", "wrong_rows",
                               "crashed_rows", "other_rows")]
    assert counts == [10, 4, 3, 1, 1, 1]
    int8 = totals.loc[("int8", "fwd")]
    assert (int8["points_compared"], int8["speedup_geomean"]) == (1, pytest.approx(4.0))
    assert ("int8", "bwd_data") not in totals.index     # no such direction, no summary line


def test_keys_without_a_value_still_match():
    # no suite, an unnamed layer: NA in the point key (pandas aligns NA keys badly)
    unnamed = FRAME.assign(suite=pd.NA, layer=FRAME["layer"].where(FRAME["layer"] != "a"))
    points = quantized.point_speedups(unnamed)
    a = points[points["descriptor"] == "d-a"].set_index(["effective_precision", "direction"])
    assert a.loc[("fp8_e4m3", "fwd"), "speedup"] == pytest.approx(2.0)
    assert len(points) == 5
    totals = quantized.summary(points).set_index(["effective_precision", "direction"])
    assert totals.loc[("fp8_e4m3", "fwd"), "speedup_geomean"] == pytest.approx(1.0)
    assert totals.loc[("fp8_e4m3", "fwd"), "rows"] == 10


def test_networks_stay_apart():
    two = frame(*[{**r, "suite": s} for s in ("net1", "net2") for r in ROWS])
    totals = quantized.summary(quantized.point_speedups(two))
    fwd = totals[(totals["effective_precision"] == "fp8_e4m3") & (totals["direction"] == "fwd")]
    assert sorted(fwd["suite"]) == ["net1", "net2"] and list(fwd["points_compared"]) == [2, 2]


def test_the_blocks_show_the_summary_every_point_and_the_points_without_a_plan():
    out = text.render(section.quantized_blocks(FRAME))
    assert "2 of 4" in out and "1.00×" in out and "0.50× – 2.00×" in out and "4.00×" in out
    assert "cudnn_graph:eng1" in out and "cudnn:implicit_gemm" in out
    assert "Points with no verified plan (1)" in out and NOT_SUPPORTED in out
    assert "int8 is forward-only" not in out and "int8: fwd fp32, forward only" in out
    assert "4 / 3 / 1 / 1 / 1" in out             # the 10 fp8 rows: ok / U / W / C / other
    assert "±127" in out and "bwd_filter fp32" in out and "int8: fwd fp32, forward only" in out
    assert section.has_quantized(FRAME)
    assert not section.has_quantized(FRAME[~FRAME["precision"].isin(["fp8_e4m3", "int8"])])


def test_a_frame_without_quantized_rows_says_so():
    out = text.render(section.quantized_blocks(frame(_fp16("a", 0.02))))
    assert out.startswith("No row at a quantized precision")


def test_table_quantized_prints_the_section(tmp_path, capsys):
    store.write(FRAME, tmp_path / "r.parquet")
    assert main(["table", "--quantized", str(tmp_path / "r.parquet")]) == 0
    out = capsys.readouterr().out
    assert "Quantized precisions against fp16" in out and "2 of 4" in out
    assert "1.00×" in out and "4.00×" in out and "0.50× – 2.00×" in out
    assert NOT_SUPPORTED in out
    assert main(["table", "--quantized", "--fusion", str(tmp_path / "r.parquet")]) == 2


def test_the_report_has_the_section_only_when_there_are_quantized_rows(tmp_path):
    paths = render_report(FRAME, tmp_path / "with")
    page = paths.markdown.read_text()
    assert "Quantized precisions" in page and "2 of 4" in page
    assert "| 1.00× | 0.50× – 2.00× |" in page and "| 4.00× |" in page
    plain = FRAME[FRAME["precision"] == "fp16"]
    assert "Quantized precisions" not in render_report(plain, tmp_path / "without"
                                                       ).markdown.read_text()


def test_a_backends_many_refusals_do_not_hide_anothers_library_status():
    """Legacy cuDNN refuses fp8 once per algorithm (8 rows); the graph API's one row says why
    cuDNN itself has no plan: the reason names each backend's own (found in the H100 report)."""
    legacy = [row(layer="e", backend="cudnn", algorithm=f"algo_{i}", ms=None,
                  precision="fp8_e4m3", status="unsupported",
                  reason="the legacy API has no fp8 convolution", descriptor="d-e", suite="net")
              for i in range(8)]
    graph = _q("e", "fp8_e4m3", "engines", None, status="unsupported",
               reason="No valid engine configs for ConvBwdData")
    points = quantized.point_speedups(frame(*legacy, graph, _fp16("e", 0.03)))
    assert points["reason"].iloc[0] == ("no verified plan: cudnn: the legacy API has no fp8 "
                                        "convolution; cudnn_graph: No valid engine configs for "
                                        "ConvBwdData")


def test_a_point_asked_in_another_result_type_is_compared_with_its_own_type_too():
    # a at fp8 written as fp8 (0.005 ms) against a in fp8's own fp16 (0.01 ms): 2.0x; against
    # fp16 data 0.02 ms: 4.0x. Only the asked point gets the own-type ratio.
    df = frame(*ROWS, _q("a", "fp8_e4m3", "eng1", 0.005, 0.03, output="fp8_e4m3"),
               _q("a", "fp8_e4m3", "eng2", 0.004, status="wrong", output="fp8_e4m3"))
    points = quantized.point_speedups(df).set_index(
        ["layer", "effective_precision", "direction", "output"])
    asked = points.loc[("a", "fp8_e4m3", "fwd", "fp8_e4m3")]
    assert (asked["own_output_ms"], asked["speedup_vs_own"]) == (0.01, pytest.approx(2.0))
    assert asked["speedup"] == pytest.approx(4.0) and asked["quantized_rel_error"] == 0.03
    own = points.loc[("a", "fp8_e4m3", "fwd", "auto")]
    assert math.isnan(own["speedup_vs_own"]) and own["quantized_ms"] == 0.01
    totals = quantized.summary(quantized.point_speedups(df)).set_index(
        ["effective_precision", "direction", "output"])
    assert totals.loc[("fp8_e4m3", "fwd", "fp8_e4m3"), "vs_own_geomean"] == pytest.approx(2.0)
    out = text.render(section.quantized_blocks(df))
    assert "Speed-up over own result type" in out and "2.00×" in out
    assert "Speed-up over own result type (geomean)" not in text.render(
        section.quantized_blocks(FRAME))
