"""The torch_cpu backend: lazy import, the reason it gives when torch is missing, and PyTorch's
conv2d / convolution_backward against the float64 reference in every direction, both layouts and
asymmetric padding. Tests that need torch are skipped, with the reason shown, where it is absent.
"""
from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import backends, reference, verdict
from harness.backends.base import Unsupported
from harness.backends.torch import cores
from harness.backends.torch import cpu as torch_cpu
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, Point

MISSING = "torch is not installed (pip install 'convbench[torch]')"
TORCH_REASON = backends.get("torch_cpu").unavailable_reason()
needs_torch = pytest.mark.skipif(TORCH_REASON is not None,
                                 reason=f"torch_cpu test skipped: {TORCH_REASON}")


def _point(problem: ConvProblem, direction: str, precision: str = "fp32",
           layout: str = "NCHW") -> Point:
    return Point(problem, direction, precision, layout, "torch_cpu", "conv2d")


def test_importing_the_backend_does_not_import_torch() -> None:
    code = ("import sys, harness.backends.torch.cpu as t; t.TorchCpuBackend().algorithms(); "
            "t.TorchCpuBackend().unavailable_reason(); "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_reason_when_torch_is_missing(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert torch_cpu.TorchCpuBackend().unavailable_reason() == MISSING


def test_one_library_algorithm() -> None:
    algos = backends.get("torch_cpu").algorithms()
    assert [(a.name, a.family, a.backend) for a in algos] == [("conv2d", "library", "torch_cpu"),
                                                              ("nn_rnn", "library", "torch_cpu"),
                                                              ("plain_loop", "loop", "torch_cpu")]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_reduced_precisions_are_unsupported_with_reason(precision: str) -> None:
    problem = ConvProblem(1, 2, 5, 5, 2, 3, 3)
    algo = backends.get("torch_cpu").algorithm("conv2d")
    assert algo.supports(_point(problem, "fwd", precision))
    with pytest.raises(Unsupported):
        algo.prepare(_point(problem, "fwd", precision), reference.make_data(problem, precision))


@st.composite
def problems(draw) -> ConvProblem:
    groups = draw(st.sampled_from([1, 2, 3]))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    in_h = max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]) + draw(st.integers(0, 5))
    in_w = max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]) + draw(st.integers(0, 5))
    return ConvProblem(draw(st.integers(1, 3)), groups * draw(st.integers(1, 3)), in_h, in_w,
                       groups * draw(st.integers(1, 3)), kh, kw,
                       stride_h=draw(st.integers(1, 3)), stride_w=draw(st.integers(1, 3)),
                       pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3],
                       dilation_h=dh, dilation_w=dw, groups=groups)


def _check(problem: ConvProblem, direction: str, precision: str, layout: str) -> None:
    algo = backends.get("torch_cpu").algorithm("conv2d")
    point = _point(problem, direction, precision, layout)
    assert algo.supports(point) is None
    data = reference.make_data(problem, precision, seed=2)
    prepared = algo.prepare(point, data)
    prepared.poison()
    assert np.isnan(prepared.output()).all()
    prepared.launch()
    judged = verdict.check(problem, direction, data, prepared.output(), precision,
                           algo.error_factor)
    error, limit = judged.rel_error, judged.tolerance
    assert error <= limit, f"{direction} {precision} {layout} {problem}: {error:.2e} > {limit:.1e}"
    if precision == "fp64":
        assert error < 1e-11
    prepared.release()


@needs_torch
@settings(max_examples=40, deadline=None)
@given(problem=problems(), layout=st.sampled_from(["NCHW", "NHWC"]),
       precision=st.sampled_from(["fp32", "fp64"]))
def test_agrees_with_reference(problem: ConvProblem, layout: str, precision: str) -> None:
    for direction in DIRECTIONS:
        _check(problem, direction, precision, layout)


ASYMMETRIC = ConvProblem(2, 4, 9, 8, 6, 3, 2, stride_h=2, pad_top=2, pad_left=0, pad_bottom=1,
                         pad_right=1, dilation_w=2, groups=2)


@needs_torch
@pytest.mark.parametrize("direction, layout", list(itertools.product(DIRECTIONS, ["NCHW", "NHWC"])))
def test_asymmetric_padding(direction: str, layout: str) -> None:
    assert not ASYMMETRIC.symmetric_padding
    _check(ASYMMETRIC, direction, "fp32", layout)


@needs_torch
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_nhwc_runs_channels_last(direction: str) -> None:
    import torch
    algo = backends.get("torch_cpu").algorithm("conv2d")
    prepared = algo.prepare(_point(ASYMMETRIC, direction, "fp32", "NHWC"),
                            reference.make_data(ASYMMETRIC, "fp32"))
    prepared.launch()
    assert prepared.result.is_contiguous(memory_format=torch.channels_last)
    assert (prepared.device, prepared.stream, prepared.extras) == ("cpu", None, {})


@needs_torch
def test_uses_every_core_and_reports_padding_scratch() -> None:
    import torch
    algo = backends.get("torch_cpu").algorithm("conv2d")
    data = reference.make_data(ASYMMETRIC, "fp32")
    prepared = algo.prepare(_point(ASYMMETRIC, "fwd"), data)
    assert torch.get_num_threads() == cores.every_core()
    padded = ASYMMETRIC.batch * ASYMMETRIC.in_channels * ASYMMETRIC.padded_h * ASYMMETRIC.padded_w
    assert prepared.workspace_bytes == padded * 4
    symmetric = ConvProblem(1, 2, 6, 6, 2, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    assert algo.prepare(_point(symmetric, "fwd"),
                        reference.make_data(symmetric, "fp32")).workspace_bytes == 0
