"""Every NumPy CPU algorithm against the float64 reference, judged as the runner judges it.

Random small problems (stride 1-3, asymmetric padding, dilation 1-3, groups incl. depthwise,
non-square kernels) in all three directions and both precisions; a second strategy draws only
3x3 stride-1 problems so that Winograd runs as often as the others. Then the contract the runner
relies on (poison/launch/output/release, workspace limits, unsupported reasons) and the
Winograd transform matrices.
"""
from __future__ import annotations

import itertools
import math
import os
import threading
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness import backends, families, reference, threads, verdict
from harness.backends.base import Unsupported, WorkspaceExceeded

# Local names as before the modules moved into packages (issue 37), so the tests' bodies stand.
from harness.backends.cpu import blas as _blas
from harness.backends.cpu import direct
from harness.backends.cpu import tiles as _tiles
from harness.backends.cpu import workers as _workers
from harness.backends.cpu.common import split
from harness.backends.cpu.fft import algorithm as fft
from harness.backends.cpu.fft import lowering as _fft_lowering
from harness.backends.cpu.fft import tiled as _fft_tiled
from harness.backends.cpu.fft import tiled_directions as _fft_tiled_directions
from harness.backends.cpu.im2col import algorithm as im2col
from harness.backends.cpu.im2col import bwd_filter as _im2col_filter
from harness.backends.cpu.im2col import columns as _columns
from harness.backends.cpu.im2col import in_place as _in_place
from harness.backends.cpu.im2col import shifted as _shifted
from harness.backends.cpu.winograd import algorithm as winograd
from harness.backends.cpu.winograd import bwd_filter as _winograd_filter
from harness.backends.cpu.winograd import toom_cook
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, Point

CPU = backends.get("cpu")
# the convolution algorithms (rnn_loop, the recurrent one, has its tests in test_rnn_points.py)
NAMES = [a.name for a in CPU.algorithms() if families.CONV in a.problem_kinds]
EXPECTED = {"direct": "direct", "im2col": "gemm", "fft": "fft",
            "winograd_f2x2_3x3": "winograd", "winograd_f4x4_3x3": "winograd", "rnn_loop": "loop"}
# float64 errors are ~1e-16 to 2e-15 (Winograd F4 included), far under this.
FP64_LIMIT = 1e-11


def _point(problem: ConvProblem, direction: str, precision: str = "fp64", name: str = "direct",
           layout: str = "NCHW", limit: int | None = None) -> Point:
    return Point(problem, direction, precision, layout, "cpu", name, limit)


def _run(name: str, problem: ConvProblem, direction: str, precision: str,
         seed: int = 0) -> tuple[float, float] | None:
    """(relative error, tolerance as the runner computes it), or None if unsupported."""
    algo = CPU.algorithm(name)
    point = _point(problem, direction, precision, name)
    if algo.supports(point) is not None:
        return None
    data = reference.make_data(problem, precision, seed)
    prepared = algo.prepare(point, data)
    prepared.poison()
    prepared.launch()
    judged = verdict.check(problem, direction, data, prepared.output(), precision,
                           algo.error_factor)
    prepared.release()
    return judged.rel_error, judged.tolerance


def _check_all(problem: ConvProblem, seed: int, names: list[str] = NAMES) -> None:
    for name, direction, precision in itertools.product(names, DIRECTIONS, ("fp64", "fp32")):
        result = _run(name, problem, direction, precision, seed)
        if result is None:
            continue
        error, limit = result
        where = f"{name} {direction} {precision} on {problem}"
        assert error <= limit, f"{where}: error {error:.3e} > tolerance {limit:.3e}"
        if precision == "fp64":
            assert error < FP64_LIMIT, where


@st.composite
def problems(draw, winograd_shape: bool = False) -> ConvProblem:
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 3))
    depthwise = draw(st.booleans())
    channels = groups if depthwise else groups * cg
    if winograd_shape:
        kh = kw = 3
        sh = sw = dh = dw = 1
    else:
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    in_h = max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]) + draw(st.integers(0, 6))
    in_w = max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]) + draw(st.integers(0, 6))
    problem = ConvProblem(draw(st.integers(1, 3)), channels, in_h, in_w,
                          groups * draw(st.integers(1, 3)), kh, kw, stride_h=sh, stride_w=sw,
                          pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2],
                          pad_right=pads[3], dilation_h=dh, dilation_w=dw, groups=groups)
    # The runner's test is a relative L2 error, so every direction's result here has at least 8
    # elements. Cancellation no longer needs this (harness/verdict.py judges it by the terms'
    # spread; 1,500 examples without the limit passed), but the FFT's rounding is normwise over
    # the whole input, elements no output reads included: with 1 to 6 outputs that read one
    # input column of two (dilation 2, padding 2), fft fwd fp64 erred 3.5e-14 against a term
    # tolerance of 2.0e-14 (hypothesis seed 7, 2026-11-25).
    assume(min(math.prod(problem.output_shape), math.prod(problem.input_shape),
               math.prod(problem.weight_shape)) >= 8)
    return problem


@settings(max_examples=150, deadline=None)
@given(problem=problems(), seed=st.integers(0, 1000))
def test_algorithms_agree_with_reference(problem: ConvProblem, seed: int) -> None:
    _check_all(problem, seed)


@settings(max_examples=120, deadline=None)
@given(problem=problems(winograd_shape=True), seed=st.integers(0, 1000))
def test_algorithms_agree_on_3x3_stride_1(problem: ConvProblem, seed: int) -> None:
    _check_all(problem, seed)


@settings(max_examples=80, deadline=None)
@given(problem=problems(), seed=st.integers(0, 1000))
def test_fft_tiled_path_agrees_with_reference(problem: ConvProblem, seed: int) -> None:
    """The random problems hold at most 9 channel pairs a group, under TILED_MIN_PAIRS: with the
    rule at 1 they take the tiled FFT (the model's tiling), as the layers of real networks do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_fft_tiled_directions, "TILED_MIN_PAIRS", 1)
        assert _fft_tiled_directions.pays(problem)
        _check_all(problem, seed, names=["fft"])


# The blocking and alternative code paths that the small random problems do not reach.
PATH_PROBLEMS = [
    ConvProblem(5, 4, 11, 9, 6, 3, 3, pad_top=2, pad_left=1, pad_bottom=0, pad_right=3,
                dilation_h=2, groups=2),
    ConvProblem(3, 6, 9, 10, 12, 3, 3, pad_top=3, pad_left=0, pad_bottom=1, pad_right=2, groups=6),
    ConvProblem(2, 8, 12, 13, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
    ConvProblem(2, 4, 8, 12, 4, 3, 2, pad_top=1, pad_bottom=1, dilation_w=2),  # wide, no pad
]


@pytest.mark.parametrize("problem", PATH_PROBLEMS, ids=lambda p: p.short_shape)
def test_small_blocks_and_alternate_paths(problem: ConvProblem, monkeypatch) -> None:
    """Tiny block sizes (many partial blocks), the wide im2col matrix at any waste, the FFT
    contraction by GEMM and by multiply-add, and its row transforms by GEMM and by pocketfft."""
    monkeypatch.setattr(direct, "BLOCK_BYTES", 1500)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", 1500)
    monkeypatch.setattr(_columns, "WIDE_MAX_WASTE", 100.0)
    monkeypatch.setattr(_tiles, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(_tiles, "MIN_CHUNK_TILES", 1)
    monkeypatch.setattr(_tiles, "MIN_FILTER_CHUNK_TILES", 1)
    for elementwise, row_gemm in [(0, 0), (10**9, 10**9)]:
        monkeypatch.setattr(fft, "ELEMENTWISE_MAX_WORK", elementwise)
        monkeypatch.setattr(fft, "ROW_GEMM_MAX", row_gemm)
        _check_all(problem, seed=7)


# im2col's stride-1 bwd_data: a forward correlation of dy padded by dilation*(k-1) - pad, which
# is a crop where a pad exceeds the dilated kernel's reach (pad_top=5 and pad_right=3 below).
TRANSPOSED_PROBLEMS = [
    ConvProblem(2, 6, 10, 11, 6, 3, 2, pad_top=5, pad_left=0, pad_bottom=1, pad_right=3,
                dilation_h=2, groups=6),  # depthwise
    ConvProblem(2, 6, 9, 12, 9, 2, 3, pad_top=0, pad_left=3, pad_bottom=2, pad_right=1,
                dilation_h=3, dilation_w=2, groups=3),
    ConvProblem(1, 3, 7, 9, 5, 1, 3, pad_top=1, pad_left=2, pad_bottom=0, pad_right=1),
]  # (col2im stays where K >= 2C: im2col.bwd_data says why)


def _no_col2im(*args, **kwargs):
    raise AssertionError("stride-1 bwd_data fell back to col2im")


@pytest.mark.parametrize("waste", [1.1, 100.0])  # per-tap windows / flat column matrix
@pytest.mark.parametrize("problem", TRANSPOSED_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_stride_1_bwd_data_is_a_forward_correlation(problem: ConvProblem, waste: float,
                                                           monkeypatch) -> None:
    monkeypatch.setattr(_columns, "WIDE_MAX_WASTE", waste)
    monkeypatch.setattr(im2col, "_col2im", _no_col2im)
    _check_all(problem, seed=3, names=["im2col"])


def test_larger_channel_counts_within_tolerance() -> None:
    """Errors at realistic reduction lengths (C*R*S = 576), where fp32 rounding has room to grow."""
    _check_all(ConvProblem(2, 64, 10, 10, 32, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                           pad_right=1), seed=11)


# ---- the contract the runner relies on ---------------------------------------------------------
def test_backend_lists_each_algorithm_once_with_its_family() -> None:
    assert {a.name: a.family for a in CPU.algorithms()} == EXPECTED
    assert all(a.backend == "cpu" for a in CPU.algorithms())
    assert CPU.unavailable_reason() is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_poison_then_launch_overwrites_everything(name: str, direction: str) -> None:
    problem = ConvProblem(2, 4, 9, 7, 6, 3, 3, pad_top=1, pad_left=2, pad_bottom=0,
                          pad_right=1, groups=2)
    point = _point(problem, direction, "fp32", name)
    prepared = CPU.algorithm(name).prepare(point, reference.make_data(problem, "fp32"))
    assert (prepared.device, prepared.stream) == ("cpu", None)
    # only direct's forward and input-gradient passes and im2col's col2im say which kernel ran
    # (compiled or NumPy: harness.schema), and im2col's rows carry their GEMM floor
    assert set(prepared.extras) <= ({"cpu_kernel"} if name == "direct" and direction != "bwd_filter"
                                    else {"gemm_floor_ms", "cpu_kernel"} if name == "im2col"
                                    and direction == "bwd_data"
                                    else {"gemm_floor_ms"} if name == "im2col" else set())
    prepared.poison()
    assert np.isnan(prepared.output()).all()
    prepared.launch()
    first = prepared.output()
    assert first.dtype == np.float64 and np.isfinite(first).all()
    prepared.poison()
    prepared.launch()  # a second launch on the same buffers gives the same bits
    np.testing.assert_array_equal(prepared.output(), first)
    prepared.release()


@pytest.mark.parametrize("name", NAMES)
def test_workspace_limit_is_enforced_and_reported(name: str) -> None:
    problem = ConvProblem(2, 4, 8, 8, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    data = reference.make_data(problem, "fp32")
    algo = CPU.algorithm(name)
    used = algo.prepare(_point(problem, "fwd", "fp32", name), data).workspace_bytes
    assert used > 0  # every algorithm here needs scratch (padded input at least)
    with pytest.raises(WorkspaceExceeded) as refused:
        algo.prepare(_point(problem, "fwd", "fp32", name, limit=used - 1), data)
    assert refused.value.needed == used
    enough = algo.prepare(_point(problem, "fwd", "fp32", name, limit=used), data)
    assert enough.workspace_bytes == used


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision, words", [("fp16", "fp16"), ("bf16", "bfloat16"),
                                              ("tf32", "TF32")])
def test_reduced_precisions_are_unsupported_with_reason(name: str, precision: str,
                                                        words: str) -> None:
    problem = PATH_PROBLEMS[2]
    reason = CPU.algorithm(name).supports(_point(problem, "fwd", precision, name))
    assert reason and words in reason
    with pytest.raises(Unsupported):
        CPU.algorithm(name).prepare(_point(problem, "fwd", precision, name),
                                    reference.make_data(problem, precision))


@pytest.mark.parametrize("name", NAMES)
def test_nhwc_is_unsupported_with_reason(name: str) -> None:
    reason = CPU.algorithm(name).supports(_point(PATH_PROBLEMS[2], "fwd", "fp32", name, "NHWC"))
    assert reason and "NHWC" in reason


@pytest.mark.parametrize("name", ["winograd_f2x2_3x3", "winograd_f4x4_3x3"])
@pytest.mark.parametrize("change, words", [
    ({"kernel_h": 5, "kernel_w": 5, "in_h": 9, "in_w": 9}, "3x3"),
    ({"kernel_w": 1}, "3x3"),
    ({"stride_h": 2}, "stride"),
    ({"dilation_w": 2}, "dilation"),
])
def test_winograd_unsupported_shapes_say_why(name: str, change: dict, words: str) -> None:
    base = dict(batch=1, in_channels=2, in_h=8, in_w=8, out_channels=2, kernel_h=3, kernel_w=3,
                pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    problem = ConvProblem(**{**base, **change})
    for direction in DIRECTIONS:
        reason = CPU.algorithm(name).supports(_point(problem, direction, "fp32", name))
        assert reason and words in reason


def test_fft_and_gemm_algorithms_support_every_valid_shape() -> None:
    problem = ConvProblem(1, 3, 11, 10, 3, 4, 2, stride_h=3, stride_w=2, pad_top=2, pad_left=0,
                          pad_bottom=1, pad_right=3, dilation_h=2, dilation_w=3, groups=3)
    for name, direction in itertools.product(["direct", "im2col", "fft"], DIRECTIONS):
        assert CPU.algorithm(name).supports(_point(problem, direction, "fp32", name)) is None


# ---- FFT sizes and Winograd matrices -----------------------------------------------------------
def test_fast_size_is_the_smallest_5_smooth_size() -> None:
    def smooth(n: int) -> bool:
        for factor in (2, 3, 5):
            while n % factor == 0:
                n //= factor
        return n == 1

    for n in range(1, 400):
        size = _fft_lowering.fast_size(n)
        assert size >= n and smooth(size)
        assert not any(smooth(m) for m in range(n, size))


def _exact_correlation_check(outputs: int, taps: int, points) -> None:
    at, g, bt = toom_cook.toom_cook(outputs, taps, [Fraction(p) for p in points])
    rng = np.random.default_rng(outputs * 10 + taps)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-50, 50, outputs + taps - 1)]
        k = [Fraction(int(v)) for v in rng.integers(-50, 50, taps)]
        gk = [sum(row[t] * k[t] for t in range(taps)) for row in g]
        bd = [sum(row[i] * d[i] for i in range(len(d))) for row in bt]
        y = [sum(row[a] * gk[a] * bd[a] for a in range(len(row))) for row in at]
        assert y == [sum(d[i + t] * k[t] for t in range(taps)) for i in range(outputs)]


@pytest.mark.parametrize("algorithm", [winograd.WinogradF2, winograd.WinogradF4])
def test_winograd_matrices_compute_correlation_exactly(algorithm) -> None:
    """Forward F(m, 3) and the filter-gradient F(3, m) on the algorithm's own points, in exact
    rational arithmetic."""
    _exact_correlation_check(algorithm.m, 3, algorithm.points)
    _exact_correlation_check(3, algorithm.m, algorithm.points)


# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2016), section 4.1 and 4.2.
LAVIN_F2 = {"at": [[1, 1, 1, 0], [0, 1, -1, -1]],
            "g": [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
            "bt": [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]}
LAVIN_F4 = {"at": [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                   [0, 1, -1, 8, -8, 1]],
            "g": [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
            "bt": [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                   [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]}


def _sign_ratio(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per row, the sign turning my row's first nonzero entry into theirs."""
    return np.array([np.sign(a[np.flatnonzero(a)[0]]) * np.sign(b[np.flatnonzero(b)[0]])
                     for a, b in zip(mine, theirs)])


@pytest.mark.parametrize("m, points, published", [(2, (0, 1, -1), LAVIN_F2),
                                                   (4, (0, 1, -1, 2, -2), LAVIN_F4)])
def test_construction_reproduces_published_matrices(m: int, points, published) -> None:
    """On Lavin & Gray's points the construction gives their matrices up to the sign of each
    tile position: flipping row a of B^T and of G and column a of A^T together (signs whose
    product is 1) leaves every product A^T[:, a] (G g)[a] (B^T d)[a] unchanged."""
    at, g, bt = (toom_cook.as_array(x) for x in toom_cook.toom_cook(m, 3, [Fraction(p)
                                                                          for p in points]))
    theirs = {k: np.array(v, dtype=float) for k, v in published.items()}
    s_bt, s_g = _sign_ratio(bt, theirs["bt"]), _sign_ratio(g, theirs["g"])
    np.testing.assert_allclose(s_bt[:, None] * bt, theirs["bt"])
    np.testing.assert_allclose(s_g[:, None] * g, theirs["g"])
    np.testing.assert_allclose(at * (s_bt * s_g)[None, :], theirs["at"])
    assert m != 4 or (s_bt == 1).all() and (s_g == 1).all()  # F(4,3) matches exactly


def test_toom_cook_rejects_wrong_point_counts() -> None:
    with pytest.raises(ValueError, match="distinct"):
        toom_cook.toom_cook(2, 3, [Fraction(0), Fraction(1)])
    with pytest.raises(ValueError, match="distinct"):
        toom_cook.toom_cook(2, 3, [Fraction(0), Fraction(1), Fraction(1)])


# ---- im2col phase planes (stride > 1) ----------------------------------------------------------
# Odd shapes for the phase planes: strides 2 and 3, asymmetric padding, dilation (sharing a factor
# with the stride and not), groups, kernels 1, 3, 5 and 7, odd H and W, batch 1 and 3.
STRIDED_PROBLEMS = [
    ConvProblem(3, 4, 13, 11, 6, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=0,
                pad_bottom=2, pad_right=1),
    ConvProblem(1, 6, 15, 9, 6, 5, 5, stride_h=3, stride_w=2, pad_top=2, pad_left=3,
                pad_bottom=0, pad_right=1, groups=3),
    ConvProblem(3, 3, 17, 19, 4, 7, 7, stride_h=2, stride_w=3, pad_top=3, pad_left=2,
                pad_bottom=1, pad_right=3),
    ConvProblem(1, 2, 11, 13, 8, 7, 5, stride_h=2, stride_w=2, pad_top=0, pad_left=2,
                pad_bottom=3, pad_right=0),  # K >= 2C: bwd_data by col2im
    ConvProblem(3, 8, 9, 11, 8, 1, 1, stride_h=2, stride_w=2),  # the plane is the column matrix
    ConvProblem(3, 8, 10, 9, 4, 1, 1, stride_h=3, stride_w=3, pad_top=1, pad_left=2,
                pad_bottom=2, pad_right=0),
    ConvProblem(1, 4, 13, 12, 4, 3, 3, stride_h=2, stride_w=3, pad_top=2, pad_left=1,
                pad_bottom=0, pad_right=2, dilation_h=2, dilation_w=3),  # one phase per axis
    ConvProblem(3, 6, 14, 15, 6, 3, 5, stride_h=3, stride_w=2, pad_top=1, pad_left=3,
                pad_bottom=2, pad_right=0, dilation_h=2, dilation_w=3, groups=6),  # depthwise
    # Input row 1 sits in a phase that a tap reads, yet no output reaches it (output 0 reads only
    # padding): that phase of dx is zero.
    ConvProblem(1, 2, 2, 5, 2, 2, 1, stride_h=3, pad_top=2),
]


def _col2im_forbidden(*args, **kwargs):
    raise AssertionError("bwd_data fell back to col2im where K < 2C")


def _force_column_layout(monkeypatch, flat: bool) -> None:
    monkeypatch.setattr(_columns, "WIDE_MAX_WASTE", 100.0 if flat else 1.0)
    monkeypatch.setattr(_columns, "FLAT_MIN_DEPTH", 0.0)


@pytest.mark.parametrize("block_bytes", [1500, im2col.BLOCK_BYTES])
@pytest.mark.parametrize("flat", [False, True])  # exact windows / flat column matrix
@pytest.mark.parametrize("problem", STRIDED_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_phase_planes_on_odd_strided_shapes(problem: ConvProblem, flat: bool,
                                                   block_bytes: int, monkeypatch) -> None:
    _force_column_layout(monkeypatch, flat)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", block_bytes)
    if problem.out_channels < 2 * problem.in_channels:
        monkeypatch.setattr(im2col, "_col2im", _col2im_forbidden)
    _check_all(problem, seed=5, names=["im2col"])


# bwd_filter's GEMM in both operand orders, dy read in place (exact windows) or copied (flat),
# stride 1 too (a 1x1 kernel whose plane is the column matrix, a K > C*R*S layer, a grouped 3x3
# whose bwd_data runs as correlations), over many blocks (each GEMM adds to the last) and
# through NumPy where the bundled OpenBLAS's accumulating GEMM is missing.
FILTER_PROBLEMS = STRIDED_PROBLEMS + [
    ConvProblem(2, 3, 7, 9, 40, 2, 3, pad_top=1, pad_right=2),   # K > C*R*S
    ConvProblem(3, 6, 5, 6, 4, 1, 1, groups=2),
    ConvProblem(2, 6, 7, 8, 4, 3, 3, pad_top=1, pad_left=2, pad_right=1, groups=2),  # K < 2C
]


@pytest.mark.parametrize("block_bytes", [1500, im2col.BLOCK_BYTES])  # one image / all a block
@pytest.mark.parametrize("in_place", [True, False])  # dy read in place / copied
@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("max_filters", [0, 1 << 20])  # dW = dy col^T / dW^T = col dy^T
@pytest.mark.parametrize("problem", FILTER_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_filter_gradient_in_both_operand_orders(problem: ConvProblem, max_filters: int,
                                                       blas: bool, in_place: bool,
                                                       block_bytes: int, monkeypatch) -> None:
    _force_column_layout(monkeypatch, flat=True)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(_im2col_filter, "MIN_IMAGE_COLUMNS", 1 if in_place else 10**9)
    monkeypatch.setattr(_im2col_filter, "TRANSPOSED_MAX_FILTERS", max_filters)
    if not blas:
        for module in (_im2col_filter, _blas):
            monkeypatch.setattr(module, "gemm_into", lambda dtype: None)
    columns = _im2col_filter.columns_for(problem, np.float64)
    folded = _im2col_filter.fold_of(problem, columns) > 1
    assert _im2col_filter.reads_dy_in_place(columns, np.float64) == (
        in_place and blas and not columns.plane_is_column_matrix and not folded)
    for precision in ("fp64", "fp32"):
        error, limit = _run("im2col", problem, "bwd_filter", precision, seed=9)
        assert error <= limit, f"bwd_filter {precision} on {problem}: {error:.3e} > {limit:.3e}"


@pytest.mark.skipif(_blas.gemm_into(np.float32) is None, reason="needs the bundled OpenBLAS")
@pytest.mark.parametrize("block_bytes", [1500, im2col.BLOCK_BYTES])  # row blocks / image blocks
@pytest.mark.parametrize("problem", FILTER_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_gemm_writes_y_in_place(problem: ConvProblem, block_bytes: int,
                                       monkeypatch) -> None:
    """The column path's GEMM writing y (fwd) and dx (stride-1 bwd_data correlations) in place,
    image by image and group by group, from flat columns switched to exact windows."""
    _force_column_layout(monkeypatch, flat=True)
    monkeypatch.setattr(_in_place, "MIN_COLUMNS", 1)
    monkeypatch.setattr(_shifted, "MIN_CHANNELS", 10**6)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", block_bytes)
    plan = im2col._Correlation.of(problem, np.float32, np.empty(problem.output_shape, np.float32))
    assert plan.in_place != plan.columns.plane_is_column_matrix
    assert plan.columns.kept == problem.out_w or not plan.in_place
    _check_all(problem, seed=13, names=["im2col"])


def test_im2col_in_place_blocks_fit_in_place_block_bytes_where_wide_enough(monkeypatch) -> None:
    """On one core in-place GEMMs take blocks of in_place.BLOCK_BYTES of column matrix (the
    GEMM reads it from L2) where every block stays in_place.MIN_COLUMNS wide (VGG-16 conv1_1),
    and im2col.BLOCK_BYTES where the last one would not (DeepBench row 2: 7-row blocks leave 2
    rows of 341 columns) or on two cores; both still match the reference."""
    conv1_1 = ConvProblem(2, 3, 224, 224, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    row_2 = ConvProblem(2, 1, 161, 700, 32, 5, 20, stride_h=2, stride_w=2)
    for problem, block_bytes in ((conv1_1, _in_place.BLOCK_BYTES), (row_2, im2col.BLOCK_BYTES)):
        plan = im2col._Correlation.of(problem, np.float32,
                                      np.empty(problem.output_shape, np.float32))
        row_bytes = im2col._row_bytes(problem, plan.columns, np.float32)
        assert plan.in_place and len(plan.row_blocks) > 1
        assert plan.row_blocks == split(problem.out_h, block_bytes // row_bytes), problem
        two = im2col._Correlation.of(problem, np.float32,
                                     np.empty(problem.output_shape, np.float32), cores=2)
        assert two.row_blocks == split(problem.out_h, im2col.BLOCK_BYTES // row_bytes)
    monkeypatch.setattr(_in_place, "BLOCK_BYTES", 30_000)   # blocks of 3-4 rows, a short last
    monkeypatch.setattr(_in_place, "MIN_COLUMNS", 1)
    _check_all(replace(conv1_1, in_h=30, in_w=31), seed=29, names=["im2col"])


FOLDING = [ConvProblem(2, 6, 7, 8, 4, 3, 3, pad_top=1, pad_left=2, pad_right=1, groups=2),
           ConvProblem(3, 4, 9, 23, 3, 3, 6, stride_h=2, stride_w=2, pad_left=1, pad_right=2),
           ConvProblem(2, 3, 8, 17, 2, 2, 4, dilation_w=2, pad_left=3, pad_right=1),  # step 2
           STRIDED_PROBLEMS[6]]                                 # stride 3, dilation 3: one phase


def _folds(problem: ConvProblem) -> list[int]:
    return [f for f in _columns.Columns.of(problem).fold_sizes if f > 1]


@pytest.mark.parametrize("problem", FOLDING, ids=lambda p: p.short_shape)
def test_im2col_folded_rows_are_the_tap_rows_shifted(problem: ConvProblem, monkeypatch) -> None:
    """Each row of a folded column matrix, read `step` * j columns on, is the column-matrix
    row of the j-th tap it stands for, image by image."""
    _force_column_layout(monkeypatch, flat=True)
    columns = _columns.Columns.of(problem)
    x = np.random.default_rng(3).standard_normal(problem.input_shape)
    planes = np.zeros(columns.planes_shape)
    columns.fill_planes(planes, x)
    n, c, taps = problem.batch, problem.in_channels, problem.kernel_h * problem.kernel_w
    span = problem.out_h * columns.width
    col = columns.gather(planes, np.empty(c * taps * n * span), 0, n, 0, problem.out_h)
    step = columns.col_phases[0].step
    assert _folds(problem)
    for fold in _folds(problem):
        run = columns.folded_run(fold)
        folded = columns.gather_folded(planes, np.empty(c * taps * n * run), 0, n, fold)
        assert folded.shape == (c * taps // fold, n * run)
        row = 0
        for rph, cph in itertools.product(columns.row_phases, columns.col_phases):
            for i, j in itertools.product(range(len(rph.taps)), range(len(cph.taps))):
                tap = row + i * len(cph.taps) + j
                folded_row = (row + i * len(cph.taps)) // fold + j // fold
                shift = j % fold * step
                for image in range(n):
                    expected = col.reshape(c, taps, n, span)[:, tap, image]
                    got = folded.reshape(c, taps // fold, n, run)[:, folded_row, image,
                                                                   shift:shift + span]
                    np.testing.assert_array_equal(got, expected)
            row += len(rph.taps) * len(cph.taps)


@pytest.mark.parametrize("problem", FOLDING, ids=lambda p: p.short_shape)
def test_im2col_shifted_dy_is_dy_on_the_flat_grid_shifted(problem: ConvProblem,
                                                          monkeypatch) -> None:
    """The folded GEMM's dy operand, written over scratch full of NaN (what an earlier block
    of another size leaves): row (g, j, k) of each image is dy[k] on the flat plane's grid,
    shifted j * step columns, and zero everywhere else."""
    _force_column_layout(monkeypatch, flat=True)
    columns = _columns.Columns.of(problem)
    p, step = problem, columns.col_phases[0].step
    dy = np.random.default_rng(4).standard_normal(p.output_shape)
    for fold in _folds(problem):
        run = columns.folded_run(fold)
        scratch = np.full(p.out_channels * fold * p.batch * run, np.nan)
        got = _im2col_filter._shifted_dy(columns, fold, dy, scratch)
        expected = np.zeros((p.groups, fold, p.filters_per_group, p.batch, run))
        for j in range(fold):
            grid = expected[:, j, ..., j * step:j * step + p.out_h * columns.width]
            grid = grid.reshape(*grid.shape[:-1], p.out_h, columns.width)
            grid[..., :p.out_w] = dy.reshape(p.batch, p.groups, p.filters_per_group, p.out_h,
                                             p.out_w).transpose(1, 2, 0, 3, 4)
        np.testing.assert_array_equal(got, expected.reshape(got.shape))


@pytest.mark.parametrize("cores", [1, 2])      # threads: each slot its own col and dy scratch
@pytest.mark.parametrize("images", [1, 2, 3])   # a block: 2 makes blocks of 2 images and 1
@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("problem", FOLDING, ids=lambda p: p.short_shape)
def test_im2col_filter_gradient_at_every_fold(problem: ConvProblem, blas: bool, images: int,
                                              cores: int, monkeypatch) -> None:
    """bwd_filter with `fold` taps a column-matrix row, at every fold the layer allows (dy
    copied once per fold, shifted): the same gradient as the reference, with groups, with
    blocks of several images and a smaller last one (whose shifted dy lies elsewhere in the
    scratch, so the zeros around each shift must be written, not left from allocation), and
    with blocks on two threads."""
    _force_column_layout(monkeypatch, flat=True)
    problem = replace(problem, batch=3)
    monkeypatch.setattr(im2col, "_blocks", lambda p, row_bytes, whole_rows: (
        split(p.batch, images), split(p.out_h, p.out_h)))
    monkeypatch.setattr("harness.threads.available_cores", lambda: cores)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", 1)     # every image fills a block
    monkeypatch.setattr(_im2col_filter, "THREADS_MIN_FLOPS_PER_ELEMENT", 0)
    launched, scratch = [], {}    # threads per launch; scratch addresses each thread wrote
    real = _im2col_filter.run_chunks
    monkeypatch.setattr(_im2col_filter, "run_chunks", lambda chunks, work, most: (
        launched.append(min(most, _workers.blas_threads(), len(chunks))),
        real(chunks, work, most))[1])

    def recorded(function, position):
        def call(*args):     # by launch: a later launch's buffers may reuse freed addresses
            scratch.setdefault(len(launched), {}).setdefault(threading.get_ident(), set()).add(
                args[position].ctypes.data)
            return function(*args)
        return call

    monkeypatch.setattr(_im2col_filter, "_shifted_dy", recorded(_im2col_filter._shifted_dy, 3))
    monkeypatch.setattr(_columns.Columns, "gather_folded",
                        recorded(_columns.Columns.gather_folded, 2))
    monkeypatch.setattr(_im2col_filter, "TRANSPOSED_MAX_FILTERS", 1 << 20)
    if not blas:
        for module in (_im2col_filter, _blas):
            monkeypatch.setattr(module, "gemm_into", lambda dtype: None)
    for fold in _folds(problem):
        monkeypatch.setattr(_im2col_filter, "fold_of", lambda p, columns, fold=fold: fold)
        for precision in ("fp64", "fp32"):
            error, limit = _run("im2col", problem, "bwd_filter", precision, seed=21)
            assert error <= limit, f"fold {fold} {precision} on {problem}: {error:.3e}"
    # a block of the whole batch is re-split for the threads too (bwd_filter.shared_blocks)
    threaded = cores > 1 and _workers.blas_threads() > 1
    assert max(launched) == (2 if threaded else 1)
    for by_thread in scratch.values():    # no two threads gather or copy dy into one scratch
        assert len(by_thread) == (2 if threaded else 1)
        first, *second = by_thread.values()
        assert not first & set().union(*second)


def test_im2col_filter_folds_only_where_it_copies_far_less() -> None:
    """DeepBench row 6 folds 5 taps a row (480 rows copied a pixel for 1600); ResNet-50 res2a
    (384 for 576, measured slower), DeepBench row 2 (114 for 100) and many filters (dW, not
    dW^T) do not."""
    row_6 = ConvProblem(8, 32, 79, 341, 32, 5, 10, stride_h=2, stride_w=2)
    res2a = ConvProblem(8, 64, 56, 56, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                        pad_right=1)
    row_2 = ConvProblem(8, 1, 161, 700, 32, 5, 20, stride_h=2, stride_w=2)
    many = replace(row_6, out_channels=128)
    assert [_im2col_filter.fold_of(p, _columns.Columns.of(p))
            for p in (row_6, res2a, row_2, many)] == [5, 1, 1, 1]
    assert _im2col_filter.columns_for(row_6, np.float32).kept == _columns.Columns.of(row_6).width


MANY_GROUPS = [ConvProblem(2, 12, 9, 7, 12, 3, 3, pad_top=1, pad_left=1, groups=12),  # depthwise
               ConvProblem(1, 20, 6, 8, 10, 2, 3, stride_h=2, pad_right=2, groups=10),
               ConvProblem(2, 18, 11, 9, 36, 3, 3, stride_w=2, pad_top=1, groups=9)]


@pytest.mark.parametrize("block_bytes", [1500, im2col.BLOCK_BYTES])  # many blocks add up / one
@pytest.mark.parametrize("few", [False, True])   # the suite's 1-3 groups made "many"
@pytest.mark.parametrize("problem", MANY_GROUPS + FILTER_PROBLEMS[-2:],
                         ids=lambda p: p.short_shape)
def test_im2col_many_groups_batch_their_gemms(problem: ConvProblem, few: bool, block_bytes: int,
                                              monkeypatch) -> None:
    """Past _blas.MAX_GROUP_CALLS groups, one np.matmul over the groups (and an add) instead of
    one BLAS call per group, in bwd_filter and in the forward column path (no in-place y: a
    call per group there too); every direction still agrees with the reference."""
    if few:
        for module in (_im2col_filter, _in_place):
            monkeypatch.setattr(module, "MAX_GROUP_CALLS", 1)
    elif problem.groups <= _blas.MAX_GROUP_CALLS:
        pytest.skip("groups within MAX_GROUP_CALLS")
    monkeypatch.setattr(_in_place, "MIN_COLUMNS", 1)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", block_bytes)
    assert _im2col_filter.batched(problem) and not _im2col_filter.transposed(problem)
    shapes = _im2col_filter.scratch_shapes(problem, _im2col_filter.columns_for(problem, np.float64),
                                           8, np.float64, 1)
    assert shapes["partial0"] == (problem.groups, problem.filters_per_group,
                                 problem.channels_per_group * problem.kernel_h * problem.kernel_w)
    plan = im2col._Correlation.of(problem, np.float64, np.empty(problem.output_shape))
    assert not plan.in_place and plan.out_elements > 0 or plan.shifted
    _check_all(problem, seed=17, names=["im2col"])


THREADED_FILTER = [ConvProblem(5, 6, 9, 8, 4, 3, 3, pad_top=1, pad_left=1),    # dW^T
                   ConvProblem(3, 8, 7, 6, 70, 3, 3, stride_h=2, pad_right=1),  # dW
                   ConvProblem(4, 9, 6, 7, 9, 3, 3, pad_top=1, groups=9)]       # batched


@pytest.mark.parametrize("cores", [2, 3])    # 3 slots for BLAS's 2 threads: one stays unused
@pytest.mark.parametrize("problem", THREADED_FILTER, ids=lambda p: p.short_shape)
def test_im2col_filter_gradient_threads_sum_their_blocks(problem: ConvProblem, cores: int,
                                                         monkeypatch) -> None:
    """bwd_filter's one-image blocks on several threads, each summing its blocks' GEMMs into an
    accumulator of its own (dW^T, dW and the batched many-groups form): the accumulators add up
    to the reference's gradient."""
    monkeypatch.setattr("harness.threads.available_cores", lambda: cores)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", 1)     # a block per image
    monkeypatch.setattr(_im2col_filter, "THREADS_MIN_FLOPS_PER_ELEMENT", 1)
    images = [(n, 1) for n in range(problem.batch)]
    assert _im2col_filter.thread_slots(problem, images, True, cores) == cores
    assert (_im2col_filter.transposed(problem), _im2col_filter.batched(problem)) == (
        problem.out_channels == 4, problem.groups == 9)
    _check_all(problem, seed=19, names=["im2col"])


def test_im2col_filter_gradient_threads_where_an_image_fills_a_block_or_the_gemm_is_skinny(
        monkeypatch) -> None:
    """One thread where the GEMM is dense and an image's column matrix is under
    im2col.BLOCK_BYTES (ResNet-50's 3x3 layers ran 1.4-1.9x slower threaded on a Xeon); one per
    core where an image fills a block (DeepBench row 6, 40 MB an image) or the GEMM is skinny
    (DeepBench rows 2 and 55, 48 and 36 flops an element: 0.72-0.76x threaded on an AMD EPYC).
    Row 55's blocks (three of its images fit one) are re-split so that each thread gets as many
    images, and the gradient still matches the reference."""
    monkeypatch.setattr("harness.threads.available_cores", lambda: 2)
    allocated: dict[str, tuple] = {}
    real = im2col.allocate
    monkeypatch.setattr(im2col, "allocate", lambda point, dtype, shapes, *rest: (
        allocated.update(shapes), real(point, dtype, shapes, *rest))[1])
    shared: list[list] = []
    run = _im2col_filter.run_chunks
    monkeypatch.setattr(_im2col_filter, "run_chunks", lambda chunks, work, most: (
        shared.append(list(chunks)), run(chunks, work, most))[1])
    res2a = ConvProblem(8, 64, 56, 56, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                        pad_right=1)
    row_6 = ConvProblem(8, 32, 79, 341, 32, 5, 10, stride_h=2, stride_w=2)
    row_2 = ConvProblem(8, 1, 161, 700, 32, 5, 20, stride_h=2, stride_w=2)
    row_55 = ConvProblem(8, 1, 161, 700, 64, 5, 5, stride_h=2, stride_w=2, pad_top=1,
                         pad_left=1, pad_bottom=1, pad_right=1)
    for problem, slots in ((res2a, 1), (row_2, 2), (row_6, 2), (row_55, 2)):
        allocated.clear()
        point = Point(problem, "bwd_filter", "fp32", "NCHW", "cpu", "im2col")
        im2col.Im2col().prepare(point, reference.make_data(problem, "fp32")).release()
        assert sum(name.startswith("col") for name in allocated) == slots, problem
    shared.clear()
    error, limit = _run("im2col", row_55, "bwd_filter", "fp32", seed=23)
    assert error <= limit
    assert shared and all(chunks == [(0, 2), (2, 2), (4, 2), (6, 2)] for chunks in shared)
    allocated.clear()       # a point run at one thread (--threads 1) allocates for one
    point = Point(row_6, "bwd_filter", "fp32", "NCHW", "cpu", "im2col", threads=1)
    im2col.Im2col().prepare(point, reference.make_data(row_6, "fp32")).release()
    assert sum(name.startswith("col") for name in allocated) == 1


@pytest.mark.parametrize("name", ["winograd_f2x2_3x3", "winograd_f4x4_3x3"])
def test_winograd_scratch_follows_the_points_thread_count(name: str, monkeypatch) -> None:
    """Per-thread scratch is sized for the threads a point may use (--threads), not for every
    core: at one thread a launch uses one slot and reports only its scratch."""
    monkeypatch.setattr("harness.threads.available_cores", lambda: 4)
    monkeypatch.setattr(_tiles, "CHUNK_BYTES", 1)
    monkeypatch.setattr(_tiles, "MIN_FILTER_CHUNK_TILES", 2)
    problem = ConvProblem(8, 16, 20, 20, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    algo = backends.get("cpu").algorithm(name)
    data = reference.make_data(problem, "fp32")
    for direction in DIRECTIONS:
        used = {}
        for count in (1, threads.ALL):
            run = algo.prepare(Point(problem, direction, "fp32", "NCHW", "cpu", name,
                                     threads=count), data)
            used[count] = run.workspace_bytes
            run.release()
        assert used[1] < used[threads.ALL], direction


@pytest.mark.skipif(_blas.gemm_into(np.float32) is None, reason="needs the bundled OpenBLAS")
def test_im2col_in_place_plan_allocates_no_gemm_output() -> None:
    """Where the GEMM writes y in place, the GEMM output buffer is not allocated nor counted
    (VGG-16 conv1_1 at batch 8 reported 22 MiB of workspace for 10 MiB used)."""
    problem = ConvProblem(8, 3, 224, 224, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    point = _point(problem, "fwd", "fp32", "im2col")
    plan = im2col._Correlation.of(problem, np.float32, np.empty(problem.output_shape, np.float32),
                                  threads.cores_for(point.threads))
    assert plan.in_place and plan.out_elements == 0
    prepared = CPU.algorithm("im2col").prepare(point, reference.make_data(problem, "fp32"))
    needed = (plan.col_elements + math.prod(plan.columns.planes_shape)) * 4
    assert prepared.workspace_bytes == needed
    prepared.release()


def _naive_columns(p: ConvProblem, x: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """(C, taps, N, P, Q): what each tap reads, straight from the padded input."""
    xpad = np.pad(x, ((0, 0), (0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right)))
    windows = []
    for tap in taps:
        r, s = divmod(int(tap), p.kernel_w)
        window = xpad[:, :, r * p.dilation_h::p.stride_h, s * p.dilation_w::p.stride_w]
        windows.append(window[:, :, :p.out_h, :p.out_w].transpose(1, 0, 2, 3))
    return np.stack(windows, axis=1)


@pytest.mark.parametrize("flat", [False, True])
def test_im2col_gathers_with_one_copy_per_phase_plane(flat: bool, monkeypatch) -> None:
    """At stride 2 a 3x3 kernel's taps fall on 4 phase planes: a block's column matrix takes 4
    copy calls (not 9), and equals the naive one with the taps in the planes' order."""
    _force_column_layout(monkeypatch, flat)
    p = ConvProblem(2, 3, 9, 8, 4, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=0,
                    pad_bottom=1, pad_right=1)
    columns = _columns.Columns.of(p)
    assert columns.planes_shape[0] == 4 and sorted(columns.tap_order) == list(range(9))
    x = np.random.default_rng(0).standard_normal(p.input_shape)
    planes = np.zeros(columns.planes_shape)
    columns.fill_planes(planes, x)
    col_flat = np.empty(columns.column_elements(p.batch * p.out_h * columns.kept))
    copies = []
    real_copyto = np.copyto
    with monkeypatch.context() as counting:
        counting.setattr(np, "copyto", lambda *a, **k: copies.append(1) or real_copyto(*a, **k))
        col = columns.gather(planes, col_flat, 0, p.batch, 0, p.out_h)
    assert len(copies) == 4
    gathered = col.reshape(p.in_channels, 9, p.batch, p.out_h, columns.kept)[..., :p.out_w]
    np.testing.assert_array_equal(gathered, _naive_columns(p, x, columns.tap_order))


def test_im2col_1x1_strided_plane_is_the_column_matrix() -> None:
    """A 1x1 stride-2 kernel reads one phase plane holding exactly the output grid: no column
    matrix is allocated and the GEMM reads the plane."""
    columns = _columns.Columns.of(STRIDED_PROBLEMS[4])
    assert columns.plane_is_column_matrix and columns.column_elements(10**6) == 0
    assert columns.planes_shape == (1, 8, 3, 5, 6)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_im2col_phase_planes_count_as_workspace(direction: str) -> None:
    """The planes (dy's, per dx phase, for bwd_data) are scratch: counted, and refused past the
    limit with the same count."""
    p = ConvProblem(2, 4, 11, 9, 6, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                    pad_bottom=0, pad_right=1)
    data = reference.make_data(p, "fp32")
    algo = CPU.algorithm("im2col")
    used = algo.prepare(_point(p, direction, "fp32", "im2col"), data).workspace_bytes
    if direction == "bwd_data":
        parts, _ = im2col._data_parts(p, np.float32, data.w, data.dy, np.empty(p.input_shape))
        planes = sum(math.prod(part.plan.columns.planes_shape) for part in parts)
        assert len(parts) == 4
    else:
        planes = math.prod(_columns.Columns.of(p).planes_shape)
    assert used > planes * 4
    with pytest.raises(WorkspaceExceeded) as refused:
        algo.prepare(_point(p, direction, "fp32", "im2col", limit=used - 1), data)
    assert refused.value.needed == used


# ---- im2col shifted GEMMs (no column matrix) ---------------------------------------------------
needs_blas = pytest.mark.skipif(_blas.gemm_into(np.float32) is None,
                                reason="NumPy's BLAS is not the bundled scipy-openblas")


def _force_shifted(monkeypatch, block_bytes: int = im2col.BLOCK_BYTES) -> None:
    monkeypatch.setattr(_shifted, "MIN_CHANNELS", 1)
    monkeypatch.setattr(_shifted, "MIN_COLUMNS", 1)
    monkeypatch.setattr(_columns, "WIDE_MAX_WASTE", 100.0)
    monkeypatch.setattr(im2col, "BLOCK_BYTES", block_bytes)


@needs_blas
@pytest.mark.parametrize("block_bytes", [1500, im2col.BLOCK_BYTES])  # row blocks / image blocks
@pytest.mark.parametrize("problem", PATH_PROBLEMS + TRANSPOSED_PROBLEMS + STRIDED_PROBLEMS,
                         ids=lambda p: p.short_shape)
def test_im2col_shifted_gemms_on_odd_shapes(problem: ConvProblem, block_bytes: int,
                                            monkeypatch) -> None:
    """Every odd shape above (groups, depthwise, dilation, strides 2 and 3 by phase planes,
    asymmetric and over-reaching padding, batch 1) through shifted GEMMs in any block split."""
    _force_shifted(monkeypatch, block_bytes)
    plan = im2col._Correlation.of(problem, np.float32)
    assert plan.shifted != plan.columns.plane_is_column_matrix
    _check_all(problem, seed=11, names=["im2col"])


@needs_blas
@settings(max_examples=100, deadline=None)
@given(problem=problems(), seed=st.integers(0, 1000))
def test_im2col_shifted_gemms_agree_with_reference(problem: ConvProblem, seed: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        _force_shifted(patch)
        _check_all(problem, seed, names=["im2col"])


# Shapes the unforced rule sends to shifted GEMMs (>= 16 channels a group, wide rows, >= 512
# GEMM columns a block): batch 1, groups, dilation, non-square kernel and input, stride 2, a
# padded 1x1 kernel.
SHIFTED_PROBLEMS = [
    ConvProblem(1, 16, 14, 40, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
    ConvProblem(2, 32, 7, 41, 32, 3, 5, pad_top=2, pad_left=0, pad_bottom=1, pad_right=3,
                dilation_h=2, groups=2),
    ConvProblem(2, 16, 30, 45, 24, 5, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=2,
                pad_bottom=0, pad_right=1),
    ConvProblem(3, 16, 6, 33, 16, 1, 1, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
]  # (a 1x1 kernel without padding reads its plane as the column matrix: nothing to save)


@needs_blas
@pytest.mark.parametrize("problem", SHIFTED_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_takes_shifted_gemms_from_16_channels_and_512_columns(problem: ConvProblem
                                                                     ) -> None:
    assert im2col._Correlation.of(problem, np.float32).shifted
    assert not im2col._Correlation.of(replace(problem, in_channels=8 * problem.groups),
                                      np.float32).shifted
    assert not im2col._Correlation.of(replace(problem, batch=1, in_h=problem.kernel_h + 2),
                                      np.float32).shifted
    _check_all(problem, seed=13, names=["im2col"])


def test_im2col_without_an_accumulating_blas_keeps_the_column_matrix(monkeypatch) -> None:
    monkeypatch.setattr(_shifted, "gemm_into", lambda dtype: None)
    assert not im2col._Correlation.of(SHIFTED_PROBLEMS[0], np.float32).shifted
    _check_all(SHIFTED_PROBLEMS[0], seed=13, names=["im2col"])


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_into_accumulates_on_strided_views(dtype) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 9)).astype(dtype)[:, 2:6]        # row stride 9, 4 deep
    b = rng.standard_normal((4, 30)).astype(dtype)[:, 3:20]      # a column slice of a wider plane
    c = rng.standard_normal((5, 25)).astype(dtype)
    expected = c[:, 4:21] + a @ b
    gemm = _blas.gemm_into(dtype)
    gemm(a, b, c[:, 4:21], True)
    np.testing.assert_allclose(c[:, 4:21], expected, rtol=1e-5)
    gemm(a, b, c[:, 4:21], False)
    np.testing.assert_allclose(c[:, 4:21], a @ b, rtol=1e-5)
    with pytest.raises(ValueError, match="row-major"):
        gemm(a, b[:, ::2], c[:, :9], False)       # a column stride BLAS would misread
    with pytest.raises(ValueError, match="shapes"):
        gemm(a, b, c[:, :16], False)


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_into_reads_transposed_views_uncopied(dtype) -> None:
    """Column-major views (a.T of a row-major matrix, with any leading dimension, also 1-row
    and 1-column ones) go to BLAS with its transpose flag (Winograd's bwd_filter passes dy
    tiles this way)."""
    rng = np.random.default_rng(1)
    at = rng.standard_normal((9, 7)).astype(dtype)[2:8]            # a = at.T is (7 x 6)
    bt = rng.standard_normal((3, 11)).astype(dtype)[:, 1:7]        # b = bt.T is (6 x 3)
    c = rng.standard_normal((7, 3)).astype(dtype)
    expected = c + at.T @ bt.T
    gemm = _blas.gemm_into(dtype)
    gemm(at.T, bt.T, c, True)
    np.testing.assert_allclose(c, expected, rtol=1e-5)
    row = rng.standard_normal((6, 4)).astype(dtype)[:, :1].T      # (1 x 6), column stride 4
    out = np.empty((1, 3), dtype)
    gemm(row, bt.T, out, False)
    np.testing.assert_allclose(out, row @ bt.T, rtol=1e-5)


@needs_blas
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_im2col_shifted_workspace_is_planes_output_block_and_weights(direction: str) -> None:
    """No column matrix: the workspace is the planes, one GEMM output block and the per-tap
    weights, counted exactly and refused past the limit with the same count."""
    p = SHIFTED_PROBLEMS[1]
    data = reference.make_data(p, "fp32")
    algo = CPU.algorithm("im2col")
    used = algo.prepare(_point(p, direction, "fp32", "im2col"), data).workspace_bytes
    if direction == "bwd_data":
        parts, _ = im2col._data_parts(p, np.float32, data.w, data.dy, np.empty(p.input_shape))
        plans = [part.plan for part in parts]
    else:
        plans = [im2col._Correlation.of(p, np.float32)]
    assert all(plan.shifted and plan.col_elements == 0 for plan in plans)
    expected = (sum(math.prod(plan.columns.planes_shape) + math.prod(plan.weights_shape)
                    for plan in plans)
                + max(plan.p.out_channels * plan.block_columns for plan in plans))
    assert used == expected * 4
    with pytest.raises(WorkspaceExceeded) as refused:
        algo.prepare(_point(p, direction, "fp32", "im2col", limit=used - 1), data)
    assert refused.value.needed == used


@needs_blas
@pytest.mark.parametrize("ratio, stride, numba, col2im", [
    (2, 1, False, False), (4, 1, False, False), (8, 1, False, True), (2, 2, False, True),
    (1, 2, False, False), (1, 1, True, False), (2, 1, True, True), (4, 1, True, True),
    (1, 2, True, True)])
def test_im2col_bwd_data_keeps_col2im_from_2x_channels_or_8x_when_shifted_by_numpy(
        ratio: int, stride: int, numba: bool, col2im: bool, monkeypatch) -> None:
    """K >= 2C takes col2im, but with shifted correlations (stride 1) and NumPy's col2im only
    from K >= 8C; compiled, its scatter is cheap enough from 2C, and at stride 2 (16 x 40
    output pixels) whatever K / C (Im2col.bwd_data)."""
    from harness.backends.cpu import compiled
    if numba and compiled.unavailable_reason() is not None:
        pytest.skip(f"numba: {compiled.unavailable_reason()}")
    if not numba:
        monkeypatch.setattr(compiled, "unavailable_reason", lambda: compiled.MISSING)
    p = ConvProblem(1, 16, 16 * stride, 40 * stride, 16 * ratio, 3, 3, stride_h=stride,
                    stride_w=stride, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    called = []
    real = im2col._col2im
    monkeypatch.setattr(im2col, "_col2im", lambda *a, **k: called.append(1) or real(*a, **k))
    _check_all(p, seed=17, names=["im2col"])
    assert bool(called) == col2im


@needs_blas
def test_a_strided_bwd_data_on_a_tiny_output_plane_keeps_the_phase_correlations(
        monkeypatch) -> None:
    """7 x 7 output pixels (col2im.STRIDED_MIN_PIXELS): col2im's GEMMs would be 49 wide."""
    from harness.backends.cpu import compiled
    if compiled.unavailable_reason() is not None:
        pytest.skip(f"numba: {compiled.unavailable_reason()}")
    p = ConvProblem(1, 16, 14, 14, 16, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                    pad_bottom=1, pad_right=1)
    monkeypatch.setattr(im2col, "_col2im", _col2im_forbidden)
    _check_all(p, seed=19, names=["im2col"])


# ---- Winograd: odd shapes and block splits -----------------------------------------------------
WINOGRAD_NAMES = ["winograd_f2x2_3x3", "winograd_f4x4_3x3"]
# Odd sizes (tiles overhang the output), asymmetric padding 0-2, batch 1, 3 and 5, channel
# counts that are not multiples of 8, groups, depthwise with a channel multiplier, and a pad of
# 3 (bwd_data then crops dy instead of padding it).
WINOGRAD_ODD_PROBLEMS = [
    ConvProblem(1, 5, 13, 11, 7, 3, 3, pad_top=0, pad_left=2, pad_bottom=1, pad_right=0),
    ConvProblem(3, 6, 9, 15, 9, 3, 3, pad_top=2, pad_left=1, pad_bottom=0, pad_right=2, groups=3),
    ConvProblem(3, 12, 10, 7, 20, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                groups=4),
    ConvProblem(3, 6, 11, 9, 12, 3, 3, pad_top=1, pad_left=0, pad_bottom=2, pad_right=1,
                groups=6),
    ConvProblem(3, 5, 7, 10, 5, 3, 3, pad_top=2, pad_left=1, pad_bottom=1, pad_right=0,
                groups=5),
    ConvProblem(1, 10, 5, 6, 11, 3, 3),  # a 3x4 output: one tile, mostly overhang
    ConvProblem(5, 3, 8, 9, 5, 3, 3, pad_top=3, pad_left=0, pad_bottom=1, pad_right=3),
]


# Chunk sizes in tiles: one tile row (bands of every image), 10 and 30 (bands of uneven rows and
# groups of images), the whole batch in one chunk.
@pytest.mark.parametrize("tiles", [1, 10, 30, 10**6])
@pytest.mark.parametrize("problem", WINOGRAD_ODD_PROBLEMS, ids=lambda p: p.short_shape)
def test_winograd_odd_shapes_in_every_chunk_split(problem: ConvProblem, tiles: int,
                                                  monkeypatch) -> None:
    for name in ("MIN_CHUNK_TILES", "MIN_FILTER_CHUNK_TILES"):
        monkeypatch.setattr(_tiles, name, tiles)
    monkeypatch.setattr(_tiles, "CHUNK_BYTES", 1)
    monkeypatch.setattr(winograd, "BY_FILTERS_MAX_CHUNKS", 0)   # chunks by tiles only
    _check_all(problem, seed=5, names=WINOGRAD_NAMES)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("problem", WINOGRAD_ODD_PROBLEMS[:4], ids=lambda p: p.short_shape)
def test_winograd_chunks_on_threads(problem: ConvProblem, threads: int, monkeypatch) -> None:
    """Chunks spread over up to 3 threads (more than this machine's cores, so slots are shared
    out unevenly) and over one, each thread with its own scratch and, for bwd_filter, its own
    accumulator."""
    monkeypatch.setattr("harness.threads.available_cores", lambda: threads)
    monkeypatch.setattr(_workers, "blas_threads", lambda: threads)
    for name in ("MIN_CHUNK_TILES", "MIN_FILTER_CHUNK_TILES"):
        monkeypatch.setattr(_tiles, name, 2)
    monkeypatch.setattr(_tiles, "CHUNK_BYTES", 1)
    for by_filters_max in (0, 10**9):   # threads sharing chunks of tiles, or blocks of filters
        monkeypatch.setattr(winograd, "BY_FILTERS_MAX_CHUNKS", by_filters_max)
        _check_all(problem, seed=9, names=WINOGRAD_NAMES)


# FUSED_U_BYTES: one filter a transform, 2 (F2) or 1 (F4) of 5 channels fp32 (parts of uneven
# length where a block has an odd count), or all of a block's at once.
@pytest.mark.parametrize("fused_bytes", [1, 700, 10**9],
                         ids=["filter-by-filter", "uneven-parts", "all-at-once"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("problem", WINOGRAD_ODD_PROBLEMS, ids=lambda p: p.short_shape)
def test_winograd_by_filters(problem: ConvProblem, threads: int, fused_bytes: int,
                             monkeypatch) -> None:
    """The path by filters (few tiles, one group) on odd shapes: the input transform in chunks
    of one tile row (bands of uneven images), filters shared out unevenly among 3 threads, each
    thread's weights transformed one filter at a time or all at once (FUSED_U_BYTES)."""
    monkeypatch.setattr("harness.threads.available_cores", lambda: threads)
    monkeypatch.setattr(_workers, "blas_threads", lambda: threads)
    monkeypatch.setattr(winograd, "BY_FILTERS_MAX_CHUNKS", 10**9)
    monkeypatch.setattr(winograd, "FUSED_U_BYTES", fused_bytes)
    monkeypatch.setattr(winograd, "chunks", lambda t, batch, tiles: _tiles.chunks(t, batch, 1))
    _check_all(problem, seed=11, names=WINOGRAD_NAMES)


def test_chunk_threads_follow_blas_and_put_its_count_back() -> None:
    """run_chunks uses at most BLAS's thread count (convbench's --threads limits BLAS), gives
    each concurrent call its own slot, and puts BLAS's count back, also after a failure."""
    if _workers._thread_calls() is None:
        pytest.skip("NumPy's BLAS is not the bundled OpenBLAS: chunks run in turn")
    with threads.limited(1):
        assert _workers.blas_threads() == 1
        seen: list[int] = []
        _workers.run_chunks(list(range(5)), lambda slot, _: seen.append(slot), most=4)
        assert seen == [0] * 5

    def fail(slot: int, chunk: int) -> None:
        if chunk == 3:
            raise RuntimeError("planted")

    with threads.limited(2):
        slots: set[int] = set()
        _workers.run_chunks(list(range(6)), lambda slot, _: slots.add(slot), most=2)
        assert slots <= {0, 1} and _workers.blas_threads() == 2
        with pytest.raises(RuntimeError, match="planted"):
            _workers.run_chunks(list(range(6)), fail, most=2)
        assert _workers.blas_threads() == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_chunk_threads_work_in_a_forked_child() -> None:
    """A child forked after the parent ran chunks on threads inherits the pool object without
    its threads; with one pool per process it makes its own (before: it waited forever)."""
    with threads.limited(2):
        _workers.run_chunks(list(range(4)), lambda slot, chunk: None, most=2)
        pid = os.fork()
        if pid == 0:
            done: list[int] = []
            _workers.run_chunks(list(range(4)), lambda slot, chunk: done.append(chunk), most=2)
            os._exit(0 if sorted(done) == [0, 1, 2, 3] else 1)
    for _ in range(200):
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's chunks never ran")


@pytest.mark.parametrize("batch", [1, 3, 5, 8, 32])
@pytest.mark.parametrize("rows,cols", [(1, 1), (2, 2), (7, 7), (14, 14), (56, 56), (3, 28)])
@pytest.mark.parametrize("tiles", [1, 5, 64, 200, 10**6])
def test_winograd_chunks_cover_every_tile_once(batch: int, rows: int, cols: int,
                                               tiles: int) -> None:
    """Chunks cover each image's tile rows in order, exactly once: bands of one image differ by
    at most one row, groups of images by at most one image."""
    t = _tiles.Tiling(4, 6, rows, cols)
    found = _tiles.chunks(t, batch, tiles)
    covered = [(n, u) for c in found for n in range(c.n0, c.n1) for u in range(c.u0, c.u1)]
    assert covered == [(n, u) for n in range(batch) for u in range(rows)]
    assert sum(c.tiles(t) for c in found) == batch * rows * cols
    spans = {(c.n1 - c.n0, c.u1 - c.u0) for c in found}
    assert max(spans)[0] - min(spans)[0] <= 1 and max(s[1] for s in spans) - min(
        s[1] for s in spans) <= 1
    if t.per_image < tiles:
        assert all((c.u0, c.u1) == (0, rows) for c in found)


def test_winograd_takes_few_tile_layers_whole_at_batch_8() -> None:
    """ResNet-50's res5 at batch 8 has 32 tiles of 512 channels, too few for two chunks: F4
    shares them out by filters (each thread's GEMMs read only its filters' transformed weights),
    and bwd_filter takes them in one chunk; res4 (128 tiles of 256) and res2 (1,568 tiles of 64
    channels) are cut into chunks of tiles for the threads (bwd_filter: res4 in one)."""
    mats = toom_cook.matrices(4, winograd.WinogradF4.points)
    for channels, size, by_filters, whole in [(64, 56, False, False), (256, 14, False, True),
                                              (512, 7, True, True)]:
        problem = ConvProblem(8, channels, size, size, channels, 3, 3, pad_top=1, pad_left=1,
                              pad_bottom=1, pad_right=1)
        core = winograd._Correlation(mats, 4, 1, channels, channels, 8, size, size, np.float32,
                                     2)
        assert core.by_filters == by_filters
        gradient = _winograd_filter.FilterGradient(mats, 4, problem, np.float32, 2)
        assert (len(gradient.chunks) == 1) == whole


# ---- FFT: odd shapes, large kernels (issue 16) -------------------------------------------------
# Kernels 1 to 11 (square, non-square, even), odd sizes, asymmetric padding (up to a kernel
# wider than the image), dilation, strides 2 and 3, groups and depthwise, batch 1 and 3.
FFT_ODD_PROBLEMS = [
    ConvProblem(1, 3, 13, 11, 4, 11, 11, pad_top=5, pad_left=5, pad_bottom=5, pad_right=5),
    ConvProblem(3, 4, 9, 15, 6, 9, 7, pad_top=4, pad_left=0, pad_bottom=2, pad_right=5),
    ConvProblem(3, 2, 6, 5, 3, 11, 9, pad_top=5, pad_left=4, pad_bottom=5, pad_right=4),
    ConvProblem(3, 6, 17, 14, 6, 5, 5, pad_top=2, pad_left=1, pad_bottom=3, pad_right=0,
                dilation_h=2, dilation_w=3, groups=3),
    ConvProblem(1, 4, 12, 13, 8, 7, 3, stride_h=2, stride_w=3, pad_top=3, pad_left=1,
                pad_bottom=2, pad_right=0, groups=2),
    ConvProblem(3, 6, 10, 11, 6, 3, 5, pad_top=1, pad_left=2, pad_bottom=1, pad_right=2,
                dilation_h=3, groups=6),  # depthwise: the multiply-add reduction
    ConvProblem(1, 2, 16, 5, 3, 2, 4, pad_top=0, pad_left=3, pad_bottom=1, pad_right=0),
    ConvProblem(3, 5, 7, 9, 5, 1, 1),
]


@pytest.mark.parametrize("problem", FFT_ODD_PROBLEMS, ids=lambda p: p.short_shape)
def test_fft_odd_shapes(problem: ConvProblem) -> None:
    _check_all(problem, seed=13, names=["fft"])


def test_fft_large_kernel_layer_within_tolerance() -> None:
    """A layer of suites/large_kernel.toml cut to 16 channels: 11x11 taps at 64 channels' worth
    of reduction (C*R*S = 1936), where rounding over the 38x40 transform has room to grow."""
    _check_all(ConvProblem(1, 16, 28, 28, 16, 11, 11, pad_top=5, pad_left=5, pad_bottom=5,
                           pad_right=5), seed=17, names=["fft"])


# The tiled path (_fft_tiled.py) on the odd shapes, every problem forced onto it, with the
# cost model's tiling and with tilings chosen to reach its edges: one output per tile (the
# kernel reaches over many tiles' outputs, m = 1 < r - 1), tiles that do not divide the output
# (m = r + 1 where that leaves a remainder), and a single tile covering the whole output.
FFT_TILED_PROBLEMS = FFT_ODD_PROBLEMS + [
    ConvProblem(2, 16, 23, 19, 16, 7, 5, pad_top=3, pad_left=2, pad_bottom=3, pad_right=2),
    ConvProblem(1, 8, 20, 17, 12, 3, 5, stride_h=2, stride_w=2, pad_top=1, pad_left=2,
                pad_bottom=1, pad_right=2, dilation_w=2, groups=2),
]


def _forced_tiling(mode: str):
    def best(shape: _fft_tiled.Shape) -> _fft_tiled.Tiling:
        if mode == "single":
            return shape.tiling(shape.out_h + shape.rs - 1, shape.out_w + shape.ss - 1)
        if mode == "one_output":
            return shape.tiling(shape.rs, shape.ss)
        ragged = [(r + m - 1) for r, out in ((shape.rs, shape.out_h), (shape.ss, shape.out_w))
                  for m in [r + 1 if out % (r + 1) else r + 2]]
        return shape.tiling(*ragged)
    return best


def _no_whole_image(*args, **kwargs):
    raise AssertionError("the whole-image FFT path ran where the tiled one was forced")


@pytest.mark.parametrize("mode", ["model", "one_output", "ragged", "single"])
@pytest.mark.parametrize("problem", FFT_TILED_PROBLEMS, ids=lambda p: p.short_shape)
def test_fft_tiled_path_on_odd_shapes(problem: ConvProblem, mode: str, monkeypatch) -> None:
    monkeypatch.setattr(_fft_tiled_directions, "TILED_MIN_PAIRS", 1)
    monkeypatch.setattr(fft, "_Buffers", _no_whole_image)
    if mode != "model":
        monkeypatch.setattr(_fft_tiled.Shape, "best", _forced_tiling(mode))
    _check_all(problem, seed=19, names=["fft"])


def test_fft_tiled_path_without_openblas(monkeypatch) -> None:
    """Where NumPy's BLAS is not the bundled OpenBLAS, the kernel transforms' strided GEMMs
    fall back to np.matmul (strided kernel taps: dilation and stride, groups)."""
    monkeypatch.setattr(_fft_tiled_directions, "TILED_MIN_PAIRS", 1)
    monkeypatch.setattr(_blas, "gemm_into", lambda dtype: None)
    _check_all(FFT_TILED_PROBLEMS[-1], seed=23, names=["fft"])
    _check_all(FFT_TILED_PROBLEMS[0], seed=23, names=["fft"])


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("problem", FFT_TILED_PROBLEMS, ids=lambda p: p.short_shape)
def test_fft_tiling_covers_the_output(problem: ConvProblem, direction: str) -> None:
    """The model's tiling: transforms at least the kernel, 5-smooth, and tiles of m = t - r + 1
    outputs reaching past the output (bwd_data's output is the phase input)."""
    shape = _fft_tiled.Shape.of(problem, _fft_lowering.Lowering.of(problem), direction)
    t = shape.best()
    for size, kernel, per_tile, count, out in ((t.th, shape.rs, t.mh, t.nh, shape.out_h),
                                               (t.tw, shape.ss, t.mw, t.nw, shape.out_w)):
        assert size >= kernel and _fft_lowering.fast_size(size) == size
        assert per_tile == size - kernel + 1
        assert (count - 1) * per_tile < out <= count * per_tile


def test_fft_takes_tiles_on_the_large_kernel_layers_and_not_depthwise() -> None:
    from harness.suite import load_suite
    for p in load_suite("large_kernel").problems:
        assert _fft_tiled_directions.pays(p)
    depthwise = ConvProblem(1, 64, 56, 56, 64, 7, 7, pad_top=3, pad_left=3, pad_bottom=3,
                            pad_right=3, groups=64)
    assert not _fft_tiled_directions.pays(depthwise)


def test_large_kernel_suite_holds_same_padded_large_kernels() -> None:
    """suites/large_kernel.toml, where FFT should overtake im2col: 5x5 to 11x11 square
    kernels at stride 1 with padding k//2 (output as large as the input), 64+ channels."""
    from harness.suite import load_suite
    problems = load_suite("large_kernel").problems
    assert sorted({p.kernel_h for p in problems}) == [5, 7, 9, 11]
    for p in problems:
        assert (p.kernel_w, p.stride_h, p.stride_w, p.groups) == (p.kernel_h, 1, 1, 1)
        assert {p.pad_top, p.pad_left, p.pad_bottom, p.pad_right} == {p.kernel_h // 2}
        assert (p.out_h, p.out_w) == (p.in_h, p.in_w)
        assert p.in_channels == p.out_channels >= 64
