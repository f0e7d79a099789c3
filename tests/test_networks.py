"""The network table (harness/analysis/networks.py, its report block and `convbench table
--networks`) on hand-made frames, and the report and the CLI saying the same numbers."""
from __future__ import annotations

import pandas as pd
import pytest

from harness import store
from harness.analysis import networks
from harness.cli import main
from harness.report import answers, render_report

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame, row
    from test_report import html_tables, markdown_tables
except ImportError:
    from tests.report_fixtures import frame, row
    from tests.test_report import html_tables, markdown_tables

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
# per direction: the best algorithm's ms and the heuristic's (a slower one)
BEST = {"fwd": 1.0, "bwd_data": 2.0, "bwd_filter": 3.0}
HEURISTIC = {"fwd": 1.5, "bwd_data": 2.0, "bwd_filter": 4.0}


def _network(suite: str, precision: str, scale: float, heuristic: bool = True,
             gpu: str = "NVIDIA H100 80GB HBM3") -> list[dict]:
    """Two layers (multiplicity 1 and 2) x three directions; times x `scale`."""
    rows = []
    for layer, multiplicity in (("L1", 1), ("L2", 2)):
        for d in DIRECTIONS:
            common = dict(layer=layer, direction=d, precision=precision, suite=suite,
                          multiplicity=multiplicity, env_gpu_name=gpu)
            rows.append(row(algorithm="fast", ms=scale * BEST[d], heuristic_pick=False, **common))
            rows.append(row(algorithm="picked", ms=scale * HEURISTIC[d], heuristic_pick=heuristic,
                            **common))
    return rows


def _long(df: pd.DataFrame) -> pd.DataFrame:
    return networks.network_table(df).set_index(["suite", "effective_precision", "policy"])


def test_two_suites_at_two_precisions_give_four_rows_of_fwd_bwd_total():
    df = frame(*_network("netA", "fp16", 1.0), *_network("netA", "bf16", 2.0),
               *_network("netB", "fp16", 10.0), *_network("netB", "bf16", 20.0))
    table = answers.networks_table(networks.network_table(df))
    assert [r[:3] for r in table.rows] == [("netA", "NVIDIA H100 80GB HBM3", "fp16"),
                                           ("netA", "NVIDIA H100 80GB HBM3", "bf16"),
                                           ("netB", "NVIDIA H100 80GB HBM3", "fp16"),
                                           ("netB", "NVIDIA H100 80GB HBM3", "bf16")]
    long = _long(df)
    # layers x multiplicity: fwd 1.0 x (1 + 2) = 3; bwd (2 + 3) x 3 = 15; total 18
    best = long.loc[("netA", "fp16", "oracle")]
    assert (best["fwd_ms"], best["bwd_ms"], best["total_ms"]) == pytest.approx((3.0, 15.0, 18.0))
    heuristic = long.loc[("netB", "bf16", "cudnn_heuristic")]    # x20: 1.5*3, (2+4)*3, sum
    assert (heuristic["fwd_ms"], heuristic["bwd_ms"], heuristic["total_ms"]) == pytest.approx(
        (90.0, 360.0, 450.0))
    assert heuristic["saves_ms"] == pytest.approx(450.0 - 360.0)
    assert heuristic["saves_pct"] == pytest.approx(20.0)
    cells = dict(zip(table.headers, table.rows[0]))
    assert cells["best verified fwd / bwd / total ms"] == "3 / 15 / 18"
    assert cells["cudnn_heuristic fwd / bwd / total ms"] == "4.5 / 18 / 22.5"
    assert cells["best saves vs cudnn_heuristic"] == "4.5 ms (20.0%)"


def test_a_policy_without_data_is_shown_missing_with_its_count_never_zero():
    df = frame(*_network("netA", "fp16", 1.0), *_network("netB", "fp16", 1.0, heuristic=False))
    rows = {r[0]: dict(zip(answers.networks_table(networks.network_table(df)).headers, r))
            for r in answers.networks_table(networks.network_table(df)).rows}
    assert rows["netB"]["cudnn_heuristic fwd / bwd / total ms"] == "— / — / — (6 of 6 missing)"
    assert rows["netB"]["best saves vs cudnn_heuristic"] == "—"
    # one point without a heuristic pick: the sums are lower bounds, and say so
    partial = frame(*[r if (r["layer"], r["direction"]) != ("L2", "fwd")
                      else {**r, "heuristic_pick": False} for r in _network("netA", "fp16", 1.0)])
    cells = dict(zip(*(lambda t: (t.headers, t.rows[0]))(
        answers.networks_table(networks.network_table(partial)))))
    assert cells["cudnn_heuristic fwd / bwd / total ms"] == "≥1.5 / 18 / ≥19.5 (1 of 6 missing)"


def test_machines_and_files_are_never_summed_together():
    df = frame(*_network("netA", "fp16", 1.0), *_network("netA", "fp16", 2.0, gpu="NVIDIA H200"))
    long = networks.network_table(df)
    best = long[long["policy"] == "oracle"].set_index("machine")["total_ms"]
    assert best.to_dict() == pytest.approx({"NVIDIA H100 80GB HBM3": 18.0, "NVIDIA H200": 36.0})
    two_files = pd.concat([frame(*_network("netA", "fp16", 1.0)).assign(source="a.parquet"),
                           frame(*_network("netA", "fp16", 1.0)).assign(source="b.parquet")])
    long = networks.network_table(two_files)
    assert list(long.loc[long["policy"] == "oracle", "total_ms"]) == [18.0, 18.0]


def test_table_networks_reads_each_file_as_its_own_source(tmp_path, capsys):
    for name, scale in (("a.parquet", 1.0), ("b.parquet", 2.0)):
        store.write(frame(*_network("netA", "fp16", scale)), tmp_path / name)
    assert main(["table", "--networks", str(tmp_path / "a.parquet"),
                 str(tmp_path / "b.parquet")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(("a.parquet", "b.parquet"))]
    assert len(lines) == 2 and " 3 / 15 / 18 " in lines[0] and " 6 / 30 / 36 " in lines[1]


@pytest.mark.parametrize("bad", ["none.parquet", "junk.parquet"])
def test_table_networks_of_a_missing_or_foreign_file_exits_2_naming_it(tmp_path, capsys, bad):
    (tmp_path / "junk.parquet").write_text("not parquet")
    assert main(["table", "--networks", str(tmp_path / bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convbench: error:") and bad in err[0], err


def test_the_pages_and_the_cli_say_the_same_numbers(tmp_path, capsys):
    # coin tosses among three candidates at L1 fwd and bwd_data, the file's rows in the opposite
    # order from the report's reading order: the resamples must not depend on the row order
    tossed = [row(layer="L1", algorithm=name, ms=1.0, precision="fp16", suite="netA",
                  env_gpu_name="NVIDIA H100 80GB HBM3", deterministic=name != "c",
                  direction=direction,
                  samples_ms=[0.9 + 0.2 * ((i * k + shift) % 7) / 6 for i in range(9)])
              for direction, shift in (("fwd", 0), ("bwd_data", 3))
              for k, name in ((1, "a"), (2, "b"), (3, "c"))]
    df = frame(*reversed([*_network("netA", "fp16", 1.0), *tossed]))
    store.write(df, tmp_path / "r.parquet")
    paths = render_report(tmp_path / "r.parquet", tmp_path / "report")
    for flag, title in (("--networks", "Network table"),
                        ("--determinism", "Cost of determinism per training step"),
                        ("--stability", "Pick stability"), ("--stability", "Near-tie points")):
        assert main(["table", flag, str(tmp_path / "r.parquet")]) == 0
        out = capsys.readouterr().out
        pages = [_titled(html_tables(paths.html), title),
                 _titled(markdown_tables(paths.markdown), title)]
        assert pages[0] == pages[1], title
        for cells in pages[0][1:]:
            # the CLI's table has a Source column the single-file report does not
            assert all(c in out for c in cells), (title, cells)


def _titled(tables: list[tuple[str, list[list[str]]]], title: str) -> list[list[str]]:
    # the Markdown reader gives a title to the untitled tables after it too: take the first
    return next(rows for name, rows in tables if name == title)


def test_a_layer_timed_as_one_training_step_has_a_column_of_its_own():
    # a recurrent layer measured only as train_step: no fwd / bwd split, but in the total
    whole = [row(layer="R1", direction="train_step", algorithm="fast", ms=7.0, suite="netA",
                 precision="fp16", multiplicity=1, env_gpu_name="NVIDIA H100 80GB HBM3")]
    df = frame(*_network("netA", "fp16", 1.0), *whole)
    best = _long(df).loc[("netA", "fp16", "oracle")]
    assert (best["fwd_ms"], best["bwd_ms"], best["step_ms"], best["total_ms"]) == pytest.approx(
        (3.0, 15.0, 7.0, 25.0))
    table = answers.networks_table(networks.network_table(df))
    cells = dict(zip(table.headers, table.rows[0]))
    assert cells["best verified fwd / bwd / whole steps / total ms"] == "3 / 15 / 7 / 25"
    # without such a layer the column is not shown
    plain = answers.networks_table(networks.network_table(frame(*_network("netA", "fp16", 1.0))))
    assert "best verified fwd / bwd / total ms" in plain.headers
