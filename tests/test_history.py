"""`convbench history`: steps (suspected, then confirmed), slow spells left out, drift, series
kept apart, and the exit code (harness/analysis/history.py, harness/report/history_page.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness import store
from harness.analysis import history
from harness.cli import main
from harness.measurement import Measurement, Status
from harness.problem import ConvProblem
from harness.sweep import Point

POINTS = 6


def _runs(path, factors, seed: int = 0, suite: str = "quick", cpu: str = "AMD EPYC",
          probes=None, noise: float = 0.03, shared=()) -> str:
    """One results file of len(factors) runs of POINTS points: run r's times scaled by
    factors[r] with `noise` (log sd) of run-to-run scatter per point; probes[r] its host probe;
    the rows of the runs in `shared` (indices) shared the CPU."""
    rng = np.random.default_rng(seed)
    rows = []
    for r, factor in enumerate(factors):
        env = {"cpu_model": cpu, "git_commit": f"c{r + 1:03d}"}
        for i in range(POINTS):
            point = Point(ConvProblem(2, 8, 8 + i, 8 + i, 8, 3, 3, name=f"layer{i}"), "fwd",
                          "fp32", "NCHW", "cpu", "im2col")
            run_factor = factor * float(np.exp(rng.normal(0.0, noise)))
            samples = tuple((1.0 + i) * run_factor * (1.0 + 0.005 * k) for k in range(5))
            extras = {"host_probe_ms": 0.5 if probes is None else probes[r],
                      "contended": r in shared}
            m = Measurement(point, Status.OK, "", samples_ms=samples, extras=extras)
            rows.append(store.to_row(m, f"run{r + 1:02d}", suite, env,
                                     f"2026-11-27T{8 + r // 60:02d}:{r % 60:02d}:00Z"))
    store.write(store.frame(rows), path)
    return str(path)


def _analysed(tmp_path, factors, **kwargs) -> history.SeriesHistory:
    (series,) = history.analyse(store.load(_runs(tmp_path / "h.parquet", factors, **kwargs)))
    return series


STEP = [1.0] * 11 + [1.15] * 9      # a +15% step from run 12 on, as the target asks


def test_a_step_is_suspected_after_one_run_and_confirmed_after_two(tmp_path):
    at_12 = _analysed(tmp_path, STEP[:12])
    suite = [s for s in at_12.steps if s.series == "suite"]
    assert [(s.at, s.state, s.verdict) for s in suite] == [(11, "suspected", "SLOWER")]
    assert not at_12.newest_confirms_regression()
    at_13 = _analysed(tmp_path, STEP[:13])
    suite = [s for s in at_13.steps if s.series == "suite"]
    assert [(s.at, s.state) for s in suite] == [(11, "confirmed")]
    assert at_13.newest_confirms_regression()
    assert suite[0].ratio == pytest.approx(1.15, rel=0.05)
    assert suite[0].p_value == pytest.approx(1 / 66)     # 10 runs before, 2 after, all above


def test_no_step_before_it_and_exactly_one_over_the_whole_series(tmp_path):
    for n in range(5, 12):
        assert not _analysed(tmp_path, STEP[:n]).steps, n
    whole = _analysed(tmp_path, STEP)
    assert [(s.at, s.state) for s in whole.steps if s.series == "suite"] == [(11, "confirmed")]
    assert not whole.newest_confirms_regression()          # confirmed long ago: no new alarm
    # a point's own scatter (3% a run here) can move where its step is placed by a few runs
    assert all(abs(s.at - 11) <= 4 and s.verdict == "SLOWER" for s in whole.steps)


def test_without_the_noise_bar_noise_is_a_step(tmp_path, monkeypatch):
    """The planted fault: the bar no longer scales with the runs' own scatter (NOISE_K 0) and
    the threshold is 1%: ordinary scatter is then reported as steps."""
    noisy = [1.0] * 12
    assert not [s for s in _analysed(tmp_path, noisy, noise=0.04).steps]
    monkeypatch.setattr(history, "NOISE_K", 0.0)
    (series,) = history.analyse(store.load(_runs(tmp_path / "n.parquet", noisy, noise=0.04)),
                                threshold=0.01)
    assert series.steps


def test_a_run_in_a_slow_spell_of_the_host_is_left_out(tmp_path):
    factors, probes = [1.0] * 12, [0.5] * 12
    factors[-1], probes[-1] = 1.4, 0.7            # the newest run: every point and the probe
    spelled = _analysed(tmp_path, factors, probes=probes)
    assert spelled.runs[-1].spell == pytest.approx(0.4) and not spelled.steps
    assert _analysed(tmp_path, factors).steps        # the same times with a quiet probe: a step


def test_a_run_that_shared_the_cpu_is_left_out(tmp_path):
    factors = [1.0] * 11 + [1.4]             # the newest run beside a busy neighbour
    shared = _analysed(tmp_path, factors, shared={11})
    assert shared.runs[-1].noise == "100% of its rows shared the CPU" and not shared.steps
    quiet = _analysed(tmp_path, factors)     # the same times, not flagged: a suspected step
    assert [s.state for s in quiet.steps if s.series == "suite"] == ["suspected"]


def test_drift_no_step_explains_is_reported_apart(tmp_path):
    drifting = list(np.linspace(1.0, 1.25, 20))
    series = _analysed(tmp_path, drifting, noise=0.005)
    assert series.drifts and series.drifts[0].ratio > 1.1
    assert not [s for s in series.steps if s.state == "confirmed" and s.series == "suite"] \
        or not series.drifts


def test_history_cli_writes_its_three_files_and_exits_1_when_the_newest_confirms(tmp_path,
                                                                                 capsys):
    results = _runs(tmp_path / "h.parquet", STEP[:13])
    out = tmp_path / "rep"
    assert main(["history", results, "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert "| confirmed | SLOWER | suite | c011 (run 11) .. c012 (run 12) |" in said
    assert "**The newest run confirms a regression**" in said
    assert (out / "history.html").exists() and (out / "history-1.png").exists()
    data = json.loads((out / "history.json").read_text())
    assert data[0]["newest_confirms_regression"] is True
    assert data[0]["steps"][0]["after_run"] == "run12"
    assert main(["history", results, "--out", str(out)]) == 2      # nothing overwritten
    assert main(["history", _runs(tmp_path / "g.parquet", STEP[:12]), "--out", str(out),
                 "--force"]) == 0


def test_suites_and_machines_are_series_of_their_own(tmp_path, capsys):
    a = _runs(tmp_path / "a.parquet", [1.0] * 6, suite="quick")
    b = _runs(tmp_path / "b.parquet", [2.0] * 6, suite="other")
    c = _runs(tmp_path / "c.parquet", [3.0] * 6, cpu="Intel Xeon")
    assert main(["history", a, b, c, "--out", str(tmp_path / "r")]) == 0
    said = capsys.readouterr().out
    assert said.count("### suite") == 3 and "No step and no drift." in said


def test_mixed_schema_versions_are_refused_in_one_line(tmp_path, capsys):
    path = _runs(tmp_path / "a.parquet", [1.0] * 6)
    df = store.load(path)
    df.loc[df.index[:POINTS], "schema_version"] = 0
    df.to_parquet(tmp_path / "old.parquet")
    code = main(["history", str(tmp_path / "old.parquet"), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err


def test_the_two_sides_of_an_ab_run_are_no_part_of_a_series(tmp_path):
    df = store.load(_runs(tmp_path / "h.parquet", [1.0] * 11 + [1.4]))
    last = df["run_id"] == "run12"
    df.loc[last, "run_id"] = "20261127T080000Z-abcdef-ab-new"
    (series,) = history.analyse(df)
    assert len(series.runs) == 11 and not series.steps
