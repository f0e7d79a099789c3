"""`convbench ab`: two environments measured in interleaved rounds, judged by the paired rounds
(harness/ab.py, harness/env_worker.py, harness/compare/paired.py)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import store
from harness.cli import main
from harness.compare import Verdict, compare
from harness.compare.paired import judge_paired
from harness.measurement import Measurement, Status
from harness.problem import ConvProblem
from harness.student_t import t_sf
from harness.sweep import Point

TESTS = Path(__file__).resolve().parent
SUITE = """name = 'ab'
layers = ['mb2ic4ih8oc4oh8kh3ph1n"a"', 'mb2ic8ih8oc8oh8kh3ph1n"b"']
[sweep]
directions = ['fwd', 'bwd_data']
[[sweep.backends]]
name = 'fake'
algorithms = ['exact', 'exact_slow']
"""


def test_t_sf_matches_scipy():
    from scipy import stats
    for df in range(1, 40):
        for t in (-6.0, -1.3, -0.2, 0.0, 0.1, 0.7, 1.5, 2.5, 4.0, 7.0, 12.0):
            exact = stats.t.sf(t, df)
            assert t_sf(t, df) == pytest.approx(exact, rel=1e-6, abs=1e-13), (t, df)
    assert t_sf(math.inf, 3) == 0.0 and t_sf(-math.inf, 3) == 1.0
    with pytest.raises(ValueError):
        t_sf(1.0, 0)


# ---- the paired verdicts, on rounds written as `ab` writes them ----------------------------------
ROUNDS, POINTS = 8, 12


def _side(path, ratios: np.ndarray, status: str = Status.OK) -> object:
    """POINTS rows, each with ROUNDS rounds of 3 samples at 1 ms x ratios[point, round]."""
    rows = []
    for i in range(POINTS):
        point = Point(ConvProblem(2, 8, 8 + i, 8 + i, 8, 3, 3, name=f"layer{i}"), "fwd", "fp32",
                      "NCHW", "cpu", "im2col")
        samples = [float(r) * s for r in ratios[i] for s in (0.99, 1.0, 1.01)]
        extras = {"process_samples": " ".join(["3"] * ROUNDS)}
        m = Measurement(point, status, "planted" if status != Status.OK else "",
                        samples_ms=tuple(samples) if status == Status.OK else (), extras=extras)
        rows.append(store.to_row(m, "r", "ab", {}, "now"))
    store.write(store.frame(rows), path)
    return store.load(path)


def _drift(seed: int) -> np.ndarray:
    """The machine's speed per point and round: slow spells of up to +60%, shared by both
    sides of a round (they ran back to back)."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(0.0, 0.05, (POINTS, ROUNDS))
                  + 0.47 * (rng.random((POINTS, ROUNDS)) < 0.25))


def test_drift_shared_by_the_pair_is_same(tmp_path):
    drift = _drift(1)
    rng = np.random.default_rng(2)
    base = _side(tmp_path / "b.parquet", drift * np.exp(rng.normal(0, 0.01, drift.shape)))
    new = _side(tmp_path / "n.parquet", drift * np.exp(rng.normal(0, 0.01, drift.shape)))
    paired = judge_paired(base, new)
    assert {r.verdict for r in paired.rows} == {Verdict.SAME} and not paired.fails()


def test_a_regression_of_a_quarter_of_the_points_is_slower_and_only_there(tmp_path):
    drift = _drift(4)
    rng = np.random.default_rng(5)
    planted = np.ones((POINTS, 1))
    planted[: POINTS // 4] = 1.25
    base = _side(tmp_path / "b.parquet", drift * np.exp(rng.normal(0, 0.02, drift.shape)))
    new = _side(tmp_path / "n.parquet",
                planted * drift * np.exp(rng.normal(0, 0.02, drift.shape)))
    paired = judge_paired(base, new)
    slower = {r.layer for r in paired.of(Verdict.SLOWER)}
    assert slower == {f"layer{i}" for i in range(POINTS // 4)} and paired.fails()
    assert all(r.verdict is Verdict.SAME for r in paired.rows if r.layer not in slower)
    # Two stored runs of the same sides, pooled (compare): the spells hide it.
    assert not compare(base, new).of(Verdict.SLOWER)


def test_a_spell_on_one_side_of_one_round_makes_a_row_ambiguous_never_slower(tmp_path):
    ones = np.ones((POINTS, ROUNDS))
    spell = ones.copy()
    spell[:, 3] = 1.6                           # the new side of round 4 ran in a slow spell
    rng = np.random.default_rng(6)
    base = _side(tmp_path / "b.parquet", ones * np.exp(rng.normal(0, 0.01, ones.shape)))
    new = _side(tmp_path / "n.parquet", spell * np.exp(rng.normal(0, 0.01, ones.shape)))
    paired = judge_paired(base, new)
    assert not paired.of(Verdict.SLOWER) and not paired.fails()
    assert "rounds" in paired.rows[0].reason


def test_a_wrong_new_side_is_broken(tmp_path):
    ones = np.ones((POINTS, ROUNDS))
    base = _side(tmp_path / "b.parquet", ones)
    new = _side(tmp_path / "n.parquet", ones, status=Status.WRONG)
    paired = judge_paired(base, new)
    assert {r.verdict for r in paired.rows} == {Verdict.BROKEN} and paired.fails()


def test_without_the_pairing_the_regression_is_lost_in_the_drift(tmp_path, monkeypatch):
    """The planted fault: each new round judged against the next round of the base (the pairs
    broken apart, as two stored runs are), so the spells no longer cancel: the planted +25%
    rows are no longer all SLOWER."""
    from harness.compare import paired as paired_module
    real = paired_module.paired_logs

    def unpaired(b, n):
        return real(b, type(n)(n.pid, n.meta, n.samples,
                               process_medians=n.process_medians[1:] + n.process_medians[:1]))
    monkeypatch.setattr(paired_module, "paired_logs", unpaired)
    with pytest.raises(AssertionError):
        test_a_regression_of_a_quarter_of_the_points_is_slower_and_only_there(tmp_path)


# ---- end to end, with real worker processes ------------------------------------------------------
def _suite(tmp_path) -> str:
    path = tmp_path / "ab.toml"
    path.write_text(SUITE)
    return str(path)


def _wrapper(tmp_path, script: str) -> str:
    """An ENV: a script that execs this Python on `script` (as a user's wrapper sets variables)."""
    path = tmp_path / "planted-python"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_ab_of_one_environment_with_itself_is_same_and_writes_both_sides(tmp_path, capsys):
    out = tmp_path / "aa"
    assert main(["ab", _suite(tmp_path), "--base", sys.executable, "--new", sys.executable,
                 "--rounds", "3", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "what differs: nothing convbench records (an A/A run)" in said
    assert "8 SAME" in said and "round 3/3 done" in said
    for side in ("base", "new"):
        df = store.load(tmp_path / f"aa-{side}.parquet")
        assert len(df) == 8 and set(df["status"]) == {"ok"}
        assert all(len(str(s).split()) == 3 for s in df["process_samples"])   # one per round
        assert df["run_id"].str.endswith(f"-ab-{side}").all()
    assert main(["ab", _suite(tmp_path), "--base", sys.executable, "--new", sys.executable,
                 "--rounds", "3", "--out", str(out)]) == 2         # nothing overwritten


def test_ab_catches_a_regression_planted_in_the_new_environment(tmp_path, capsys):
    new = _wrapper(tmp_path, str(TESTS / "planted_env_worker.py"))
    assert main(["ab", _suite(tmp_path), "--base", sys.executable, "--new", new,
                 "--rounds", "3", "--out", str(tmp_path / "ab"),
                 "--new-var", "CONVBENCH_PLANT=fake"]) == 1
    said = capsys.readouterr().out
    assert "$CONVBENCH_PLANT (unset) -> fake" in said
    assert "**4 SLOWER**" in said and "4 SAME" in said and "+25.0%" in said


@pytest.mark.parametrize("env, why", [
    ("/no/such/python", "no such file, folder or command"),
    ("{tmp}", "a folder without bin/python"),
    ("{false}", "cannot start"),
    ("/bin/true", "ended (exit code 0) without a word: is it a Python?"),
])
def test_an_unusable_environment_is_one_line_and_exit_2(tmp_path, capsys, env, why):
    false = tmp_path / "false-python"
    false.write_text("#!/bin/sh\necho 'No module named harness' >&2\nexit 1\n")
    false.chmod(0o755)
    spec = env.format(tmp=tmp_path, false=false)
    assert main(["ab", _suite(tmp_path), "--base", sys.executable, "--new", spec,
                 "--rounds", "3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--new {spec}" in err[0] and why in err[0], err
    if env == "{false}":
        assert "convbench is not installed there" in err[0]


def test_an_environment_that_cannot_run_a_backend_is_refused_naming_it(tmp_path, capsys):
    script = tmp_path / "no_fake.py"
    script.write_text("import sys\nfrom harness import backends, env_worker\n"
                      "backends.register_all = lambda registry: None\n"
                      "env_worker.serve(int(sys.argv[-1]))\n")
    assert main(["ab", _suite(tmp_path), "--base", _wrapper(tmp_path, str(script)),
                 "--new", sys.executable, "--rounds", "3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot run backend 'fake'" in err[0], err


def test_too_few_rounds_and_bad_variables_are_refused(tmp_path, capsys):
    suite = _suite(tmp_path)
    assert main(["ab", suite, "--base", sys.executable, "--new", sys.executable,
                 "--rounds", "2"]) == 2
    assert "at least 3 rounds" in capsys.readouterr().err
    assert main(["ab", suite, "--base", sys.executable, "--new", sys.executable,
                 "--new-var", "OPENBLAS_NUM_THREADS"]) == 2
    assert "give NAME=VALUE" in capsys.readouterr().err


def test_a_gpu_point_that_kills_its_process_is_a_crashed_row_and_the_run_goes_on(tmp_path,
                                                                                monkeypatch,
                                                                                capsys):
    """GPU points run in crash-isolated processes of each environment's own interpreter (the
    fake backend posing as a GPU one; its `dies` algorithm kills the process measuring it)."""
    from harness import backends
    monkeypatch.setattr(backends, "_REGISTRY", {**backends._REGISTRY,
                                                "fake_gpu": "planted_backends:FakeGpuBackend"})
    suite = tmp_path / "gpu.toml"
    suite.write_text("name = 'gpu'\nlayers = ['mb2ic4ih8oc4oh8kh3ph1n\"a\"']\n[sweep]\n"
                     "directions = ['fwd']\n[[sweep.backends]]\nname = 'fake_gpu'\n")
    path = f"PYTHONPATH={TESTS}"       # where the planted backend's module lies, both sides
    assert main(["ab", str(suite), "--base", sys.executable, "--new", sys.executable,
                 "--base-var", path, "--new-var", path, "--rounds", "3",
                 "--backend", "fake_gpu", "--out", str(tmp_path / "g")]) == 0
    assert "1 SAME" in capsys.readouterr().out
    new = store.load(tmp_path / "g-new.parquet").set_index("algorithm")
    assert new.at["exact", "status"] == "ok" and new.at["dies", "status"] == "crashed"
    assert "worker process died" in new.at["dies", "reason"]


def test_one_round_in_a_spell_on_one_side_is_left_out_and_the_regression_stands(tmp_path,
                                                                                 monkeypatch):
    """Seven rounds +50% and one at -24% (the base side of that round in a spell), every point:
    the outlying round is left out and named; kept, it makes the rows AMBIGUOUS (the planted
    fault: OUTLIER_K so large that no round is ever left out)."""
    from harness.compare import paired as paired_module
    rng = np.random.default_rng(7)
    ratios = np.full((POINTS, ROUNDS), 1.5) * np.exp(rng.normal(0, 0.03, (POINTS, ROUNDS)))
    ratios[:, 7] = 0.76
    base = _side(tmp_path / "b.parquet", np.ones((POINTS, ROUNDS)))
    new = _side(tmp_path / "n.parquet", ratios)
    paired = judge_paired(base, new)
    assert {r.verdict for r in paired.rows} == {Verdict.SLOWER}
    assert "1 of 8 left out as outliers (-24.0%)" in paired.rows[0].reason
    monkeypatch.setattr(paired_module, "OUTLIER_K", 1e9)
    assert Verdict.AMBIGUOUS in {r.verdict for r in judge_paired(base, new).rows}
