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
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness import backends, reference
from harness import precision as precision_table
from harness.backends.base import Unsupported, WorkspaceExceeded
from harness.backends.cpu import direct, fft, im2col, winograd
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, Point

CPU = backends.get("cpu")
NAMES = [a.name for a in CPU.algorithms()]
EXPECTED = {"direct": "direct", "im2col": "gemm", "fft": "fft",
            "winograd_f2x2_3x3": "winograd", "winograd_f4x4_3x3": "winograd"}
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
    error, _ = reference.relative_errors(prepared.output(), reference.reference(problem, direction,
                                                                                data))
    prepared.release()
    limit = precision_table.tolerance(precision, problem.reduction_length(direction), algo.error_factor)
    return error, limit


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
    # The runner's test is a relative L2 error. Over a handful of elements it measures chance
    # cancellation (a 1-element dw that happens to be near 0) more than the algorithm, so every
    # direction's result here has at least 8 elements.
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
    monkeypatch.setattr(im2col, "WIDE_MAX_WASTE", 100.0)
    monkeypatch.setattr(winograd, "BLOCK_BYTES", 3000)
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
]  # (a 1x1 kernel keeps col2im, one add: im2col.bwd_data says why)


def _no_col2im(*args, **kwargs):
    raise AssertionError("stride-1 bwd_data fell back to col2im")


@pytest.mark.parametrize("waste", [1.1, 100.0])  # per-tap windows / flat column matrix
@pytest.mark.parametrize("problem", TRANSPOSED_PROBLEMS, ids=lambda p: p.short_shape)
def test_im2col_stride_1_bwd_data_is_a_forward_correlation(problem: ConvProblem, waste: float,
                                                           monkeypatch) -> None:
    monkeypatch.setattr(im2col, "WIDE_MAX_WASTE", waste)
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
    assert (prepared.device, prepared.stream, prepared.extras) == ("cpu", None, {})
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
        size = fft.fast_size(n)
        assert size >= n and smooth(size)
        assert not any(smooth(m) for m in range(n, size))


def _exact_correlation_check(outputs: int, taps: int, points) -> None:
    at, g, bt = winograd.toom_cook(outputs, taps, [Fraction(p) for p in points])
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
    at, g, bt = (winograd.as_array(x) for x in winograd.toom_cook(m, 3, [Fraction(p)
                                                                          for p in points]))
    theirs = {k: np.array(v, dtype=float) for k, v in published.items()}
    s_bt, s_g = _sign_ratio(bt, theirs["bt"]), _sign_ratio(g, theirs["g"])
    np.testing.assert_allclose(s_bt[:, None] * bt, theirs["bt"])
    np.testing.assert_allclose(s_g[:, None] * g, theirs["g"])
    np.testing.assert_allclose(at * (s_bt * s_g)[None, :], theirs["at"])
    assert m != 4 or (s_bt == 1).all() and (s_g == 1).all()  # F(4,3) matches exactly


def test_toom_cook_rejects_wrong_point_counts() -> None:
    with pytest.raises(ValueError, match="distinct"):
        winograd.toom_cook(2, 3, [Fraction(0), Fraction(1)])
    with pytest.raises(ValueError, match="distinct"):
        winograd.toom_cook(2, 3, [Fraction(0), Fraction(1), Fraction(1)])
