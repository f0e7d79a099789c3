"""Direct convolution: accumulate one kernel tap at a time, each tap a GEMM over a strided window.

No expanded copy of the input is built (unlike im2col): per tap, the window that every output
reads is copied (C values per output pixel) and multiplied by that tap's (K/g x C/g) weights,
and the product is added into the output. Work goes in blocks of images and output rows small
enough (`BLOCK_BYTES`) that the window, the product and the accumulator stay in cache across the
R*S taps: unblocked, a 1-channel 5x20 DeepSpeech layer spends its time streaming a 27 MB
accumulator through memory 100 times (0.6 GFLOP/s).

3-D runs through the same lines: the loops go over `problem.spatial`, a tap is one index per
axis, and a block's unit along the outermost axis is a depth slice instead of a row.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from itertools import product

import numpy as np

from harness.backends.cpu import compiled, workers
from harness.backends.cpu.common import (TILE_W, CpuAlgorithm, CpuPrepared, allocate, interior,
                                         padded_shape, split, tap_major_weights, workspace_of)
from harness.problem import Axis, ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point
from harness.threads import available_cores

# Window + product + accumulator of one block: about half the 2 MiB per-core L2.
BLOCK_BYTES = 1 << 20


def _taps(p: ConvProblem) -> list[tuple[int, ...]]:
    """Every kernel tap, one index per spatial axis (outermost first)."""
    return list(product(*(range(a.kernel) for a in p.spatial)))


# A block is cut along the outermost spatial axis (output rows in 2-D, output depth slices in
# 3-D); the inner axes are always whole, so a 2-D row and a 3-D slice play the same part.
Block = tuple[int, int, int, int]  # first image, images, first outer output, outer outputs


def _blocks(p: ConvProblem, bytes_per_pixel: int, whole_rows: bool) -> list[Block]:
    """(first image, images, first outer output, outer outputs) blocks of about BLOCK_BYTES."""
    outer = p.spatial[0].out
    row_bytes = bytes_per_pixel * math.prod(_inner(p))
    rows = outer if whole_rows else max(1, BLOCK_BYTES // row_bytes)
    if rows < outer:
        return [(n0, 1, p0, pr) for n0, _ in split(p.batch, 1) for p0, pr in split(outer, rows)]
    images = max(1, BLOCK_BYTES // (row_bytes * outer))
    return [(n0, ni, 0, outer) for n0, ni in split(p.batch, images)]


def _largest(blocks: list[Block], p: ConvProblem) -> int:
    return max(ni * pr for _, ni, _, pr in blocks) * math.prod(_inner(p))


def _inner(p: ConvProblem) -> tuple[int, ...]:
    """Output sizes of the axes inside the outermost: (Q,) in 2-D, (P, Q) in 3-D."""
    return tuple(a.out for a in p.spatial[1:])


def _block_shape(channels: int, block: Block, inner: tuple[int, ...]) -> tuple[int, ...]:
    """(channels, images, outer outputs, *inner outputs): a block gathered channels-outermost."""
    _, ni, _, pr = block
    return (channels, ni, pr, *inner)


def _gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b per group; with one input channel per group an outer product, done by
    broadcasting: BLAS threads cost more than a K=1 GEMM's arithmetic (1.6 s -> 0.1 s on
    DeepSpeech layer 1)."""
    if a.shape[-1] == 1:
        np.multiply(a, b, out=out)
    else:
        np.matmul(a, b, out=out)


def _window(axes: tuple[Axis, ...], xpad: np.ndarray, block: Block,
            tap: tuple[int, ...]) -> np.ndarray:
    """(C, images, outer outputs, *inner outputs) view of what `tap` reads for the block.

    Takes `p.spatial` computed once: the property builds its Axis objects on every read."""
    n0, ni, p0, pr = block
    outer, *inner = axes
    first, *rest = tap
    axes = (outer.window(first, p0, pr), *(a.window(t) for a, t in zip(inner, rest)))
    return xpad[(slice(n0, n0 + ni), slice(None), *axes)].swapaxes(0, 1)


class Direct(CpuAlgorithm):
    name = "direct"
    family = "direct"
    description = ("a GEMM per kernel tap over a strided window; fwd and stride-1 bwd_data "
                   "compiled (numba): few channels, wide rows")
    runs_3d = True  # the loops run over `problem.spatial`, so depth is one more axis

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        return _compiled_else_numpy(_compiled_reason(point.problem),
                                    lambda: _compiled_fwd(point, data, dtype),
                                    lambda: self._numpy_fwd(point, data, dtype))

    def _numpy_fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + 2 * p.out_channels) * item, False)
        cols = _largest(blocks, p)
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        axes, taps, inner = p.spatial, _taps(p), _inner(p)
        buf = allocate(point, dtype, {
            "xpad": padded_shape(p), "window": (p.in_channels * cols,),
            "acc": (p.out_channels * cols,), "product": (p.out_channels * cols,),
            "weights": (*(a.kernel for a in axes), g, kg, cg)})
        xpad, wt = buf["xpad"], buf["weights"]
        inside = (..., *interior(p))

        def kernel() -> None:
            xpad[inside] = x
            np.copyto(wt, tap_major_weights(p, w))
            for block in blocks:
                n0, ni, p0, pr = block
                size = ni * pr * math.prod(inner)
                window = buf["window"][:p.in_channels * size].reshape(
                    _block_shape(p.in_channels, block, inner))
                acc = buf["acc"][:p.out_channels * size].reshape(g, kg, size)
                product = buf["product"][:p.out_channels * size].reshape(g, kg, size)
                for i, tap in enumerate(taps):
                    np.copyto(window, _window(axes, xpad, block, tap))
                    _gemm(wt[tap], window.reshape(g, cg, size), acc if i == 0 else product)
                    if i:
                        np.add(acc, product, out=acc)
                np.copyto(y[n0:n0 + ni, :, p0:p0 + pr],
                          acc.reshape(_block_shape(p.out_channels, block, inner)).swapaxes(0, 1))

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """A stride-1 layer's input gradient is a forward correlation of dy with the filters
        turned round (`turned_round`): the compiled forward kernel runs it where it would run a
        forward pass of that shape; else the NumPy kernel below."""
        turned = turned_round(point.problem)
        return _compiled_else_numpy(
            _compiled_reason(turned) if turned is not None else
            "stride above 1 or a pad beyond the kernel's reach: the NumPy kernel",
            lambda: _compiled_bwd_data(point, turned, data, dtype),
            lambda: self._numpy_bwd_data(point, data, dtype))

    def _numpy_bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """Per block of images: dy block times each tap's transposed weights, added into the
        input positions that tap read."""
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + p.out_channels) * item, True)
        cols = _largest(blocks, p)
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        axes, taps, inner = p.spatial, _taps(p), _inner(p)
        buf = allocate(point, dtype, {
            "dxpad": padded_shape(p), "dy": (p.out_channels * cols,),
            "product": (p.in_channels * cols,),
            "weights": (*(a.kernel for a in axes), g, cg, kg)})
        dxpad, wt = buf["dxpad"], buf["weights"]
        inside = (..., *interior(p))
        last = wt.ndim - 1

        def kernel() -> None:
            np.copyto(wt, tap_major_weights(p, w).swapaxes(last - 1, last))
            dxpad.fill(0)
            for block in blocks:
                n0, ni, _, pr = block
                size = ni * pr * math.prod(inner)
                dyb = buf["dy"][:p.out_channels * size]
                np.copyto(dyb.reshape(_block_shape(p.out_channels, block, inner)),
                          dy[n0:n0 + ni].swapaxes(0, 1))
                product = buf["product"][:p.in_channels * size]
                scattered = product.reshape(_block_shape(p.in_channels, block, inner))
                for tap in taps:
                    np.matmul(wt[tap], dyb.reshape(g, kg, size), out=product.reshape(g, cg, size))
                    target = _window(axes, dxpad, block, tap)
                    target += scattered
            np.copyto(dx, dxpad[inside])

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """Per block of images and tap: dW[tap] += dy block @ window^T."""
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + p.out_channels) * item, True)
        cols = _largest(blocks, p)
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        axes, taps, inner = p.spatial, _taps(p), _inner(p)
        buf = allocate(point, dtype, {
            "xpad": padded_shape(p), "window": (p.in_channels * cols,),
            "dy": (p.out_channels * cols,), "dw": (*(a.kernel for a in axes), g, kg, cg),
            "part": (g, kg, cg)})
        xpad, dwt, part = buf["xpad"], buf["dw"], buf["part"]
        inside = (..., *interior(p))

        def kernel() -> None:
            xpad[inside] = x
            for b, block in enumerate(blocks):
                n0, ni, _, pr = block
                size = ni * pr * math.prod(inner)
                dyb = buf["dy"][:p.out_channels * size]
                np.copyto(dyb.reshape(_block_shape(p.out_channels, block, inner)),
                          dy[n0:n0 + ni].swapaxes(0, 1))
                window = buf["window"][:p.in_channels * size]
                gathered = window.reshape(_block_shape(p.in_channels, block, inner))
                for tap in taps:
                    np.copyto(gathered, _window(axes, xpad, block, tap))
                    # (G, Kg, pixels) @ (G, pixels, Cg): the transposed view is a BLAS operand.
                    np.matmul(dyb.reshape(g, kg, size), window.reshape(g, cg, size).swapaxes(1, 2),
                              out=dwt[tap] if b == 0 else part)
                    if b:
                        np.add(dwt[tap], part, out=dwt[tap])
            np.copyto(tap_major_weights(p, dw), dwt)

        return CpuPrepared(dw, kernel, workspace_of(buf))


# ---- the compiled forward pass (harness/backends/cpu/direct_compiled.py) ------------------------
# Where the compiled kernel runs instead of the per-tap GEMMs. In `convbench run cpu_compare` on
# the 2-core AMD EPYC VM (2026-11-28, fp32, batch 8; ms, two threads unless said) it ran every
# forward pass with few input channels faster than the GEMMs and than oneDNN (train_55 6.5 ms,
# oneDNN 9.6; VGG-16 conv1_1 10.8 against 16.4), and channel-rich layers whose output rows fill
# its TILE_W-column tiles faster than the GEMMs up to 64 channels (res2a 14.2 against 22.7 ms,
# VGG-16 conv2_1 96 against 188, DeepBench train_06 35 against 298), but not res4a, whose 14
# columns fill 22% of a tile (49 against 17 ms). At 128 channels it split (VGG-16 conv3_1 fwd
# 102 against 119 ms on two threads, 203 against 166 on one), at 256 it lost (conv3_1's input
# gradient, 256 channels turned round: 104 against 99, 202 against 173 on one thread): BLAS's
# GEMMs grow better with the channels. evidence/studies/numba_direct has the figures.
FEW_CHANNELS = 16
FULL_TILES = 0.75        # the share of its tiles' columns a channel-rich layer's rows must fill
MOST_CHANNELS = 128      # ... and the most channels per group it may have


def _compiled_else_numpy(reason: str | None, compiled_kernel: Callable[[], CpuPrepared | str],
                         numpy_kernel: Callable[[], CpuPrepared]) -> CpuPrepared:
    """The compiled kernel where `reason` is None and it builds (it returns why not where numba
    fails to load or compile); else the NumPy one, its row saying why (`cpu_kernel`)."""
    if reason is None:
        prepared = compiled_kernel()
        if isinstance(prepared, CpuPrepared):
            return prepared
        reason = prepared
    prepared = numpy_kernel()
    prepared.extras["cpu_kernel"] = f"numpy: {reason}"
    return prepared


def _spans(jobs: int, cores: int) -> list[tuple[int, int]]:
    """`jobs` as one contiguous (first, last) range a core (workers.run_chunks deals them to
    its threads)."""
    return [(first, first + count) for first, count in split(jobs, -(-jobs // cores))]


def _compiled_reason(p: ConvProblem) -> str | None:
    """Why the NumPy forward pass runs for `p` (None: the compiled one does)."""
    cg = p.channels_per_group
    use = p.out_w / (-(-p.out_w // TILE_W) * TILE_W)
    rule = (f"(the compiled kernel runs below {FEW_CHANNELS} channels, or up to "
            f"{MOST_CHANNELS} from {FULL_TILES:.0%} of its tiles)")
    if cg >= FEW_CHANNELS and use < FULL_TILES:
        return (f"{cg} input channels per group and {p.out_w} output columns, {use:.0%} of the "
                f"compiled kernel's {TILE_W}-column tiles: per-tap BLAS GEMMs {rule}")
    if cg > MOST_CHANNELS:
        return f"{cg} input channels per group: per-tap BLAS GEMMs {rule}"
    return compiled.unavailable_reason()


def _compiled_fwd(point: Point, data: ProblemData, dtype: type) -> CpuPrepared | str:
    """The compiled forward pass, compiled here (its cost is the point's setup); the reason the
    NumPy one runs instead where numba fails to load or compile."""
    return _compiled(point, point.problem, data.x.astype(dtype), data.w.astype(dtype), dtype)


def turned_round(p: ConvProblem) -> ConvProblem | None:
    """The forward problem whose output is `p`'s input gradient, where `p` has stride 1: dy
    (K channels) correlated with the filters turned round (each group's K x C swapped, every
    kernel axis reversed), padded by the kernel's reach less `p`'s pad on each side. None for
    a stride above 1 or a pad beyond the reach (a negative pad)."""
    axes = (p.axis_d, p.axis_h, p.axis_w)      # a 2-D problem's depth axis: size 1, kernel 1
    rd, rh, rw = ((a.kernel - 1) * a.dilation for a in axes)
    if any(a.stride != 1 or max(a.pad_begin, a.pad_end) > r
           for a, r in zip(axes, (rd, rh, rw))):
        return None
    return ConvProblem(p.batch, p.out_channels, p.out_h, p.out_w, p.in_channels, p.kernel_h,
                       p.kernel_w, pad_top=rh - p.pad_top, pad_bottom=rh - p.pad_bottom,
                       pad_left=rw - p.pad_left, pad_right=rw - p.pad_right,
                       dilation_h=p.dilation_h, dilation_w=p.dilation_w, groups=p.groups,
                       in_d=p.out_d, kernel_d=p.kernel_d, pad_front=rd - p.pad_front,
                       pad_back=rd - p.pad_back, dilation_d=p.dilation_d)


def _compiled_bwd_data(point: Point, turned: ConvProblem, data: ProblemData,
                       dtype: type) -> CpuPrepared | str:
    """dx as the compiled forward pass of `turned` (turned_round) over dy; the filters are
    turned round at every launch, as a training step's new weights would be."""
    p = point.problem
    g, kg, cg = p.groups, p.filters_per_group, p.channels_per_group
    w = data.w.astype(dtype)
    kernel_axes = tuple(range(3, w.ndim + 1))
    turned_w = np.empty((p.in_channels, kg, *w.shape[2:]), dtype)

    def turn() -> None:
        grouped = w.reshape(g, kg, cg, *w.shape[2:]).swapaxes(1, 2)
        np.copyto(turned_w.reshape(g, cg, kg, *w.shape[2:]), np.flip(grouped, kernel_axes))
    turn()
    return _compiled(point, turned, data.dy.astype(dtype), turned_w, dtype, turn)


def _compiled(point: Point, p: ConvProblem, x_in: np.ndarray, w_in: np.ndarray, dtype: type,
              refresh=None) -> CpuPrepared | str:
    """The compiled forward kernel computing `p` (the point's problem, or the forward problem a
    backward pass is) from x_in and w_in; `refresh`, where given, runs first in every launch."""
    kernels = compiled.kernels()
    if kernels is None:
        return str(compiled.unavailable_reason())
    spatial = len(p.spatial)
    axes = (p.axis_d, p.axis_h, p.axis_w)       # a 2-D problem's depth axis: size 1, kernel 1
    stride, dilation, pad = (np.array([getattr(a, f) for a in axes], np.int64)
                             for f in ("stride", "dilation", "pad_begin"))
    x = kernels.as_5d(x_in, spatial)
    w = kernels.as_5d(w_in, spatial)
    y = np.empty(p.output_shape, dtype)
    y5 = kernels.as_5d(y, spatial)
    n, c, d, h, width = x.shape
    margin = kernels.margin_of(p.pad_left, p.stride_w)
    per = kernels.phase_length(width, p.out_w, p.kernel_w, p.dilation_w, p.pad_left, p.stride_w)
    cores = available_cores()       # read once here, not in every timed launch
    reads = p.channels_per_group * math.prod(a.kernel for a in p.spatial)
    offsets = [(np.empty(reads, np.int64), np.empty(reads, np.int64)) for _ in range(cores)]
    buf = allocate(point, dtype, {"phases": (n, c, d, h, p.stride_w, per),
                                  "weights": kernels.packed_shape(w, p.groups)},
                   other_bytes=sum(a.nbytes + b.nbytes for a, b in offsets))
    kernel_size = np.array(w.shape[2:], np.int64)
    phase_spans = _spans(kernels.phase_jobs(x), cores)
    forward_spans = _spans(kernels.forward_jobs(buf["weights"], y5), cores)

    def kernel() -> None:   # weights packed, phases split, then the output rows, on the threads
        if refresh is not None:
            refresh()
        kernels.pack(w, p.groups, buf["weights"])
        workers.run_chunks(phase_spans, lambda _, span: kernels.phases(
            x, p.stride_w, margin, buf["phases"], *span), cores)
        workers.run_chunks(forward_spans, lambda slot, span: kernels.forward(
            buf["phases"], buf["weights"], y5, kernel_size, stride, dilation, pad, margin,
            *offsets[slot], *span), cores)
    try:
        kernel()                    # compiles (or loads the cache) for this dtype
    except Exception as error:      # numba's typing and lowering errors have no common base
        return compiled.failed(error)
    prepared = CpuPrepared(y, kernel, workspace_of(buf) + sum(a.nbytes + b.nbytes
                                                                for a, b in offsets))
    prepared.extras["cpu_kernel"] = compiled.label()
    return prepared
