"""The output axis (issue 17): a quantized forward pass written in another result precision
(fp8 into bf16, fp32 or fp8; int8 into int8), its scale, tolerance, point ids, sweep expansion,
suite and command-line checks, the fp8 decoding of device results, and totals that count each
layer-direction once. The GPU side is tests/test_quantized_gpu.py."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import precision, store
from harness.analysis import networks, policies
from harness.analysis.points import STEP_KEYS
from harness.backends.cudnn import device_buffers
from harness.cli import main
from harness.problem import ConvProblem
from harness.suite import SuiteError, load_suite
from harness.sweep import AlgorithmChoice, Point, Sweep

PROBLEM = ConvProblem(4, 32, 14, 14, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="small3x3")
LENGTH = PROBLEM.reduction_length("fwd")            # 32 * 3 * 3 = 288
GOLDEN = Path(__file__).resolve().parent / "golden"


def test_each_quantized_precision_offers_its_own_result_type_first_and_only_forward_extras():
    assert precision.offered_outputs("fp8_e4m3", "fwd") == ("fp16", "bf16", "fp32", "fp8_e4m3")
    assert precision.offered_outputs("fp8_e5m2", "fwd")[-1] == "fp8_e5m2"
    assert precision.offered_outputs("fp8_e4m3", "bwd_filter") == ("fp32",)
    assert precision.offered_outputs("int8", "fwd") == ("fp32", "int8")
    assert precision.offered_outputs("int8", "bwd_data") == ()
    assert precision.offered_outputs("fp16", "fwd") == ("fp16",)
    assert precision.output_precision("fp8_e4m3", "fwd", "fp8_e4m3") == "fp8_e4m3"
    assert precision.output_precision("int8", "bwd_data", "int8") is None    # no such direction


def test_an_8_bit_result_is_scaled_by_a_power_of_two_that_leaves_headroom():
    for name, output, largest in (("fp8_e4m3", "fp8_e4m3", 448.0), ("int8", "int8", 127.0),
                                  ("fp8_e5m2", "fp8_e5m2", 57344.0)):
        for length in (9, 288, 4608, 13824):
            scale = precision.output_scale(name, output, length)
            assert math.log2(scale) == round(math.log2(scale))          # exact scaling
            rms = precision.TABLE[name].data_scale**2 * length**0.5 * scale
            assert 5.5 <= largest / rms <= 11.5, (name, length, largest / rms)
    assert precision.output_scale("fp8_e4m3", "fp32", LENGTH) == 1.0
    assert precision.output_scale("fp8_e4m3", None, LENGTH) == 1.0


def _rounded(name: str, output: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An exact result with the statistics of a forward pass (a sum of LENGTH products of
    operands exact in `name`) and the same result as a device writes it in `output`: scaled,
    rounded to the type, scale divided out."""
    rng = np.random.default_rng(seed)
    scale = precision.TABLE[name].data_scale
    x = precision.round_to(rng.standard_normal((4096, LENGTH)) * scale, name)
    w = precision.round_to(rng.standard_normal(LENGTH) * scale, name)
    exact = x @ w
    factor = precision.output_scale(name, output, LENGTH)
    return exact, precision.round_to(exact * factor, output) / factor


@pytest.mark.parametrize("name,output,off", [
    ("fp8_e4m3", "fp8_e4m3", 1.1), ("int8", "int8", 1.1), ("fp8_e4m3", "bf16", 1.1),
    ("fp8_e5m2", "fp8_e5m2", 1.25)])     # 2 mantissa bits: its honest rounding is ~5%
def test_an_honestly_rounded_result_passes_and_one_off_by_a_factor_does_not(name, output, off):
    exact, written = _rounded(name, output)
    tol = precision.tolerance(name, LENGTH, direction="fwd", output=output)
    error = np.linalg.norm(written - exact) / np.linalg.norm(exact)
    assert error <= tol / 2, (error, tol)                  # honest rounding: well inside
    wrong = np.linalg.norm(written * off - exact) / np.linalg.norm(exact)
    assert wrong > tol, (wrong, tol)                       # a result 10% (25%) off: out
    # the wide default keeps its own, tighter tolerance
    assert precision.tolerance(name, LENGTH, direction="fwd") < tol


def test_point_ids_name_an_asked_output_and_keep_every_other_id_as_it_was():
    plain = Point(PROBLEM, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "engines")
    assert plain.point_id.split("|")[3] == "fp8_e4m3" and plain.result_precision == "fp16"
    asked = Point(PROBLEM, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "engines",
                  output="fp8_e4m3")
    assert asked.point_id.split("|")[3] == "fp8_e4m3>fp8_e4m3"
    assert asked.result_precision == "fp8_e4m3" and asked.point_id != plain.point_id


def _sweep(**axes) -> Sweep:
    return Sweep("t", (PROBLEM,), backends=(AlgorithmChoice("cudnn_graph", ("engines",)),),
                 **axes)


def test_the_sweep_expands_each_precision_into_the_outputs_it_offers_once_each():
    sweep = _sweep(precisions=("fp16", "fp8_e4m3", "int8"), directions=("fwd", "bwd_data"),
                   outputs=("auto", "fp16", "fp32", "int8"))
    points = list(sweep.points(lambda _: ("engines",)))
    got = sorted((p.direction, p.precision, p.output or "-") for p in points)
    # fp16 fwd, fp8's own fp16 and its fp32, int8's own fp32 and its int8; backward: one each
    assert got == sorted([("fwd", "fp16", "-"), ("fwd", "fp8_e4m3", "-"),
                          ("fwd", "fp8_e4m3", "fp32"), ("fwd", "int8", "-"),
                          ("fwd", "int8", "int8"), ("bwd_data", "fp16", "-"),
                          ("bwd_data", "fp8_e4m3", "-"), ("bwd_data", "int8", "-")])
    assert len({p.point_id for p in points}) == len(points)
    assert _sweep(precisions=("fp16",), outputs=("fp32",)).unoffered_outputs() == ["fp32"]


def test_an_output_no_precision_writes_is_one_line_and_exit_2(tmp_path, capsys):
    out = str(tmp_path / "r.parquet")
    assert main(["run", "quick", "--precision", "fp16", "--output-type", "fp32",
                 "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--output-type" in err and "fp32" in err
    assert main(["run", "quick", "--output-type", "fp7", "--out", out]) == 2
    assert "unknown output 'fp7'" in capsys.readouterr().err
    suite = tmp_path / "s.toml"
    suite.write_text('layers = [{ batch = 2, in_channels = 16, in_h = 8, in_w = 8, '
                     'out_channels = 16, kernel_h = 3, kernel_w = 3 }]\n'
                     '[sweep]\nprecisions = ["fp16"]\noutputs = ["int8"]\n')
    with pytest.raises(SuiteError, match="sweep.outputs"):
        load_suite(str(suite))


def test_fp8_results_decode_bit_for_bit_and_the_poison_is_nan():
    for name, (_, _, largest) in precision.MINIFLOAT.items():
        table = device_buffers.fp8_values(name)
        finite = table[np.isfinite(table)]
        # every finite pattern decodes to a value of the format that encodes back to it
        assert np.array_equal(precision.round_to(finite, name), finite)
        assert np.array_equal(table[device_buffers.fp8_bits(finite, name)], finite)
        assert finite.max() == largest and len(np.unique(finite)) == 253 - (name == "fp8_e5m2") * 6
        assert math.isnan(table[device_buffers.poison_value(name)])
    assert device_buffers.poison_value("int8") == -128          # no scaled int8 result is -128


def _row(output: str, ms: float, direction: str = "fwd") -> dict:
    return {"layer": "l", "descriptor": "d", "batch": 4, "multiplicity": 1, "direction": direction,
            "op": "conv", "precision": "fp8_e4m3", "effective_precision": "fp8_e4m3",
            "output": output, "layout": "NHWC", "workspace_limit": -1, "timing_mode": "warm",
            "threads": 0, "status": "ok", "median_ms": ms, "backend": "cudnn_graph",
            "algorithm": f"eng-{output}-{direction}", "heuristic_pick": False}


def test_a_training_step_counts_each_layer_direction_once_in_its_own_result_type():
    df = pd.DataFrame([_row("auto", 1.0), _row("fp32", 5.0), _row("auto", 2.0, "bwd_data")])
    step = policies.network_totals(df, [policies.ORACLE], STEP_KEYS)
    assert len(step) == 1 and step["points"].iloc[0] == 2
    assert step[f"total_{policies.ORACLE}"].iloc[0] == pytest.approx(3.0)   # not 8.0
    # the network table's fwd / bwd split counts the same way
    long = networks.network_table(df, [policies.ORACLE]).iloc[0]
    assert (long["fwd_ms"], long["bwd_ms"], long["total_ms"]) == pytest.approx((1.0, 2.0, 3.0))


def test_a_layer_direction_measured_only_in_an_asked_type_is_missing_from_the_step():
    df = pd.DataFrame([_row("fp32", 5.0), _row("auto", 2.0, "bwd_data")])
    step = policies.network_totals(df, [policies.ORACLE], STEP_KEYS).iloc[0]
    assert step["points"] == 2 and step[f"missing_{policies.ORACLE}"] == 1   # a lower bound


def test_older_files_read_as_auto_and_stay_one_point_per_layer_direction():
    old = store.load(GOLDEN / "quick-cpu-2026-11-22.parquet")      # from before the column
    assert set(old["output"]) == {"auto"}


def test_int8_rounding_is_judged_against_the_result_it_rounds_not_the_scale_aimed_at():
    # a 1x1 input under a 3x3 kernel with padding 1: one tap of nine is in the image, so the
    # result's RMS is a third of what output_scale aims at and its rounding reads 3x larger
    scale_aimed = precision.output_scale("int8", "int8", 576)
    rms = 127 / 8 / 2**0.5 / 3               # the scaled result's RMS there, at worst
    honest = 0.5 / 3**0.5 / rms              # rounding to the nearest integer, uniform
    assert honest > precision.tolerance("int8", 576, direction="fwd", output="int8")
    assert honest < precision.tolerance("int8", 576, direction="fwd", output="int8",
                                        result_rms=rms) / 1.5
    assert scale_aimed == precision.output_scale("int8", "int8", 576)


def test_an_algorithms_error_factor_does_not_loosen_an_8_bit_results_rounding():
    plain = precision.tolerance("fp8_e4m3", LENGTH, 1.0, "fwd", "fp8_e4m3")
    winograd = precision.tolerance("fp8_e4m3", LENGTH, 4.0, "fwd", "fp8_e4m3")
    assert winograd < plain * 1.1             # the accumulation term is small beside 0.094
    assert precision.tolerance("fp16", LENGTH, 4.0) == pytest.approx(
        4 * precision.tolerance("fp16", LENGTH, 1.0))      # floating precisions as before


def test_a_precisions_own_type_asked_by_name_is_auto_and_points_refuse_other_types():
    sweep = _sweep(precisions=("fp8_e4m3", "int8"), outputs=("fp16", "fp32"))
    assert sweep.unoffered_outputs() == []   # fp16 is fp8's own, fp32 int8's own
    assert {(p.precision, p.output) for p in sweep.points(lambda _: ("engines",))} == {
        ("fp8_e4m3", None), ("fp8_e4m3", "fp32"), ("int8", None)}
    with pytest.raises(ValueError, match="cannot be asked"):
        Point(PROBLEM, "bwd_data", "fp8_e4m3", "NHWC", "cudnn_graph", "engines",
              output="fp8_e4m3")


def test_a_regressed_row_asked_in_another_type_reproduces_with_that_type():
    from harness.compare.verdicts import RowResult, Verdict
    from harness.report.compare_summary import reproduce_command
    row = RowResult("id", Verdict.SLOWER, "", suite="resnet50", layer="l", direction="fwd",
                    precision="int8", layout="NHWC", backend="cudnn_graph", algorithm="eng4",
                    output="int8")
    assert reproduce_command(row).endswith("--output-type int8")
    assert "--output-type" not in reproduce_command(RowResult("id", Verdict.SLOWER, "",
                                                              output="auto"))


class _HostCupy:
    """NumPy standing in for CuPy in DeviceTensors (no GPU here): what it calls of CuPy."""
    asarray, empty, uint8 = staticmethod(np.asarray), staticmethod(np.empty), np.uint8

    class cuda:
        class Stream:
            class null:
                @staticmethod
                def synchronize() -> None:
                    pass


@pytest.mark.parametrize("channels", [32, 256])    # scale 2, and scale 1 (2,304 terms)
def test_an_8_bit_result_always_gets_the_scale_its_graph_reads(channels):
    from harness.backends.cudnn.graph_epilogue import UID_SCALE, epilogue_pack
    from harness.reference import make_data
    problem = ConvProblem(2, channels, 6, 6, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    point = Point(problem, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "engines",
                  output="fp8_e4m3")
    tensors = device_buffers.DeviceTensors(_HostCupy).get(point, make_data(problem, "fp8_e4m3"))
    scale = point.result_scale
    assert float(tensors["y_scale"][0]) == scale and (channels == 256) == (scale == 1.0)
    pack = epilogue_pack("conv", {name: _Pointer() for name in tensors})
    assert UID_SCALE in pack
    wide = Point(problem, "fwd", "fp8_e4m3", "NHWC", "cudnn_graph", "engines")
    assert "y_scale" not in device_buffers.DeviceTensors(_HostCupy).get(
        wide, make_data(problem, "fp8_e4m3"))


class _Pointer:
    class data:
        ptr = 1


def test_the_best_per_layer_table_names_an_asked_type_even_when_it_is_the_only_one(capsys):
    def header(name: str) -> str:
        assert main(["table", str(GOLDEN / name)]) == 0
        lines = capsys.readouterr().out.splitlines()
        return next(lines[i + 1] for i, line in enumerate(lines)
                    if line.startswith("best verified algorithm per layer"))
    assert " output " in header("res4a_branch2b-fp8-out-fp8-nvidia-h100-2026-11-24.parquet")
    assert " output " not in header("quick-cpu-2026-11-22.parquet")
