"""Phase planes and column matrices of im2col (algorithm.py says why each
choice): which taps read which phase of the stride along one axis (`axis_phases`), and the
planes a launch splits its input into and gathers a block's column matrix from (`Columns`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness.problem import ConvProblem

# Largest width/Q ratio for which the flat column matrix pays. Measured at stride 1 with the
# full padding as the gap: 58/56 won by 25%, 30/28 broke even, 16/14 and 9/7 lost 10-20% to
# the exact windows; with the shared one-column gap (57/56, 29/28, 15/14, 8/7) the differences
# sat inside the machine's noise.
WIDE_MAX_WASTE = 1.1
# The flat matrix also leaves gap columns in the GEMM's other operand (y's block in fwd, dy's in
# bwd_filter: K values a pixel), whose copy then runs row by row. It pays only where the column
# matrix's C*R*S values a pixel outweigh those K by this factor. Measured (2-core VM, flat vs
# exact windows): DeepBench row 55 fwd (25 vs 64) and VGG conv1_1 bwd_filter (27 vs 64) 12-13%
# slower flat (the dy copy took twice as long); DeepBench rows 2 and 6 (100 and 1600 vs 32),
# ResNet conv1 (147 vs 64) a tie or better flat.
FLAT_MIN_DEPTH = 1.0

def _little_waste(width: int, p: ConvProblem) -> bool:
    return width <= WIDE_MAX_WASTE * p.out_w


@dataclass(frozen=True)
class AxisPhase:
    """Along one axis, one phase a of the padded input: its elements a, a + stride, ...

    `taps` (ascending kernel indices) read it, tap i of them at plane index output + offset +
    i*step. Input elements input_start, input_start + stride, ... (`count` of them) sit in it
    after `data_start` padding elements and before `end_zeros` more."""
    taps: range
    offset: int
    step: int
    data_start: int
    input_start: int
    count: int
    end_zeros: int

    @property
    def last_offset(self) -> int:
        return self.offset + (len(self.taps) - 1) * self.step

    @property
    def tap_slice(self) -> slice:
        return slice(self.taps.start, self.taps.stop, self.taps.step)


def axis_phases(size: int, pad_begin: int, pad_end: int, stride: int, dilation: int,
                 kernel: int) -> list[AxisPhase]:
    """Every phase of one axis, in phase order; phases no tap reads have empty `taps`."""
    # Consecutive taps of one phase are `period` kernel indices and `step` plane elements apart.
    common = math.gcd(stride, dilation)
    period, step = stride // common, dilation // common
    first_taps = {t * dilation % stride: t for t in range(min(period, kernel))}
    padded = size + pad_begin + pad_end
    phases = []
    for phase in range(stride):
        first = first_taps.get(phase)
        taps = range(first, kernel, period) if first is not None else range(0)
        data_start = max(0, -((phase - pad_begin) // stride))
        input_start = phase + data_start * stride - pad_begin
        count = len(range(input_start, size, stride))
        elements = len(range(phase, padded, stride))
        phases.append(AxisPhase(taps, (first or 0) * dilation // stride, step, data_start,
                                 input_start, count, elements - data_start - count))
    return phases


@dataclass(frozen=True)
class Columns:
    """How the column matrix of problem p is gathered from its phase planes.

    Planes are `rows` x `width`, data from column `gap` on (the gap's zeros serve as the right
    padding of one row and the left padding of the next), stored (plane, C, N, rows, width) so
    that a block of images is one strided GEMM operand when a plane is the column matrix.
    `kept` columns of each row are copied: `width` (flat) or Q (exact windows)."""
    p: ConvProblem
    row_phases: tuple[AxisPhase, ...]
    col_phases: tuple[AxisPhase, ...]
    rows: int
    width: int
    gap: int
    kept: int

    @classmethod
    def of(cls, p: ConvProblem) -> Columns:
        row_phases = tuple(ph for ph in axis_phases(p.in_h, p.pad_top, p.pad_bottom, p.stride_h,
                                                     p.dilation_h, p.kernel_h) if ph.taps)
        col_phases = tuple(ph for ph in axis_phases(p.in_w, p.pad_left, p.pad_right, p.stride_w,
                                                     p.dilation_w, p.kernel_w) if ph.taps)
        widest = max(ph.count for ph in col_phases)
        # Room for each plane's left padding, for its right padding (which spills into the
        # next row's gap) and for Q outputs per row.
        gap = max(p.out_w - widest, *(ph.data_start for ph in col_phases),
                  *(ph.end_zeros - (widest - ph.count) for ph in col_phases))
        width = widest + gap
        # A flat run of `width` columns starting `reach` columns into a row ends in a later
        # row: spare rows below the last one an output reads keep it inside the buffer.
        reach = max(ph.last_offset + gap - ph.data_start for ph in col_phases)
        rows = max(*(ph.data_start + ph.count for ph in row_phases),
                   p.out_h + max(ph.last_offset for ph in row_phases) + -(-reach // width))
        depth = p.in_channels * p.kernel_h * p.kernel_w
        flat = _little_waste(width, p) and depth >= FLAT_MIN_DEPTH * p.out_channels
        return cls(p, row_phases, col_phases, rows, width, gap, width if flat else p.out_w)

    @property
    def little_waste(self) -> bool:
        """Whether flat runs of `width` columns per output row waste little (WIDE_MAX_WASTE)."""
        return _little_waste(self.width, self.p)

    @property
    def planes_shape(self) -> tuple[int, ...]:
        return (len(self.row_phases) * len(self.col_phases), self.p.in_channels, self.p.batch,
                self.rows, self.width)

    @property
    def tap_order(self) -> np.ndarray:
        """Kernel tap r*S + s of each column-matrix row of a channel, plane by plane."""
        return np.array([r * self.p.kernel_w + s
                         for rph, cph in product(self.row_phases, self.col_phases)
                         for r in rph.taps for s in cph.taps])

    @property
    def natural_order(self) -> bool:
        return bool((self.tap_order == np.arange(self.p.kernel_h * self.p.kernel_w)).all())

    @property
    def plane_is_column_matrix(self) -> bool:
        """A 1x1 kernel's plane holding exactly the output grid needs no copy."""
        if self.p.kernel_h * self.p.kernel_w > 1:
            return False
        (rph,), (cph,) = self.row_phases, self.col_phases
        return (self.kept == self.width and rph.offset == 0
                and cph.offset + self.gap - cph.data_start == 0 and self.rows == self.p.out_h)

    def column_elements(self, columns: int) -> int:
        """Scratch for a column matrix of `columns` columns (none where the plane is one)."""
        if self.plane_is_column_matrix:
            return 0
        return self.p.in_channels * self.p.kernel_h * self.p.kernel_w * columns

    def run_start(self, rph: AxisPhase, cph: AxisPhase) -> int:
        """Where, in an image of a plane, the flat run of the plane's first tap for output row 0
        starts (a later tap adds its own offset, a later row `width`)."""
        return rph.offset * self.width + cph.offset + self.gap - cph.data_start

    @property
    def tap_offsets(self) -> list[tuple[int, int]]:
        """(plane, start of its flat run) of each column-matrix row of a channel, in
        `tap_order`: tap (r, s) of a stride-1 correlation reads the flat plane from r*width + s."""
        return [(index, self.run_start(rph, cph) + i * rph.step * self.width + j * cph.step)
                for index, (rph, cph) in enumerate(product(self.row_phases, self.col_phases))
                for i in range(len(rph.taps)) for j in range(len(cph.taps))]

    def fill_planes(self, planes: np.ndarray, x: np.ndarray,
                    images: slice = slice(None)) -> None:
        """planes <- x (its `images` only) split by phase; the padding around the data stays
        zero from allocation."""
        p, gap = self.p, self.gap
        for index, (rph, cph) in enumerate(product(self.row_phases, self.col_phases)):
            if rph.count and cph.count:
                target = planes[index, :, images, rph.data_start:rph.data_start + rph.count,
                                gap:gap + cph.count]
                source = x[images, :, rph.input_start::p.stride_h, cph.input_start::p.stride_w]
                np.copyto(target, source.transpose(1, 0, 2, 3))

    def gather(self, planes: np.ndarray, col_flat: np.ndarray, n0: int, images: int, p0: int,
               rows: int) -> np.ndarray:
        """The (C*R*S, images*rows*kept) column matrix of a block: one copy per plane."""
        p, width, kept = self.p, self.width, self.kept
        c, n = p.in_channels, p.batch
        if self.plane_is_column_matrix:
            return planes[0, :, n0:n0 + images, p0:p0 + rows].reshape(c, -1, copy=False)
        taps = p.kernel_h * p.kernel_w
        col = col_flat[:c * taps * images * rows * kept].reshape(c, taps, images, rows, kept)
        item, plane = planes.itemsize, self.rows * width
        elements = planes.reshape(-1)
        first = 0
        for index, (rph, cph) in enumerate(product(self.row_phases, self.col_phases)):
            tr, ts = len(rph.taps), len(cph.taps)
            start = (index * c * n + n0) * plane + p0 * width + self.run_start(rph, cph)
            runs = as_strided(elements[start:], shape=(c, tr, ts, images, rows, kept),
                              strides=(n * plane * item, rph.step * width * item,
                                       cph.step * item, plane * item, width * item, item),
                              writeable=False)
            target = col[:, first:first + tr * ts].reshape((c, tr, ts, images, rows, kept),
                                                           copy=False)
            np.copyto(target, runs)
            first += tr * ts
        return col.reshape(c * taps, -1)

    @property
    def fold_sizes(self) -> list[int]:
        """How many taps of a kernel row one row of a folded column matrix may stand for (1
        where it cannot be folded): divisors of the tap count every column phase has. Taps j
        and j + 1 of a phase read flat runs `step` elements apart, so with a flat matrix
        (kept == width) tap j + 1's row is tap j's row shifted by `step` columns, and one
        row `step` * (fold - 1) columns longer serves `fold` taps (`gather_folded`)."""
        if self.kept != self.width or self.plane_is_column_matrix:
            return [1]
        common = math.gcd(*(len(ph.taps) for ph in self.col_phases))
        return [d for d in range(1, common + 1) if common % d == 0]

    def folded_run(self, fold: int) -> int:
        """Columns a folded row has per image: the flat run of out_h rows plus the shift."""
        return self.p.out_h * self.width + (fold - 1) * self.col_phases[0].step

    def gather_folded(self, planes: np.ndarray, col_flat: np.ndarray, n0: int, images: int,
                      fold: int) -> np.ndarray:
        """The (C*R*S / fold, images * folded_run) folded column matrix of whole images: row
        (c, plane, i, jb) is the run of tap (i, jb * fold) of the plane, whose following
        fold - 1 taps read it `step`, 2 * `step`, ... columns on. One copy per plane."""
        p, width = self.p, self.width
        c, n = p.in_channels, p.batch
        run, plane = self.folded_run(fold), self.rows * width
        rows = c * p.kernel_h * p.kernel_w // fold
        col = col_flat[:rows * images * run].reshape(c, rows // c, images, run)
        item, elements = planes.itemsize, planes.reshape(-1)
        first = 0
        for index, (rph, cph) in enumerate(product(self.row_phases, self.col_phases)):
            tr, tf = len(rph.taps), len(cph.taps) // fold
            start = (index * c * n + n0) * plane + self.run_start(rph, cph)
            runs = as_strided(elements[start:], shape=(c, tr, tf, images, run),
                              strides=(n * plane * item, rph.step * width * item,
                                       fold * cph.step * item, plane * item, item),
                              writeable=False)
            np.copyto(col[:, first:first + tr * tf].reshape((c, tr, tf, images, run),
                                                            copy=False), runs)
            first += tr * tf
        return col.reshape(rows, -1)


