"""The NumPy CPU backend: direct, im2col+GEMM, FFT and Winograd convolution in fp32 and fp64.

Adding an algorithm is one class (a CpuAlgorithm subclass in its own module) and one entry in
`ALGORITHMS`.
"""
from __future__ import annotations

from harness.backends.base import Algorithm, Backend
from harness.backends.cpu import compiled
from harness.backends.cpu.direct import Direct
from harness.backends.cpu.fft.algorithm import Fft
from harness.backends.cpu.im2col.algorithm import Im2col
from harness.backends.cpu.rnn import NumpyRnn
from harness.backends.cpu.winograd.algorithm import WinogradF2, WinogradF4

ALGORITHMS: tuple[type[Algorithm], ...] = (Direct, Im2col, Fft, WinogradF2, WinogradF4,
                                           NumpyRnn)


class CpuBackend(Backend):
    name = "cpu"
    device = "cpu"
    description = "NumPy algorithms (BLAS GEMMs, pocketfft FFTs) on the host CPU"

    def algorithms(self) -> list[Algorithm]:
        return [cls() for cls in ALGORITHMS]

    def notes(self) -> list[str]:
        reason = compiled.unavailable_reason()
        return [f"compiled kernels (direct, the FMA peak): "
                f"{compiled.version() if reason is None else 'not run: ' + reason}"]
