"""The CPU GEMM floor of a convolution direction (issue 42, harness/backends/cpu/gemm_floor.py):
the product's shapes per direction, a sliced floor scaled to the whole, and im2col rows that
carry it."""
from __future__ import annotations

import pytest

from harness import backends, reference
from harness.backends.cpu import gemm_floor
from harness.problem import ConvProblem
from harness.sweep import Point

PROBLEM = ConvProblem(2, 6, 10, 12, 8, 3, 3, groups=2, pad_top=1, pad_left=1, pad_bottom=1,
                      pad_right=1)


def test_each_direction_multiplies_its_own_operands() -> None:
    # 2 groups of 4 filters and 3 channels x 9 taps, over 2 x 10 x 12 output pixels
    pixels = 2 * 10 * 12
    assert gemm_floor.operand_shapes(2, 4, 27, "fwd", pixels) == ((2, 4, 27), (2, 27, pixels))
    assert gemm_floor.operand_shapes(2, 4, 27, "bwd_data", pixels) == ((2, 27, 4),
                                                                        (2, 4, pixels))
    assert gemm_floor.operand_shapes(2, 4, 27, "bwd_filter", pixels) == ((2, 4, pixels),
                                                                          (2, pixels, 27))


def test_a_sliced_floor_is_scaled_to_every_pixel(monkeypatch) -> None:
    # large enough (0.3 GFLOP) that the product, not BLAS's fixed cost, takes the time
    problem = ConvProblem(8, 16, 64, 64, 32, 3, 3)
    whole = gemm_floor.floor_ms(problem, "fwd", float, 1)
    monkeypatch.setattr(gemm_floor, "FULL_BYTES", 1 << 20)  # 744 of 30,752 pixels a product
    gemm_floor._floor_ms.cache_clear()
    try:
        sliced = gemm_floor.floor_ms(problem, "fwd", float, 1)
    finally:
        gemm_floor._floor_ms.cache_clear()
    # the slice's time per pixel times every pixel: near the whole product's (unscaled, the
    # slice would read 2% of it)
    assert whole / 3 < sliced < whole * 3


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_im2col_rows_carry_their_floor(direction) -> None:
    point = Point(PROBLEM, direction, "fp32", "NCHW", "cpu", "im2col")
    data = reference.make_data(PROBLEM, "fp32", seed=1)
    prepared = backends.get("cpu").algorithm("im2col").prepare(point, data)
    floor = prepared.extras["gemm_floor_ms"]
    assert floor == gemm_floor.floor_ms(PROBLEM, direction, prepared.result.dtype, 0) > 0


def test_fwd_result_rows_lie_as_y_channel_rows_modulo_the_set_period() -> None:
    """fwd's result rows are congruent to y's channel rows (an output plane apart) modulo
    SET_PERIOD, so a slice meets the 4 KiB aliasing of VGG-16 conv1_1's 224 x 224 planes; the
    other directions' results stay contiguous."""
    period = gemm_floor.SET_PERIOD // 4
    for columns, plane in ((184_000, 224 * 224), (1000, 224 * 224), (50_176, 50_176),
                           (300, 49), (32_768, 112 * 112)):
        row = gemm_floor.result_row("fwd", columns, plane, 4)
        assert columns <= row < columns + period
        assert (row - plane) % period == 0, (columns, plane, row)
    assert gemm_floor.result_row("fwd", 184_000, 224 * 224, 4) * 4 % 4096 == 0  # aliased
    for direction in ("bwd_data", "bwd_filter"):
        assert gemm_floor.result_row(direction, 184_000, 224 * 224, 4) == 184_000


def test_the_floor_passes_the_output_plane(monkeypatch) -> None:
    """floor_ms times fwd's product with the problem's own output plane (P x Q) as the row
    spacing, into a result of that spacing."""
    seen = []
    real = gemm_floor.result_row

    def spy(direction: str, columns: int, plane: int, itemsize: int) -> int:
        seen.append((direction, plane))
        return real(direction, columns, plane, itemsize)

    monkeypatch.setattr(gemm_floor, "result_row", spy)
    problem = ConvProblem(2, 3, 32, 32, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    gemm_floor._floor_ms.cache_clear()
    try:
        assert gemm_floor.floor_ms(problem, "fwd", float, 1) > 0
    finally:
        gemm_floor._floor_ms.cache_clear()
    assert seen == [("fwd", 32 * 32)]
