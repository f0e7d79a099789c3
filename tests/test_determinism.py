"""The cost of determinism (harness/analysis/determinism.py and its report blocks) on hand-made
frames: every expected number is computed here by hand."""
from __future__ import annotations

import math

import pytest

from harness.analysis import determinism
from harness.report import answers, text

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame, row
except ImportError:
    from tests.report_fixtures import frame, row


def _cost_frame():
    # L1 (x3): the fastest is nondeterministic at 1.0 ms, the fastest deterministic 20% slower;
    # L2 (x1): the fastest is deterministic. cuDNN's heuristic picks L1's nondeterministic one.
    return frame(row(layer="L1", algorithm="algo_0", ms=1.0, multiplicity=3,
                     deterministic=False, heuristic_pick=True),
                 row(layer="L1", algorithm="algo_1", ms=1.2, multiplicity=3, deterministic=True,
                     heuristic_pick=False),
                 row(layer="L2", algorithm="algo_1", ms=0.5, deterministic=True,
                     heuristic_pick=True))


def test_a_deterministic_best_20_percent_slower_costs_that_times_the_multiplicity():
    points = determinism.point_cost(_cost_frame()).set_index("layer")
    assert points.loc["L1", "cost_ms"] == pytest.approx(0.2)
    assert points.loc["L1", "cost_pct"] == pytest.approx(20.0)
    assert points.loc["L2", "cost_ms"] == 0.0
    step = determinism.network_cost(_cost_frame()).iloc[0]
    assert step["total_oracle"] == pytest.approx(1.0 * 3 + 0.5)
    assert step["total_deterministic"] == pytest.approx(1.2 * 3 + 0.5)
    assert step["cost_ms"] == pytest.approx(0.6)
    assert step["cost_pct"] == pytest.approx(100 * 0.6 / 3.5)


def test_nondeterministic_picks_of_the_heuristic_and_pytorch_are_marked():
    df = frame(*_cost_frame().to_dict("records"),
               row(layer="L2", backend="torch_gpu", algorithm="cudnn_benchmark", ms=0.6,
                   deterministic=False))
    points = determinism.point_cost(df).set_index("layer")
    assert points.loc["L1", "cudnn_heuristic_deterministic"] == False  # noqa: E712
    assert points.loc["L2", "cudnn_heuristic_deterministic"] == True  # noqa: E712
    assert points.loc["L2", "pytorch_deterministic"] == False  # noqa: E712
    step = determinism.network_cost(df).iloc[0]
    assert step["nondeterministic_cudnn_heuristic"] == 1 and step["nondeterministic_pytorch"] == 1
    shown = text.render(answers.determinism_blocks(df))
    assert "cudnn:algo_0 (nondeterministic)" in shown
    assert "torch_gpu:cudnn_benchmark (nondeterministic)" in shown
    assert "cudnn:algo_1 (nondeterministic)" not in shown


def test_without_a_verified_deterministic_algorithm_the_cost_is_unknown_not_zero():
    # L2's only algorithm was never checked (deterministic unknown): it cannot be chosen in
    # deterministic mode, so the step's deterministic total misses a point and has no cost
    df = frame(row(layer="L1", algorithm="algo_1", ms=1.0, deterministic=True),
               row(layer="L2", algorithm="algo_0", ms=0.5, deterministic=None))
    point = determinism.point_cost(df).set_index("layer").loc["L2"]
    assert math.isnan(point["det_ms"]) and math.isnan(point["cost_ms"])
    step = determinism.network_cost(df).iloc[0]
    assert step["missing_deterministic"] == 1 and math.isnan(step["cost_ms"])
    shown = text.render(answers.determinism_blocks(df))
    assert "≥ 1 (1 of 2 points missing)" in shown
