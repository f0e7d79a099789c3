"""FFT convolution: real 2-D FFTs (NumPy's pocketfft) and a per-frequency channel contraction.

Every problem is lowered to a stride-1, undilated correlation first (lowering.py: dilation
spreads the kernel, a stride splits it into phases), so one core serves all shapes and all
three directions exactly. Two paths: with several channels per group (tiled.pays), the
overlap-save tiled transform of tiled.py, whose kernel spectrum has t x (t/2+1) rather
than L x (L/2+1) frequencies and whose per-frequency contraction is a GEMM over images and
tiles; otherwise (depthwise and near it) the whole-image transform below.

Transform sizes cover the padded (phase) input and are rounded up to 5-smooth sizes, which
pocketfft transforms fastest; circular wrap-around never reaches the kept outputs because a
correlation's valid part needs no more than the input length.

The 2-D transforms go one axis at a time. Along the rows (contiguous, long) pocketfft's real
FFT; along the columns, a DFT written as one complex GEMM, E (lh x rows) @ (rows x everything):
pocketfft pays ~0.5 us of call overhead per short strided column (measured 250 ms for the
4096 x 91 columns of a DeepSpeech kernel spectrum, 16 ms as a GEMM), and the GEMM only reads
the rows that hold data (3 of 40 for a kernel) and only writes the rows that are kept. Its
output is frequency-major, the layout the channel contraction needs: a batched complex GEMM
over frequencies, or, with few channels to sum over, where one tiny GEMM per frequency costs
more in call overhead than in arithmetic, a broadcast multiply-add.
"""
from __future__ import annotations

import math

import numpy as np

from harness.backends.cpu.common import (CpuAlgorithm, CpuPrepared, allocate, interior, nbytes,
                                         workspace_of)
from harness.backends.cpu.fft import tiled_directions as tiled
from harness.backends.cpu.fft.lowering import Lowering as _Lowering
from harness.backends.cpu.fft.lowering import taps
from harness.backends.cpu.fft.tiled import half_spectrum_weights, real_dft
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

# Longest transform whose forward row DFTs run as a GEMM rather than through pocketfft (the
# GEMM's work grows as lw^2: at lw = 360 the two cost about the same).
ROW_GEMM_MAX = 256
# Up to this many multiply-adds per output element of a per-frequency GEMM (summed channels
# times the smaller GEMM side), a broadcast multiply-add beats one tiny GEMM per frequency:
# depthwise layers (1 x 1 GEMMs) want it; DeepSpeech layer 1 (8x4 @ 4x32) already does not
# (62 ms against 15 ms for the GEMMs).
ELEMENTWISE_MAX_WORK = 8


def _sizes(p: ConvProblem, lo: _Lowering) -> dict[str, int]:
    return {"n": p.batch, "g": p.groups, "cg": p.channels_per_group, "kg": p.filters_per_group,
            "sh": lo.sh, "sw": lo.sw, "hs": lo.hs, "ws": lo.ws, "rs": lo.rs, "ss": lo.ss,
            "lh": lo.lh, "lw": lo.lw, "f2": lo.f2, "p": p.out_h, "q": p.out_w,
            "cgp": p.channels_per_group * lo.phases}


class _Buffers:
    """Flat scratch buffers named with their axes; `view` gives any axis order without copying
    (reshaping a contiguous buffer never copies, so writes through the view land in it)."""

    def __init__(self, point: Point, sizes: dict[str, int], real: type, layouts: dict[str, str],
                 temporary: int = 0):
        self.sizes, self.layouts, self.temporary = sizes, layouts, temporary
        cplx = np.complex64 if real == np.float32 else np.complex128
        shapes = {name: (math.prod(sizes[a] for a in axes.split()),)
                  for name, axes in layouts.items()}
        real_shapes = {k: v for k, v in shapes.items() if k.islower()}
        cplx_shapes = {k: v for k, v in shapes.items() if not k.islower()}
        # Each allocation is checked against the limit together with everything else.
        self.real = allocate(point, real, real_shapes, nbytes(cplx, cplx_shapes) + temporary)
        self.cplx = allocate(point, cplx, cplx_shapes, nbytes(real, real_shapes) + temporary)

    @property
    def workspace(self) -> int:
        return workspace_of(self.real) + workspace_of(self.cplx) + self.temporary

    def view(self, name: str, wanted: str | None = None) -> np.ndarray:
        flat = (self.real if name.islower() else self.cplx)[name]
        names = self.layouts[name].split()
        array = flat.reshape([self.sizes[a] for a in names])
        if wanted is None:
            return array
        return array.transpose([names.index(a) for a in wanted.split()])

    def matrix(self, name: str, rows: str, cols: str) -> np.ndarray:
        """A frequency-major spectrum as (F, groups, rows, cols) GEMM operands."""
        s = self.sizes
        return self.view(name).reshape(s["lh"] * s["f2"], s["g"], s[rows], s[cols])


def _dft(rows: int, size: int, dtype: type) -> np.ndarray:
    """E[k, r] = exp(-2 pi i k r / size): (size x rows), a length-`size` DFT of `rows` inputs."""
    k, r = np.meshgrid(np.arange(size), np.arange(rows), indexing="ij")
    return np.exp(-2j * np.pi * k * r / size).astype(dtype)


def _idft(keep: int, size: int, dtype: type) -> np.ndarray:
    """The first `keep` outputs of the inverse length-`size` DFT, normalised: (keep x size)."""
    u, k = np.meshgrid(np.arange(keep), np.arange(size), indexing="ij")
    return (np.exp(2j * np.pi * u * k / size) / size).astype(dtype)


class _Transform:
    """Forward: real src (..., rows, cols) -> spectrum (lh, f2, ...) frequency-major.
    Inverse: spectrum (lh, f2, ...) -> the first `keep` rows (..., keep, lw) of the real signal.

    The forward row transforms are a real GEMM, src (.. x cols) @ [cos | -sin] (cols x 2*f2),
    whose output is the complex spectrum interleaved, where the transform is short enough
    (lw <= ROW_GEMM_MAX) that this beats pocketfft's ~2 us per call: 41k rows of 171 points
    (DeepSpeech layer 2) take 107 ms in pocketfft, ~20 ms as a GEMM. That needs the source
    contiguous (`flat`, real) and leaves its spectrum row-major (`spec`, complex), so two
    copies frame it."""

    def __init__(self, lo: _Lowering, rows: int, keep: int, cplx: type,
                 flat: np.ndarray | None = None, spec: np.ndarray | None = None):
        self.lo = lo
        self.e = _dft(rows, lo.lh, cplx)
        self.einv = _idft(keep, lo.lh, cplx)
        self.flat, self.spec = flat, spec
        if flat is not None:
            # (cols x 2*f2): columns (frequency, re/im), the interleaved complex spectrum
            self.row_dft = np.ascontiguousarray(
                real_dft(lo.lw, flat.shape[-1], -1, flat.dtype).T)

    def forward(self, src: np.ndarray, rows_out: np.ndarray, staged: np.ndarray,
                out: np.ndarray) -> None:
        """rows_out: view (..., rows, f2) of `staged` (rows, f2, ...); out (lh, f2, ...)."""
        if self.flat is None:
            np.fft.rfft(src, self.lo.lw, axis=-1, out=rows_out)
        else:
            np.copyto(self.flat, src)
            cols = self.flat.shape[-1]
            real_spec = self.spec.view(self.flat.dtype).reshape(-1, 2 * self.lo.f2)
            np.matmul(self.flat.reshape(-1, cols), self.row_dft, out=real_spec)
            np.copyto(rows_out, self.spec)
        np.matmul(self.e, staged.reshape(len(staged), -1), out=out.reshape(len(out), -1))

    def inverse(self, spec: np.ndarray, staged: np.ndarray, staged_view: np.ndarray,
                out: np.ndarray) -> None:
        """staged (keep, f2, ...) with view (..., keep, f2); out (..., keep, lw)."""
        np.matmul(self.einv, spec.reshape(len(spec), -1), out=staged.reshape(len(staged), -1))
        np.fft.irfft(staged_view, self.lo.lw, axis=-1, out=out)


class _KernelTransform:
    """Kernel-sized signals (rs x ss phase taps) <-> their spectra, both axes as GEMMs: a kernel
    holds a few taps, so a DFT over just those beats thousands of pocketfft calls (each ~2 us)
    on mostly-zero rows. Taps are stored (rs, ss, planes): the dilated, phase-split position of
    tap (r, s) is r*dilation_h = i*sh + a, s*dilation_w = j*sw + b."""

    def __init__(self, p: ConvProblem, lo: _Lowering, cplx: type):
        self.lo = lo
        self.taps = taps(p, lo)
        self.e_rows = _dft(lo.rs, lo.lh, cplx)                 # (lh x rs)
        self.e_cols = _dft(lo.ss, lo.lw, cplx)[:lo.f2]         # (f2 x ss) of a real signal
        self.einv_rows = _idft(lo.rs, lo.lh, cplx)             # (rs x lh)
        # Real inverse along the columns from the half spectrum.
        self.einv_cols = (_idft(lo.ss, lo.lw, np.complex128)[:, :lo.f2]
                          * half_spectrum_weights(lo.lw)).astype(cplx)

    def forward(self, taps: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        """taps (rs, ss, planes) real -> staged (rs, f2, planes) -> out (lh, f2, planes)."""
        np.matmul(self.e_cols, taps, out=staged)
        np.matmul(self.e_rows, staged.reshape(self.lo.rs, -1), out=out.reshape(self.lo.lh, -1))

    def inverse(self, spec: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        """spec (lh, f2, planes) -> staged (rs, f2, planes) -> out (rs, ss, planes), real."""
        np.matmul(self.einv_rows, spec.reshape(self.lo.lh, -1), out=staged.reshape(self.lo.rs, -1))
        np.copyto(out, np.matmul(self.einv_cols, staged).real)


def _contract(a: np.ndarray, b: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """out[f, g] = a[f, g] @ b[f, g] for every frequency f and group g."""
    reduce_len = a.shape[-1]
    if reduce_len * min(a.shape[-2], b.shape[-1]) > ELEMENTWISE_MAX_WORK:
        np.matmul(a, b, out=out)
        return
    for i in range(reduce_len):
        product = np.multiply(a[..., i:i + 1], b[..., i:i + 1, :], out=out if i == 0 else scratch)
        if i:
            np.add(out, product, out=out)


# Axis names: n images, g groups, kg/cg filters/channels per group, sh/sw stride phases,
# hs/ws phase-input size, rs/ss phase-kernel size, p/q output size, lh/lw transform size,
# f2 = lw//2+1 real-FFT columns. Lower-case buffer names are real, upper-case complex.
_X_PHASES = "n g cg hs sh ws sw"


class Fft(CpuAlgorithm):
    name = "fft"
    family = "fft"
    description = ("overlap-save tiles, DFTs and channel contraction as real GEMMs "
                   "(depthwise: whole-image pocketfft)")
    # Rounding is spread over every transform element, not just the L products an output sums,
    # and the column DFTs (GEMMs) add O(lh) terms where an FFT adds O(log lh). Measured over
    # 3600 random problems per precision (the tests' strategies): fp32 errors a median 0.10 of
    # the factor-1 tolerance (2x the GEMM algorithms' 0.05), at most 0.93; fp64 a median 0.24,
    # at most 6.8 (7.0 by a targeted search), on problems that keep one column of a 4-wide
    # transform, where the error of all outputs lands on the few kept. The tiled path (tile-sized
    # DFTs as GEMMs in split real arithmetic), measured the same way with
    # TILED_MIN_PAIRS at 1 (10,800 results per precision): fp32 a median 0.098, at most 1.6;
    # fp64 a median 0.20, at most 3.6 (a review's 30,000 more, forced tilings and the NumPy
    # fallback included: at most 5.4). 16 covers both; a wrong index still errs about 1e5 times
    # more. A result that is exactly 0 (every tap reads padding), where the FFT leaves ~1e-13
    # of rounding of the outputs it crops, is judged against the operands' norms
    # (harness/verdict.py), which that rounding is ~1e-16 of.
    error_factor = 16.0

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        if tiled.pays(point.problem):
            return tiled.fwd(point, data, dtype)
        p, lo = point.problem, _Lowering.of(point.problem)
        b = _Buffers(point, _sizes(p, lo), dtype, {
            "xpad": _X_PHASES, "wt": "rs ss g cg sh sw kg", "z": "n g kg p lw",
            "XR": "hs f2 g n cg sh sw", "WR": "rs f2 g cg sh sw kg", "ZR": "p f2 g n kg",
            "X": "lh f2 g n cg sh sw", "W": "lh f2 g cg sh sw kg", "Z": "lh f2 g n kg",
            "S": "lh f2 g n kg", **_row_gemm(lo, "xs", "g n cg sh sw hs ws")},
            _temporaries(p, lo, dtype, p.batch * p.in_channels * lo.hs))
        cplx = b.cplx["X"].dtype
        tx = _Transform(lo, lo.hs, p.out_h, cplx, *_row_scratch(b, "xs"))
        tz = _KernelTransform(p, lo, cplx)
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        w_taps = w.reshape(p.groups, -1, p.channels_per_group, p.kernel_h, p.kernel_w)
        y = np.empty(p.output_shape, dtype)
        xpad = b.view("xpad").reshape(p.batch, p.in_channels, lo.hs * lo.sh, lo.ws * lo.sw)
        x_src = b.view("xpad", "g n cg sh sw hs ws")
        wt = b.view("wt", "rs ss sh sw g kg cg")
        x_mat, w_mat = b.matrix("X", "n", "cgp"), b.matrix("W", "cgp", "kg")
        z_mat, scratch = b.matrix("Z", "n", "kg"), b.matrix("S", "n", "kg")
        z = b.view("z").reshape(p.batch, p.out_channels, p.out_h, lo.lw)
        rows, cols = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols] = x
            for r, s, i, a, j, c in tz.taps:
                wt[i, j, a, c] = w_taps[..., r, s]
            tx.forward(x_src, b.view("XR", "g n cg sh sw hs f2"), b.view("XR"), b.view("X"))
            tz.forward(_flat_planes(b, "wt", "rs ss"), _flat_planes(b, "WR", "rs f2"), b.view("W"))
            np.conjugate(w_mat, out=w_mat)  # correlation = product with the conjugate
            _contract(x_mat, w_mat, z_mat, scratch)
            tx.inverse(b.view("Z"), b.view("ZR"), b.view("ZR", "n g kg p f2"), b.view("z"))
            np.copyto(y, z[..., :p.out_w])

        return CpuPrepared(y, kernel, b.workspace)

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        if tiled.pays(point.problem):
            return tiled.bwd_data(point, data, dtype)
        p, lo = point.problem, _Lowering.of(point.problem)
        b = _Buffers(point, _sizes(p, lo), dtype, {
            "dxpad": _X_PHASES, "wt": "rs ss g kg cg sh sw", "dxph": "n g cg sh sw hs lw",
            "DYR": "p f2 g n kg", "WR": "rs f2 g kg cg sh sw", "DXR": "hs f2 g n cg sh sw",
            "DY": "lh f2 g n kg", "W": "lh f2 g kg cg sh sw", "DX": "lh f2 g n cg sh sw",
            "S": "lh f2 g n cg sh sw", **_row_gemm(lo, "dys", "g n kg p q")},
            _temporaries(p, lo, dtype, p.batch * p.out_channels * p.out_h))
        cplx = b.cplx["DY"].dtype
        tdy = _Transform(lo, p.out_h, lo.hs, cplx, *_row_scratch(b, "dys"))
        tw = _KernelTransform(p, lo, cplx)
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        w_taps = w.reshape(p.groups, -1, p.channels_per_group, p.kernel_h, p.kernel_w)
        dx = np.empty(p.input_shape, dtype)
        dxpad = b.view("dxpad").reshape(p.batch, p.in_channels, lo.hs * lo.sh, lo.ws * lo.sw)
        wt = b.view("wt", "rs ss sh sw g kg cg")
        dy_src = dy.reshape(p.batch, p.groups, -1, p.out_h, p.out_w).transpose(1, 0, 2, 3, 4)
        dy_mat, w_mat = b.matrix("DY", "n", "kg"), b.matrix("W", "kg", "cgp")
        dx_mat, scratch = b.matrix("DX", "n", "cgp"), b.matrix("S", "n", "cgp")
        rows, cols = interior(p)

        def kernel() -> None:
            for r, s, i, a, j, c in tw.taps:
                wt[i, j, a, c] = w_taps[..., r, s]
            # dy's zero extension to the transform size is the full convolution's padding.
            tdy.forward(dy_src, b.view("DYR", "g n kg p f2"), b.view("DYR"), b.view("DY"))
            tw.forward(_flat_planes(b, "wt", "rs ss"), _flat_planes(b, "WR", "rs f2"), b.view("W"))
            _contract(dy_mat, w_mat, dx_mat, scratch)
            tdy.inverse(b.view("DX"), b.view("DXR"), b.view("DXR", "n g cg sh sw hs f2"),
                        b.view("dxph"))
            np.copyto(b.view("dxpad", "n g cg sh sw hs ws"), b.view("dxph")[..., :lo.ws])
            np.copyto(dx, dxpad[:, :, rows, cols])

        return CpuPrepared(dx, kernel, b.workspace)

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        if tiled.pays(point.problem):
            return tiled.bwd_filter(point, data, dtype)
        p, lo = point.problem, _Lowering.of(point.problem)
        b = _Buffers(point, _sizes(p, lo), dtype, {
            "xpad": _X_PHASES, "dwt": "rs ss g kg cg sh sw",
            "XR": "hs f2 g n cg sh sw", "DYR": "p f2 g kg n", "DWR": "rs f2 g kg cg sh sw",
            "X": "lh f2 g n cg sh sw", "DY": "lh f2 g kg n", "DW": "lh f2 g kg cg sh sw",
            "S": "lh f2 g kg cg sh sw", **_row_gemm(lo, "xs", "g n cg sh sw hs ws"),
            **_row_gemm(lo, "dys", "g kg n p q")},
            _temporaries(p, lo, dtype, p.batch * p.in_channels * lo.hs,
                         p.batch * p.out_channels * p.out_h))
        cplx = b.cplx["X"].dtype
        tx = _Transform(lo, lo.hs, lo.hs, cplx, *_row_scratch(b, "xs"))
        tdy = _Transform(lo, p.out_h, lo.hs, cplx, *_row_scratch(b, "dys"))
        tw = _KernelTransform(p, lo, cplx)
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        dw_taps = dw.reshape(p.groups, -1, p.channels_per_group, p.kernel_h, p.kernel_w)
        xpad = b.view("xpad").reshape(p.batch, p.in_channels, lo.hs * lo.sh, lo.ws * lo.sw)
        x_src = b.view("xpad", "g n cg sh sw hs ws")
        dwt = b.view("dwt", "rs ss sh sw g kg cg")
        dy_src = dy.reshape(p.batch, p.groups, -1, p.out_h, p.out_w).transpose(1, 2, 0, 3, 4)
        dy_mat, x_mat = b.matrix("DY", "kg", "n"), b.matrix("X", "n", "cgp")
        dw_mat, scratch = b.matrix("DW", "kg", "cgp"), b.matrix("S", "kg", "cgp")
        rows, cols = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols] = x
            tx.forward(x_src, b.view("XR", "g n cg sh sw hs f2"), b.view("XR"), b.view("X"))
            tdy.forward(dy_src, b.view("DYR", "g kg n p f2"), b.view("DYR"), b.view("DY"))
            np.conjugate(dy_mat, out=dy_mat)
            _contract(dy_mat, x_mat, dw_mat, scratch)
            # Only the rs x ss corner of the correlation holds kernel taps: only it is inverted.
            tw.inverse(b.view("DW"), _flat_planes(b, "DWR", "rs f2"),
                       _flat_planes(b, "dwt", "rs ss"))
            for r, s, i, a, j, c in tw.taps:
                dw_taps[..., r, s] = dwt[i, j, a, c]

        return CpuPrepared(dw, kernel, b.workspace)


def _temporaries(p: ConvProblem, lo: _Lowering, dtype: type, *fft_rows: int) -> int:
    """Bytes NumPy allocates inside a launch, beyond the preallocated buffers: pocketfft's
    zero-padded copy of each source it transforms (rows x lw), and the kernel transform's
    complex copy of the taps and complex product (rs x ss x planes each)."""
    real = np.dtype(dtype).itemsize
    padded = sum(fft_rows) * lo.lw * real if lo.lw > ROW_GEMM_MAX else 0
    taps = lo.rs * lo.ss * p.out_channels * p.channels_per_group * lo.phases
    return padded + 2 * taps * 2 * real


def _row_gemm(lo: _Lowering, name: str, axes: str) -> dict[str, str]:
    """Scratch layouts for row DFTs by GEMM (a contiguous copy of the source, real, and its
    row spectrum, complex: upper-case name), or none where pocketfft is used."""
    if lo.lw > ROW_GEMM_MAX:
        return {}
    return {name: axes, name.upper(): axes.rsplit(" ", 1)[0] + " f2"}


def _row_scratch(b: _Buffers, name: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    if name not in b.layouts:
        return None, None
    return b.view(name), b.view(name.upper())


def _flat_planes(b: _Buffers, name: str, lead: str) -> np.ndarray:
    """Buffer `name` as (lead axes..., everything else flattened)."""
    first, second = lead.split()
    return b.view(name).reshape(b.sizes[first], b.sizes[second], -1)
