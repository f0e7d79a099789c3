"""CPU algorithms against their ceilings (issue 42): the analysis (harness/analysis/ceilings.py),
its table and the report's section."""
from __future__ import annotations

import pytest

from harness import schema
from harness.analysis import ceilings
from harness.backends.cpu import peaks
from harness.measurement import Measurement
from harness.problem import ConvProblem
from harness.report import ceilings as ceiling_report
from harness.report import text
from harness.sweep import Point

PROBLEM = ConvProblem(8, 3, 32, 32, 16, 3, 3, name="layer")
PEAKS = {"cores": 2, "fp32": {"1": 100.0, "all": 200.0}, "fp64": {"1": 50.0, "all": 100.0},
         "sgemm": {"1": 90.0, "all": 180.0}, "how": "test"}


def _frame(times: dict[str, float], floor_ms: float | None = 2.0):
    rows = []
    for candidate, ms in times.items():
        backend, algorithm = candidate.split(":")
        point = Point(PROBLEM, "fwd", "fp32", "NCHW", backend, algorithm)
        extras = {"gemm_floor_ms": floor_ms} if algorithm == "im2col" else {}
        m = Measurement(point, "ok", samples_ms=(ms,) * 3, effective_precision="fp32",
                        extras=extras)
        row = schema.to_row(m, "run", "suite", {}, "now")
        rows.append({**row, **peaks.row_columns(row, PEAKS)})
    return schema.frame(rows)


def test_the_best_own_algorithm_against_onednn_and_im2col_against_its_floor() -> None:
    df = _frame({"cpu:direct": 4.0, "cpu:im2col": 3.0, "torch_cpu:conv2d": 2.5})
    table = ceilings.ceilings(df)
    row = table.iloc[0]
    assert row["own_candidate"] == "cpu:im2col" and row["own_ms"] == 3.0
    assert row["own_over_onednn"] == pytest.approx(3.0 / 2.5)
    assert row["im2col_over_floor"] == pytest.approx(3.0 / 2.0)
    gflops = PROBLEM.flops_of("fwd") / 3.0e-3 / 1e9
    assert row["own_peak_pct"] == pytest.approx(100 * gflops / 200.0)
    assert ceilings.has_ceilings(df)
    shown = text.render(ceiling_report.ceiling_blocks(df))
    assert "1.20×" in shown and "1.50×" in shown


def test_without_onednn_or_a_floor_the_cells_are_empty() -> None:
    df = _frame({"cpu:direct": 4.0}, floor_ms=None)
    row = ceilings.ceilings(df).iloc[0]
    assert row["own_candidate"] == "cpu:direct"
    assert row["onednn_ms"] != row["onednn_ms"] and row["im2col_over_floor"] != \
        row["im2col_over_floor"]          # NaN: nothing to compare with


def test_a_run_without_own_cpu_rows_says_so() -> None:
    df = _frame({"torch_cpu:conv2d": 2.5})
    assert ceilings.ceilings(df).empty
    assert "No verified CPU row" in text.render(ceiling_report.ceiling_blocks(df))
