"""The op axis (harness.epilogue): conv followed by bias, ReLU and a residual add, timed as one
call, verified against the float64 oracle with the same epilogue, refused with a reason by
algorithms that only convolve."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from harness import epilogue, reference, runner, schema, store
from harness.problem import ConvProblem
from harness.suite import SuiteError, load_suite
from harness.sweep import AlgorithmChoice, Point, Sweep, TimingOptions

PROBLEM = ConvProblem(2, 6, 7, 7, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="small")
FAST = TimingOptions(budget_ms=2, min_samples=3, max_samples=20)


def _point(op: str, backend: str = "torch_cpu", algorithm: str = "conv2d",
           layout: str = "NCHW", direction: str = "fwd") -> Point:
    return Point(PROBLEM, direction, "fp32", layout, backend, algorithm, timing=FAST, op=op)


def test_plain_convolution_ids_are_unchanged_and_ops_are_named():
    assert _point("conv").point_id == ("small|n2c6h7w7k8r3s3u1v1p1.1.1.1d1.1g1|fwd|fp32|NCHW|"
                                       "torch_cpu|conv2d|inf|warm")
    assert "|fwd+conv_bias_relu|" in _point("conv_bias_relu").point_id
    assert len({_point(op).point_id for op in epilogue.OPS}) == len(epilogue.OPS)


def test_epilogues_are_swept_on_the_forward_direction_only():
    sweep = Sweep("ops", (PROBLEM,), directions=("fwd", "bwd_data"),
                  backends=(AlgorithmChoice("torch_cpu"),), ops=epilogue.OPS)
    found = sorted((p.direction, p.op) for p in sweep.points(lambda b: ["conv2d"]))
    assert found == sorted([("bwd_data", "conv")] + [("fwd", op) for op in epilogue.OPS])


def test_the_oracle_applies_the_epilogue_exactly():
    data = reference.make_data(PROBLEM, "fp64", seed=1, op="conv_bias_add_relu")
    conv = reference.reference(PROBLEM, "fwd", data)
    b = data.bias.reshape(1, -1, 1, 1)
    expect = {"conv": conv, "conv_bias": conv + b, "conv_bias_relu": np.maximum(conv + b, 0),
              "conv_bias_add_relu": np.maximum(conv + b + data.residual, 0)}
    for op, expected in expect.items():
        np.testing.assert_array_equal(reference.reference(PROBLEM, "fwd", data, op=op), expected)
    assert (expect["conv_bias_relu"] == 0).mean() > 0.2     # the ReLU is exercised
    with pytest.raises(ValueError, match="forward direction only"):
        reference.reference(PROBLEM, "bwd_data", data, op="conv_bias")


def test_operands_of_every_op_share_x_w_dy_and_exist_only_when_needed():
    plain = reference.make_data(PROBLEM, "fp16", seed=4)
    assert plain.bias is None and plain.residual is None
    for op in epilogue.OPS[1:]:
        data = reference.make_data(PROBLEM, "fp16", seed=4, op=op)
        for name in ("x", "w", "dy"):
            np.testing.assert_array_equal(getattr(data, name), getattr(plain, name))
        assert data.bias.shape == (PROBLEM.out_channels,)
        assert (data.residual is not None) == (op == "conv_bias_add_relu")
        # rounded to the point's precision, like every operand
        np.testing.assert_array_equal(data.bias, data.bias.astype(np.float16))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", epilogue.OPS)
def test_torch_cpu_runs_every_op_verified(op, layout):
    pytest.importorskip("torch")
    m = runner.run_point(_point(op, layout=layout))
    assert m.ok, m.reason
    assert m.rel_error <= m.tolerance and m.median_ms > 0


def test_a_dropped_epilogue_is_wrong_not_ok(monkeypatch):
    """The check behind every op row: torch_cpu with its ReLU taken out must fail verification."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "relu_", lambda y: y)       # the library's ReLU, not the oracle's
    m = runner.run_point(_point("conv_bias_relu"))
    assert m.status == "wrong", (m.status, m.reason)


def test_algorithms_that_only_convolve_refuse_with_a_reason():
    m = runner.run_point(_point("conv_bias_relu", backend="cpu", algorithm="im2col"))
    assert m.status == "unsupported"
    assert m.reason == ("op conv_bias_relu: not supported by cpu (im2col), which runs conv")


def test_files_without_an_op_column_read_as_plain_convolution(tmp_path):
    m = runner.run_point(_point("conv", backend="cpu", algorithm="direct"))
    row = schema.to_row(m, "r", "s", {}, schema.finished_now())
    del row["op"]
    path = tmp_path / "old.parquet"
    pd.DataFrame([row]).to_parquet(path)
    assert list(store.load(path)["op"]) == ["conv"]


def test_suite_ops_are_checked(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('name = "g"\nlayers = ["ic8ih8oc8kh3ph1n\\"a\\""]\n'
                    '[sweep]\nops = ["conv", "conv_bias_add_relu"]\n')
    assert load_suite(str(good)).ops == ("conv", "conv_bias_add_relu")
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "b"\nlayers = ["ic8ih8oc8kh3ph1n\\"a\\""]\n'
                   '[sweep]\nops = ["conv_gelu"]\n')
    with pytest.raises(SuiteError, match="conv_gelu"):
        load_suite(str(bad))


def test_an_unknown_op_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "quick", "--op",
                           "conv_bias_gelu", "--out", str(tmp_path / "r.parquet")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "conv_bias_gelu" in lines[0], done.stderr


def test_a_plan_answers_for_the_convolution_not_for_fused_rows(tmp_path, capsys):
    import json
    from harness.cli import main
    path = tmp_path / "ops.parquet"
    assert main(["run", "quick", "--backend", "fake", "--algorithm", "exact", "--direction", "fwd",
                 "--op", "conv,conv_bias_relu", "--budget-ms", "1", "--out", str(path)]) == 0
    df = store.load(path)
    fused = df["op"] == "conv_bias_relu"
    assert fused.any() and (df.loc[fused, "status"] == "ok").all()
    # planted: the fused rows fastest, under a name no plain row has
    df.loc[fused, ["algorithm", "median_ms"]] = ["fused_only", 1e-9]
    store.write(df, tmp_path / "planted.parquet")
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "planted.parquet"), "--suite", "quick"]) == 0
    chosen = {c["algorithm"] for layer in json.loads(capsys.readouterr().out)["layers"]
              for c in layer["directions"].values() if c}
    assert chosen == {"exact"}


def test_backward_directions_run_conv_whatever_the_ops():
    """--op conv_bias without conv must not drop the backward points: they have no epilogue."""
    sweep = Sweep("ops", (PROBLEM,), directions=("fwd", "bwd_data", "bwd_filter"),
                  backends=(AlgorithmChoice("torch_cpu"),), ops=("conv_bias",))
    found = sorted((p.direction, p.op) for p in sweep.points(lambda b: ["conv2d"]))
    assert found == [("bwd_data", "conv"), ("bwd_filter", "conv"), ("fwd", "conv_bias")]


def test_exported_names_tell_a_fused_row_from_a_plain_one():
    from harness import export
    rows = [schema.to_row(runner.run_point(_point(op, backend="fake", algorithm="exact")), "r",
                          "s", {}, schema.finished_now()) for op in ("conv", "conv_bias")]
    df = schema.frame(rows)
    charts = export.to_github_action_benchmark(df)
    assert len({c["name"] for c in charts}) == 2
    assert not any("[" in c["name"] for c in charts)        # no point-id suffix needed
    bench = export.to_pytest_benchmark_json(df)["benchmarks"]
    assert len({b["name"] for b in bench}) == 2 and "fwd+conv_bias" in bench[1]["param"]
