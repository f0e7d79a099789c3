"""Model import without a framework: merging, the suite file, `convbench import` / `run --model`
refusals, and `convbench plan` (the importers themselves: test_models_onnx.py,
test_models_torch.py)."""
from __future__ import annotations

import json
from pathlib import Path

from harness import models, plan, store
from harness.cli import main
from harness.models.suite_file import suite_text
from harness.problem import ConvProblem
from harness.suite import load_suite, parse_suite


def _conv(name: str, c: int = 16, hw: int = 28, k: int = 3, **fields) -> ConvProblem:
    return ConvProblem(batch=2, in_channels=c, in_h=hw, in_w=hw, out_channels=c, kernel_h=k,
                       kernel_w=k, name=name, **{"pad_top": 1, "pad_left": 1, "pad_bottom": 1,
                                                 "pad_right": 1, **fields})


def _model(*convs: ConvProblem, skipped=None) -> models.ImportedModel:
    layers = models.merge(tuple(c.with_batch(8) for c in convs))
    return models.ImportedModel("net", "tests:net", 8, layers, len(convs), skipped or {}, "test")


def test_identical_shapes_merge_in_network_order_named_by_the_first():
    merged = models.merge((_conv("a.conv"), _conv("b.conv", c=32), _conv("c.conv"),
                           _conv("d.conv")))
    assert [(p.name, p.multiplicity, p.in_channels) for p in merged] == [
        ("a.conv", 3, 16), ("b.conv", 1, 32)]


def test_the_suite_file_reads_back_to_the_same_layers_asymmetric_pads_included():
    # An uneven pad (TF "SAME" with stride 2: nothing on top, one row at the bottom) survives:
    # benchdnn text implies the end padding from the output size.
    uneven = _conv("stem", c=8, hw=224, stride_h=2, stride_w=2, pad_top=0, pad_left=0,
                   pad_bottom=1, pad_right=1)
    model = _model(_conv("a"), _conv("b", c=32, groups=32), uneven, _conv("a2"),
                   skipped={"Conv1d": 2, "ConvTranspose2d": 1})
    text = suite_text(model)
    assert ("Not imported (convbench runs no 1-D, transposed or quantized convolution): "
            "2 Conv1d, 1 ConvTranspose2d") in text
    assert "# 4 convolutions (2-D), 3 unique shapes" in text
    assert uneven.pad_bottom == 1 and uneven.out_h == 112
    sweep = parse_suite(text, "net.toml")
    assert sweep.name == "net" and sweep.directions == ("fwd", "bwd_data", "bwd_filter")
    assert sweep.problems == model.layers


def test_an_impossible_source_is_one_line(capsys):
    for argv, words in ((["import", "resnet50"], "expected torchvision:NAME"),
                        (["import", "x.onnx", "--input", "3x224"], "--input '3x224'"),
                        (["run", "--input", "3x8x8"], "--input needs --model")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_import_never_replaces_a_suite_file_unasked(tmp_path, capsys, monkeypatch):
    target = tmp_path / "mine.toml"
    target.write_text("# edited by hand\n")
    monkeypatch.setattr(models, "import_model", lambda *a, **k: _model(_conv("a")))
    assert main(["import", "tests:net", "-o", str(target)]) == 2
    assert "exists" in capsys.readouterr().err and target.read_text() == "# edited by hand\n"
    assert main(["import", "tests:net", "-o", str(target), "--force"]) == 0
    assert parse_suite(target.read_text(), str(target)).problems == _model(_conv("a")).layers


def test_run_model_keeps_its_suite_beside_the_results_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(models, "import_model",
                        lambda *a, **k: _model(_conv("a", c=4, hw=6), _conv("b", c=4, hw=6)))
    out = tmp_path / "net.parquet"
    argv = ["run", "--model", "tests:net", "--backend", "fake", "--algorithm", "exact",
            "--direction", "fwd", "--out", str(out), "--budget-ms", "1"]
    assert main(argv) == 0
    kept = tmp_path / "net.suite.toml"
    assert kept.exists() and "tests:net" in kept.read_text()
    assert list(store.load(out)["layer"]) == ["a"]      # merged: one shape, multiplicity 2
    assert int(store.load(out)["multiplicity"].iloc[0]) == 2
    assert main(["run", str(kept), "--backend", "fake", "--algorithm", "exact", "--direction",
                 "fwd", "--out", str(tmp_path / "again.parquet"), "--budget-ms", "1"]) == 0
    # A different model into the same place is refused: the kept suite is never overwritten.
    monkeypatch.setattr(models, "import_model", lambda *a, **k: _model(_conv("z", c=8, hw=6)))
    assert main([*argv[:-4], "--out", str(out), "--resume", "--budget-ms", "1"]) == 2
    assert "holds other layers" in capsys.readouterr().err and "tests:net" in kept.read_text()


# ---- plan ---------------------------------------------------------------------------------------
def _fake_results(tmp_path: Path) -> tuple[Path, object]:
    path = tmp_path / "fake.parquet"
    assert main(["run", "quick", "--backend", "fake", "--workspace-limit", "0,unlimited",
                 "--direction", "fwd,bwd_data", "--budget-ms", "1", "--out", str(path)]) == 0
    return path, load_suite("quick")


def test_plan_picks_the_fastest_verified_algorithm_that_fits(tmp_path, capsys):
    path, sweep = _fake_results(tmp_path)
    out = tmp_path / "plan.json"
    assert main(["plan", str(path), "--suite", "quick", "-o", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["schema"] == plan.SCHEMA and len(document["layers"]) == len(sweep.problems)
    df = store.load(path)
    ok = df[df["status"] == "ok"]
    for layer in document["layers"]:
        assert layer["directions"]["bwd_filter"] is None          # not measured: no answer
        for direction in ("fwd", "bwd_data"):
            choice = layer["directions"][direction]
            mine = ok[(ok["layer"] == layer["layer"]) & (ok["direction"] == direction)]
            assert choice["algorithm"] == mine.sort_values("median_ms").iloc[0]["algorithm"]
            assert choice["algorithm"] != "wrong_fast"       # planted: fastest, but wrong
    # Under no workspace at all the 64 MiB algorithm is out.
    capsys.readouterr()
    assert main(["plan", str(path), "--suite", "quick", "--workspace-limit", "0"]) == 0
    tight = json.loads(capsys.readouterr().out)
    chosen = {c["algorithm"] for layer in tight["layers"]
              for c in layer["directions"].values() if c}
    assert "hungry" not in chosen and chosen
    assert main(["plan", str(path), "--suite", "quick", "--precision", "bf16"]) == 2
    assert "the results hold fp32" in capsys.readouterr().err
    assert main(["plan", str(path), "--suite", "quick", "-o", str(out)]) == 2   # exists


def test_step_totals_say_how_many_layer_directions_each_row_sums(tmp_path, capsys):
    """A precision cut short (fp16 here: 2 of 4 layers) is summed over what it has, and the
    table says so per row instead of one layer count for all (an efficientnet_b0 run measured
    bf16 on 8 of 46 layers)."""
    import io
    import pandas as pd
    from report_fixtures import gpu_frame
    from harness import store
    from harness.cli import main
    df = gpu_frame("small")
    short = df["layer"].isin(sorted(df["layer"].unique())[:2]) & (df["precision"] == "fp16")
    path = tmp_path / "short.parquet"
    df[~short].to_parquet(path)
    assert main(["table", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("network time per pass"):].split("\n\n")[0].splitlines()
    assert "layer_dirs" in lines[1]
    totals = pd.read_fwf(io.StringIO("\n".join(lines[1:])))
    per_precision = totals.groupby("precision")["layer_dirs"].max().to_dict()
    assert per_precision == {"fp16": 2 * 2, "fp32": 4 * 2}, out
    assert store.load(path)["layer"].nunique() == 4
