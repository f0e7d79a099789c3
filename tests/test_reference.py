"""The float64 oracle against a brute-force loop, its adjoint identities, and precision rounding.

Everything else is judged by harness.reference, so it is checked here against code that shares
nothing with it: plain Python loops straight from the definitions in harness/backends/base.py.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import precision, reference
from harness.problem import ConvProblem
from harness.reference import ProblemData


# ---- brute force, from the definitions ---------------------------------------------------------
def _taps(p: ConvProblem):
    """Every (n, k, p, q, c, r, s, h, w): output element, input channel, tap, and the input
    pixel it reads (h, w may fall in the padding)."""
    cg, kg = p.channels_per_group, p.filters_per_group
    for n, k, i, j in itertools.product(range(p.batch), range(p.out_channels), range(p.out_h),
                                        range(p.out_w)):
        group = k // kg
        for c, r, s in itertools.product(range(cg), range(p.kernel_h), range(p.kernel_w)):
            h = i * p.stride_h + r * p.dilation_h - p.pad_top
            w = j * p.stride_w + s * p.dilation_w - p.pad_left
            yield n, k, i, j, group * cg + c, c, r, s, h, w


def _inside(p: ConvProblem, h: int, w: int) -> bool:
    return 0 <= h < p.in_h and 0 <= w < p.in_w


def brute_forward(p: ConvProblem, d: ProblemData) -> np.ndarray:
    y = np.zeros(p.output_shape)
    for n, k, i, j, ci, c, r, s, h, w in _taps(p):
        if _inside(p, h, w):
            y[n, k, i, j] += d.x[n, ci, h, w] * d.w[k, c, r, s]
    return y


def brute_backward_data(p: ConvProblem, d: ProblemData) -> np.ndarray:
    dx = np.zeros(p.input_shape)
    for n, k, i, j, ci, c, r, s, h, w in _taps(p):
        if _inside(p, h, w):
            dx[n, ci, h, w] += d.dy[n, k, i, j] * d.w[k, c, r, s]
    return dx


def brute_backward_filter(p: ConvProblem, d: ProblemData) -> np.ndarray:
    dw = np.zeros(p.weight_shape)
    for n, k, i, j, ci, c, r, s, h, w in _taps(p):
        if _inside(p, h, w):
            dw[k, c, r, s] += d.x[n, ci, h, w] * d.dy[n, k, i, j]
    return dw


BRUTE = {"fwd": brute_forward, "bwd_data": brute_backward_data,
         "bwd_filter": brute_backward_filter}

TINY = [
    ConvProblem(2, 3, 5, 6, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
    ConvProblem(1, 4, 7, 6, 2, 2, 3, stride_h=2, stride_w=3, pad_top=2, pad_left=0,
                pad_bottom=1, pad_right=2, groups=2),
    ConvProblem(2, 3, 8, 7, 3, 3, 2, dilation_h=2, dilation_w=3, pad_top=0, pad_left=3, groups=3),
    ConvProblem(1, 2, 6, 9, 4, 1, 4, stride_w=2, dilation_w=2, pad_right=1),
]


@pytest.mark.parametrize("direction", list(BRUTE))
@pytest.mark.parametrize("problem", TINY, ids=lambda p: p.short_shape)
def test_reference_matches_brute_force(problem: ConvProblem, direction: str) -> None:
    data = reference.make_data(problem, "fp64", seed=3)
    expected = BRUTE[direction](problem, data)
    np.testing.assert_allclose(reference.reference(problem, direction, data), expected,
                               rtol=1e-12, atol=1e-12)


class _CupyLikeNumpy:
    """NumPy, except that einsum keeps CuPy's rule: a `...` in the operands must appear in the
    output (CuPy raises "output has more dimensions than subscripts given" otherwise). The GPU
    sweeps run the oracle on CuPy; an oracle that only NumPy accepts crashes every GPU point."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def einsum(spec, *operands):
        inputs, output = spec.split("->")
        assert "..." not in inputs or "..." in output, f"CuPy refuses {spec}"
        return np.einsum(spec, *operands)


TINY_3D = ConvProblem(2, 3, 5, 6, 4, 3, 2, in_d=4, kernel_d=2, pad_front=1, name="tiny3d")


@pytest.mark.parametrize("direction", list(BRUTE))
@pytest.mark.parametrize("problem", [TINY[1], TINY_3D], ids=lambda p: p.short_shape)
def test_reference_runs_under_cupy_einsum_rules(problem: ConvProblem, direction: str) -> None:
    data = reference.make_data(problem, "fp64", seed=3)
    np.testing.assert_allclose(reference.reference(problem, direction, data, _CupyLikeNumpy()),
                               reference.reference(problem, direction, data), rtol=1e-12)


# ---- adjoint identities on random problems -----------------------------------------------------
@st.composite
def problems(draw) -> ConvProblem:
    groups = draw(st.sampled_from([1, 2, 3]))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    # Big enough that the dilated kernel fits the padded input.
    in_h = max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]) + draw(st.integers(0, 4))
    in_w = max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]) + draw(st.integers(0, 4))
    return ConvProblem(draw(st.integers(1, 2)), groups * draw(st.integers(1, 2)), in_h, in_w,
                       groups * draw(st.integers(1, 2)), kh, kw,
                       stride_h=draw(st.integers(1, 3)), stride_w=draw(st.integers(1, 3)),
                       pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3],
                       dilation_h=dh, dilation_w=dw, groups=groups)


@settings(max_examples=60, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**16))
def test_backward_passes_are_adjoints_of_forward(problem: ConvProblem, seed: int) -> None:
    """<fwd(x, w), dy> = <x, bwd_data(w, dy)> = <w, bwd_filter(x, dy)>."""
    d = reference.make_data(problem, "fp64", seed)
    y = reference.reference(problem, "fwd", d)
    dx = reference.reference(problem, "bwd_data", d)
    dw = reference.reference(problem, "bwd_filter", d)
    forward = float(np.vdot(y, d.dy))
    scale = np.linalg.norm(y) * np.linalg.norm(d.dy) + 1e-300
    assert abs(forward - float(np.vdot(d.x, dx))) <= 1e-12 * scale
    assert abs(forward - float(np.vdot(d.w, dw))) <= 1e-12 * scale


@settings(max_examples=20, deadline=None)
@given(problem=problems())
def test_reference_is_linear(problem: ConvProblem) -> None:
    """Doubling the input doubles the output: a cheap guard against stray constant terms."""
    d = reference.make_data(problem, "fp64", seed=1)
    doubled = ProblemData(x=2 * d.x, w=d.w, dy=d.dy)
    np.testing.assert_allclose(reference.reference(problem, "fwd", doubled),
                               2 * reference.reference(problem, "fwd", d), rtol=1e-13, atol=1e-13)


# ---- precision rounding, tolerance, error measures ---------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (np.pi, 3.140625),                  # bf16 keeps 8 significant bits
    (1 + 2**-8, 1.0),                   # a tie between 1 and 1 + 2^-7 rounds to even (1)
    (1 + 3 * 2**-8, 1 + 2**-6),         # a tie between 1 + 2^-7 and 1 + 2^-6 rounds to even
    (1 + 2**-8 + 2**-12, 1 + 2**-7),    # just above the tie rounds up
    (-2.5, -2.5),                       # exactly representable
    (65504.0, 65536.0),                 # rounds up to the next power of two
])
def test_round_to_bfloat16_known_values(value: float, expected: float) -> None:
    rounded = precision.round_to(np.array([value]), "bf16")
    assert rounded.dtype == np.float64
    assert rounded[0] == expected


def test_round_to_other_precisions() -> None:
    values = np.array([np.pi, 1 / 3, 1e-3])
    np.testing.assert_array_equal(precision.round_to(values, "fp64"), values)
    assert precision.round_to(values, "fp32")[0] == float(np.float32(np.pi))
    assert precision.round_to(values, "tf32")[1] == float(np.float32(1 / 3))
    assert precision.round_to(values, "fp16")[0] == 3.140625
    with pytest.raises(ValueError, match="unknown precision"):
        precision.round_to(values, "int4")


def test_make_data_is_rounded_seeded_and_never_zero() -> None:
    problem = TINY[1]
    a = reference.make_data(problem, "bf16", seed=5)
    b = reference.make_data(problem, "bf16", seed=5)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.x, precision.round_to(a.x, "bf16"))
    assert a.dy.shape == problem.output_shape and np.all(a.w != 0)


def test_tolerance_grows_with_reduction_and_factor() -> None:
    small = precision.tolerance("fp32", 9)
    assert small == pytest.approx(8 * 2**-24 + 2 * 2**-24 * 3)
    assert precision.tolerance("fp32", 900) > small
    assert precision.tolerance("fp32", 9, 4.0) == pytest.approx(4 * small)
    assert precision.tolerance("fp64", 9) < 1e-14


def test_relative_errors_flags_nan_and_measures_error() -> None:
    expected = np.ones((2, 3))
    assert reference.relative_errors(np.full((2, 3), np.nan), expected) == (np.inf, np.inf)
    result = expected.copy()
    result[0, 0] = 1.5
    rel, worst = reference.relative_errors(result, expected)
    assert rel == pytest.approx(0.5 / np.sqrt(6))
    assert worst == 0.5
