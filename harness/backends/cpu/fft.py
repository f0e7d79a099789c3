"""FFT convolution: real 2-D FFTs (NumPy's pocketfft) and a per-frequency channel contraction.

Every problem is lowered to a stride-1, undilated correlation first, so one core serves all
shapes and all three directions exactly:
- dilation: the kernel is spread out with zeros (R -> (R-1)*dilation+1 taps);
- stride s: polyphase split. y[p] = sum_r x[p*s + r] w[r] equals, with r = i*s + a,
  sum_a sum_i x_a[p + i] w_a[i], where x_a[u] = x[u*s + a] and w_a[i] = w[i*s + a]: a stride-1
  correlation over s*s times as many channels with a kernel s*s times smaller. Strided layers
  (the DeepBench speech layers are stride 2) thus cost no more FFT work than stride-1 ones.
Transform sizes cover the padded (phase) input and are rounded up to 5-smooth sizes, which
pocketfft transforms fastest; circular wrap-around never reaches the kept outputs because a
correlation's valid part needs no more than the input length.
The contraction is a batched complex GEMM over frequencies (frequency-major operands, written
there directly by the FFT's `out=`), or, with few channels to sum over, where one tiny GEMM per
frequency would cost more in call overhead than arithmetic, a broadcast multiply-add.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.backends.base import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

# At or below this many summed channels (times the smaller GEMM side) the per-frequency GEMMs
# are too small to beat a broadcast multiply-add (measured on the DeepBench speech layers).
ELEMENTWISE_MAX_WORK = 64


def fast_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            size = p35
            while size < n:
                size *= 2
            best = min(best, size)
            p35 *= 3
        p5 *= 5
    return best


@dataclass(frozen=True)
class _Lowering:
    """Geometry of the stride-1 correlation a problem is lowered to."""
    sh: int
    sw: int
    hs: int          # phase-input height/width: ceil(padded / stride)
    ws: int
    rs: int          # phase-kernel height/width: ceil(dilated kernel / stride)
    ss: int
    lh: int          # transform sizes
    lw: int

    @property
    def phases(self) -> int:
        return self.sh * self.sw

    @property
    def freqs(self) -> tuple[int, int]:
        return self.lh, self.lw // 2 + 1

    @classmethod
    def of(cls, p: ConvProblem) -> "_Lowering":
        sh, sw = p.stride_h, p.stride_w
        hs, ws = -(-p.padded_h // sh), -(-p.padded_w // sw)
        return cls(sh, sw, hs, ws, -(-p.effective_kernel_h // sh), -(-p.effective_kernel_w // sw),
                   fast_size(hs), fast_size(ws))


def _axes(buf: np.ndarray, sizes: dict[str, int], stored: str, wanted: str) -> np.ndarray:
    """A view of contiguous `buf`, whose axes are the names in `stored` (C order), with its axes
    in the order `wanted`. Reshaping a contiguous buffer never copies, so writes go through."""
    names = stored.split()
    view = buf.reshape([sizes[n] for n in names])
    return view.transpose([names.index(n) for n in wanted.split()])


def _sizes(p: ConvProblem, lo: "_Lowering") -> dict[str, int]:
    f1, f2 = lo.freqs
    return {"n": p.batch, "g": p.groups, "cg": p.channels_per_group, "kg": p.filters_per_group,
            "sh": lo.sh, "sw": lo.sw, "hs": lo.hs, "ws": lo.ws, "rs": lo.rs, "ss": lo.ss,
            "lh": lo.lh, "lw": lo.lw, "f1": f1, "f2": f2, "p": p.out_h, "q": p.out_w}


def _plane(outer: int, channels: int, lo: "_Lowering") -> tuple[int, int, int, int]:
    """A zero-bordered spatial buffer as large as the transform, in every phase."""
    return outer, channels, lo.lh * lo.sh, lo.lw * lo.sw


def _dilated_taps(p: ConvProblem, wd: np.ndarray) -> np.ndarray:
    """The entries of the zero-spread kernel buffer that hold real taps."""
    return wd[:, :, :p.effective_kernel_h:p.dilation_h, :p.effective_kernel_w:p.dilation_w]


_AXES = (-2, -1)


def _spectra(sizes: dict[str, int], buffers: dict[str, str]) -> dict[str, tuple[int, ...]]:
    """Flat shapes of spectrum buffers described by their axis names."""
    return {name: (math.prod(sizes[a] for a in axes.split()),) for name, axes in buffers.items()}


def _matrices(sizes: dict[str, int], spec: dict[str, np.ndarray],
              *layouts: tuple[str, str, str]) -> list[np.ndarray]:
    """Each spectrum buffer as (F, G, rows, cols) GEMM operands; "cgp" = channels x phases."""
    sizes = dict(sizes, cgp=sizes["cg"] * sizes["sh"] * sizes["sw"])
    f = sizes["f1"] * sizes["f2"]
    return [spec[name].reshape(f, sizes["g"], sizes[rows], sizes[cols])
            for name, rows, cols in layouts]


def _complex(dtype: type) -> type:
    return np.complex64 if dtype == np.float32 else np.complex128


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


class Fft(CpuAlgorithm):
    name = "fft"
    family = "fft"
    # Measured fp32 relative L2 error is about 1e-7, under the tolerance for the GEMM family;
    # no allowance needed (tests/test_cpu_algorithms.py checks it at factor 1).
    error_factor = 1.0

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p, lo = point.problem, _Lowering.of(point.problem)
        n = _sizes(p, lo)
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        real = allocate(point, dtype, {"xpad": _plane(p.batch, p.in_channels, lo),
                                       "wd": _plane(p.out_channels, p.channels_per_group, lo),
                                       "z": (p.batch, p.out_channels, lo.lh, lo.lw)})
        spec = allocate(point, _complex(dtype), _spectra(n, {
            "x": "f1 f2 g n cg sh sw", "w": "f1 f2 g cg sh sw kg", "z": "f1 f2 g n kg",
            "scratch": "f1 f2 g n kg"}))
        xpad, wd, z = real["xpad"], real["wd"], real["z"]
        x_phases = _axes(xpad, n, "n g cg lh sh lw sw", "n g cg sh sw lh lw")
        w_phases = _axes(wd, n, "g kg cg lh sh lw sw", "g kg cg sh sw lh lw")
        x_spec = _axes(spec["x"], n, "f1 f2 g n cg sh sw", "n g cg sh sw f1 f2")
        w_spec = _axes(spec["w"], n, "f1 f2 g cg sh sw kg", "g kg cg sh sw f1 f2")
        z_spec = _axes(spec["z"], n, "f1 f2 g n kg", "n g kg f1 f2")
        z_grouped = _axes(z, n, "n g kg lh lw", "n g kg lh lw")
        x_mat, w_mat, z_mat, scratch = _matrices(n, spec, ("x", "n", "cgp"), ("w", "cgp", "kg"),
                                                 ("z", "n", "kg"), ("scratch", "n", "kg"))
        rows, cols = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols] = x
            _dilated_taps(p, wd)[...] = w
            np.fft.rfftn(x_phases, axes=_AXES, out=x_spec)
            np.fft.rfftn(w_phases, axes=_AXES, out=w_spec)
            np.conjugate(w_mat, out=w_mat)  # correlation = product with the conjugate
            _contract(x_mat, w_mat, z_mat, scratch)
            np.fft.irfftn(z_spec, (lo.lh, lo.lw), _AXES, out=z_grouped)
            np.copyto(y, z[:, :, :p.out_h, :p.out_w])

        return CpuPrepared(y, kernel, workspace_of(real) + workspace_of(spec))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p, lo = point.problem, _Lowering.of(point.problem)
        n = _sizes(p, lo)
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        real = allocate(point, dtype, {"dxpad": _plane(p.batch, p.in_channels, lo),
                                       "wd": _plane(p.out_channels, p.channels_per_group, lo),
                                       "dy": (p.batch, p.out_channels, lo.lh, lo.lw)})
        spec = allocate(point, _complex(dtype), _spectra(n, {
            "dy": "f1 f2 g n kg", "w": "f1 f2 g kg cg sh sw", "dx": "f1 f2 g n cg sh sw",
            "scratch": "f1 f2 g n cg sh sw"}))
        dxpad, wd, dypad = real["dxpad"], real["wd"], real["dy"]
        w_phases = _axes(wd, n, "g kg cg lh sh lw sw", "g kg cg sh sw lh lw")
        dx_phases = _axes(dxpad, n, "n g cg lh sh lw sw", "n g cg sh sw lh lw")
        dy_grouped = _axes(dypad, n, "n g kg lh lw", "n g kg lh lw")
        dy_spec = _axes(spec["dy"], n, "f1 f2 g n kg", "n g kg f1 f2")
        w_spec = _axes(spec["w"], n, "f1 f2 g kg cg sh sw", "g kg cg sh sw f1 f2")
        dx_spec = _axes(spec["dx"], n, "f1 f2 g n cg sh sw", "n g cg sh sw f1 f2")
        dy_mat, w_mat, dx_mat, scratch = _matrices(n, spec, ("dy", "n", "kg"), ("w", "kg", "cgp"),
                                                   ("dx", "n", "cgp"), ("scratch", "n", "cgp"))
        rows, cols = interior(p)

        def kernel() -> None:
            _dilated_taps(p, wd)[...] = w
            dypad[:, :, :p.out_h, :p.out_w] = dy  # zeros beyond: the correlation's extra outputs
            np.fft.rfftn(dy_grouped, axes=_AXES, out=dy_spec)
            np.fft.rfftn(w_phases, axes=_AXES, out=w_spec)
            _contract(dy_mat, w_mat, dx_mat, scratch)
            np.fft.irfftn(dx_spec, (lo.lh, lo.lw), _AXES, out=dx_phases)
            np.copyto(dx, dxpad[:, :, rows, cols])

        return CpuPrepared(dx, kernel, workspace_of(real) + workspace_of(spec))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p, lo = point.problem, _Lowering.of(point.problem)
        n = _sizes(p, lo)
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        real = allocate(point, dtype, {"xpad": _plane(p.batch, p.in_channels, lo),
                                       "wd": _plane(p.out_channels, p.channels_per_group, lo),
                                       "dy": (p.batch, p.out_channels, lo.lh, lo.lw)})
        spec = allocate(point, _complex(dtype), _spectra(n, {
            "dy": "f1 f2 g kg n", "x": "f1 f2 g n cg sh sw", "dw": "f1 f2 g kg cg sh sw",
            "scratch": "f1 f2 g kg cg sh sw"}))
        xpad, wd, dypad = real["xpad"], real["wd"], real["dy"]
        x_phases = _axes(xpad, n, "n g cg lh sh lw sw", "n g cg sh sw lh lw")
        w_phases = _axes(wd, n, "g kg cg lh sh lw sw", "g kg cg sh sw lh lw")
        dy_grouped = _axes(dypad, n, "n g kg lh lw", "n g kg lh lw")
        x_spec = _axes(spec["x"], n, "f1 f2 g n cg sh sw", "n g cg sh sw f1 f2")
        dy_spec = _axes(spec["dy"], n, "f1 f2 g kg n", "n g kg f1 f2")
        dw_spec = _axes(spec["dw"], n, "f1 f2 g kg cg sh sw", "g kg cg sh sw f1 f2")
        dy_mat, x_mat, dw_mat, scratch = _matrices(n, spec, ("dy", "kg", "n"), ("x", "n", "cgp"),
                                                   ("dw", "kg", "cgp"), ("scratch", "kg", "cgp"))
        rows, cols = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols] = x
            dypad[:, :, :p.out_h, :p.out_w] = dy
            np.fft.rfftn(x_phases, axes=_AXES, out=x_spec)
            np.fft.rfftn(dy_grouped, axes=_AXES, out=dy_spec)
            np.conjugate(dy_mat, out=dy_mat)
            _contract(dy_mat, x_mat, dw_mat, scratch)
            np.fft.irfftn(dw_spec, (lo.lh, lo.lw), _AXES, out=w_phases)
            np.copyto(dw, _dilated_taps(p, wd))

        return CpuPrepared(dw, kernel, workspace_of(real) + workspace_of(spec))
