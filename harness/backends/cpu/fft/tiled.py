"""Overlap-save tiled FFT convolution (what cuDNN calls FFT_TILING), all in real GEMMs.

The lowered correlation's output is cut into tiles of m = t - r + 1 rows (columns likewise);
each tile's input window of t rows is transformed at size t, where a circular correlation with
the r-tap kernel wraps only into rows >= m, which are dropped. Against one transform of the
whole image this shrinks the kernel spectrum, which at batch 1 dominates (K*C planes), from
L x (L/2+1) to t x (t/2+1) frequencies, and turns the per-frequency channel contraction from a
GEMV (one image) into a GEMM with one row per image and tile.

Everything is a real GEMM on split real and imaginary parts, so NumPy's BLAS (multithreaded)
does all the arithmetic and no complex copy of anything is made:
- along the columns, a real DFT matrix (2*f2 x data columns), rows (frequency, re/im);
- along the rows, the complex DFT as a stacked real matrix ([[C, -S], [S, C]]) whose output
  rows are (frequency, part): a spectrum is stored as `parts` real blocks per frequency;
- the complex contraction Z = X V as two real GEMMs per frequency: X is stored in four blocks
  (Re, Im, -Im, Re), V in two, so Z = (X0;X1) V0 + (X2;X3) V1 gives (Re Z; Im Z) with no
  negation pass (fwd takes V X: the weights' own (K, C) layout read untransposed); the
  conjugate a correlation needs is folded into the sign of V's DFT.
The tile size per axis is the 5-smooth size the cost model (`Shape.cost`) finds cheapest.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.backends.cpu.fft.lowering import Lowering, fast_size
from harness.problem import ConvProblem

# Cost of one small BLAS call (NumPy's loop, OpenBLAS's setup), in multiply-adds' worth of
# time: it makes the model prefer fewer, larger per-frequency GEMMs where the flops are close.
CALL_COST = 20_000
# Time of a float written or read by a pass over a large buffer, in multiply-adds: on the Xeon
# VM of issue 16 a 27 MB spectrum took ~2.5 ms a pass (~0.37 ns a float) while the contraction
# ran ~31 G multiply-adds/s (128 channels, 28x28, 11x11).
MEMORY_COST = 12
# Parts of a spectrum: (real part, imaginary part) and their signs, per stored block.
TWO = ((0, 1), (1, 1))
FOUR = ((0, 1), (1, 1), (1, -1), (0, 1))


@dataclass(frozen=True)
class Tiling:
    """Transform size t, outputs per tile m and tile count, per axis."""
    th: int
    tw: int
    mh: int
    mw: int
    nh: int
    nw: int

    @property
    def f2(self) -> int:
        return self.tw // 2 + 1

    @property
    def freqs(self) -> int:
        return self.th * self.f2

    @property
    def tiles(self) -> int:
        return self.nh * self.nw

    @property
    def reach(self) -> tuple[int, int]:
        """Input rows and columns the tiles read."""
        return (self.nh - 1) * self.mh + self.th, (self.nw - 1) * self.mw + self.tw


def _smooth_sizes(low: int, high: int) -> list[int]:
    sizes, size = [], low
    while size <= high:
        size = fast_size(size)
        if size <= high:
            sizes.append(size)
        size += 1
    return sizes


@dataclass(frozen=True)
class Shape:
    """The lowered correlation of one direction: output extent (tiled), kernel taps, operand
    channels (cin summed, cout kept), and which outputs are kept ("tile" or "kernel")."""
    out_h: int
    out_w: int
    rs: int
    ss: int
    batch: int
    groups: int
    cin: int
    cout: int
    direction: str

    @classmethod
    def of(cls, p: ConvProblem, lo: Lowering, direction: str) -> Shape:
        out_h, out_w = (lo.hs, lo.ws) if direction == "bwd_data" else (p.out_h, p.out_w)
        cin, cout = p.channels_per_group * lo.phases, p.filters_per_group
        if direction == "bwd_data":
            cin, cout = cout, cin
        return cls(out_h, out_w, lo.rs, lo.ss, p.batch, p.groups, cin, cout, direction)

    def tiling(self, th: int, tw: int) -> Tiling:
        mh, mw = th - self.rs + 1, tw - self.ss + 1
        return Tiling(th, tw, mh, mw, -(-self.out_h // mh), -(-self.out_w // mw))

    def cost(self, t: Tiling) -> float:
        """Multiply-adds of every GEMM of a launch, plus MEMORY_COST per float each pass
        writes or reads, plus CALL_COST per per-frequency GEMM call."""
        nt, g = self.batch * t.tiles, self.groups
        kernel_planes = g * self.cin * self.cout
        signal = g * nt * self.cin
        if self.direction == "bwd_filter":
            operands = [(t.th, t.tw, 2, signal), (t.mh, t.mw, 4, g * nt * self.cout)]
            kept = (self.rs, self.ss, kernel_planes)
        else:
            operands = [(t.th, t.tw, 4, signal), (self.rs, self.ss, 2, kernel_planes)]
            kept = (t.mh, t.mw, g * nt * self.cout)
        work = floats = 0
        for lh, lw, parts, rest in operands:
            work += 2 * t.f2 * lh * (lw + t.th * parts) * rest
            # tiles (written, read), column spectra (written, read), spectrum (written, read)
            floats += 2 * (lh * lw + 2 * t.f2 * lh + t.freqs * parts) * rest
        kh, kw, rest = kept
        work += 2 * t.f2 * kh * (2 * t.th + kw) * rest
        work += 4 * t.freqs * g * nt * self.cin * self.cout
        # the two products (written; one read by the sum, which writes the other), the sum
        # (read by the inverse), its column spectra (written, read), the kept outputs
        floats += (5 * 2 * t.freqs + 2 * 2 * t.f2 * kh + kh * kw) * rest
        calls = 2 * t.freqs * (1 if g == 1 else 2 * g)
        return work + MEMORY_COST * floats + CALL_COST * calls

    def best(self) -> Tiling:
        """The cheapest tiling by `cost`, transform sizes 5-smooth, from the kernel (one output
        per tile) up to one tile covering the whole output."""
        rows = _smooth_sizes(self.rs, fast_size(self.out_h + self.rs - 1))
        cols = _smooth_sizes(self.ss, fast_size(self.out_w + self.ss - 1))
        return min((self.tiling(th, tw) for th in rows for tw in cols), key=self.cost)


def real_dft(size: int, length: int, sign: int, dtype: type) -> np.ndarray:
    """(2*f2 x length), rows (frequency l, re/im): the half spectrum of `length` real samples
    at transform size `size`, exp(sign * 2 pi i l b / size)."""
    angle = 2 * np.pi * np.outer(np.arange(size // 2 + 1), np.arange(length)) / size
    return np.stack([np.cos(angle), sign * np.sin(angle)], axis=1).reshape(-1, length).astype(dtype)


def complex_dft(size: int, length: int, sign: int, parts: tuple, dtype: type) -> np.ndarray:
    """(size*len(parts) x 2*length): the DFT exp(sign * 2 pi i k a / size) of `length` complex
    samples stored (re block; im block), output rows (frequency k, part)."""
    angle = 2 * np.pi * np.outer(np.arange(size), np.arange(length)) / size
    c, s = np.cos(angle), sign * np.sin(angle)
    components = (np.concatenate([c, -s], axis=1), np.concatenate([s, c], axis=1))  # re, im
    blocks = [factor * components[which] for which, factor in parts]
    return np.stack(blocks, axis=1).reshape(size * len(parts), 2 * length).astype(dtype)


def inverse_rows(size: int, keep: int, dtype: type) -> np.ndarray:
    """(2*keep x 2*size): the first `keep` outputs of the normalised inverse DFT, complex input
    stored (frequency k, re/im), output rows (re/im, position)."""
    angle = 2 * np.pi * np.outer(np.arange(keep), np.arange(size)) / size
    c, s = np.cos(angle) / size, np.sin(angle) / size
    re, im = np.stack([c, -s], axis=2), np.stack([s, c], axis=2)
    return np.concatenate([re, im], axis=0).reshape(2 * keep, 2 * size).astype(dtype)


def half_spectrum_weights(size: int) -> np.ndarray:
    """(f2,): what each column of a real signal's half spectrum stands for in a real inverse:
    columns 1..f2-1 for their mirror images too (2), DC and, at even sizes, Nyquist (1)."""
    weight = np.full(size // 2 + 1, 2.0)
    weight[0] = 1.0
    if size % 2 == 0:
        weight[-1] = 1.0
    return weight


def inverse_cols(size: int, keep: int, dtype: type) -> np.ndarray:
    """(keep x 2*f2): the first `keep` real outputs of the inverse real DFT from the half
    spectrum (rows (l, re/im)), weighted by half_spectrum_weights."""
    f2 = size // 2 + 1
    angle = 2 * np.pi * np.outer(np.arange(keep), np.arange(f2)) / size
    both = (np.stack([np.cos(angle), -np.sin(angle)], axis=2)
            * (half_spectrum_weights(size) / size)[:, None])
    return both.reshape(keep, 2 * f2).astype(dtype)


class Forward:
    """Real tiles (columns b, rows a, rest) -> spectrum (l, k, part, rest): the column DFT, then
    the row DFT per column frequency l (a batched GEMM over l)."""

    def __init__(self, t: Tiling, rows: int, cols: int, sign: int, parts: tuple, dtype: type):
        self.cols = real_dft(t.tw, cols, sign, dtype)
        self.rows = complex_dft(t.th, rows, sign, parts, dtype)
        self.f2, self.staged_rows, self.out_rows = t.f2, 2 * rows, t.th * len(parts)

    def nbytes(self) -> int:
        return self.cols.nbytes + self.rows.nbytes

    def __call__(self, src: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        """src (cols, rows*rest) contiguous; staged (f2*2*rows*rest,); out (freqs*parts*rest,)."""
        np.matmul(self.cols, src, out=staged.reshape(len(self.cols), -1))
        np.matmul(self.rows, staged.reshape(self.f2, self.staged_rows, -1),
                  out=out.reshape(self.f2, self.out_rows, -1))


class Inverse:
    """Spectrum (l, k, re/im, rest) -> the first keep_w x keep_h outputs (b, a, rest), real."""

    def __init__(self, t: Tiling, keep_h: int, keep_w: int, dtype: type):
        self.rows = inverse_rows(t.th, keep_h, dtype)
        self.cols = inverse_cols(t.tw, keep_w, dtype)
        self.f2, self.spec_rows = t.f2, 2 * t.th

    def nbytes(self) -> int:
        return self.cols.nbytes + self.rows.nbytes

    def __call__(self, spec: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        np.matmul(self.rows, spec.reshape(self.f2, self.spec_rows, -1),
                  out=staged.reshape(self.f2, len(self.rows), -1))
        np.matmul(self.cols, staged.reshape(len(self.cols[0]), -1),
                  out=out.reshape(len(self.cols), -1))


def window_view(base: np.ndarray, t: Tiling, size: tuple[int, int],
                phases: tuple[int, int]) -> np.ndarray:
    """Every tile's input window of base (H, W, *rest), uncopied: (cols, rows, nh, nw, sh, sw,
    *rest), element (b, a, i, j, ph, pw, ...) = base[(i*mh + a)*sh + ph, (j*mw + b)*sw + pw, ...].
    Windows of `size` (rows, cols) overlap where size > (mh, mw): overlap-save."""
    (sh, sw), (row, col, *rest) = phases, base.strides
    shape = (size[1], size[0], t.nh, t.nw, sh, sw, *base.shape[2:])
    strides = (col * sw, row * sh, row * sh * t.mh, col * sw * t.mw, row, col, *rest)
    return np.lib.stride_tricks.as_strided(base, shape, strides, writeable=False)
