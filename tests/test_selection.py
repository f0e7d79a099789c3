"""Selection analysis on small synthetic results frames (runs anywhere)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import store
from harness.analysis import selection

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame as _frame
    from report_fixtures import row as _row
except ImportError:
    from tests.report_fixtures import frame as _frame
    from tests.report_fixtures import row as _row


def _pick(sel: pd.DataFrame, policy: str, **where) -> pd.Series:
    mine = sel[sel["policy"] == policy]
    for column, value in where.items():
        mine = mine[mine[column] == value]
    assert len(mine) == 1, mine
    return mine.iloc[0]


def test_oracle_excludes_torch_and_pytorch_may_beat_it():
    df = _frame(_row(algorithm="gemm", ms=2.0, heuristic_pick=True, find_pick=False),
                _row(algorithm="winograd", ms=1.0, heuristic_pick=False, find_pick=True),
                _row(backend="torch_gpu", algorithm="cudnn_benchmark", ms=0.5))
    sel = selection.selection(df)
    assert set(sel["oracle_algorithm"]) == {"winograd"}
    assert set(sel["oracle_backend"]) == {"cudnn"}
    torch = _pick(sel, "pytorch")
    assert torch["regret"] == pytest.approx(0.5) and bool(torch["picks_oracle"])


def test_a_policy_that_picks_the_oracle_has_regret_one():
    df = _frame(_row(algorithm="gemm", ms=2.0, heuristic_pick=True, find_pick=False),
                _row(algorithm="winograd", ms=1.0, heuristic_pick=False, find_pick=True))
    sel = selection.selection(df)
    find = _pick(sel, "cudnn_find")
    assert find["regret"] == 1.0 and bool(find["picks_oracle"])
    heuristic = _pick(sel, "cudnn_heuristic")
    assert heuristic["regret"] == 2.0 and not bool(heuristic["picks_oracle"])
    summary = selection.policy_summary(sel).set_index("policy")
    assert summary.loc["cudnn_find", "picks_oracle_pct"] == 100.0
    assert summary.loc["cudnn_heuristic", "max_regret"] == 2.0


def test_within_one_percent_counts_as_the_oracle():
    df = _frame(_row(algorithm="a", ms=1.0, heuristic_pick=False),
                _row(algorithm="b", ms=1.009, heuristic_pick=True))
    assert bool(_pick(selection.selection(df), "cudnn_heuristic")["picks_oracle"])


def test_network_totals_weight_layers_by_multiplicity():
    df = _frame(_row(layer="L1", algorithm="a", ms=1.0, multiplicity=1, heuristic_pick=False),
                _row(layer="L1", algorithm="b", ms=2.0, multiplicity=1, heuristic_pick=True),
                _row(layer="L2", algorithm="a", ms=1.0, multiplicity=3, heuristic_pick=True),
                _row(layer="L2", algorithm="b", ms=3.0, multiplicity=3, heuristic_pick=False))
    totals = selection.network_totals(selection.selection(df))
    row = totals[totals["policy"] == "cudnn_heuristic"].iloc[0]
    assert row["policy_total_ms"] == pytest.approx(2.0 * 1 + 1.0 * 3)
    assert row["oracle_total_ms"] == pytest.approx(1.0 * 1 + 1.0 * 3)
    assert row["ratio"] == pytest.approx(5.0 / 4.0) and row["layers_missing"] == 0


def test_graph_heuristic_takes_the_best_ranked_verified_plan():
    df = _frame(_row(backend="cudnn_graph", algorithm="eng1_k2=0", status="unsupported"),
                _row(backend="cudnn_graph", algorithm="eng7", ms=3.0, graph_heuristic_rank=1),
                _row(backend="cudnn_graph", algorithm="eng9", ms=1.0, graph_heuristic_rank=2),
                _row(backend="cudnn_graph", algorithm="eng4", ms=0.9))   # offered by B only
    pick = _pick(selection.selection(df), "graph_heuristic")
    assert pick["policy_algorithm"] == "eng7" and pick["regret"] == pytest.approx(3.0 / 0.9)


def test_policies_answer_for_the_precision_asked_for():
    # A graph plan asked for fp32 that computes at TF32 accuracy: it is the heuristic's fp32
    # pick, but it never becomes the fp32 oracle; it competes in the tf32 setting instead.
    df = _frame(_row(algorithm="implicit_gemm", ms=2.0, heuristic_pick=True),
                _row(backend="cudnn_graph", algorithm="eng0", ms=0.5, effective="tf32",
                     graph_heuristic_rank=0),
                _row(algorithm="implicit_gemm", ms=0.8, precision="tf32", heuristic_pick=True))
    sel = selection.selection(df)
    graph = _pick(sel, "graph_heuristic")
    assert graph["effective_precision"] == "fp32" and not bool(graph["precision_kept"])
    assert graph["oracle_ms"] == 2.0
    # 0.5 ms against the fp32 oracle's 2.0 would read as a 4x win: no regret is claimed
    assert math.isnan(graph["regret"]) and pd.isna(graph["picks_oracle"])
    summary = selection.policy_summary(sel).set_index("policy")
    assert summary.loc["graph_heuristic", "precision_lowered"] == 1
    tf32 = _pick(sel, "cudnn_heuristic", effective_precision="tf32")
    assert tf32["oracle_algorithm"] == "eng0" and tf32["regret"] == pytest.approx(1.6)
    assert bool(tf32["precision_kept"])


def test_workspace_limits_are_separate_settings_and_unfit_picks_have_no_time():
    df = _frame(_row(algorithm="fft", ms=1.0, limit=-1, heuristic_pick=True),
                _row(algorithm="gemm", ms=2.0, limit=-1, heuristic_pick=False),
                _row(algorithm="fft", status="workspace_exceeded", limit=0),
                _row(algorithm="gemm", ms=2.0, limit=0, heuristic_pick=True),
                _row(backend="torch_gpu", algorithm="cudnn_benchmark", status="workspace_exceeded",
                     limit=0))
    sel = selection.selection(df)
    assert _pick(sel, "cudnn_heuristic", workspace_limit=0)["regret"] == 1.0
    assert _pick(sel, "cudnn_heuristic", workspace_limit=-1)["oracle_ms"] == 1.0
    torch = _pick(sel, "pytorch", workspace_limit=0)
    assert torch["policy_status"] == "workspace_exceeded" and math.isnan(torch["regret"])


def test_versus_pytorch_geometric_mean_and_worst_points():
    rows = []
    for layer, oracle_ms, torch_ms in (("L1", 1.0, 2.0), ("L2", 2.0, 1.0), ("L3", 1.0, 1.0)):
        rows += [_row(layer=layer, ms=oracle_ms),
                 _row(layer=layer, backend="torch_gpu", algorithm="cudnn_benchmark", ms=torch_ms)]
    gap = selection.versus_pytorch(selection.selection(_frame(*rows)), worst=1)
    row = gap.iloc[0]
    assert row["points"] == 3 and row["geomean_oracle_over_pytorch"] == pytest.approx(1.0)
    assert row["worst"] == 2.0 and row["worst_points"].startswith("L2 fwd")


def test_format_selection_takes_results_or_selection_frames():
    df = _frame(_row(algorithm="gemm", ms=2.0, heuristic_pick=True, find_pick=True),
                _row(backend="torch_gpu", algorithm="cudnn_benchmark", ms=1.5))
    text = selection.format_selection(df)
    assert text == selection.format_selection(selection.selection(df))
    for word in ("cudnn_heuristic", "cudnn_find", "pytorch", "Network totals", "0.75"):
        assert word in text
    assert "No policy picks" in selection.format_selection(store.frame([]))


def test_a_policy_without_rows_answers_nothing():
    # legacy-only results: no graph plans, no PyTorch rows, so neither policy appears at all
    df = _frame(_row(algorithm="implicit_gemm", ms=2.0, heuristic_pick=True),
                _row(algorithm="gemm", ms=1.0))
    sel = selection.selection(df)
    assert set(sel["policy"]) == {"cudnn_heuristic"}
    assert set(selection.policy_summary(sel)["policy"]) == {"cudnn_heuristic"}
    assert "n32 fp32" in selection.policy_summary(sel)["worst_setting"].iloc[0]


def test_versus_pytorch_adds_an_overall_row_across_settings():
    rows = []
    for layout, oracle_ms, torch_ms in (("NCHW", 1.0, 2.0), ("NHWC", 1.0, 0.5)):
        for r in (_row(ms=oracle_ms), _row(backend="torch_gpu", algorithm="cudnn_benchmark",
                                           ms=torch_ms)):
            rows.append({**r, "layout": layout})
    gap = selection.versus_pytorch(selection.selection(_frame(*rows))).set_index("layout")
    assert list(gap.index) == ["NCHW", "NHWC", "all"]
    assert gap.loc["NCHW", "geomean_oracle_over_pytorch"] == pytest.approx(0.5)
    assert gap.loc["all", "geomean_oracle_over_pytorch"] == pytest.approx(1.0)   # sqrt(0.5 * 2)
    assert gap.loc["all", "points"] == 2 and gap.loc["all", "worst"] == pytest.approx(2.0)


def test_versus_pytorch_counts_the_points_whose_pytorch_pick_was_unstable():
    # L1's and L2's timing processes ran different picks, L3's the same, L4's were not recorded
    rows = []
    for layer, stable in (("L1", False), ("L2", False), ("L3", True), ("L4", None)):
        rows += [_row(layer=layer, ms=1.0),
                 _row(layer=layer, backend="torch_gpu", algorithm="cudnn_benchmark", ms=2.0,
                      torch_pick_stable=stable)]
    df = _frame(*rows)
    sel = selection.selection(df)
    torch = sel[sel["policy"] == "pytorch"].set_index("layer")["pick_stable"]
    assert torch["L1"] == False and torch["L3"] == True and pd.isna(torch["L4"])  # noqa: E712
    gap = selection.versus_pytorch(sel)
    assert gap.iloc[0]["pytorch_unstable"] == 2 and gap.iloc[0]["points"] == 4
    assert selection.pytorch_pick_counts(df) == (2, 3)
    assert "pytorch_unstable" in selection.format_selection(df)


def _lowered_graph_frame() -> pd.DataFrame:
    # The graph heuristic's fp32 pick computes at TF32 accuracy; cuDNN's heuristic keeps fp32.
    return _frame(_row(algorithm="implicit_gemm", ms=2.0, heuristic_pick=True),
                  _row(backend="cudnn_graph", algorithm="eng0", ms=0.5, effective="tf32",
                       graph_heuristic_rank=0),
                  _row(algorithm="implicit_gemm", ms=0.8, precision="tf32", heuristic_pick=True))


def test_the_report_and_the_cli_judge_policies_alike():
    # The report's frame once rewrote `precision` to the delivered one, so its selection table
    # counted a lowered graph pick as kept (0 lowered) while `table --selection` said 1.
    from harness.report import computed as report_analysis
    df = _lowered_graph_frame()
    cli = selection.policy_summary(selection.selection(df))
    report = selection.policy_summary(selection.selection(report_analysis.prepare(df)))
    pd.testing.assert_frame_equal(cli, report)
    assert cli.set_index("policy").loc["graph_heuristic", "precision_lowered"] == 1


def test_a_lowered_pick_has_no_ratio_in_the_report_tables():
    from harness.report import computed as report_analysis
    df = report_analysis.prepare(_lowered_graph_frame())
    best = report_analysis.best_per_point(df, "graph_heuristic").set_index("effective_precision")
    assert best.loc["fp32", "base_candidate"] == "cudnn_graph:eng0 [asked fp32]"
    assert not bool(best.loc["fp32", "base_comparable"])
    assert pd.isna(best.loc["fp32", "speedup_base"])
    totals = report_analysis.network_totals(df, ["graph_heuristic"])
    totals = totals.set_index("effective_precision")
    assert totals.loc["fp32", "missing_graph_heuristic"] == 1


def test_unnamed_layers_of_one_batch_stay_apart():
    from harness import analysis
    df = _frame(_row(layer="", descriptor="mb32ic64ih56oc64oh56kh1", ms=1.0),
                _row(layer="", descriptor="mb32ic64ih56oc256oh56kh1", ms=3.0))
    best = analysis.best_per_point(df)
    assert sorted(best["best_median_ms"]) == [1.0, 3.0]
    assert sorted(analysis.layer_labels(best)) == ["mb32ic64ih56oc256oh56kh1",
                                                   "mb32ic64ih56oc64oh56kh1"]


def test_a_name_reused_for_two_shapes_gets_its_shape_in_the_label():
    from harness import analysis
    df = _frame(_row(layer="conv", descriptor="mb32ic3oc8", ms=1.0),
                _row(layer="conv", descriptor="mb32ic8oc8", ms=2.0),
                _row(layer="conv", descriptor="mb64ic8oc8", ms=2.0, batch=64))
    assert list(analysis.layer_labels(df)) == ["conv mb32ic3oc8", "conv mb32ic8oc8", "conv n64"]


def test_the_table_prints_the_network_time_and_what_the_best_saves(tmp_path, capsys):
    from harness.cli import main
    df = _frame(_row(layer="L1", algorithm="gemm", ms=2.0, heuristic_pick=True, multiplicity=3),
                _row(layer="L1", algorithm="fft", ms=1.0, heuristic_pick=False, multiplicity=3),
                _row(layer="L2", algorithm="gemm", ms=0.5, heuristic_pick=True),
                _row(layer="L2", direction="bwd_data", algorithm="gemm", ms=4.0,
                     heuristic_pick=True))
    df.to_parquet(tmp_path / "r.parquet")
    assert main(["table", str(tmp_path / "r.parquet")]) == 0
    line = capsys.readouterr().out.splitlines()[-1].split()
    # 3 layer-directions; best: 1.0 x 3 + 0.5 + 4.0 = 7.5; heuristic: 2.0 x 3 + 0.5 + 4.0 =
    # 10.5; saving 3 (28.6%)
    assert line[4:] == ["3", "7.5", "10.5", "3", "ms", "(28.6%)"], line


def test_a_plan_with_two_rows_at_a_point_is_one_candidate_and_never_its_own_runner_up():
    """A graph-API plan asked for fp32 and for tf32 that computes at tf32 both times has two
    rows at the tf32 point (one measurement, measured_with): one candidate, and the runner-up
    is another plan."""
    from harness import analysis
    df = _frame(_row(backend="cudnn_graph", algorithm="eng1", ms=1.0, effective="tf32"),
                _row(backend="cudnn_graph", algorithm="eng1", ms=1.0, precision="tf32"),
                _row(backend="cudnn_graph", algorithm="eng2", ms=1.5, precision="tf32"))
    best = analysis.best_per_point(df).set_index("effective_precision").loc["tf32"]
    assert (best["n_tried"], best["n_ok"]) == (2, 2)
    assert best["best_candidate"] == "cudnn_graph:eng1"
    assert best["runner_candidate"] == "cudnn_graph:eng2" and best["speedup_runner"] == 1.5
