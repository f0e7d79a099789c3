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

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from harness import epilogue, families, precision
from harness.backends.cudnn.lib import CudnnError
from harness.reference import ProblemData
from harness.sweep import DIRECTIONS, Point, TimingOptions
from harness.timer import Timing


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
    """The library reported an error while running (e.g. a cuDNN status); becomes `failed`, or
    `crashed` where a subclass knows from the library's status that the CUDA context is lost."""
    context_lost: bool = False


class BackendUnavailable(Exception):
    """A backend cannot be used on this machine (missing library, no GPU); message says why."""


# cudaError_t codes after which the CUDA context cannot be used again: every later call in the
# process fails with the same error. The driver API's CUresult numbers these faults alike
# (CUDA_ERROR_ILLEGAL_ADDRESS 700, CUDA_ERROR_LAUNCH_FAILED 719, ...).
CONTEXT_LOST_CODES = {
    700: "cudaErrorIllegalAddress", 702: "cudaErrorLaunchTimeout", 710: "cudaErrorAssert",
    714: "cudaErrorHardwareStackError", 715: "cudaErrorIllegalInstruction",
    716: "cudaErrorMisalignedAddress", 718: "cudaErrorInvalidPc", 719: "cudaErrorLaunchFailure",
}
# (module, exception class, attribute holding its cudaError_t / CUresult number) of the CUDA
# libraries' coded errors. Looked up in sys.modules: an error of a library that was never
# imported cannot have been raised, and importing cupy or torch here would cost seconds.
_CODED_CUDA_ERRORS = (
    ("cupy_backends.cuda.api.runtime", "CUDARuntimeError", "status"),
    ("cupy_backends.cuda.api.driver", "CUDADriverError", "status"),
    ("torch", "AcceleratorError", "error_code"),      # torch >= 2.8 (c10::AcceleratorError)
)


def context_lost(err: BaseException) -> bool:
    """Whether `err` says the CUDA context of this process is unusable: the point is `crashed`
    and the worker process must be replaced. Decided by the error's type and status number,
    never by words in its message (a message that merely quotes an error name is a failure)."""
    if isinstance(err, (AlgorithmFailed, CudnnError)):    # these know their library's status
        return err.context_lost
    for module_name, class_name, attribute in _CODED_CUDA_ERRORS:
        module = sys.modules.get(module_name)
        kind = getattr(module, class_name, None)    # None: not loaded, or a torch before 2.8
        if kind is not None and isinstance(err, kind):
            return getattr(err, attribute, None) in CONTEXT_LOST_CODES
    return _torch_cudnn_execution_failed(err)


def _torch_cudnn_execution_failed(err: BaseException) -> bool:
    """PyTorch's cuDNN failures carry no status number: its CuDNNError reaches Python as a plain
    RuntimeError whose text is fixed as "cuDNN error: <cudnnGetErrorString(status)>", so the
    status name at its head is all there is. EXECUTION_FAILED (and its _CUDART, _CUDA_DRIVER,
    ... forms) is a kernel that faulted, as for the legacy cuDNN backend's status 5000-5999."""
    return ("torch" in sys.modules and type(err) is RuntimeError
            and str(err).startswith("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))


class Prepared(ABC):
    """One algorithm bound to one point's buffers, ready to launch. Subclasses set the four
    attributes (plain attributes or dataclass fields) and implement the four abstract methods;
    the rest has defaults that a backend overrides where it knows better."""
    workspace_bytes: int
    device: str               # "cpu" or "cuda": selects the timer and the cache flusher
    stream: Any               # CUDA stream for the GPU timer (a cupy Stream); None on the CPU
    extras: dict[str, Any]    # the backend's own columns (names in schema.EXTRA_COLUMNS); the
                              # executor copies them into each row and never writes here
    # A variant of an expanding algorithm (a graph-API plan) may belong to another family and
    # round differently than its algorithm says; None: the algorithm's.
    family: str | None = None
    error_factor: float | None = None
    # capture(calls) -> replay, for a library whose calls the timer cannot capture into a CUDA
    # graph itself (PyTorch's allocator must know); None: the timer captures launch().
    capture: Callable[[int], Callable[[], None]] | None = None
    # How long one call keeps the GPU busy at the least, where the backend has seen its kernels
    # (harness/call_bound.py); None: not known.
    device_ms_at_least: float | None = None

    @abstractmethod
    def launch(self) -> None:
        """Run the convolution once, writing the output."""

    @abstractmethod
    def poison(self) -> None:
        """Fill the output with NaN, so elements that launch() does not write show."""

    @abstractmethod
    def output(self) -> Any:
        """The result as float64 in logical layout (numpy or cupy)."""

    @abstractmethod
    def release(self) -> None:
        """Free buffers and workspace."""

    def extras_for_limit(self, limit: int | None) -> dict[str, Any]:
        """Columns that depend on the row's workspace limit (cuDNN: whether this algorithm is
        the library's own pick under it); the points of a group differ only in that limit."""
        return {}

    def own_timing(self, options: TimingOptions) -> Timing | None:
        """The samples of an object that supplies its own (the fake backend draws them from a
        cost model); None, the default, has the executor time launch() on `device`."""
        return None


def padding_pairs(problem: Any) -> str:
    """Each axis's two paddings, as a refusal of asymmetric padding names them (depth first, and
    only for a 3-D problem, so 2-D reasons read as they always did)."""
    p = problem
    text = f"top {p.pad_top} / bottom {p.pad_bottom}, left {p.pad_left} / right {p.pad_right}"
    return f"front {p.pad_front} / back {p.pad_back}, {text}" if p.is_3d else text


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
    # Whether the algorithm runs 3-D (depth) problems; those that do not get a row saying so
    # from `refusal`, one place for every backend, so a 3-D sweep never reaches their code.
    runs_3d: ClassVar[bool] = False
    # The ops (harness.epilogue) it computes as one timed call: plain convolution, or that
    # followed by bias, ReLU and a residual add. Others get a row saying so from `refusal`.
    ops: ClassVar[tuple[str, ...]] = (epilogue.CONV,)
    # Precisions it computes as another, where the data, the library call and so the output and
    # time are the same (the graph API builds one graph for fp32 and tf32): the runner measures
    # such points once and judges each row by its own precision (executor.computed_precision).
    computed_as: ClassVar[dict[str, str]] = {}
    # The problem families (harness/families.py) it computes: a convolution algorithm makes no
    # row for a recurrent layer, nor a recurrent one for a convolution.
    problem_kinds: ClassVar[tuple[str, ...]] = (families.CONV,)

    def exists_for(self, point: Point) -> bool:
        """Whether a sweep makes a row for this point at all (no row, rather than a refusal,
        where the algorithm has no meaning: a direction it does not exist for, a problem
        family it does not compute)."""
        return (point.direction in self.directions
                and point.problem.kind in self.problem_kinds)

    def variants(self, point: Point, data: ProblemData) -> list[str]:
        """Names of the concrete variants for this point (expanding algorithms only)."""
        raise NotImplementedError

    def computes_as(self, precision: str) -> str:
        """The precision whose computation this algorithm runs for `precision` (computed_as)."""
        return self.computed_as.get(precision, precision)

    def engine_of(self, variant: str) -> str | None:
        """The implementation a variant is one setting of (a graph-API engine, whose variants are
        its knob choices), or None. Variants of one engine hang alike: on efficientnet_b0 every
        knob setting of three engines hung on one point, and one engine on every depthwise
        layer, so after one hung the worker gives its siblings a short cap (harness.worker)."""
        return None

    def race_rank(self, point: Point) -> int | None:
        """Where the library ranks this algorithm for the point (0: its likeliest fastest), or
        None where it has no ranking: a point's candidates are measured in this order
        (PointExecutor.race_order), so a fast one sets the race's bar early."""
        return None

    def ahead(self, point: Point) -> None:
        """Start, in the background, setup that prepare(point) would otherwise wait for and
        that needs no test data (cudnn_rnn's PERSIST_DYNAMIC build): the worker calls it for
        the points that come next (harness/ahead.py). Nothing by default."""

    def supports(self, point: Point) -> str | None:
        """None when this algorithm can run the point, else the reason it cannot."""
        raise NotImplementedError

    def refusal(self, point: Point) -> str | None:
        """`supports`, after the rules every algorithm shares: what the executor asks."""
        if point.problem.is_3d and not self.runs_3d:
            return f"3-D convolution: not yet supported by {self.backend} ({self.name})"
        if point.op not in self.ops:
            return (f"op {point.op}: not supported by {self.backend} ({self.name}), which runs "
                    f"{', '.join(self.ops)}")
        return precision.refusal(point.precision, point.direction) or self.supports(point)

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

    def notes(self) -> list[str]:
        """What `convbench list` should say of this backend here beyond its algorithms (an
        optional part that runs or does not, and why)."""
        return []

    def algorithms(self) -> list[Algorithm]:
        raise NotImplementedError

    def algorithm(self, name: str) -> Algorithm:
        for algo in self.algorithms():
            if algo.name == name:
                return algo
        known = [a.name for a in self.algorithms()]
        raise KeyError(f"backend {self.name!r} has no algorithm {name!r}; "
                       f"known: {', '.join(known)}")
