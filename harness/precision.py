"""The one precision table: for each precision convbench can ask for, how its data is stored and
how much error an honest algorithm may make at it; rounding to it, the tolerance, and the
precision a result's error shows was delivered. Backends keep only their library's enum for each
name (cuDNN data types, torch dtypes, cuBLAS types).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Precision:
    name: str
    storage: str                # NumPy dtype the data is stored in (bf16: kept in float32 here)
    element_bytes: int          # bytes per stored element on the device
    operand_roundoff: float     # unit roundoff of the operands multiplied
    accumulator_roundoff: float  # unit roundoff of the accumulator
    tensor_float: bool = False  # tf32: fp32 data, products on tensor cores at 10 mantissa bits


# Sweep order. tf32 keeps 10 mantissa bits, bf16 7; every precision but fp64 accumulates in float.
TABLE: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "float32", 4, 2.0**-24, 2.0**-24),
    Precision("tf32", "float32", 4, 2.0**-11, 2.0**-24, tensor_float=True),
    Precision("fp16", "float16", 2, 2.0**-11, 2.0**-24),
    Precision("bf16", "float32", 2, 2.0**-8, 2.0**-24),
    Precision("fp64", "float64", 8, 2.0**-53, 2.0**-53),
)}
NAMES = tuple(TABLE)

# Rounding the operands and the result costs about one unit each; a few units of slack keep honest
# algorithms in, while any indexing bug (errors of order 1e-1) stays far out.
_OPERAND_UNITS = 8.0
# Sequential float accumulation of L terms drifts like sqrt(L) units (random-sign data).
_ACCUMULATION_UNITS = 2.0


def element_bytes(name: str) -> int:
    return TABLE[name].element_bytes


def tolerance(name: str, reduction_length: int, error_factor: float = 1.0) -> float:
    """Largest relative L2 error accepted for an algorithm run at precision `name`."""
    p = TABLE[name]
    bound = (_OPERAND_UNITS * p.operand_roundoff
             + _ACCUMULATION_UNITS * p.accumulator_roundoff * reduction_length**0.5)
    return bound * error_factor


def delivered(asked: str, rel_error: float, reduction_length: int,
              error_factor: float) -> str | None:
    """What the accuracy shows was computed: the asked precision, tf32 for fp32 data computed on
    tensor cores, or None when the result is wrong even for that."""
    if rel_error <= tolerance(asked, reduction_length, error_factor):
        return asked
    lowered = _tensor_float_of(asked)
    if lowered and rel_error <= tolerance(lowered, reduction_length, error_factor):
        return lowered
    return None


def _tensor_float_of(name: str) -> str | None:
    """The tensor-core format that data of precision `name` may be computed at unasked (fp32:
    tf32), i.e. a tensor-float precision with the same storage and element size."""
    asked = TABLE[name]
    if asked.tensor_float:
        return None
    return next((p.name for p in TABLE.values() if p.tensor_float and p.storage == asked.storage
                 and p.element_bytes == asked.element_bytes), None)


def round_to(array: np.ndarray, name: str) -> np.ndarray:
    """float64 values that are exactly representable in the precision's storage type."""
    if name not in TABLE:
        raise ValueError(f"unknown precision {name!r}")
    if name == "fp64":
        return array
    if name == "bf16":
        return _round_to_bfloat16(array.astype(np.float32)).astype(np.float64)
    return array.astype(TABLE[name].storage).astype(np.float64)


def _round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bfloat16, kept in float32 (NumPy has no bfloat16 type)."""
    bits = values.view(np.uint32).astype(np.uint64)
    rounding = 0x7FFF + ((bits >> 16) & 1)
    rounded = ((bits + rounding) >> 16 << 16).astype(np.uint32)
    return rounded.view(np.float32)
