"""The quantized precisions (issue 17): fp8_e4m3, fp8_e5m2 and int8 data, their device bit
patterns, their tolerance and the rows every backend gives them without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from harness import backends, precision, reference
from harness.backends.cudnn.device_buffers import fp8_bits, storage_dtype, to_storage
from harness.problem import ConvProblem
from harness.runner import plan, run_points
from harness.sweep import AlgorithmChoice, Sweep, TimingOptions

SMALL = ConvProblem(2, 8, 6, 6, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)

# Values written out by hand from the formats' definitions (OCP 8-bit floating point):
# e4m3 has 3 mantissa bits (spacing 1/8 in [1, 2)), smallest normal 2^-6, subnormal step 2^-9,
# largest 448; e5m2 has 2 bits (spacing 1/4 in [1, 2)), subnormal step 2^-16, largest 57344.
HAND = {
    "fp8_e4m3": [(1.06, 1.0), (1.0625, 1.0), (1.1875, 1.25), (0.1, 0.1015625), (3e-3, 2**-9 * 2),
                 (0.9e-3, 2**-9 * 0), (1.1e-3, 2**-9), (500.0, 448.0), (-300.0, -288.0)],
    "fp8_e5m2": [(1.125, 1.0), (1.375, 1.5), (0.1, 0.09375), (17.9, 16.0), (18.1, 20.0),
                 (1e5, 57344.0), (2**-17 * 1.01, 2**-16)],
}
# the same values' bit patterns: sign | exponent (bias 7 / 15) | mantissa
BITS = {"fp8_e4m3": [(1.0, 0x38), (1.25, 0x3A), (448.0, 0x7E), (2**-9, 0x01), (2**-6, 0x08),
                     (-1.0, 0xB8), (0.0, 0x00)],
        "fp8_e5m2": [(1.0, 0x3C), (1.5, 0x3E), (57344.0, 0x7B), (2**-16, 0x01), (-2.0, 0xC0)]}


@pytest.mark.parametrize("name", sorted(HAND))
def test_fp8_rounding_is_nearest_even_with_subnormals_and_saturation(name):
    values = np.array([v for v, _ in HAND[name]])
    expected = np.array([e for _, e in HAND[name]])
    np.testing.assert_array_equal(precision.round_to(values, name), expected)


@pytest.mark.parametrize("name", sorted(BITS))
def test_fp8_bit_patterns(name):
    values = np.array([v for v, _ in BITS[name]])
    assert [int(b) for b in fp8_bits(values, name)] == [b for _, b in BITS[name]]
    assert storage_dtype(name) == np.uint8 and to_storage(values, name).dtype == np.uint8


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_agrees_with_torch_on_a_million_values(name):
    """PyTorch's float8 types as an independent check of the rounding and the bits. Inputs are
    float32 (torch rounds float64 through float32 first: 18.0000001 -> 16 in e5m2, where a
    direct round gives 20)."""
    torch = pytest.importorskip("torch")
    dtype = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[name]
    rng = np.random.default_rng(3)
    largest = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}[name]
    x = (rng.standard_normal(1 << 20) * np.exp(rng.uniform(-14, 9, 1 << 20))).astype(np.float32)
    x = np.clip(x, -largest, largest).astype(np.float64)
    ours = precision.round_to(x, name)
    theirs = torch.from_numpy(x).to(dtype)
    np.testing.assert_array_equal(ours, theirs.to(torch.float64).numpy())
    np.testing.assert_array_equal(fp8_bits(ours, name), theirs.view(torch.uint8).numpy())


def test_int8_data_are_integers_spread_by_the_scale_and_bias_is_in_the_result_precision():
    data = reference.make_data(SMALL, "int8", seed=1, op="conv_bias_add_relu")
    for a in (data.x, data.w, data.dy):
        assert np.array_equal(a, np.round(a)) and np.abs(a).max() <= 127
        assert 10 < a.std() < 22                          # N(0, 16^2), rounded
    assert to_storage(data.x, "int8").dtype == np.int8
    # the bias and residual are added to the fp32 result: not integers, scale 16^2
    assert not np.array_equal(data.bias, np.round(data.bias))
    assert np.array_equal(data.residual, precision.round_to(data.residual, "fp32"))


def test_fp8_epilogue_operands_take_the_fp16_result_precision():
    data = reference.make_data(SMALL, "fp8_e4m3", seed=1, op="conv_bias")
    np.testing.assert_array_equal(data.x, precision.round_to(data.x, "fp8_e4m3"))
    np.testing.assert_array_equal(data.bias, precision.round_to(data.bias, "fp16"))
    assert not np.array_equal(data.bias, precision.round_to(data.bias, "fp8_e4m3"))


def test_result_precisions_and_tolerances():
    """The tolerance's rounding term is the result's (fp16 for an fp8 y, fp32 for its dw), and
    the accumulation term Hopper's ~14-bit fp8 sums; int8 sums are exact."""
    assert precision.output_precision("fp8_e5m2", "fwd") == "fp16"
    assert precision.output_precision("fp8_e4m3", "bwd_filter") == "fp32"
    assert precision.output_precision("int8", "bwd_data") is None
    assert precision.output_precision("bf16", "bwd_data") == "bf16"
    sums = 2 * (2**-14 + 2**-24) * 10                    # L = 100: under the promotion length
    assert precision.tolerance("fp8_e4m3", 100) == pytest.approx(8 * 2**-11 + sums)
    assert precision.tolerance("fp8_e4m3", 100, direction="bwd_filter") == pytest.approx(
        8 * 2**-24 + sums)
    # a batch-256 wgrad (L = 802,816): the 14-bit part stops at 4,096 terms, so the check
    # still catches one sample of 256 left out (relative error ~ 1/16)
    big = precision.tolerance("fp8_e4m3", 256 * 56 * 56, direction="bwd_filter")
    assert big == pytest.approx(8 * 2**-24 + 2 * (2**-14 * 64 + 2**-24 * 896))
    assert big < 0.01 < (1 / 256) ** 0.5
    assert precision.tolerance("int8", 10**6) == pytest.approx(8 * 2**-24)
    # an fp8 result off by one fp8 step (2^-4) in every element is not accepted as fp8
    assert precision.delivered("fp8_e4m3", 2**-4, 2304, 1.0) is None
    assert precision.delivered("fp8_e4m3", 1e-3, 2304, 1.0) == "fp8_e4m3"
    assert precision.QUANTIZED == ("fp8_e4m3", "fp8_e5m2", "int8")
    assert "int8" not in precision.FLOATING and "fp16" in precision.FLOATING


# torch_cpu needs torch, which `pip install -e .[test]` does not bring: its case is skipped,
# with the reason, where torch is absent; the cpu backend's runs everywhere.
TORCH_REASON = backends.get("torch_cpu").unavailable_reason()


@pytest.mark.parametrize("backend", [
    "cpu", pytest.param("torch_cpu", marks=pytest.mark.skipif(
        TORCH_REASON is not None, reason=f"torch_cpu case skipped: {TORCH_REASON}"))])
def test_cpu_backends_give_rows_with_reasons_and_int8_backward_is_refused_everywhere(backend):
    sweep = Sweep("q", (SMALL,), backends=(AlgorithmChoice(backend),),
                  timing=TimingOptions(warmup=0, min_samples=1, budget_ms=1),
                  precisions=precision.QUANTIZED, directions=("fwd", "bwd_data"))
    rows = []
    run_points(plan(sweep).points, rows.append)
    assert rows and all(m.status == "unsupported" and m.reason for m in rows)
    assert {m.point.backend for m in rows} == {backend}
    reasons = {(m.point.precision, m.point.direction): m.reason for m in rows}
    assert "forward-only" in reasons[("int8", "bwd_data")]
    assert "fp8" in reasons[("fp8_e5m2", "fwd")]


def test_bytes_moved_count_the_result_at_its_own_width_and_no_peak_means_no_roofline():
    """int8 y is fp32 and an fp8 dw is fp32: the review found bytes at 1 per element for all
    three tensors (half of fp16's), and a roofline percentage against bandwidth alone."""
    import pandas as pd
    from harness.peaks import annotate
    p = ConvProblem(32, 256, 14, 14, 256, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    x, w, y = 32 * 256 * 14 * 14, 256 * 256 * 9, 32 * 256 * 14 * 14
    assert p.bytes_moved(1, 4, "fwd") == x + w + 4 * y
    assert p.bytes_moved(1, 4, "bwd_filter") == x + y + 4 * w
    assert p.bytes_moved(2) == 2 * (x + w + y)                       # one width: unchanged
    rows = pd.DataFrame({"env_gpu_name": ["H100", "H100"], "median_ms": [1.0, 1.0],
                         "backend": ["cudnn_graph"] * 2, "precision": ["fp16", "int8"],
                         "flops": [1e12, 1e12], "bytes_moved": [1e9, 1e9],
                         "arithmetic_intensity": [1000.0, 1000.0]})
    out = annotate(rows, {"fp16": 800.0, "bandwidth_gbps": 3000.0})
    assert out["roofline_pct"].iloc[0] == pytest.approx(100 * 1000 / 800)
    assert np.isnan(out["roofline_pct"].iloc[1])
