"""The small protocol every convolution algorithm implements, CPU and GPU alike.

A backend (cpu, cudnn, torch_cpu, fake, ...) is a named set of `Algorithm`s. The runner asks an
algorithm whether it `supports` a point (a reason string when not), `prepare`s it on the point's
data (allocating buffers and workspace, converting to the point's precision and layout) and gets
back a `Prepared` object whose `launch()` runs the convolution once. The runner verifies the output
and times `launch`; algorithms never time, verify, store or print anything themselves.

Directions, all in logical NCHW / KCRS index order, x input, w weight, y output:
  fwd:        y  = conv(x, w)
  bwd_data:   dx = d<conv(x, w), dy>/dx   (transposed convolution of dy with w)
  bwd_filter: dw = d<conv(x, w), dy>/dw
"""
from __future__ import annotations

from typing import Any, ClassVar, Protocol

from harness.reference import ProblemData
from harness.sweep import DIRECTIONS, Point


class Unsupported(Exception):
    """The algorithm cannot run this point; the message is the reason stored in the row."""


class WorkspaceExceeded(Exception):
    """The algorithm needs more workspace than the point allows."""

    def __init__(self, needed: int, limit: int):
        super().__init__(f"needs {needed} bytes of workspace, limit is {limit}")
        self.needed = needed
        self.limit = limit


def fits(needed: int, limit: int | None) -> bool:
    """Whether `needed` bytes of workspace are within `limit` (None: no limit)."""
    return limit is None or needed <= limit


def require_fits(needed: int, limit: int | None) -> None:
    """WorkspaceExceeded unless `needed` fits `limit`: what a backend calls once it knows."""
    if not fits(needed, limit):
        raise WorkspaceExceeded(needed, limit)


class AlgorithmFailed(Exception):
    """The library reported an error while running (e.g. a cuDNN status); becomes `failed`."""


class BackendUnavailable(Exception):
    """A backend cannot be used on this machine (missing library, no GPU); message says why."""


class Prepared(Protocol):
    """One algorithm bound to one point's buffers, ready to launch."""
    workspace_bytes: int
    device: str               # "cpu" or "cuda": selects the timer
    stream: int | None        # CUDA stream handle for the GPU timer; None on the CPU
    extras: dict[str, Any]    # optional extra columns (names must exist in store.COLUMNS)
    # Optional: a prepared variant of an expanding algorithm may also say `family` (str) and
    # `error_factor` (float) for itself; the runner falls back to the algorithm's.

    def launch(self) -> None: ...           # run the convolution once, writing the output
    def poison(self) -> None: ...           # fill the output with NaN so unwritten elements show
    def output(self) -> Any: ...            # the result as float64, logical layout (numpy or cupy)
    def release(self) -> None: ...          # free buffers and workspace


class Algorithm:
    """Base class: subclasses set the class attributes and implement `supports` and `prepare`."""
    backend: ClassVar[str]
    name: ClassVar[str]
    family: ClassVar[str]          # direct, gemm, implicit_gemm, fft, winograd, library, ...
    description: ClassVar[str] = ""  # one line for `convbench list`: what the algorithm does
    # Directions the algorithm exists for; a sweep makes no rows for the others (cuDNN's backward
    # filter has no "gemm", say), unlike `supports`, whose refusals are rows with a reason.
    directions: ClassVar[tuple[str, ...]] = DIRECTIONS
    # Multiplies the precision's tolerance. 1 for algorithms that round like a plain dot product;
    # fast algorithms whose transforms amplify rounding set a larger value and say why.
    error_factor: ClassVar[float] = 1.0
    # An expanding algorithm stands for a set of concrete variants known only once the problem is
    # seen (cuDNN graph-API execution plans): `variants` names them and `prepare` receives points
    # whose algorithm is one of those names.
    expands: ClassVar[bool] = False

    def variants(self, point: Point, data: ProblemData) -> list[str]:
        """Names of the concrete variants for this point (expanding algorithms only)."""
        raise NotImplementedError

    def supports(self, point: Point) -> str | None:
        """None when this algorithm can run the point, else the reason it cannot."""
        raise NotImplementedError

    def prepare(self, point: Point, data: ProblemData) -> Prepared:
        """Allocate and convert; may raise Unsupported, WorkspaceExceeded or AlgorithmFailed."""
        raise NotImplementedError


class Backend:
    """A named family of algorithms on one device."""
    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    description: ClassVar[str] = ""

    def unavailable_reason(self) -> str | None:
        """None when usable on this machine, else why not (e.g. 'cupy is not installed')."""
        return None

    def algorithms(self) -> list[Algorithm]:
        raise NotImplementedError

    def algorithm(self, name: str) -> Algorithm:
        for algo in self.algorithms():
            if algo.name == name:
                return algo
        known = [a.name for a in self.algorithms()]
        raise KeyError(f"backend {self.name!r} has no algorithm {name!r}; known: {', '.join(known)}")
