"""The command line: bad input of every kind gets one clear message and exit code 2, never a
traceback; the default run works on the CPU; a missing GPU is explained."""
from __future__ import annotations

import pytest

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
    "unknown precision": (GOOD_LAYER + "[sweep]\nprecisions = ['fp8']\n", "fp8"),
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
    "--precision": (["--precision", "fp8"], "fp8"),
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
    other = _results(tmp_path, "other.parquet", gpu_name="NVIDIA H200", cudnn="9.19.0")
    assert main(["compare", base, other]) == 2
    err = capsys.readouterr().err
    assert "gpu_name" in err and "NVIDIA H200" in err
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
