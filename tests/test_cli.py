"""The command line: bad input of every kind gets one clear message and exit code 2, never a
traceback; the default run works on the CPU; a missing GPU is explained."""
from __future__ import annotations

import pytest
from test_compare import QUICK_SIZED

from harness import store
from harness.cli import main

GOOD_LAYER = "layers = ['mb2ic4ih8oc4oh8kh3ph1n\"l\"']\n"


def _suite(tmp_path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return str(path)


def _results(tmp_path, name: str = "r.parquet", **env) -> str:
    out = tmp_path / name
    assert main(["run", _suite(tmp_path, GOOD_LAYER + "[[sweep.backends]]\nname='fake'\n"),
                 "--out", str(out)]) == 0
    if env:
        df = store.load(out)
        for key, value in env.items():
            df[f"env_{key}"] = value
        store.write(df, out)
    return str(out)


BAD_SUITES = {
    "unknown top-level key": (GOOD_LAYER + "colour = 'red'\n", "colour"),
    "precisions not a list": (GOOD_LAYER + "[sweep]\nprecisions = 'fp32'\n", "precisions"),
    "unknown precision": (GOOD_LAYER + "[sweep]\nprecisions = ['int4']\n", "int4"),
    "unknown direction": (GOOD_LAYER + "[sweep]\ndirections = ['sideways']\n", "sideways"),
    "kernel larger than input": ("layers = [{batch=2, in_channels=4, in_h=4, in_w=4, "
                                 "out_channels=4, kernel_h=7, kernel_w=7}]\n", "kernel"),
    "groups do not divide": ("layers = [{batch=2, in_channels=6, in_h=8, in_w=8, "
                             "out_channels=6, kernel_h=3, kernel_w=3, groups=4}]\n", "groups"),
    "empty layer list": ("layers = []\n", "layers"),
    "malformed descriptor": ("layers = ['mb2icXih8']\n", "layers[0]"),
    "bad TOML": ("layers = [\n", "bad.toml"),
    "negative budget": (GOOD_LAYER + "[timing]\nbudget_ms = -5\n", "budget_ms"),
    "unknown timing mode": (GOOD_LAYER + "[timing]\nmode = 'hot'\n", "hot"),
    "bad workspace limit": (GOOD_LAYER + "[sweep]\nworkspace_limits = ['12XB']\n", "12XB"),
    "unknown backend": (GOOD_LAYER + "[[sweep.backends]]\nname = 'cuda'\n", "cuda"),
}


@pytest.mark.parametrize("case", sorted(BAD_SUITES))
def test_malformed_suite_exits_2_with_one_message(case, tmp_path, capsys):
    text, named = BAD_SUITES[case]
    assert main(["run", _suite(tmp_path, text), "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convbench: error:"), err
    assert named in err[0], err[0]
    assert "Traceback" not in err[0]


BAD_ARGUMENTS = {
    "--precision": (["--precision", "int4"], "int4"),
    "--direction": (["--direction", "up"], "up"),
    "--layout": (["--layout", "NCWH"], "NCWH"),
    "--backend": (["--backend", "cudaa"], "cudaa"),
    "--algorithm": (["--backend", "fake", "--algorithm", "bogus"], "bogus"),
    "--batch": (["--batch", "0"], "batch"),
    "--budget-ms": (["--budget-ms", "-1"], "-1"),
    "--workspace-limit": (["--workspace-limit", "lots"], "lots"),
    "--layer": (["--layer", "nosuch"], "nosuch"),
    "--timing-mode": (["--timing-mode", "hot"], "hot"),
    "--gpu-timer": (["--gpu-timer", "cupti"], "cupti"),
    "--gpu-processes": (["--gpu-processes", "0"], "--gpu-processes"),
    "--gpu-processes too many": (["--gpu-processes", "9"], "9"),
    "empty list item": (["--precision", "fp32,,fp64"], "fp32,,fp64"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_run_arguments_exit_2(case, tmp_path, capsys):
    flags, named = BAD_ARGUMENTS[case]
    suite = _suite(tmp_path, GOOD_LAYER + "[[sweep.backends]]\nname='fake'\n")
    assert main(["run", suite, *flags, "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


def test_unknown_suite_name_lists_nothing_but_the_problem(capsys):
    assert main(["run", "resnet51"]) == 2
    assert "resnet51" in capsys.readouterr().err


def test_unparseable_argument_is_one_line_and_exit_2(capsys):
    assert main(["run", "quick", "--batch", "abc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'abc'" in err[0] and err[0].startswith("convbench: error:"), err


def test_table_and_report_of_missing_or_foreign_files_exit_2(tmp_path, capsys):
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    for argv in (["table", str(tmp_path / "none.parquet")], ["table", str(junk)],
                 ["report", str(tmp_path / "none.parquet")], ["shapes", "nosuite"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("convbench: error:"), (argv, err)


def test_compare_refuses_other_environments_unless_asked(tmp_path, capsys):
    base = _results(tmp_path, "base.parquet")
    other = _results(tmp_path, "other.parquet", cpu_model="Other CPU", cudnn="9.19.0")
    assert main(["compare", base, other]) == 2
    err = capsys.readouterr().err
    assert "cpu_model" in err and "Other CPU" in err and "cudnn" not in err   # fake: CPU rows
    assert main(["compare", base, other, "--allow-env-mismatch"]) in (0, 1)
    assert "mismatch" in capsys.readouterr().out.lower()
    assert main(["compare", base, base, "--threshold", "5"]) == 2


def test_missing_gpu_is_explained_by_list_and_refused_by_run(capsys):
    from harness import backends
    reason = backends.get("cudnn").unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a usable GPU: nothing to explain")
    assert main(["list"]) == 0
    assert reason in capsys.readouterr().out
    assert main(["run", "quick", "--backend", "cudnn"]) == 2
    err = capsys.readouterr().err
    assert "cudnn" in err and reason in err


def test_default_run_on_the_cpu_prints_the_best_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--budget-ms", "5"]) == 0
    out = capsys.readouterr().out
    assert "best verified algorithm per layer" in out
    files = list((tmp_path / "results").glob("quick-*.parquet"))
    assert len(files) == 1
    df = store.load(files[0])
    assert set(df["backend"]) >= {"cpu"} and (df["status"] == "ok").any()
    assert (df.loc[df["status"] == "ok", "rel_error"] <= df.loc[df["status"] == "ok",
                                                                "tolerance"]).all()


def test_layer_names_work_without_the_network_prefix(tmp_path, capsys):
    out = tmp_path / "one.csv"
    code = main(["run", "resnet50", "--layer", "res5a_branch2c", "--batch", "1",
                 "--backend", "cpu", "--algorithm", "im2col", "--direction", "fwd",
                 "--budget-ms", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert set(store.load(out)["layer"]) == {"resnet_50:res5a_branch2c"}


def test_layer_flags_add_up(tmp_path, capsys):
    out = tmp_path / "two.csv"
    code = main(["run", "resnet50", "--layer", "res5a_branch2c", "--layer", "res4a_branch1",
                 "--batch", "1", "--backend", "cpu", "--algorithm", "im2col", "--direction",
                 "fwd", "--budget-ms", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert set(store.load(out)["layer"]) == {"resnet_50:res5a_branch2c", "resnet_50:res4a_branch1"}


# ---- issue 12: list, memory, reports, check arguments -------------------------------------------
def test_list_shows_real_algorithms_with_descriptions_and_not_the_test_backend():
    import subprocess
    import sys
    from harness import backends
    # A fresh process: these tests register `fake` themselves (conftest.py).
    done = subprocess.run([sys.executable, "-m", "harness.cli", "list"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "fake" not in out and "wrong_fast" not in out
    # The product's own backends, from a fresh process too: tests register more in this one.
    names = subprocess.run([sys.executable, "-c", "from harness import backends; "
                            "print(*backends.names())"], capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert "fake" not in names and "cpu" in names
    for name in names:
        assert f"{name} (" in out
        for algo in backends.get(name).algorithms():
            assert algo.description, f"{name}:{algo.name} has no description"
            line = next(ln for ln in out.splitlines() if ln.split()[:1] == [algo.name]
                        and algo.description in ln)
            assert len(line) < 160, line
    # which algorithms of each backend run 3-D, the epilogue ops and the quantized precisions,
    # a line after them (the GPU backends' rules need no GPU)
    none = "fp8_e4m3: none; fp8_e5m2: none; int8: none"
    lines = out.splitlines()
    assert f"    (3-D: direct; epilogue ops: none; {none})" in lines           # cpu
    assert out.count(f"    (3-D: all; epilogue ops: all; {none})") >= 2      # torch_cpu, torch_gpu
    assert ("    (3-D: all; epilogue ops: none; fp8_e4m3: none; fp8_e5m2: none; "
            "int8: implicit_precomp_gemm)") in lines                          # legacy cudnn
    assert ("    (3-D: all; epilogue ops: all; fp8_e4m3: all; fp8_e5m2: all; int8: all)"
            in lines)                                                         # cudnn_graph


def test_cudnn_descriptions_say_what_the_numbered_algorithms_are():
    from harness.backends.cudnn import legacy as cudnn
    assert "non-deterministic" in cudnn.DESCRIPTIONS["algo_0"]
    assert "deterministic" in cudnn.DESCRIPTIONS["algo_1"]
    assert "ALGO_3" in cudnn.DESCRIPTIONS["algo_3"]


BIG = ("{batch=2, in_channels=4, in_h=1000000000000, in_w=8, out_channels=4, kernel_h=3, "
       "kernel_w=3, name='huge'}")
SMALL = ("{batch=2, in_channels=4, in_h=8, in_w=8, out_channels=4, kernel_h=3, kernel_w=3, "
         "name='small'}")
WIDE = ("{batch=2, in_channels=512, in_h=56, in_w=56, out_channels=512, kernel_h=3, kernel_w=3, "
        "name='wide'}")


@pytest.mark.parametrize("backend, flags", [("cpu", ["--algorithm", "direct"]), ("fake", [])])
def test_a_layer_too_big_for_memory_is_an_unsupported_row(tmp_path, capsys, backend, flags):
    suite = _suite(tmp_path, f"layers = [{SMALL}, {BIG}]\n[[sweep.backends]]\nname='{backend}'\n")
    out = tmp_path / "r.parquet"
    assert main(["run", suite, *flags, "--budget-ms", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out and "error" not in captured.err
    df = store.load(out)
    huge, small = df[df["layer"] == "huge"], df[df["layer"] == "small"]
    assert len(huge) and (huge["status"] == "unsupported").all()
    assert huge["reason"].str.contains("of host memory for its buffers").all()
    assert (small["status"] != "unsupported").any()


def test_batch_100000_makes_the_wide_layer_unsupported_and_the_small_one_runs(tmp_path, capsys):
    suite = _suite(tmp_path, f"layers = [{SMALL}, {WIDE}]\n[[sweep.backends]]\nname='fake'\n")
    out = tmp_path / "r.parquet"
    assert main(["run", suite, "--batch", "100000", "--algorithm", "exact", "--out",
                 str(out)]) == 0
    df = store.load(out).set_index("layer")
    assert df.loc["wide", "status"] == "unsupported" and "TB of host memory" in df.loc["wide",
                                                                                      "reason"]
    assert df.loc["small", "status"] == "ok"


def test_a_suite_where_no_point_fits_exits_2_naming_the_layer(tmp_path, capsys):
    suite = _suite(tmp_path, f"layers = [{BIG}]\n[[sweep.backends]]\nname='cpu'\n")
    out = tmp_path / "r.parquet"
    assert main(["run", suite, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'huge'" in err[0] and "of host memory" in err[0], err
    assert not list(tmp_path.glob("r.parquet*"))


def test_2_to_the_70_in_a_suite_file_exits_2_naming_the_field(tmp_path, capsys):
    suite = _suite(tmp_path, "layers = [{batch=2, in_channels=4, in_h=1180591620717411303424, "
                             "in_w=8, out_channels=4, kernel_h=3, kernel_w=3}]\n")
    for argv in (["run", suite, "--out", str(tmp_path / "r.parquet")], ["shapes", suite]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in_h=1180591620717411303424" in err[0], err
    assert main(["shapes", "quick", "--batch", str(2**70)]) == 2
    assert "batch=1180591620717411303424" in capsys.readouterr().err


def test_a_suite_name_that_would_leave_the_results_folder_exits_2(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    suite = _suite(tmp_path, "name = '../../esc'\n" + GOOD_LAYER + "[[sweep.backends]]\n"
                             "name='fake'\n")
    monkeypatch.chdir(tmp_path / "work")
    assert main(["run", suite]) == 2
    assert "'../../esc'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bad.toml", "work"]


@pytest.fixture
def results_file(tmp_path) -> str:
    return _results(tmp_path)


REPORT_ARGUMENTS = {
    "--jobs 0": (["--jobs", "0"], "'0'"),
    "--jobs -1": (["--jobs", "-1"], "'-1'"),
    # found by tests/test_fuzz.py: 2^70 processes overflowed a C int in multiprocessing
    "--jobs 2^70": (["--jobs", str(2**70)], "must be at most 1024"),
    "--peaks bad JSON": (["--peaks", "{bad"], "not a readable JSON file"),
    "--peaks not an object": (["--peaks", "[1, 2]"], "got list"),
    "--peaks wrong shape": (["--peaks", '{"fp32": {"x": 1}}'], "peaks['fp32']"),
    "--peaks unknown key": (["--peaks", '{"fp33": 1.0}'], "'fp33'"),
    "--peaks negative": (["--peaks", '{"fp32": -4}'], "-4"),
    "--peaks not UTF-8": (["--peaks", b"\xff\xfe{}"], "peaks.json"),
    "--peaks missing": (["--peaks", None], "peaks.json"),
    "--out a file": (["--out", "FILE"], "is not a folder"),
    "--title not UTF-8": (["--title", "\udcff"], "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(REPORT_ARGUMENTS))
def test_bad_report_arguments_exit_2_with_one_line(case, tmp_path, results_file, capsys,
                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)          # the default report folder, should one be made
    flags, named = REPORT_ARGUMENTS[case]
    flags = list(flags)
    if flags[0] == "--peaks":
        peaks = tmp_path / "peaks.json"
        if flags[1] is not None:
            (peaks.write_bytes if isinstance(flags[1], bytes) else peaks.write_text)(flags[1])
        flags[1] = str(peaks)
    if flags[1] == "FILE":
        (tmp_path / "existing.html").write_text("keep me")
        flags[1] = str(tmp_path / "existing.html")
    jobs = [] if flags[0] == "--jobs" else ["--jobs", "1"]
    code = main(["report", results_file, *flags, *jobs])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("convbench: error:") and named in err[0], err
    if case == "--out a file":
        assert (tmp_path / "existing.html").read_text() == "keep me"


def test_a_report_with_good_peaks_is_written(tmp_path, results_file, capsys):
    peaks = tmp_path / "peaks.json"
    peaks.write_text('{"fp32": 0.5, "bandwidth_gbps": 40}')
    out = tmp_path / "rep"
    assert main(["report", results_file, "--peaks", str(peaks), "--out", str(out),
                 "--jobs", "1"]) == 0
    assert (out / "index.md").exists()


@pytest.mark.parametrize("flags, named", [(["--confirm", "-1"], "'-1'"),
                                          (["--min-samples", "0"], "'0'")])
def test_check_refuses_negative_confirmation_rounds_and_no_samples(tmp_path, capsys, flags,
                                                                    named):
    assert main(["check", "quick", "--baseline", str(tmp_path / "b.parquet"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and flags[0] in err[0], err


def _plans_suite(tmp_path):
    """Two problems x one expanding algorithm with two plans (planted_backends.PlansBackend)."""
    from harness import backends
    backends.register("plans", "planted_backends:PlansBackend")
    suite = tmp_path / "plans.toml"
    suite.write_text("name = 'plans'\nlayers = ['mb2ic4ih8oc4oh8kh3ph1n\"a\"', "
                     "'mb2ic8ih10oc8kh3sh2n\"b\"']\n[sweep]\ndirections = ['fwd']\n"
                     "precisions = ['fp64']\n[[sweep.backends]]\nname = 'plans'\n")
    return suite


def test_progress_counts_planned_points_not_the_rows_they_expand_into(tmp_path, capsys):
    """Two problems x one expanding algorithm with two plans: 2 planned points, 4 rows."""
    suite = _plans_suite(tmp_path)
    assert main(["run", str(suite), "--out", str(tmp_path / "plans.parquet")]) == 0
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len(progress) == 4
    assert progress[-1].startswith("[2/2, row 4] ")
    assert all("/2" in line for line in progress)


def test_plan_limit_measures_each_points_first_plans_and_says_what_it_left_out(tmp_path,
                                                                              capsys):
    """--plan-limit 1 (and the suite's `plan_limit = 1`) measures only the first plan the
    expanding algorithm names for each point, records how many it offered, and the run says how
    many it left out; without it every plan has a row and no such line; 0 is one line, exit 2."""
    from harness import store
    suite = _plans_suite(tmp_path)
    assert main(["run", str(suite), "--plan-limit", "1",
                 "--out", str(tmp_path / "one.parquet")]) == 0
    out = capsys.readouterr().out
    assert "plan limit: 2 of 2 points measured only their first 1 plans" in out, out
    assert "leaving 2 plans unmeasured (up to 2 offered a point)" in out
    rows = store.load(tmp_path / "one.parquet")
    assert set(rows["algorithm"]) == {"plan_fast"} and len(rows) == 2
    assert (rows["plans_offered"] == 2).all()
    limited = tmp_path / "limited.toml"
    limited.write_text(suite.read_text() + "[timing]\nplan_limit = 1\n")
    assert main(["run", str(limited), "--out", str(tmp_path / "suite.parquet")]) == 0
    assert set(store.load(tmp_path / "suite.parquet")["algorithm"]) == {"plan_fast"}
    capsys.readouterr()
    assert main(["run", str(suite), "--out", str(tmp_path / "all.parquet")]) == 0
    assert "plan limit" not in capsys.readouterr().out
    assert set(store.load(tmp_path / "all.parquet")["algorithm"]) == {"plan_fast", "plan_slow"}
    assert main(["run", str(suite), "--plan-limit", "0",
                 "--out", str(tmp_path / "bad.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["convbench: error: --plan-limit: 0 must be a positive integer"], err


def test_a_run_races_the_plans_and_says_what_it_left_out(tmp_path, capsys):
    """The slow plan (10x the fast one, measured after it) stops after its heat; the run says
    so; --no-race and the suite's `race = false` time it in full; a bad value is one line."""
    from harness import store
    suite = _plans_suite(tmp_path)
    assert main(["run", str(suite), "--out", str(tmp_path / "raced.parquet")]) == 0
    out = capsys.readouterr().out
    assert "raced out: 2 of 4 timed plans" in out and "--no-race" in out
    rows = store.load(tmp_path / "raced.parquet").set_index("algorithm")
    assert set(rows.loc["plan_slow", "stop_reason"]) == {"raced_out"}
    assert (rows.loc["plan_slow", "raced_out_by"] > 5).all()
    assert not rows.loc["plan_fast", "stop_reason"].str.contains("raced").any()
    assert main(["run", str(suite), "--no-race", "--out", str(tmp_path / "full.parquet")]) == 0
    assert "raced out" not in capsys.readouterr().out
    full = store.load(tmp_path / "full.parquet")
    assert not full["stop_reason"].str.contains("raced").any()
    unraced = tmp_path / "unraced.toml"
    unraced.write_text(suite.read_text() + "[timing]\nrace = false\n")
    assert main(["run", str(unraced), "--out", str(tmp_path / "suite.parquet")]) == 0
    assert not store.load(tmp_path / "suite.parquet")["stop_reason"].str.contains("raced").any()
    capsys.readouterr()
    unraced.write_text(suite.read_text() + "[timing]\nrace = 1\n")
    assert main(["run", str(unraced), "--out", str(tmp_path / "bad.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "timing.race" in err[0] and "true or false" in err[0], err


def test_a_cluster_run_has_one_bar_over_its_shards_with_per_worker_counts(monkeypatch):
    """On a terminal the one bar advances by planned points and its text counts the shards each
    worker finished; off a terminal (CI logs) each shard is a line."""
    import io
    from harness.cli import running

    class _Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(running.sys, "stdout", _Terminal())
    with running._progress(10) as progress:
        progress.shard_done(1, 3, "tcp://a:1", 4, {"tcp://a:1": 1})
        progress.shard_done(2, 3, "tcp://b:2", 4, {"tcp://a:1": 1, "tcp://b:2": 1})
        task = progress._bar.tasks[0]
        assert task.description == "shards 2/3 (tcp://a:1 1, tcp://b:2 1)"
        assert task.total == 10


def test_a_second_report_into_the_same_folder_is_refused_unless_forced(tmp_path, results_file,
                                                                       capsys):
    out = tmp_path / "rep"
    assert main(["report", results_file, "--out", str(out), "--jobs", "1"]) == 0
    (out / "index.md").write_text("my annotated copy")
    assert main(["report", results_file, "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a report" in err[0] and "--force" in err[0], err
    assert (out / "index.md").read_text() == "my annotated copy"
    assert main(["report", results_file, "--out", str(out), "--jobs", "1", "--force"]) == 0
    assert (out / "index.md").read_text() != "my annotated copy"


# ---- issue 36: a regression gate that fails on wrong results and on lost points ------------------
EIGHTEEN_POINTS = "name = 'eighteen'\n" + QUICK_SIZED     # 3 layers x 3 directions x 2


@pytest.fixture(scope="module")
def eighteen(tmp_path_factory):
    """(the suite file, a fake-backend run of its 18 points, every one ok)."""
    folder = tmp_path_factory.mktemp("eighteen")
    suite = folder / "eighteen.toml"
    suite.write_text(EIGHTEEN_POINTS)
    assert main(["run", str(suite), "--out", str(folder / "run.parquet")]) == 0
    df = store.load(folder / "run.parquet")
    assert len(df) == 18 and set(df["status"]) == {"ok"}
    return str(suite), df


def _write(tmp_path, name: str, df) -> str:
    store.write(df, tmp_path / name)
    return str(tmp_path / name)


def _planted(run, rows, status: str):
    """The run with `rows` (positions) turned into rows of `status`, as the runner writes them."""
    df = run.copy()
    for i in rows:
        df.at[i, "status"], df.at[i, "reason"] = status, f"planted {status}"
        df.at[i, "samples_ms"], df.at[i, "n_samples"] = [], 0
    return df


@pytest.mark.parametrize("status", ["wrong", "crashed", "failed"])
def test_compare_exits_1_when_the_candidate_breaks_verified_points(tmp_path, eighteen, capsys,
                                                                   status):
    """The issue's case: 9 of 18 rows wrong used to be 'suite SAME' and exit 0."""
    _, run = eighteen
    base = _write(tmp_path, "base.parquet", run)
    new = _write(tmp_path, "new.parquet", _planted(run, range(0, 18, 2), status))
    assert main(["compare", base, new]) == 1
    out = capsys.readouterr().out
    assert "**9 BROKEN**" in out and "9 SAME" in out and "0 MISSING" in out
    assert ("**9 points verified in the baseline are wrong/crashed/failed in the candidate "
            "(BROKEN): a correctness regression.**") in out
    assert out.count("| BROKEN |") == 9 and f"new status {status}: planted {status}" in out
    assert main(["compare", base, new, "--allow-missing"]) == 1
    assert main(["compare", base, new, "--fail-on", "ambiguous"]) == 1
    assert main(["compare", base, new, "--fail-on", "never"]) == 0
    assert main(["compare", base, base]) == 0


def test_compare_exits_1_when_the_candidate_lost_points_unless_allowed(tmp_path, eighteen,
                                                                       capsys):
    """The issue's other case: 13 of 18 points gone used to exit 0."""
    _, run = eighteen
    base = _write(tmp_path, "base.parquet", run)
    new = _write(tmp_path, "new.parquet", run.iloc[13:])
    verdicts = tmp_path / "verdicts.csv"
    assert main(["compare", base, new, "--verdicts", str(verdicts)]) == 1
    assert "**13 MISSING**" in capsys.readouterr().out
    assert (store.pd.read_csv(verdicts)["verdict"].value_counts().to_dict()
            == {"MISSING": 13, "SAME": 5})
    assert main(["compare", base, new, "--allow-missing"]) == 0
    assert main(["compare", base, new, "--allow-missing", "--fail-on", "ambiguous"]) == 0
    assert main(["compare", base, new, "--fail-on", "never"]) == 0


def test_an_unsupported_candidate_row_is_missing_not_broken(tmp_path, eighteen, capsys):
    _, run = eighteen
    base = _write(tmp_path, "base.parquet", run)
    new = _write(tmp_path, "new.parquet", _planted(run, [4], "unsupported"))
    assert main(["compare", base, new]) == 1
    out = capsys.readouterr().out
    assert "**1 MISSING**" in out and "0 BROKEN" in out and "correctness regression" not in out
    assert "new status unsupported: planted unsupported" in out
    assert main(["compare", base, new, "--allow-missing"]) == 0


def test_compare_and_check_help_name_broken_and_allow_missing(capsys):
    for command in ("compare", "check"):
        assert main([command, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())      # argparse wraps at will
        assert "--allow-missing do not exit 1 for MISSING rows" in text
        assert "BROKEN when the candidate's row is wrong, crashed or failed" in text
        assert ("1 a regression under the policy (and nothing else): by default a SLOWER row or "
                "suite, a BROKEN row, or a MISSING row unless --allow-missing") in text


def _check(suite: str, base: str, tmp_path, *flags: str) -> int:
    return main(["check", suite, "--baseline", base, "--out", str(tmp_path / "check.parquet"),
                 "--min-samples", "3", *flags])


def test_a_check_narrowed_by_flags_finds_nothing_missing(tmp_path, eighteen, capsys):
    suite, run = eighteen
    base = _write(tmp_path, "base.parquet", run)
    assert _check(suite, base, tmp_path, "--layer", "a", "--direction", "fwd,bwd_data") == 0
    out = capsys.readouterr().out
    assert "4 SAME" in out and "0 MISSING" in out and "0 BROKEN" in out


def test_a_check_waits_out_a_slow_spell_of_the_host_before_it_measures(tmp_path, eighteen,
                                                                       capsys, monkeypatch):
    """A baseline whose CPU rows read the host probe at 1.0 ms, a host that reads 1.4 ms for two
    probes and then 1.0: the check measures only after three quiet reads in a row, and says it
    waited (harness/contention.py: a run measured in a spell reads as a regression)."""
    from harness import contention
    from harness.cli import results
    suite, run = eighteen
    base = run.assign(host_probe_ms=1.0)
    reads = iter([9.0, 1.4, 1.4, 1.0, 1.0, 1.0] + [1.0] * 20)   # the first only warms the BLAS
    probed = []

    def probe(cores):
        probed.append(next(reads))
        return probed[-1]
    measured_after = []
    real_measure = results.measure

    def measure(*args, **kwargs):
        measured_after.append(len(probed))
        return real_measure(*args, **kwargs)
    monkeypatch.setattr(contention, "host_probe_ms", probe)
    monkeypatch.setattr(contention, "POLL_S", 0.0)
    monkeypatch.setattr(results, "measure", measure)
    assert _check(suite, _write(tmp_path, "base.parquet", base), tmp_path) == 0
    assert measured_after == [6]
    assert "waited 0 s for a slow spell of the host to pass (a fixed matmul on every core: " \
           "1 ms, the baseline's 1 ms)" in capsys.readouterr().out


def test_wait_for_quiet_host_gives_up_after_its_time_and_says_how_slow_the_host_was(
        monkeypatch):
    from harness import contention
    monkeypatch.setattr(contention, "POLL_S", 0.0)
    ticks = iter(range(100))
    wait = contention.wait_for_quiet_host(1.0, 2, timeout_s=3, probe=lambda cores: 1.3,
                                          clock=lambda: next(ticks))
    assert not wait.quiet and wait.reads == 3 and wait.slower == pytest.approx(0.3)
    wait = contention.wait_for_quiet_host(1.0, 2, probe=lambda cores: 1.07)
    assert wait.quiet and wait.reads == contention.QUIET_READS


def test_a_check_whose_run_breaks_verified_points_exits_1(tmp_path, capsys):
    """The planted wrong and failing algorithms of the fake backend, verified in a baseline
    doctored to say so: the check's own run gets them wrong and failed, BROKEN, exit 1."""
    suite = tmp_path / "broken.toml"
    suite.write_text(EIGHTEEN_POINTS.replace("'exact_slow'", "'wrong_fast', 'crash'"))
    assert main(["run", str(suite), "--out", str(tmp_path / "run.parquet")]) == 0
    run = store.load(tmp_path / "run.parquet")
    exact = run[run["algorithm"] == "exact"].set_index(["layer", "direction"])["samples_ms"]
    bad = run["status"] != "ok"
    assert set(run.loc[bad, "status"]) == {"wrong", "failed"} and bad.sum() == 18
    for i in run.index[bad]:        # verified in the baseline, as they were before the fault
        run.at[i, "status"], run.at[i, "reason"] = "ok", ""
        run.at[i, "samples_ms"] = exact[run.at[i, "layer"], run.at[i, "direction"]]
    base = _write(tmp_path, "base.parquet", run)
    assert _check(str(suite), base, tmp_path, "--allow-missing") == 1
    out = capsys.readouterr().out
    assert "**18 BROKEN**" in out and "9 SAME" in out and "0 MISSING" in out
    assert _check(str(suite), base, tmp_path, "--force", "--fail-on", "never") == 0


def test_a_check_matches_the_rows_an_expanding_algorithm_makes(tmp_path, capsys):
    """Each plan of an expanding algorithm is a row with its own point id: the check keeps the
    baseline's rows of the points it plans by their planned point id, so they are judged (not
    dropped, leaving the run's rows NEW and nothing to compare)."""
    suite = _plans_suite(tmp_path)
    assert main(["run", str(suite), "--out", str(tmp_path / "base.parquet")]) == 0
    base = str(tmp_path / "base.parquet")
    assert _check(str(suite), base, tmp_path) == 0
    out = capsys.readouterr().out
    assert "4 SAME" in out and "0 NEW" in out
    assert _check(str(suite), base, tmp_path, "--force", "--layer", "a") == 0
    out = capsys.readouterr().out
    assert "2 SAME" in out and "0 MISSING" in out and "0 NEW" in out


# ---- issue 37: bad input that used to be exit 3 or silently ignored ----------------------------
def test_plan_with_two_workspace_limits_exits_2_naming_them(tmp_path, results_file, capsys):
    suite = _suite(tmp_path, GOOD_LAYER + "[[sweep.backends]]\nname='fake'\n")
    assert main(["plan", results_file, "--suite", suite, "--workspace-limit", "0,64MiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workspace-limit '0,64MiB'" in err[0] and "one limit" in err[0]
    assert main(["plan", results_file, "--suite", suite, "--workspace-limit", "64MiB"]) == 0


def _nan_samples(tmp_path, results_file: str) -> str:
    df = store.load(results_file)
    df["samples_ms"] = [[float("nan")] * len(s) for s in df["samples_ms"]]
    path = tmp_path / "nan.parquet"
    store.write(df, path)
    return str(path)


@pytest.mark.parametrize("command", ["table", "compare", "report", "plan", "table --networks"])
def test_results_whose_samples_are_nan_exit_2_naming_the_file(command, tmp_path, results_file,
                                                               capsys):
    nan = _nan_samples(tmp_path, results_file)
    suite = _suite(tmp_path, GOOD_LAYER + "[[sweep.backends]]\nname='fake'\n")
    argv = {"table": ["table", nan], "compare": ["compare", results_file, nan],
            "report": ["report", nan, "--out", str(tmp_path / "rep"), "--jobs", "1"],
            "plan": ["plan", nan, "--suite", suite],
            "table --networks": ["table", "--networks", nan]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"convbench: error: {nan}: row 1 "), err
    assert "sample of nan ms" in err[0]


@pytest.mark.parametrize("flags, named", [(["--layer", ""], "--layer ''"),
                                          (["--layer", " "], "--layer ' '"),
                                          (["--backend", ""], "--backend ''"),
                                          (["--out", ""], "--out ''")])
def test_an_empty_filter_or_out_exits_2_naming_the_flag(flags, named, tmp_path, capsys,
                                                        monkeypatch):
    """`--layer ''` once ran the whole suite, and `--out ''` wrote to the default file."""
    monkeypatch.chdir(tmp_path)
    suite = _suite(tmp_path, GOOD_LAYER + "[[sweep.backends]]\nname='fake'\n")
    out = [] if "--out" in flags else ["--out", str(tmp_path / "x.parquet")]
    assert main(["run", suite, *flags, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not list(tmp_path.rglob("*.parquet")) and not list(tmp_path.rglob("*.jsonl"))


def test_profile_says_where_the_time_went_per_backend_and_direction(tmp_path, eighteen, capsys):
    suite, run = eighteen
    path = _write(tmp_path, "run.parquet", run)
    assert main(["table", "--profile", path]) == 0
    out = capsys.readouterr().out
    assert "stage seconds per backend and direction (prepare, verify against float64, time):" \
        in out and "costliest rows (seconds):" in out
    from harness.analysis import stages
    table = stages.profile(run)
    assert set(table["direction"]) == {"fwd", "bwd_data", "bwd_filter"}
    assert table["rows"].sum() == 18 and table["share"].sum() == pytest.approx(1.0)
    old = run.drop(columns=[c for c in run.columns if c.startswith("stage_")])
    assert main(["table", "--profile", _write(tmp_path, "old.parquet", old)]) == 0
    assert "no stage times in these rows" in capsys.readouterr().out
    assert main(["run", suite, "--out", str(tmp_path / "p.parquet"), "--profile"]) == 0
    assert "costliest rows (seconds):" in capsys.readouterr().out
