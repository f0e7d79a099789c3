"""The convolution problem: shapes, stride, padding, dilation, groups, and what follows from them.

A `ConvProblem` is pure data (frozen, hashable). It knows nothing of devices, timing or pandas.
Dilation is 1-based here (1 = no dilation), as in cuDNN and PyTorch; benchdnn's 0-based
dilation is converted where descriptors are parsed and printed.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar


class ProblemError(ValueError):
    """An impossible convolution shape; the message names the value and the rule it broke."""


# Every count a problem implies (a field, a tensor's float64 bytes, FLOPs) is stored as an int64
# column; 2**62 leaves headroom for sums of a few of them. No real layer comes near it.
MAX_COUNT = 2**62
MAX_DIGITS = len(str(MAX_COUNT))
DEPTH_FIELDS = ("in_d", "kernel_d", "stride_d", "pad_front", "pad_back", "dilation_d")


@dataclass(frozen=True)
class ConvProblem:
    kind: ClassVar[str] = "conv"       # harness/families.py: which oracle checks its outputs
    batch: int
    in_channels: int
    in_h: int
    in_w: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    pad_bottom: int = 0
    pad_right: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    name: str = field(default="", compare=True)
    multiplicity: int = 1
    # Depth (3-D convolution), last so positional construction of 2-D problems is unchanged;
    # the defaults are a flat problem, whose ids, descriptors and columns stay as they were.
    in_d: int = 1
    kernel_d: int = 1
    stride_d: int = 1
    pad_front: int = 0
    pad_back: int = 0
    dilation_d: int = 1

    def __post_init__(self) -> None:
        label = f"problem {self.name!r}" if self.name else "problem"
        positive = ("batch", "in_channels", "in_h", "in_w", "out_channels", "kernel_h", "kernel_w",
                    "stride_h", "stride_w", "dilation_h", "dilation_w", "groups", "multiplicity",
                    "in_d", "kernel_d", "stride_d", "dilation_d")
        pads = ("pad_top", "pad_left", "pad_bottom", "pad_right", "pad_front", "pad_back")
        _coerce_integers(self)
        for attr in positive:
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ProblemError(f"{label}: {attr}={value!r} must be a positive integer")
        for attr in pads:
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ProblemError(f"{label}: {attr}={value!r} must be a non-negative integer")
        for attr in (*positive, *pads):
            if getattr(self, attr) > MAX_COUNT:
                raise ProblemError(f"{label}: {attr}={getattr(self, attr)} is larger than 2**62")
        for channels in ("in_channels", "out_channels"):
            if getattr(self, channels) % self.groups:
                raise ProblemError(f"{label}: {channels}={getattr(self, channels)} "
                                   f"is not divisible by groups={self.groups}")
        if self.effective_kernel_d > self.padded_d:
            raise ProblemError(f"{label}: dilated kernel depth {self.effective_kernel_d} "
                               f"(kernel_d={self.kernel_d}, dilation_d={self.dilation_d}) "
                               f"is larger than the padded input depth {self.padded_d}")
        if self.effective_kernel_h > self.padded_h:
            raise ProblemError(f"{label}: dilated kernel height {self.effective_kernel_h} "
                               f"(kernel_h={self.kernel_h}, dilation_h={self.dilation_h}) "
                               f"is larger than the padded input height {self.padded_h}")
        if self.effective_kernel_w > self.padded_w:
            raise ProblemError(f"{label}: dilated kernel width {self.effective_kernel_w} "
                               f"(kernel_w={self.kernel_w}, dilation_w={self.dilation_w}) "
                               f"is larger than the padded input width {self.padded_w}")
        _check_counts(self, label)
        # Bottom/right padding that no output reads changes nothing: store the canonical value
        # so equivalent problems compare equal and symmetric ones stay expressible to cuDNN.
        object.__setattr__(self, "pad_back", _canonical_end_pad(
            self.in_d, self.kernel_d, self.stride_d, self.dilation_d, self.pad_front,
            self.pad_back))
        object.__setattr__(self, "pad_bottom", _canonical_end_pad(
            self.in_h, self.kernel_h, self.stride_h, self.dilation_h, self.pad_top,
            self.pad_bottom))
        object.__setattr__(self, "pad_right", _canonical_end_pad(
            self.in_w, self.kernel_w, self.stride_w, self.dilation_w, self.pad_left,
            self.pad_right))

    # ---- geometry -------------------------------------------------------------------------
    @property
    def is_3d(self) -> bool:
        """Whether any depth field differs from a flat problem's (a 2-D problem has none)."""
        return any(getattr(self, name) != flat for name, flat in DEPTH_DEFAULTS.items())

    @property
    def spatial(self) -> tuple[Axis, ...]:
        """The spatial axes outermost first: (depth,) height, width; depth only for 3-D."""
        axes = (self.axis_h, self.axis_w)
        return (self.axis_d, *axes) if self.is_3d else axes

    @property
    def axis_d(self) -> Axis:
        return Axis(self.in_d, self.kernel_d, self.stride_d, self.dilation_d, self.pad_front,
                    self.pad_back)

    @property
    def axis_h(self) -> Axis:
        return Axis(self.in_h, self.kernel_h, self.stride_h, self.dilation_h, self.pad_top,
                    self.pad_bottom)

    @property
    def axis_w(self) -> Axis:
        return Axis(self.in_w, self.kernel_w, self.stride_w, self.dilation_w, self.pad_left,
                    self.pad_right)

    # Per-axis geometry is Axis's; these names are what the rest of the code reads.
    effective_kernel_d = property(lambda self: self.axis_d.extent)
    effective_kernel_h = property(lambda self: self.axis_h.extent)
    effective_kernel_w = property(lambda self: self.axis_w.extent)
    padded_d = property(lambda self: self.axis_d.padded)
    padded_h = property(lambda self: self.axis_h.padded)
    padded_w = property(lambda self: self.axis_w.padded)
    out_d = property(lambda self: self.axis_d.out)
    out_h = property(lambda self: self.axis_h.out)
    out_w = property(lambda self: self.axis_w.out)

    @property
    def symmetric_padding(self) -> bool:
        return (self.pad_top == self.pad_bottom and self.pad_left == self.pad_right
                and self.pad_front == self.pad_back)

    @property
    def channels_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def filters_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels

    # NCHW / KCRS / NKPQ, with the depth axis after the channels for 3-D (NCDHW, as torch).
    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, self.in_channels, *(a.size for a in self.spatial))

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.channels_per_group, *(a.kernel for a in self.spatial))

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, *(a.out for a in self.spatial))

    # ---- work and traffic -----------------------------------------------------------------
    @property
    def flops(self) -> int:
        """Multiply-adds x 2 counting every kernel tap, padding included (cuDNN/DeepBench count).

        The three directions do the same arithmetic, so one count serves all of them."""
        return (2 * self.batch * self.out_channels * self.channels_per_group
                * _prod(tuple(a.kernel * a.out for a in self.spatial)))

    def flops_of(self, direction: str) -> int:
        """The FLOPs of one call of `direction` (every problem family answers it)."""
        return self.flops

    @property
    def flops_no_padding(self) -> int:
        """Only the taps that land on real input (benchdnn's count)."""
        taps = _prod(tuple(_valid_taps(a.size, a.out, a.kernel, a.stride, a.dilation, a.pad_begin)
                           for a in self.spatial))
        return 2 * self.batch * self.out_channels * self.channels_per_group * taps

    def kinked(self, direction: str) -> bool:
        """Whether a direction's result jumps where an input crosses a kink: never for a
        convolution, a sum of products (a fused ReLU is forward only, and continuous)."""
        return False

    # Steps that each store a state the next reads: none in a convolution (a recurrence's:
    # harness/rnn/problem.py; precision.tolerance's `chain`).
    chain = 1

    def reduction_length(self, direction: str) -> int:
        """How many products are summed into one output element; rounding error grows with it."""
        if direction == "fwd":
            return self.channels_per_group * _prod(tuple(a.kernel for a in self.spatial))
        if direction == "bwd_data":
            # Tap r reaches a given input element when r*d lands on the stride grid: that
            # happens for at most ceil(k * gcd(s, d) / s) of the k taps per axis.
            return self.filters_per_group * _prod(tuple(
                _taps_per_element(a.kernel, a.stride, a.dilation) for a in self.spatial))
        if direction == "bwd_filter":
            return self.batch * _prod(tuple(a.out for a in self.spatial))
        raise ValueError(f"unknown direction {direction!r}")

    def result_shape(self, direction: str) -> tuple[int, ...]:
        """The tensor `direction` writes: y (fwd), dx (bwd_data) or dw (bwd_filter)."""
        shapes = {"fwd": self.output_shape, "bwd_data": self.input_shape,
                  "bwd_filter": self.weight_shape}
        if direction not in shapes:
            raise ValueError(f"unknown direction {direction!r}")
        return shapes[direction]

    def bytes_moved(self, element_bytes: int, result_bytes: int | None = None,
                    direction: str = "fwd") -> int:
        """Compulsory traffic: read two tensors and write the third (the direction's result, at
        `result_bytes` each where it is wider than the operands: fp8, int8), once each."""
        result = _prod(self.result_shape(direction))
        operands = (_prod(self.input_shape) + _prod(self.weight_shape) + _prod(self.output_shape)
                    - result)
        return operands * element_bytes + result * (result_bytes or element_bytes)

    def arithmetic_intensity(self, element_bytes: int, result_bytes: int | None = None,
                             direction: str = "fwd") -> float:
        return self.flops / self.bytes_moved(element_bytes, result_bytes, direction)

    def with_batch(self, batch: int) -> ConvProblem:
        return replace(self, batch=batch)

    @property
    def label(self) -> str:
        return self.name or self.short_shape

    def shape_id(self) -> str:
        """The problem's part of a point id (sweep.Point.point_id): every field of the shape."""
        shape = (f"n{self.batch}c{self.in_channels}h{self.in_h}w{self.in_w}k{self.out_channels}"
                 f"r{self.kernel_h}s{self.kernel_w}u{self.stride_h}v{self.stride_w}"
                 f"p{self.pad_top}.{self.pad_left}.{self.pad_bottom}.{self.pad_right}"
                 f"d{self.dilation_h}.{self.dilation_w}g{self.groups}")
        if self.is_3d:                             # 2-D ids stay as they always were
            shape += (f"z{self.in_d}r{self.kernel_d}u{self.stride_d}p{self.pad_front}."
                      f"{self.pad_back}d{self.dilation_d}")
        return shape

    @property
    def short_shape(self) -> str:
        sizes = "x".join(str(a.size) for a in self.spatial)
        kernel = "x".join(str(a.kernel) for a in self.spatial)
        stride = self.stride_d if self.is_3d and self.stride_d != self.stride_h else ""
        stride_text = f"{stride}x{self.stride_h}" if stride else f"{self.stride_h}"
        return (f"{self.in_channels}x{sizes}->{self.out_channels} k{kernel} s{stride_text}"
                + (f" g{self.groups}" if self.groups > 1 else ""))


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a problem (1-based dilation, both paddings) and what follows."""
    size: int
    kernel: int
    stride: int
    dilation: int
    pad_begin: int
    pad_end: int

    @property
    def extent(self) -> int:
        """The dilated kernel's span."""
        return (self.kernel - 1) * self.dilation + 1

    @property
    def padded(self) -> int:
        return self.pad_begin + self.size + self.pad_end

    @property
    def out(self) -> int:
        return (self.padded - self.extent) // self.stride + 1

    def window(self, tap: int, first: int = 0, count: int | None = None) -> slice:
        """Positions of the padded input that kernel tap `tap` reads for outputs
        first..first+count-1 (every output by default)."""
        count = self.out - first if count is None else count
        start = first * self.stride + tap * self.dilation
        return slice(start, start + (count - 1) * self.stride + 1, self.stride)



# The depth fields' flat values (their defaults): a problem with these is 2-D, and older results
# files, which lack the depth columns, hold 2-D problems.
DEPTH_DEFAULTS = {f.name: f.default for f in fields(ConvProblem) if f.name in DEPTH_FIELDS}

def _check_counts(problem: ConvProblem, label: str) -> None:
    """Refuse shapes whose tensors or FLOPs no 64-bit count (nor any memory) can hold."""
    for what, shape in (("input", problem.input_shape), ("weight", problem.weight_shape),
                        ("output", problem.output_shape)):
        if _prod(shape) * 8 > MAX_COUNT:
            raise ProblemError(f"{label}: the {what} tensor {'x'.join(map(str, shape))} has "
                               f"{_prod(shape)} elements; in float64 that is more than 2**62 "
                               "bytes")
    if problem.flops > MAX_COUNT:
        raise ProblemError(f"{label}: {problem.flops} FLOPs ({problem.short_shape}, batch "
                           f"{problem.batch}) is more than 2**62")


def _taps_per_element(kernel: int, stride: int, dilation: int) -> int:
    return min(kernel, -(-kernel * math.gcd(stride, dilation) // stride))


def _coerce_integers(problem: ConvProblem) -> None:
    """Accept NumPy integers (problems rebuilt from a results frame carry them) as plain ints."""
    for f in fields(problem):
        value = getattr(problem, f.name)
        if isinstance(value, numbers.Integral) and not isinstance(value, (int, bool)):
            object.__setattr__(problem, f.name, int(value))


def output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                pad_end: int) -> int:
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1


def end_pad_for_output(size: int, out: int, kernel: int, stride: int, dilation: int,
                       pad_begin: int) -> int:
    """The end padding that gives `out` outputs (benchdnn's rule), canonicalised as below."""
    needed = (out - 1) * stride + (kernel - 1) * dilation + 1 - size - pad_begin
    if output_size(size, kernel, stride, dilation, pad_begin, pad_begin) == out:
        return pad_begin
    return max(0, needed)


def _canonical_end_pad(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                       pad_end: int) -> int:
    out = output_size(size, kernel, stride, dilation, pad_begin, pad_end)
    return end_pad_for_output(size, out, kernel, stride, dilation, pad_begin)


def _valid_taps(size: int, out: int, kernel: int, stride: int, dilation: int, pad: int) -> int:
    """Count (output position, kernel tap) pairs along one axis that read real input: those
    with 0 <= o*stride - pad + t*dilation < size. Closed form, so in_h = 10**12 takes no time."""
    return (_pairs_below(size + pad, out, kernel, stride, dilation)
            - _pairs_below(pad, out, kernel, stride, dilation))


def _pairs_below(bound: int, out: int, kernel: int, stride: int, dilation: int) -> int:
    """How many pairs (o < out, t < kernel) have o*stride + t*dilation < bound."""
    if bound <= 0:
        return 0
    taps = min(kernel, -(-bound // dilation))                # taps that reach some output
    full = min(taps, max(0, -(-(bound - (out - 1) * stride) // dilation)))  # reach all `out`
    # Tap t in [full, taps) reaches ceil((bound - t*d) / s) outputs; with u = taps-1-t the
    # sum runs over an increasing arithmetic progression.
    offset = bound - (taps - 1) * dilation + stride - 1
    return full * out + _floor_sum(taps - full, stride, dilation, offset)


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a*i + b) / m) for i in range(n)) in O(log) steps (a, b >= 0, m >= 1); the
    Euclid-like reduction of AtCoder Library's floor_sum."""
    total = 0
    while n > 0:
        total += (n - 1) * n // 2 * (a // m) + n * (b // m)
        a, b = a % m, b % m
        top = a * n + b
        if top < m:
            break
        n, b, m, a = top // m, top % m, a, m
    return total


def _prod(shape: tuple[int, ...]) -> int:
    result = 1
    for dim in shape:
        result *= dim
    return result
