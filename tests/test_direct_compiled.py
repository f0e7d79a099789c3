"""cpu:direct's compiled forward pass (issue 42, harness/backends/cpu/direct_compiled.py): the
layers it runs (few input channels per group), its agreement with the float64 reference on
every geometry the forward pass takes, and the NumPy path where numba is missing."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from harness import backends, reference, verdict
from harness.backends.cpu import compiled, direct
from harness.backends.cpu.common import TILE_W
from harness.problem import ConvProblem
from harness.sweep import Point

HAS_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed (the [compiled] "
                                                       "extra, which the test extras include)")
DIRECT = backends.get("cpu").algorithm("direct")
GEOMETRIES = [
    ConvProblem(2, 1, 23, 41, 8, 5, 7, stride_h=2, stride_w=2, name="deepspeech-like"),
    ConvProblem(2, 3, 17, 19, 6, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
    ConvProblem(2, 4, 11, 13, 6, 3, 3, stride_w=3, pad_top=2, pad_left=0, pad_bottom=0,
                pad_right=2, name="asymmetric"),
    ConvProblem(1, 6, 12, 12, 9, 3, 3, dilation_h=2, dilation_w=3, pad_top=2, pad_left=3,
                pad_bottom=2, pad_right=3, groups=3, name="grouped-dilated"),
    ConvProblem(1, 8, 9, 9, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                groups=8, name="depthwise"),
    ConvProblem(1, 2, 6, 7, 5, 3, 2, stride_h=2, pad_top=1, pad_left=1, pad_bottom=1,
                pad_right=0, in_d=5, kernel_d=3, stride_d=2, pad_front=1, pad_back=1,
                name="3-D"),
    ConvProblem(1, 2, 4, 4, 3, 5, 5, pad_top=3, pad_left=3, pad_bottom=3, pad_right=3,
                name="taps-past-the-edge"),
    # rows of several output tiles, the last one partial, and a last block of two filters
    ConvProblem(2, 3, 5, 150, 6, 3, 4, stride_w=1, pad_top=1, pad_left=2, pad_bottom=1,
                pad_right=1, name="several-tiles"),
]


def _run(problem: ConvProblem, direction: str, precision: str, seed: int):
    """cpu:direct prepared, launched over a poisoned output, and judged against float64."""
    point = Point(problem, direction, precision, "NCHW", "cpu", "direct")
    data = reference.make_data(problem, precision, seed=seed)
    prepared = DIRECT.prepare(point, data)
    prepared.poison()
    prepared.launch()
    judged = verdict.check(problem, direction, data, prepared.output(), precision)
    return prepared, judged


def _forward(problem: ConvProblem, precision: str):
    return _run(problem, "fwd", precision, seed=3)


@needs_numba
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
@pytest.mark.parametrize("problem", GEOMETRIES, ids=lambda p: p.name or p.short_shape)
def test_the_compiled_forward_pass_matches_the_reference(problem, precision) -> None:
    prepared, judged = _forward(problem, precision)
    kernel = prepared.extras["cpu_kernel"]
    assert kernel.startswith("numba ") and kernel.endswith(", on the CPU threads")
    assert judged.delivered == precision, (judged.rel_error, judged.tolerance)
    if precision == "fp64":
        assert judged.rel_error < 1e-13


@needs_numba
def test_a_misplaced_tap_in_the_compiled_kernel_is_wrong(monkeypatch) -> None:
    kernels = compiled.kernels()
    real = kernels.forward

    def shifted(xp, wp, y, kernel, stride, dilation, pad, *rest):   # one column over
        real(xp, wp, y, kernel, stride, dilation, pad - np.array([0, 0, 1]), *rest)
    monkeypatch.setattr(kernels, "forward", shifted)
    _, judged = _forward(GEOMETRIES[1], "fp32")
    assert judged.delivered is None and judged.rel_error > 0.1


def test_channel_rich_narrow_layers_keep_the_per_tap_gemms() -> None:
    problem = ConvProblem(1, direct.FEW_CHANNELS, 6, 6, 4, 3, 3)
    prepared, judged = _forward(problem, "fp32")
    assert prepared.extras["cpu_kernel"].startswith(
        f"numpy: {direct.FEW_CHANNELS} input channels per group and 4 output columns, 6% of")
    assert judged.delivered == "fp32"


def test_layers_of_very_many_channels_keep_the_per_tap_gemms() -> None:
    problem = ConvProblem(1, direct.MOST_CHANNELS * 2, 3, TILE_W, 4, 3, 3, pad_top=1,
                          pad_left=1, pad_bottom=1, pad_right=1)
    prepared, judged = _forward(problem, "fp32")
    assert prepared.extras["cpu_kernel"].startswith(
        f"numpy: {direct.MOST_CHANNELS * 2} input channels per group: per-tap BLAS GEMMs")
    assert judged.delivered == "fp32"


@needs_numba
def test_channel_rich_layers_that_fill_the_tiles_run_compiled() -> None:
    problem = ConvProblem(1, direct.FEW_CHANNELS, 3, TILE_W, 4, 3, 3, pad_top=1,
                          pad_left=1, pad_bottom=1, pad_right=1)
    prepared, judged = _forward(problem, "fp32")
    assert prepared.extras["cpu_kernel"].startswith("numba ")
    assert judged.delivered == "fp32"


def test_without_numba_the_numpy_forward_runs_and_the_row_says_why(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    monkeypatch.setattr(compiled, "_state", {})
    prepared, judged = _forward(GEOMETRIES[0], "fp32")
    assert prepared.extras["cpu_kernel"] == f"numpy: {compiled.MISSING}"
    assert judged.delivered == "fp32"


def test_loading_the_cpu_backend_does_not_import_numba() -> None:
    import subprocess
    import sys
    code = ("import sys, harness.backends.cpu as c; c.CpuBackend().algorithms(); "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_convbench_list_says_whether_the_compiled_kernels_run(monkeypatch, capsys) -> None:
    from harness.cli import main
    assert main(["list"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "compiled kernels" in s)
    assert (compiled.version() in line) if HAS_NUMBA else (compiled.MISSING in line)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    monkeypatch.setattr(compiled, "_state", {})
    assert main(["list"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "compiled kernels" in s)
    assert line.endswith(f"not run: {compiled.MISSING})")


# Stride-1 layers whose input gradient the compiled forward kernel computes (turned_round):
# channel-rich wide rows, asymmetric pads, groups with dilation, 3-D, few channels.
BACKWARD_DATA = [
    ConvProblem(2, 16, 9, 70, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                name="wide"),
    ConvProblem(2, 6, 9, 80, 8, 3, 4, pad_top=2, pad_left=0, pad_bottom=1, pad_right=3,
                name="asymmetric"),
    ConvProblem(1, 6, 7, 70, 9, 3, 3, dilation_h=2, dilation_w=2, pad_top=2, pad_left=2,
                pad_bottom=2, pad_right=2, groups=3, name="grouped-dilated"),
    ConvProblem(1, 4, 5, 70, 6, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1, in_d=4,
                kernel_d=3, pad_front=1, pad_back=0, name="3-D"),
    ConvProblem(2, 16, 9, 20, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                name="few-filters"),
]


def _backward_data(problem: ConvProblem, precision: str):
    return _run(problem, "bwd_data", precision, seed=2)


@needs_numba
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
@pytest.mark.parametrize("problem", BACKWARD_DATA, ids=lambda p: p.name)
def test_stride_1_input_gradients_run_compiled_and_match_the_reference(problem,
                                                                        precision) -> None:
    prepared, judged = _backward_data(problem, precision)
    assert prepared.extras["cpu_kernel"].startswith("numba ")
    assert judged.delivered == precision, (judged.rel_error, judged.tolerance)
    if precision == "fp64":
        assert judged.rel_error < 1e-13


@needs_numba
def test_filters_not_turned_round_are_wrong(monkeypatch) -> None:
    problem = BACKWARD_DATA[0]
    point = Point(problem, "bwd_data", "fp32", "NCHW", "cpu", "direct")
    data = reference.make_data(problem, "fp32", seed=2)
    with monkeypatch.context() as planted:      # the kernel axes kept as they are
        planted.setattr(np, "flip", lambda array, axes: array)
        prepared = DIRECT.prepare(point, data)
        prepared.launch()
    judged = verdict.check(problem, "bwd_data", data, prepared.output(), "fp32")
    assert prepared.extras["cpu_kernel"].startswith("numba ")
    assert judged.delivered is None and judged.rel_error > 0.1


def test_strided_input_gradients_keep_the_numpy_kernel() -> None:
    problem = ConvProblem(1, 2, 9, 70, 4, 3, 3, stride_h=2, stride_w=2)
    prepared, judged = _backward_data(problem, "fp32")
    assert prepared.extras["cpu_kernel"].startswith("numpy: stride above 1")
    assert judged.delivered == "fp32"
    assert direct.turned_round(problem) is None
