"""Whether a point's buffers can fit, known before anything is allocated.

A point whose test data, float64 reference and backend buffers cannot fit in the memory this
machine has free is an `unsupported` row saying how many bytes it needs, not a MemoryError with a
traceback; a sweep where no point fits is bad input (the CLI's exit 2) naming the layers. The
counts are upper estimates of what the executor and the backends allocate (harness/reference.py,
executor.PointExecutor); the backends' blocked scratch is small and not counted.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import epilogue, families
from harness.precision import widest_bytes
from harness.problem import ConvProblem, ProblemError
from harness.rnn.reference import CHUNK_STEPS
from harness.sweep import Point

FLOAT64 = 8
_MEMINFO = Path("/proc/meminfo")
# cgroup v2: a container's limit, which /proc/meminfo does not show.
_CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Footprint:
    """Bytes a point needs: on the host, and on the GPU (0 for CPU points)."""
    host: int
    device: int


def footprint(point: Point, device: str) -> Footprint:
    """What `point` allocates when run by a backend on `device` ("cpu" or "cuda")."""
    p = point.problem
    if p.kind == families.RNN:
        return _recurrent_footprint(point, device)
    # x, w, dy (reference.make_data), and the residual of an op that adds one
    data = FLOAT64 * (_operand_elements(p) + _residual_elements(point))
    checking = FLOAT64 * (_reference_elements(p) + 3 * _result_elements(p, point.direction))
    # its device copy, every element at the widest of the types its precision may write (fp8's
    # fp32 dw, int8's fp32 y: an upper bound for an 8-bit result asked with --output-type)
    backend = widest_bytes(point.precision) * (_operand_elements(p) + _padded_elements(p)
                                               + _residual_elements(point))
    if device == "cuda":  # the reference and the comparison run on the GPU (cupy)
        return Footprint(host=data, device=data + checking + backend)
    return Footprint(host=data + checking + backend, device=0)


def _recurrent_footprint(point: Point, device: str) -> Footprint:
    """A recurrent point: its tensors (harness/rnn/oracle.RnnData: inputs, states, weights and
    the outputs' gradients), the oracle's tape (per layer, direction and step the gates and the
    states it saved: harness/rnn/reference.py) and the flat results; the backend holds its own
    copy and an autograd tape of the same size."""
    p = point.problem
    elements = p.tensor_elements()
    tensors = sum(elements.values()) + elements["y"]
    tape = p.layers * p.directions * p.seq_len * p.batch * (p.gates + 6) * p.hidden_size
    # beside the tape, the oracle's gates of a chunk of steps: forward's input gates, backward's
    # two gradients
    chunk = 3 * min(p.seq_len, CHUNK_STEPS) * p.batch * p.gates * p.hidden_size
    data = FLOAT64 * tensors
    # the flat result and its comparisons, and the oracle's passes kept with the data (its
    # outputs and gradients, as many elements as the tensors: harness/rnn/oracle.RnnData)
    checking = FLOAT64 * (tape + chunk + 4 * tensors)
    backend = widest_bytes(point.precision) * (tensors + tape)
    if device == "cuda":
        return Footprint(host=data, device=data + checking + backend)
    return Footprint(host=data + checking + backend, device=0)


def bytes_needed(point: Point, device: str | None = None) -> int:
    """Host bytes the runner allocates for `point` (an upper estimate); `device` defaults to
    the device of the point's backend."""
    return footprint(point, device or _device(point)).host


def _device(point: Point) -> str:
    from harness import backends
    return backends.get(point.backend).device


def _operand_elements(p: ConvProblem) -> int:
    return math.prod(p.input_shape) + math.prod(p.weight_shape) + math.prod(p.output_shape)


def _padded_elements(p: ConvProblem) -> int:
    return p.batch * p.in_channels * p.padded_d * p.padded_h * p.padded_w


def _reference_elements(p: ConvProblem) -> int:
    """The oracle's padded input, one tap's window, and its result with a per-tap product."""
    window = p.batch * p.in_channels * p.out_d * p.out_h * p.out_w
    return _padded_elements(p) + window + _operand_elements(p)


def _result_elements(p: ConvProblem, direction: str) -> int:
    """The tensor a direction writes: the runner holds two outputs and their difference."""
    return math.prod(p.result_shape(direction))


# ---- what is free -------------------------------------------------------------------------------
def host_bytes_available() -> int | None:
    """Memory this process can still allocate (MemAvailable, capped by a cgroup v2 limit); None
    where the system says nothing."""
    available = _meminfo_available()
    if available is None:
        available = _sysconf_available()
    limit = _cgroup_headroom()
    if available is None or limit is None:
        return limit if available is None else available
    return min(available, limit)


def _meminfo_available() -> int | None:
    try:
        text = _MEMINFO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_headroom() -> int | None:
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        used = (_CGROUP / "memory.current").read_text().strip()
    except OSError:
        return None
    if not (limit.isdigit() and used.isdigit()):
        return None           # "max": no limit
    return max(0, int(limit) - int(used))


def device_bytes_available() -> int | None:
    """Free GPU memory (plus what CuPy's pool holds for reuse); None without CuPy or a GPU.
    Call only for GPU points: it imports cupy."""
    try:
        import cupy
        free, _total = cupy.cuda.runtime.memGetInfo()
        return int(free) + int(cupy.get_default_memory_pool().free_bytes())
    except (ImportError, RuntimeError):   # CUDARuntimeError is a RuntimeError
        return None


# ---- verdicts -----------------------------------------------------------------------------------
def refusal(point: Point, device: str, host_free: int | None = None,
            device_free: int | None = None) -> str | None:
    """Why `point` cannot fit, or None. Free memory is read now unless given."""
    need = footprint(point, device)
    host_free = host_bytes_available() if host_free is None else host_free
    if host_free is not None and need.host > host_free:
        return _too_big(need.host, host_free, "host")
    if device == "cuda" and need.device:
        device_free = device_bytes_available() if device_free is None else device_free
        if device_free is not None and need.device > device_free:
            return _too_big(need.device, device_free, "GPU")
    return None


def _too_big(needed: int, free: int, where: str) -> str:
    return (f"needs {format_bytes(needed)} of {where} memory for its buffers, "
            f"{format_bytes(free)} available")


def impossible_layers(points: Iterable[Point], host_free: int | None = None) -> list[str]:
    """Labels of the layers none of whose points fit in host memory, in sweep order."""
    host_free = host_bytes_available() if host_free is None else host_free
    if host_free is None:
        return []
    fits: dict[str, bool] = {}
    for point in points:
        label = point.problem.label
        fits[label] = fits.get(label, False) or bytes_needed(point) <= host_free
    return [label for label, fit in fits.items() if not fit]


def require_some_fit(points: Sequence[Point], host_free: int | None = None) -> None:
    """ProblemError naming the layers when not one point of the sweep fits in host memory (a
    run would only write rows saying so). GPU memory is checked per point, in the worker."""
    host_free = host_bytes_available() if host_free is None else host_free
    if not points or host_free is None:
        return
    if any(bytes_needed(point) <= host_free for point in points):
        return
    layers = impossible_layers(points, host_free)
    smallest = min(bytes_needed(point) for point in points)
    shown = ", ".join(repr(name) for name in layers[:5]) + (" ..." if len(layers) > 5 else "")
    what = "layer" if len(layers) == 1 else "layers"
    needs = "needs" if len(layers) == 1 else "need"
    raise ProblemError(f"no point fits in memory: {what} {shown} {needs} at least "
                       f"{format_bytes(smallest)} of host memory for its buffers, "
                       f"{format_bytes(host_free)} available; a smaller batch may fit")


def format_bytes(count: int) -> str:
    """4.1 TB, 20.3 GB, 512 B: decimal units, three significant figures."""
    if count < 1000:
        return f"{count} B"
    value, unit = float(count), "B"
    for larger in ("kB", "MB", "GB", "TB", "PB", "EB", "ZB"):
        value, unit = value / 1000, larger
        if value < 999.5:
            break
    return f"{value:.3g} {unit}"


def _residual_elements(point: Point) -> int:
    return math.prod(point.problem.output_shape) if epilogue.needs_residual(point.op) else 0
