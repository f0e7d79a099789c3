"""A planted GPU backend for the isolation test: one algorithm writes through a bad pointer
(an illegal address poisons the CUDA context for good), another is a harmless copy."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness import reference
from harness.backends.base import Algorithm, Backend, Prepared

_BAD_WRITE = r"""
extern "C" __global__ void bad_write(float* p) { p[threadIdx.x + (1ull << 40)] = 1.0f; }
"""


@dataclass
class _Prepared(Prepared):
    point: Any
    data: Any
    bad: bool
    stream: Any
    workspace_bytes: int = 0
    device: str = "cuda"
    extras: dict = field(default_factory=dict)
    _out: Any = None

    def launch(self) -> None:
        import cupy
        with self.stream:
            if self.bad:
                kernel = cupy.RawKernel(_BAD_WRITE, "bad_write")
                kernel((1,), (32,), (cupy.empty(1, dtype=cupy.float32),))
                self.stream.synchronize()
            expected = reference.reference(self.point.problem, self.point.direction, self.data,
                                           cupy)
            self._out = expected.copy()

    def poison(self) -> None:
        if self._out is not None:
            self._out.fill(float("nan"))

    def output(self):
        self.stream.synchronize()
        return self._out

    def release(self) -> None:
        self._out = None


class _Algo(Algorithm):
    backend = "gpu_fault"
    family = "test"
    bad = False

    def supports(self, point):
        return None

    def prepare(self, point, data):
        import cupy
        return _Prepared(point, data, self.bad, cupy.cuda.Stream(non_blocking=True))


class IllegalAddress(_Algo):
    name = "illegal_address"
    bad = True


class Harmless(_Algo):
    name = "harmless"


class GpuFaultBackend(Backend):
    name = "gpu_fault"
    device = "cuda"

    def algorithms(self):
        return [IllegalAddress(), Harmless()]
