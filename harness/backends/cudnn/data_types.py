"""The legacy cuDNN API's data-type configurations (facts: shared/reference/cudnn-api.md 1.7):
which cuDNN data, compute and math types each precision runs in, the result written in its own
precision's type (int8: INT8_EXT_CONFIG, int32 sums written as FLOAT) or the one a point asks
(int8 into int8: INT8_CONFIG), the type of the alpha / beta scalars, and the precisions and
int8 problems the legacy API cannot take at all. Pure data and rules, checked without a GPU;
legacy.py builds its descriptors from them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from harness.backends.cudnn import lib
from harness.precision import output_precision
from harness.sweep import Point

# precision -> (operands' cuDNN data type, compute type, math type). The result tensor takes the
# operand type of its own precision (precision.output_precision): int8's fp32 y is FLOAT.
PRECISION_CONFIG = {
    "fp32": (lib.FLOAT, lib.FLOAT, lib.FMA_MATH),       # FMA math forbids TF32 tensor cores
    "tf32": (lib.FLOAT, lib.FLOAT, lib.DEFAULT_MATH),   # default math allows them
    "fp16": (lib.HALF, lib.FLOAT, lib.TENSOR_OP_MATH),  # PSEUDO_HALF_CONFIG
    "bf16": (lib.BFLOAT16, lib.FLOAT, lib.TENSOR_OP_MATH),  # PSEUDO_BFLOAT16_CONFIG
    "fp64": (lib.DOUBLE, lib.DOUBLE, lib.DEFAULT_MATH),
    # INT8_EXT_CONFIG (x, w INT8; INT32 compute; y FLOAT). cuDNN triggers tensor cores (here the
    # int8 IMMA kernels) only under TENSOR_OP_MATH or ..._ALLOW_CONVERSION (docs: legacy-api.html,
    # "Convolution Functions"); int8 products and int32 sums are exact, so allowing them cannot
    # change the result, and there is no float data for ALLOW_CONVERSION to convert.
    "int8": (lib.INT8, lib.INT32, lib.TENSOR_OP_MATH),
}
# Precisions the legacy API has no convolution for at all (its convolutions take no fp8 data
# type; cuDNN's fp8 kernels are graph-API engines), with the reason their rows carry.
NO_LEGACY = dict.fromkeys(("fp8_e4m3", "fp8_e5m2"),
                          "the legacy API has no fp8 convolution; use cudnn_graph")
# INT8_EXT_CONFIG's documented limits, refused up front with a reason a reader can act on rather
# than left to whatever status cuDNN gives: channels in fours, one algorithm. A problem within
# them that cuDNN still refuses is an unsupported row with cuDNN's status.
INT8_CHANNEL_MULTIPLE = 4
INT8_ALGORITHM = "implicit_precomp_gemm"


def quantized_refusal(algorithm: str, point: Point) -> str | None:
    """Why the legacy API cannot run `point` at its quantized precision: fp8 never, int8 only as
    INT8_EXT_CONFIG (NHWC, channels in fours, one algorithm); None for the other precisions."""
    if point.precision in NO_LEGACY:
        return NO_LEGACY[point.precision]
    if point.precision != "int8":
        return None
    p = point.problem
    if point.layout != "NHWC":
        return "int8 needs NHWC (INT8_EXT_CONFIG)"
    if p.channels_per_group % INT8_CHANNEL_MULTIPLE or p.filters_per_group % INT8_CHANNEL_MULTIPLE:
        return (f"int8 needs input and output channels per group in multiples of "
                f"{INT8_CHANNEL_MULTIPLE} (INT8_EXT_CONFIG); this problem has "
                f"{p.channels_per_group} in and {p.filters_per_group} out")
    if algorithm != INT8_ALGORITHM:
        return "cuDNN runs int8 only with IMPLICIT_PRECOMP_GEMM"
    return None


@dataclass(frozen=True)
class TypeConfig:
    """The cuDNN types of one precision and direction: the two inputs' data type, the compute
    and math types of the convolution descriptor, and the result's data type."""
    operands: int
    compute: int
    output: int
    math: int

    def descriptor_types(self, direction: str) -> tuple[int, int, int]:
        """Data types of the x, w and y descriptors: the direction's result (y, dx or dw) is
        `output`, the two it reads are `operands`."""
        result = {"fwd": 2, "bwd_data": 0, "bwd_filter": 1}[direction]
        return tuple(self.output if i == result else self.operands for i in range(3))


def type_config(name: str, direction: str, output: str | None = None) -> TypeConfig:
    """The types of precision `name` in `direction`, its result in `output` (None: the
    precision's own): int8 into int8 is INT8_CONFIG, into fp32 INT8_EXT_CONFIG."""
    operands, compute, math = PRECISION_CONFIG[name]
    result = output_precision(name, direction, output)
    return TypeConfig(operands, compute, PRECISION_CONFIG[result][0], math)


def scalar_type(output: int) -> type:
    """The C type of alpha and beta for a result of cuDNN data type `output`: double for a
    DOUBLE result, float for every other (HALF, BFLOAT16, FLOAT, INT8_EXT_CONFIG's FLOAT y and
    INT8_CONFIG's INT8 y)
    (cuDNN docs, "Scaling Parameters"). Not the operands' type: that is INT8 for int8."""
    return ctypes.c_double if output == lib.DOUBLE else ctypes.c_float
