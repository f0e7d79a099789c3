"""A seeded fake backend so the runner, store, reports and regression checks can be tested on any
machine: a cost model plus noise, and planted faults (a wrong result, a crash, an unsupported
shape, a workspace-hungry algorithm). Its outputs come from the reference plus a controlled
perturbation; its times are drawn, never measured."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from harness import epilogue, reference
from harness.backends.base import (Algorithm, AlgorithmFailed, Backend, Prepared, Unsupported,
                                   require_fits)
from harness.reference import ProblemData
from harness.stopping import RACED_OUT, raced_out
from harness.sweep import Point, TimingOptions
from harness.timer import Timing

MiB = 1 << 20


@dataclass
class _FakePrepared(Prepared):
    point: Point
    data: ProblemData
    perturbation: float
    crash: bool
    gflops: float
    seed: int
    workspace_bytes: int = 0
    device: str = "cpu"        # never timed on it: own_timing draws the samples
    stream: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    _out: np.ndarray | None = None

    def launch(self) -> None:
        if self.crash:
            raise AlgorithmFailed("planted crash: the fake algorithm always fails at launch")
        exact = reference.reference(self.point.problem, self.point.direction, self.data,
                                    op=self.point.op)
        noise = np.random.default_rng(self.seed).standard_normal(exact.shape)
        scale = np.linalg.norm(exact) / max(np.sqrt(exact.size), 1.0)
        self._out = exact + self.perturbation * scale * noise

    def poison(self) -> None:
        if self._out is not None:
            self._out.fill(np.nan)

    def output(self) -> np.ndarray:
        return self._out

    def release(self) -> None:
        self._out = None

    def own_timing(self, options: TimingOptions) -> Timing:
        """Lognormal samples around the cost model's time (2% spread), seeded by the point; a
        plan that loses a race (options.race_bar_ms) stops after the heat, as the timers do."""
        base_ms = self.point.problem.flops / (self.gflops * 1e9) * 1e3
        rng = np.random.default_rng(self.seed)
        n = max(options.min_samples, 10)
        samples = [float(s) for s in base_ms * rng.lognormal(0.0, 0.02, size=n)]
        heat = next((k for k in range(1, n) if raced_out(samples[:k], options)), None)
        if heat is not None:
            return Timing(tuple(samples[:heat]), RACED_OUT)
        return Timing(tuple(samples), "simulated")


class _FakeAlgorithm(Algorithm):
    backend: ClassVar[str] = "fake"
    gflops: ClassVar[float] = 100.0
    perturbation: ClassVar[float] = 0.0
    crash: ClassVar[bool] = False
    workspace: ClassVar[int] = 0
    runs_3d = True                # its outputs are the oracle's, which is 3-D too
    ops = epilogue.OPS            # and so are the epilogues

    def supports(self, point: Point) -> str | None:
        if point.precision not in ("fp32", "fp64"):
            return f"the fake backend models fp32 and fp64 only, not {point.precision}"
        return None

    def prepare(self, point: Point, data: ProblemData) -> _FakePrepared:
        require_fits(self.workspace, point.workspace_limit)
        seed = int.from_bytes(hashlib.sha256(point.point_id.encode()).digest()[:4], "little")
        return _FakePrepared(point, data, self.perturbation, self.crash, self.gflops, seed,
                             workspace_bytes=self.workspace)


class FakeExact(_FakeAlgorithm):
    name = "exact"
    family = "gemm"
    gflops = 100.0


class FakeExactSlow(_FakeAlgorithm):
    name = "exact_slow"
    family = "direct"
    gflops = 40.0


class FakeWrong(_FakeAlgorithm):
    """Planted: the fastest of all, and wrong by 1% relative. Must never be ranked."""
    name = "wrong_fast"
    family = "winograd"
    gflops = 1000.0
    perturbation = 1e-2


class FakeCrash(_FakeAlgorithm):
    name = "crash"
    family = "fft"
    crash = True


class FakeStrideOne(_FakeAlgorithm):
    name = "stride1_only"
    family = "winograd"
    gflops = 150.0

    def supports(self, point: Point) -> str | None:
        if point.problem.stride_h > 1 or point.problem.stride_w > 1:
            return "planted: only stride-1 problems"
        return super().supports(point)


class FakeHungry(_FakeAlgorithm):
    name = "hungry"
    family = "fft"
    gflops = 200.0
    workspace = 64 * MiB


class FakeBackend(Backend):
    name = "fake"
    device = "cpu"
    description = "seeded cost model with planted faults, for tests"

    def algorithms(self) -> list[Algorithm]:
        return [FakeExact(), FakeExactSlow(), FakeWrong(), FakeCrash(), FakeStrideOne(),
                FakeHungry()]


__all__ = ["FakeBackend", "Unsupported"]
