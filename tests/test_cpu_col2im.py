"""im2col's col2im input gradient (issue 42, harness/backends/cpu/im2col/col2im.py): the compiled
scatter-add against the float64 reference on the geometries col2im takes (K >= 2C: strides 1-3,
dilation, asymmetric padding, groups, wide kernels, blocks of one output row and of whole
images, one thread and two), the NumPy path where numba is missing or the groups are many, and
each row saying which ran."""
from __future__ import annotations

import importlib.util

import pytest

from harness import backends, reference, verdict
from harness.backends.cpu import compiled
from harness.backends.cpu.im2col import algorithm as im2col
from harness.backends.cpu.im2col import col2im
from harness.problem import ConvProblem
from harness.sweep import Point

HAS_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed (the [compiled] "
                                                       "extra, which the test extras include)")
IM2COL = backends.get("cpu").algorithm("im2col")
# Every one has K >= 2C, where bwd_data takes col2im (Im2col.bwd_data).
GEOMETRIES = [
    ConvProblem(3, 1, 23, 41, 8, 5, 7, stride_h=2, stride_w=2, name="deepspeech-like"),
    ConvProblem(2, 3, 17, 19, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                name="vgg-like"),
    ConvProblem(2, 2, 13, 17, 6, 4, 5, stride_h=3, stride_w=2, pad_top=2, pad_left=0,
                pad_bottom=0, pad_right=3, dilation_h=2, dilation_w=3, name="odd"),
    ConvProblem(1, 4, 12, 14, 16, 3, 5, stride_w=3, pad_left=1, pad_right=2, groups=2,
                name="grouped"),
    ConvProblem(2, 1, 9, 44, 4, 3, 20, stride_h=2, stride_w=2, dilation_w=2, pad_top=1,
                name="wide"),
    ConvProblem(1, 2, 7, 2, 4, 3, 1, stride_w=3, pad_left=1, pad_right=1, name="narrow"),
]


def _bwd_data(p: ConvProblem, precision: str, threads: int = 0):
    point = Point(p, "bwd_data", precision, "NCHW", "cpu", "im2col", threads=threads)
    data = reference.make_data(p, precision, seed=3)
    prepared = IM2COL.prepare(point, data)
    prepared.poison()
    prepared.launch()
    judged = verdict.check(p, "bwd_data", data, prepared.output(), precision,
                           IM2COL.error_factor)
    return prepared, judged


def _assert_right(p: ConvProblem, precision: str, threads: int = 0):
    prepared, judged = _bwd_data(p, precision, threads)
    assert judged.rel_error <= judged.tolerance, f"{p} {precision}: {judged.rel_error:.3e}"
    if precision == "fp64":
        assert judged.rel_error < 1e-11, p
    return prepared


@needs_numba
@pytest.mark.parametrize("columns", [1, col2im.BLOCK_COLUMNS])  # a row a block / whole images
@pytest.mark.parametrize("threads", [1, 0])
@pytest.mark.parametrize("p", GEOMETRIES, ids=lambda p: p.name)
def test_compiled_col2im_matches_the_reference(p: ConvProblem, threads: int, columns: int,
                                               monkeypatch) -> None:
    monkeypatch.setattr(col2im, "BLOCK_COLUMNS", columns)
    called = []
    real = im2col._col2im
    monkeypatch.setattr(im2col, "_col2im", lambda *a, **k: called.append(1) or real(*a, **k))
    for precision in ("fp64", "fp32"):
        prepared = _assert_right(p, precision, threads)
        assert prepared.extras["cpu_kernel"].startswith("numba ")
    assert called, "bwd_data did not take col2im"


def test_without_numba_numpy_col2im_runs_and_the_row_says_why(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    monkeypatch.setattr(compiled, "_state", {})
    for p in GEOMETRIES[:3]:
        prepared = _assert_right(p, "fp32")
        assert prepared.extras["cpu_kernel"] == f"numpy: {compiled.MISSING}"


def test_many_groups_take_numpy_col2im() -> None:
    p = ConvProblem(1, 12, 9, 10, 24, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                    groups=12)
    prepared = _assert_right(p, "fp32")
    assert prepared.extras["cpu_kernel"].startswith("numpy: 12 groups")


@needs_numba
def test_many_taps_are_scattered_in_blocks_of_dcol_bytes(monkeypatch) -> None:
    """C*R*S = 1,600 rows (DeepBench train_06's): a whole image's dcol holds 1,600 x 9 x 36
    values; under DCOL_BYTES a block takes two output rows (the minimum columns lowered so this
    small image splits), and the sums stay right."""
    p = ConvProblem(1, 32, 21, 81, 32, 5, 10, stride_h=2, stride_w=2, name="train_06-like")
    row = 1600 * 36 * 4                      # dcol bytes of one output row (9 x 36 outputs)
    whole = _assert_right(p, "fp32", threads=1).workspace_bytes
    monkeypatch.setattr(col2im, "DCOL_BYTES", 2 * row)
    monkeypatch.setattr(col2im, "DCOL_MIN_COLUMNS", 1)
    assert _assert_right(p, "fp32", threads=1).workspace_bytes == whole - 7 * row
    _assert_right(p, "fp64", threads=0)
