"""The per-frequency half of the tiled FFT (tiled.py): the channel contraction, and the
kernel-sized spectra (K*C planes per frequency: at batch 1 the largest thing a launch touches).

Each step is one batched NumPy GEMM over all frequencies, so BLAS spreads the thick ones over
the cores. Made block by block of frequencies on the worker threads (cpu/workers.py) instead, to
keep each block in L2 next to its contraction, these thin GEMMs (2*rs = 22 terms) ran at one
core's speed: 12.3 ms against 11.4 ms (128 channels, 28x28, 11x11, fwd). The contraction
alone, its frequencies split between two worker threads, ran 1.6-2x faster in isolation
(e.g. 5.8 -> 2.9 ms, 128 channels, 130 frequencies, 35 tiles) but not inside a launch (A/B
on the large_kernel layers: within noise, bwd_filter at 128 channels 10-15% slower), so it
stays one batched GEMM call per product.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.backends.cpu.blas import gemm_or_numpy
from harness.backends.cpu.fft.tiled import (TWO, Tiling, complex_dft, inverse_cols, inverse_rows,
                                            real_dft)


def _merged(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A reshaped view that refuses to copy (a copy would leave GEMM outputs unwritten)."""
    view = array.view()
    view.shape = shape
    return view


def _product(left: np.ndarray, right: np.ndarray, out: np.ndarray) -> None:
    """out = left @ right per frequency, one side two blocks (F, 2, g, m, k), the other one
    (F, 1, g, ...). With one group and the blocks on the left they are one matrix of 2m rows:
    one GEMM per frequency, not two."""
    if left.shape[1] == 2 and left.shape[2] == 1:
        freqs, _, _, m, k = left.shape
        np.matmul(_merged(left, (freqs, 2 * m, k)), right[:, 0, 0],
                  out=_merged(out, (freqs, 2 * m, out.shape[-1])))
    else:
        np.matmul(left, right, out=out)


def contract(four: np.ndarray, two: np.ndarray, out: np.ndarray, scratch: np.ndarray,
             four_left: bool = True) -> None:
    """The complex product Z = X V (four_left) or V X per frequency, stored (Re Z, Im Z):
    X (F, 4, g, ...) as (Re, Im, -Im, Re), V (F, 2, g, ...) as (Re, Im), transposed views
    welcome; out and scratch (F, 2, g, ...). Re Z = X0 V0 + X2 V1, Im Z = X1 V0 + X3 V1."""
    for pair, single, into in ((four[:, 0:2], two[:, 0:1], out),
                               (four[:, 2:4], two[:, 1:2], scratch)):
        _product(*((pair, single) if four_left else (single, pair)), into)
    np.add(out, scratch, out=out)


def _gemm_by(dtype: type) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """c <- a @ b into a strided view c (a row of a tap-major buffer): BLAS's own GEMM, which
    writes such a view in place, else NumPy's matmul (correct, maybe through a copy)."""
    gemm = gemm_or_numpy(dtype)
    return lambda a, b, c: gemm(a, b, c, False)


class KernelForward:
    """Taps in the weights' own layout (planes, rs, ss) -> spectrum (l, k, re/im, planes), the
    DFT conjugated (a correlation's kernel). The taps' transposition (planes innermost) is
    folded into one column GEMM per tap row, which reads its operand transposed: a copy doing
    it alone cost 3.5 ms for 128 x 128 x 11 x 11 taps. `flip` rotates the kernel by 180
    degrees (bwd_data's) on the way, by reversed DFT columns and tap rows."""

    def __init__(self, t: Tiling, rs: int, ss: int, flip: bool, dtype: type):
        cols = real_dft(t.tw, ss, +1, dtype)
        self.cols = np.ascontiguousarray(cols[:, ::-1]) if flip else cols
        self.rows = complex_dft(t.th, rs, +1, TWO, dtype)
        self.rs, self.flip, self.f2, self.th = rs, flip, t.f2, t.th
        self.gemm = _gemm_by(dtype)

    def nbytes(self) -> int:
        return self.cols.nbytes + self.rows.nbytes

    def __call__(self, taps: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        """taps (planes, rs, ss) -> staged (l, re/im, i, planes) -> out (l, k, re/im, planes)."""
        planes = len(taps)
        by_row = staged.reshape(2 * self.f2, self.rs, planes)
        for i in range(self.rs):
            tap_row = self.rs - 1 - i if self.flip else i
            self.gemm(self.cols, taps[:, tap_row, :].T, by_row[:, i, :])
        np.matmul(self.rows, staged.reshape(self.f2, 2 * self.rs, planes),
                  out=out.reshape(self.f2, 2 * self.th, planes))


class KernelInverse:
    """Spectrum (l, k, re/im, planes) -> the first rs x ss lags in the weights'
    own layout (planes, rs, ss): the transposition again folded into one GEMM per tap row."""

    def __init__(self, t: Tiling, rs: int, ss: int, dtype: type):
        self.rows = inverse_rows(t.th, rs, dtype)
        self.cols_t = inverse_cols(t.tw, ss, dtype).T
        self.rs, self.f2, self.th = rs, t.f2, t.th
        self.gemm = _gemm_by(dtype)

    def nbytes(self) -> int:
        return self.cols_t.nbytes + self.rows.nbytes

    def __call__(self, spec: np.ndarray, staged: np.ndarray, out: np.ndarray) -> None:
        """spec (l, k, re/im, planes) -> staged (l, re/im, i, planes) -> out (planes, rs, ss)."""
        planes = len(out)
        np.matmul(self.rows, spec.reshape(self.f2, 2 * self.th, planes),
                  out=staged.reshape(self.f2, 2 * self.rs, planes))
        by_row = staged.reshape(2 * self.f2, self.rs, planes)
        for i in range(self.rs):
            self.gemm(by_row[:, i, :].T, self.cols_t, out[:, i, :])
