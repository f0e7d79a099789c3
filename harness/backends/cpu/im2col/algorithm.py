"""im2col + GEMM: copy every receptive field into a column matrix, then one BLAS GEMM per block.

Speed comes from five choices (the naive sliding_window_view version spends 8x the GEMM's time
copying, shared/reference/gpu-findings.md):
- phase planes: once per launch the padded input is split into one plane per (row, column)
  phase of the stride that some tap reads (x[:, :, a::s, b::s], padding included; at stride 1
  the one plane is the padded input). Every tap then reads a stride-1 window of one plane, and
  the taps reading one plane form a sub-grid of the kernel, so one copy call per plane and
  block fills their rows of the column matrix with contiguous runs. (Copying stride-2 windows
  tap by tap from the padded input spent 42% of a stride-2 forward in 2,400 small strided
  copies.) The column matrix lists its taps plane by plane; the weights are permuted to match
  once, at prepare;
- blocks of images and output rows (`BLOCK_BYTES`) big enough for an efficient GEMM yet small
  enough that the GEMM finds in cache what the copy just wrote;
- the operand order W (K, C*R*S) @ col (C*R*S, pixels) leaves each block in NCHW order, so
  the copy into y only drops the gap columns, with no transpose after the GEMM;
- a "flat" column matrix: the planes are laid out as rows of [gap zeros | input row], so what a
  tap reads for a block of output rows is one contiguous run of the flattened plane (a run
  that leaves a row on either side lands in a gap, i.e. reads the padding). Each row yields
  `width` outputs of which Q are kept (57 for 56 at ResNet's res2); used where that waste is
  small (`columns.WIDE_MAX_WASTE`) and the column matrix is deep (`FLAT_MIN_DEPTH`), windows of
  exactly Q columns elsewhere. A 1x1 kernel whose plane holds exactly the output grid needs no
  copy at all: its plane is the column matrix;
- shifted GEMMs (shifted.py) where each tap's GEMM is deep enough
  (`shifted.MIN_CHANNELS` channels per group): the flat plane is the column matrix, a
  contiguous run of it per tap, and one accumulating GEMM per tap reads it in place; no column
  matrix is copied at all (it was 11-26% of a ResNet-50 3x3 forward, the GEMMs 63-84%).

Backward data reuses all of this: output phase (a, b) of dx (the elements whose padded
coordinates are a, b modulo the stride) receives only the taps r with r*dilation = a (mod
stride), so it is a stride-1 forward correlation of dy with that sub-kernel rotated by 180
degrees, channel axes swapped per group (at stride 1, one phase and the whole kernel). col2im
(dcol = W^T dy, then its taps added into dx: col2im.py, compiled where numba is) remains where
K >= 2C, or, where col2im is NumPy's, 8C at stride 1 where the correlations are shifted GEMMs
(`Im2col.bwd_data` says why).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import numpy as np

from harness.backends.cpu import gemm_floor
from harness.backends.cpu.blas import gemm_into
from harness.backends.cpu.common import CpuAlgorithm, CpuPrepared, allocate, split, workspace_of
from harness.backends.cpu.im2col import bwd_filter as filter_gemms
from harness.backends.cpu.im2col import col2im
from harness.backends.cpu.im2col import in_place as in_place_gemm
from harness.backends.cpu.im2col import shifted as shifted_gemms
from harness.backends.cpu.im2col.columns import AxisPhase, Columns, axis_phases
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point
from harness.threads import cores_for

# Column-matrix block size: 4-8 MiB ran ResNet-50's 3x3 layers fastest; smaller blocks make the
# GEMMs too thin, larger ones lose to memory traffic
# (evidence/notes/constants.md#im2col-block_bytes).
BLOCK_BYTES = 8 << 20
# bwd_data keeps col2im where K >= this many times C (the second at stride 1 with shifted
# correlations, where col2im is NumPy's); see Im2col.bwd_data.
COL2IM_MIN_RATIO = 2
SHIFTED_COL2IM_MIN_RATIO = 8


def _blocks(p: ConvProblem, row_bytes: int, whole_rows: bool,
            block_bytes: int | None = None) -> tuple[list, list]:
    """Image blocks and output-row blocks whose scratch (`row_bytes` per output row of one
    image) fits `block_bytes` (BLOCK_BYTES by default)."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    rows = p.out_h if whole_rows else max(1, block_bytes // row_bytes)
    if rows < p.out_h:
        return split(p.batch, 1), split(p.out_h, rows)
    images = max(1, block_bytes // (row_bytes * p.out_h))
    return split(p.batch, images), split(p.out_h, p.out_h)


def _max_len(blocks: list[tuple[int, int]]) -> int:
    return max(length for _, length in blocks)


def _row_bytes(p: ConvProblem, columns: Columns, dtype: type) -> int:
    """Bytes of column matrix per output row of one image."""
    return p.in_channels * p.kernel_h * p.kernel_w * columns.kept * np.dtype(dtype).itemsize


def _weights_copied(columns: Columns, w: np.ndarray) -> bool:
    """Whether the GEMM needs the weights copied: into the column matrix's tap order, or out of
    a view (bwd_data's rotated sub-kernels) into one contiguous operand."""
    return not (columns.natural_order and w.flags.c_contiguous)


def _weights_in_tap_order(columns: Columns, w: np.ndarray, target: np.ndarray) -> None:
    p = columns.p
    taps = p.kernel_h * p.kernel_w
    kernel_major = np.reshape(w, (p.out_channels, p.channels_per_group, taps))
    np.copyto(target.reshape(kernel_major.shape), kernel_major[:, :, columns.tap_order])


@dataclass(frozen=True)
class _Correlation:
    """The plan of one forward correlation of problem p: x (p.input_shape) with w -> y.

    A column matrix per block, gathered from the phase planes, then one GEMM; or, where
    `shifted` (shifted.shifted_pays), no column matrix: one accumulating GEMM per tap reads
    the planes in place (harness/backends/cpu/im2col/shifted.py)."""
    p: ConvProblem
    columns: Columns
    images: list[tuple[int, int]]
    row_blocks: list[tuple[int, int]]
    shifted: bool = False
    in_place: bool = False

    @classmethod
    def of(cls, p: ConvProblem, dtype: type, y: np.ndarray | None = None,
           cores: int = 1) -> _Correlation:
        """The plan for writing into `y` on `cores` cores: exact windows where the GEMM can fill
        y in place (in_place.py), flat columns where they pay (columns.py) elsewhere or where y
        is not given."""
        columns = Columns.of(p)
        # Shifted blocks are sized by the GEMM's output block: BLOCK_BYTES ran as fast as 32 MiB
        # (evidence/notes/constants.md#im2col-block_bytes).
        shifted = cls(p, columns, *_blocks(p, p.out_channels * columns.width
                                           * np.dtype(dtype).itemsize, False), True)
        if shifted_gemms.shifted_pays(p, columns, dtype, shifted.block_columns):
            return shifted
        exact = None if y is None else in_place_gemm.exact_where_in_place(columns, y)
        if exact is not None:
            row_bytes = _row_bytes(p, exact, dtype)
            for block_bytes in (in_place_gemm.block_bytes(cores, BLOCK_BYTES), BLOCK_BYTES):
                plan = cls(p, exact, *_blocks(p, row_bytes, False, block_bytes), in_place=True)
                if in_place_gemm.wide_enough(min(rows for _, rows in plan.row_blocks) * p.out_w):
                    return plan
        return cls(p, columns, *_blocks(p, _row_bytes(p, columns, dtype), False))

    @property
    def block_columns(self) -> int:
        """GEMM columns of the largest block."""
        ni, pr = _max_len(self.images), _max_len(self.row_blocks)
        if self.shifted:
            return shifted_gemms.span(self.columns, ni, pr)
        return ni * pr * self.columns.kept

    @property
    def col_elements(self) -> int:
        return 0 if self.shifted else self.columns.column_elements(self.block_columns)

    @property
    def out_elements(self) -> int:
        """GEMM output scratch: none where the GEMM writes y in place."""
        return 0 if self.in_place else self.p.out_channels * self.block_columns

    def copies_weights(self, w: np.ndarray) -> bool:
        return self.shifted or _weights_copied(self.columns, w)

    @property
    def weights_shape(self) -> tuple[int, ...]:
        return shifted_gemms.weights_shape(self.p) if self.shifted else self.p.weight_shape

    def weights_into(self, w: np.ndarray, target: np.ndarray) -> None:
        if self.shifted:
            shifted_gemms.weights_into(self.columns, w, target)
        else:
            _weights_in_tap_order(self.columns, w, target)

    def bind(self, x: np.ndarray, w: np.ndarray, y: np.ndarray, planes: np.ndarray,
             col_flat: np.ndarray, out_flat: np.ndarray) -> Callable[[], None]:
        """The launch: y <- x (*) w through the given scratch. `w` must already be the GEMM's
        operand (see copies_weights)."""
        if self.shifted:
            blocks = [(n0, ni, p0, pr) for n0, ni in self.images for p0, pr in self.row_blocks]
            return shifted_gemms.bind(self.columns, blocks, x, w, y, planes, out_flat)
        p, columns = self.p, self.columns
        g, kg, k = p.groups, p.filters_per_group, p.out_channels
        wmat = w.reshape(g, kg, -1)
        kept = columns.kept
        gemm = gemm_into(y.dtype) if self.in_place else None

        def kernel() -> None:
            columns.fill_planes(planes, x)
            for n0, ni in self.images:
                for p0, pr in self.row_blocks:
                    col = columns.gather(planes, col_flat, n0, ni, p0, pr)
                    if gemm is not None:
                        in_place_gemm.gemm_into_y(gemm, wmat, col, y[n0:n0 + ni, :, p0:p0 + pr])
                        continue
                    cols = col.shape[1]
                    out = out_flat[:k * cols].reshape(g, kg, cols)
                    np.matmul(wmat, col.reshape(g, -1, cols), out=out)
                    block = out.reshape(k, ni, pr, kept)[..., :p.out_w]
                    np.copyto(y[n0:n0 + ni, :, p0:p0 + pr], block.transpose(1, 0, 2, 3))

        return kernel


@dataclass(frozen=True)
class _Part:
    """One correlation of a launch with its operands; y may be a strided view of the result."""
    plan: _Correlation
    x: np.ndarray
    w: np.ndarray
    y: np.ndarray


def _correlations(point: Point, dtype: type, parts: list[_Part],
                  zeroed: list[np.ndarray]) -> tuple[Callable[[], None], int]:
    """One kernel running `parts` one after another, then zero-filling `zeroed` (result
    elements no tap reaches), and its workspace in bytes.

    Each part has its own planes (and weights, where copied); they share the column matrix and
    GEMM output buffers, sized for the largest part that uses them."""
    shapes = {"col": (max((part.plan.col_elements for part in parts), default=0),),
              "out": (max((part.plan.out_elements for part in parts), default=0),)}
    for i, part in enumerate(parts):
        shapes[f"planes{i}"] = part.plan.columns.planes_shape
        if part.plan.copies_weights(part.w):
            shapes[f"w{i}"] = part.plan.weights_shape
    buf = allocate(point, dtype, shapes)
    kernels = []
    for i, part in enumerate(parts):
        w = buf.get(f"w{i}", part.w)
        if f"w{i}" in buf:
            part.plan.weights_into(part.w, w)
        kernels.append(part.plan.bind(part.x, w, part.y, buf[f"planes{i}"], buf["col"],
                                      buf["out"]))

    def kernel() -> None:
        for run in kernels:
            run()
        for view in zeroed:
            view.fill(0)

    return kernel, workspace_of(buf)


def _sub_axis(ph: AxisPhase, dy_size: int) -> tuple[slice, int, int]:
    """Along one axis, dx phase `ph` as a stride-1 correlation of dy with its taps reversed:
    (the dy elements it reads, padding before, padding after).

    Output i of the phase (dx element input_start + i*stride) reads dy elements
    data_start + i - offset of its taps. A negative padding means the outermost dy elements
    only ever meet padding taps; they are cropped instead."""
    reach = ph.last_offset - ph.offset + 1
    begin = ph.last_offset - ph.data_start
    end = ph.count - 1 + reach - dy_size - begin
    return slice(max(0, -begin), dy_size - max(0, -end)), max(0, begin), max(0, end)


def _sub_weights(p: ConvProblem, w: np.ndarray, rph: AxisPhase,
                 cph: AxisPhase) -> np.ndarray:
    """W (K, Cg, R, S) -> view (G, Cg, Kg, R', S'): the taps of one phase, flipped in R and S,
    as the weights of the transposed problem, whose inputs are p's K filters and outputs p's C
    channels, per group."""
    w5 = w.reshape(p.groups, p.filters_per_group, p.channels_per_group, p.kernel_h, p.kernel_w)
    sub = w5[:, :, :, rph.tap_slice, cph.tap_slice]
    return sub[..., ::-1, ::-1].transpose(0, 2, 1, 3, 4)


def _data_parts(p: ConvProblem, dtype: type, w: np.ndarray, dy: np.ndarray, dx: np.ndarray,
                cores: int = 1) -> tuple[list[_Part], list[np.ndarray]]:
    """bwd_data as stride-1 correlations, one per phase of dx, and the phases no tap reaches."""
    parts, zeroed = [], []
    row_phases = axis_phases(p.in_h, p.pad_top, p.pad_bottom, p.stride_h, p.dilation_h,
                              p.kernel_h)
    col_phases = axis_phases(p.in_w, p.pad_left, p.pad_right, p.stride_w, p.dilation_w,
                              p.kernel_w)
    for rph, cph in product(row_phases, col_phases):
        if not (rph.count and cph.count):
            continue  # a phase of padding only
        view = dx[:, :, rph.input_start::p.stride_h, cph.input_start::p.stride_w]
        rows, top, bottom = _sub_axis(rph, p.out_h)
        cols, left, right = _sub_axis(cph, p.out_w)
        if not (rph.taps and cph.taps) or rows.start >= rows.stop or cols.start >= cols.stop:
            zeroed.append(view)
            continue
        sub = ConvProblem(p.batch, p.out_channels, rows.stop - rows.start,
                          cols.stop - cols.start, p.in_channels, len(rph.taps), len(cph.taps),
                          pad_top=top, pad_left=left, pad_bottom=bottom, pad_right=right,
                          dilation_h=rph.step, dilation_w=cph.step, groups=p.groups,
                          name=p.name)
        parts.append(_Part(_Correlation.of(sub, dtype, view, cores), dy[:, :, rows, cols],
                           _sub_weights(p, w, rph, cph), view))
    return parts, zeroed


def _col2im(point: Point, p: ConvProblem, w: np.ndarray, dy: np.ndarray, dtype: type
            ) -> CpuPrepared:
    """dcol = W^T dy, then its taps added into dx (col2im.py: compiled, or NumPy's)."""
    return col2im.col2im(point, p, w, dy, dtype, BLOCK_BYTES)


def _filter_gradient(point: Point, p: ConvProblem, x: np.ndarray, dy: np.ndarray,
                     dtype: type) -> CpuPrepared:
    """dW = dy col^T (or its transpose, bwd_filter.py says when), accumulated over blocks of
    whole images, col gathered as in fwd.

    With the flat column matrix the junk columns of col meet zeros in dy's copy, so they add
    nothing. The GEMM leaves dW in the column matrix's tap order; one gather restores R, S."""
    columns = filter_gemms.columns_for(p, dtype)
    fold = filter_gemms.fold_of(p, columns)
    k, taps = p.out_channels, p.kernel_h * p.kernel_w
    per_image = filter_gemms.image_columns(columns, fold)
    image_bytes = filter_gemms.image_bytes(columns, fold, dtype)
    images, _ = _blocks(p, -(-image_bytes // p.out_h), True)
    cores, fills = cores_for(point.threads), image_bytes >= BLOCK_BYTES
    if cores > 1 and filter_gemms.threaded(p, fills):
        images = filter_gemms.shared_blocks(p.batch, images, cores)
    slots = filter_gemms.thread_slots(p, images, fills, cores)
    dw = np.empty(p.weight_shape, dtype)
    taps_shape = (p.groups, p.filters_per_group, p.channels_per_group * taps)
    shapes = {"planes": columns.planes_shape, **filter_gemms.scratch_shapes(
        p, columns, _max_len(images) * per_image, dtype, slots, fold)}
    if not columns.natural_order:
        shapes["dw_taps"] = taps_shape
    buf = allocate(point, dtype, shapes)
    dw_taps = buf.get("dw_taps", dw.reshape(taps_shape))
    gradient = filter_gemms.bind(columns, images, slots, x, dy, buf, dw_taps, fold)
    inverse = np.argsort(columns.tap_order)

    def kernel() -> None:
        gradient()
        if "dw_taps" in buf:
            np.take(dw_taps.reshape(k, p.channels_per_group, taps), inverse, axis=2,
                    out=dw.reshape(k, p.channels_per_group, taps))

    return CpuPrepared(dw, kernel, workspace_of(buf))


class Im2col(CpuAlgorithm):
    name = "im2col"
    family = "gemm"
    description = ("receptive fields as a column matrix (copied, or read in place per tap), "
                   "then GEMMs")

    def prepare(self, point: Point, data: ProblemData) -> CpuPrepared:
        """Also the direction's GEMM floor (gemm_floor.py): the row's time over it is what the
        gathers and copies cost."""
        prepared = super().prepare(point, data)
        dtype = prepared.result.dtype
        prepared.extras["gemm_floor_ms"] = gemm_floor.floor_ms(point.problem, point.direction,
                                                               dtype, point.threads)
        return prepared

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        y = np.empty(p.output_shape, dtype)
        part = _Part(_Correlation.of(p, dtype, y, cores_for(point.threads)), data.x.astype(dtype),
                     data.w.astype(dtype), y)
        kernel, workspace = _correlations(point, dtype, [part], [])
        return CpuPrepared(y, kernel, workspace)

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """dx phase by phase, each a forward correlation of dy with a rotated sub-kernel,
        through fwd's im2col + GEMM: no col2im adds (they were a third of the time at ResNet-50
        res2a, and strided adds at stride 2).

        Where K >= 2C (COL2IM_MIN_RATIO) col2im stays for correlations through a column
        matrix: per dy pixel they copy K*R*S values into it, col2im writes and then adds C*R*S,
        each add a strided read-modify-write worth about two copies. Shifted correlations copy
        nothing per tap, so at stride 1 col2im stays only from K >= 8C
        (SHIFTED_COL2IM_MIN_RATIO).
        Study: evidence/logs/im2col-issue16-cpu-intel-xeon-2026-11-24.txt, with NumPy's
        col2im. Compiled (numba: col2im_compiled.py), col2im's scatter costs less, and it beat
        shifted correlations from K >= 2C as well (one thread / all cores: VGG-16 conv2_1 0.82 /
        0.84, conv3_1 0.87 / 0.79, conv4_1 0.90 / 0.88), not at K = C (ResNet-50 res2a 0.87 /
        1.12, res3a 0.98 / 1.07, res4a 0.93 / 1.05; VGG-16 conv5_1 0.95 / 0.92): 2-core AMD
        EPYC VM, evidence/logs/im2col-col2im-rule-issue42-cpu-amd-epyc-2026-11-28.txt. At
        stride > 1 it beat the phase correlations at any K / C but on tiny output planes
        (col2im.pays_strided)."""
        p = point.problem
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        parts, zeroed = _data_parts(p, dtype, w, dy, dx, cores_for(point.threads))
        stride_1 = (p.stride_h, p.stride_w) == (1, 1)
        shifted = stride_1 and all(part.plan.shifted for part in parts)
        ratio = (SHIFTED_COL2IM_MIN_RATIO if shifted and not col2im.compiled_runs(p)
                 else COL2IM_MIN_RATIO)
        if p.out_channels >= ratio * p.in_channels or col2im.pays_strided(p):
            return _col2im(point, p, w, dy, dtype)
        kernel, workspace = _correlations(point, dtype, parts, zeroed)
        return CpuPrepared(dx, kernel, workspace)

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        return _filter_gradient(point, p, data.x.astype(dtype), data.dy.astype(dtype), dtype)
