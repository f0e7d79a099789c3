"""GPU buffers as both cuDNN backends keep them: storage dtypes (bf16 as raw uint16 bits: CuPy
has no bfloat16), physical layouts (NCHW as is, NHWC with the channels innermost, for 4-D and
5-D tensors alike) with their element strides, the upload of a problem's tensors, the NaN poison
and the float64 logical view of an output. One home, so the legacy and the graph backend hold
identical buffers (moved out of legacy.py when 3-D made it too long)."""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.precision import MINIFLOAT, is_narrow, output_precision
from harness.reference import ProblemData
from harness.sweep import Point


class DeviceTensors:
    """Device copies of one problem's x, w, dy (and the op's bias and residual) and its output
    buffers, in the point's precision and layout, shared by every algorithm of that problem
    (uploading per algorithm would dominate a sweep); replaced when the problem, op, precision
    or layout changes. The bias is the plain (K,) vector: its values are contiguous in either
    layout, which is all a [1, K, 1, 1] tensor of channel stride 1 reads."""

    def __init__(self, cupy: Any):
        self.cupy = cupy
        self._key: tuple | None = None
        self._tensors: dict[str, Any] = {}

    def get(self, point: Point, data: ProblemData) -> dict[str, Any]:
        # The op is in the key, not only in `data`: an id can be reused once data is freed.
        key = (point.problem, point.op, point.precision, point.output, point.layout, id(data))
        if key != self._key:
            self._tensors = {}                     # free the previous problem's memory first
            # the epilogue's operands are added to y, so they are stored like the precision's
            # own y (an 8-bit y is the sum scaled and rounded: its operands stay wide)
            result = output_precision(point.precision, "fwd")
            self._tensors = {name: upload(self.cupy, getattr(data, name), point.layout, stored)
                             for name, stored in (("x", point.precision), ("w", point.precision),
                                                  ("dy", point.precision), ("residual", result))
                             if getattr(data, name) is not None}
            if data.bias is not None:
                self._tensors["bias"] = self.cupy.asarray(to_storage(data.bias, result))
            for name, direction in (("y", "fwd"), ("dx", "bwd_data"), ("dw", "bwd_filter")):
                stored = output_precision(point.precision, direction, point.output)
                if stored is not None:                # int8 has no backward buffers
                    shape = physical_shape(point.problem.result_shape(direction), point.layout)
                    self._tensors[name] = self.cupy.empty(shape, dtype=storage_dtype(stored))
            if is_narrow(point.result_precision):
                # what the graph's scale node multiplies y by: there even when it is 1 (a
                # 2,304-term sum of fp8 products is already at the RMS an fp8 y is scaled to)
                self._tensors["y_scale"] = self.cupy.asarray([point.result_scale],
                                                             dtype=np.float32)
            # The copies ran on the legacy default stream, which does not order work on the
            # backends' non-blocking streams, and a pageable upload may still be in flight
            # when asarray returns: without this wait the first algorithm of a problem could
            # read half-copied inputs (seen on the H100 as finite garbage, rel. error ~0.8).
            self.cupy.cuda.Stream.null.synchronize()
            self._key = key
        return self._tensors


def element_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Element strides of a logical N, C, spatial... (or K, C, spatial...) tensor stored in
    `layout`, packed: NCHW in that order, NHWC with the channels innermost (NDHWC for 5-D)."""
    order = physical_axes(len(shape), layout)        # logical axis of each physical position
    strides = [0] * len(shape)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


def storage_dtype(precision: str) -> Any:
    # bf16 travels as raw uint16 bits and fp8 as raw uint8 bits: CuPy has neither type.
    return {"fp32": np.float32, "tf32": np.float32, "fp16": np.float16, "bf16": np.uint16,
            "fp64": np.float64, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8,
            "int8": np.int8}[precision]


def physical_axes(rank: int, layout: str) -> tuple[int, ...]:
    """The logical axis stored at each physical position: NCHW keeps the logical order, NHWC
    moves the channels (axis 1) innermost: (0, 2, 3, 1) for 4-D, (0, 2, 3, 4, 1) for 5-D."""
    return tuple(range(rank)) if layout == "NCHW" else (0, *range(2, rank), 1)


def physical_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    return tuple(shape[axis] for axis in physical_axes(len(shape), layout))


def to_storage(values: np.ndarray, precision: str) -> np.ndarray:
    if precision == "bf16":
        # The data is already bf16-exact, so dropping the low 16 bits of float32 is lossless.
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if precision in MINIFLOAT:
        return fp8_bits(values, precision)
    return values.astype(storage_dtype(precision))


def fp8_bits(values: np.ndarray, precision: str) -> np.ndarray:
    """The fp8 bit patterns of values already exact in the format (precision.round_to): sign,
    biased exponent (0: subnormal), mantissa. Normal x = 2^e * (1 + f), subnormal x = 2^emin * f."""
    mantissa_bits, min_exponent, _ = MINIFLOAT[precision]
    bias = 1 - min_exponent
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    _, exponent = np.frexp(magnitude)             # magnitude = m * 2^exponent, 0.5 <= m < 1
    biased = np.where(magnitude > 0, np.maximum(exponent - 1 + bias, 0), 0)  # 0: subnormal, 0
    scale = np.ldexp(1.0, np.maximum(biased, 1) - bias)
    fraction = np.where(biased > 0, magnitude / scale - 1.0, magnitude / scale)
    mantissa = np.round(fraction * 2**mantissa_bits).astype(np.uint16)
    sign = (np.signbit(values)).astype(np.uint16) << 7
    return (sign | (biased.astype(np.uint16) << mantissa_bits) | mantissa).astype(np.uint8)


def from_storage(cupy: Any, buffer: Any, precision: str) -> Any:
    """A buffer of `precision`'s storage dtype (storage_dtype; not fp8) as float64 values."""
    if precision == "bf16":
        buffer = (buffer.astype(cupy.uint32) << 16).view(cupy.float32)
    return buffer.astype(cupy.float64)


def upload(cupy, values: np.ndarray, layout: str, precision: str) -> Any:
    physical = values.transpose(physical_axes(values.ndim, layout))
    return cupy.asarray(np.ascontiguousarray(to_storage(physical, precision)))


# The poison of an 8-bit result: a NaN pattern of both fp8 formats (S.1111.111 in e4m3,
# S.11111.11 in e5m2), and for int8 -128, which a scaled result never is (precision.round_to
# keeps int8 symmetric, and output_scale leaves 5.7 standard deviations to 127).
_FP8_NAN, _INT8_UNWRITTEN = 0x7F, -128


def poison_value(result: str) -> Any:
    """The poison an output written in precision `result` is filled with: NaN in its storage,
    or a value no valid result takes (int8)."""
    if result == "int8":
        return _INT8_UNWRITTEN
    return {"bf16": 0x7FC0, **dict.fromkeys(MINIFLOAT, _FP8_NAN)}.get(result, float("nan"))


def fp8_values(precision: str) -> np.ndarray:
    """float64 value of each of the 256 fp8 bit patterns (NaN for the NaN patterns, +-inf for
    e5m2's infinities): the inverse of fp8_bits."""
    mantissa_bits, min_exponent, _ = MINIFLOAT[precision]
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    top = (1 << (7 - mantissa_bits)) - 1                   # the all-ones exponent
    biased, mantissa = (codes >> mantissa_bits) & top, codes & ((1 << mantissa_bits) - 1)
    fraction = mantissa / 2.0**mantissa_bits
    values = sign * np.where(biased == 0, np.ldexp(fraction, min_exponent),
                             np.ldexp(1.0 + fraction, biased - (1 - min_exponent)))
    if precision == "fp8_e4m3":                           # no infinities; one NaN per sign
        values[(biased == top) & (mantissa == (1 << mantissa_bits) - 1)] = np.nan
    else:
        values[biased == top] = np.where(mantissa[biased == top] == 0,
                                         sign[biased == top] * np.inf, np.nan)
    return values


def logical_view(point: Point, buffer: Any):
    """A function turning the output buffer into float64 in logical NCHW / KCRS order, with an
    8-bit result decoded and its scale divided out (unwritten int8 elements become NaN)."""
    import cupy
    result = point.result_precision
    scale = point.result_scale
    decode = cupy.asarray(fp8_values(result)) if result in MINIFLOAT else None

    def view(buf: Any) -> Any:
        values = decode[buf].astype(cupy.float64) if decode is not None else from_storage(
            cupy, buf, result)
        if result == "int8":
            values[buf == _INT8_UNWRITTEN] = cupy.nan
        if scale != 1.0:
            values /= scale
        if point.layout == "NHWC":       # channels back from innermost: (0, 3, 1, 2) for 4-D
            values = values.transpose(0, values.ndim - 1, *range(1, values.ndim - 1))
        return cupy.ascontiguousarray(values)
    return view
