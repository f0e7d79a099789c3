"""The one precision table: for each precision convbench can ask for, how its data is stored and
how much error an honest algorithm may make at it; rounding to it, the tolerance, and the
precision a result's error shows was delivered. Backends keep only their library's enum for each
name (cuDNN data types, torch dtypes, cuBLAS types).
"""
from __future__ import annotations

import math
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
    # Quantized formats (fp8, int8): the operands are exact in the format and the products exact
    # in the accumulator, so the only roundings are the accumulation and the result's, which is
    # written in a wider precision per direction (`outputs`; a direction not there does not exist).
    quantized: bool = False
    outputs: tuple[tuple[str, str], ...] = ()
    # Data is drawn N(0, data_scale^2) before rounding: int8's integers need a spread to hold
    # information (the relative error the check reads does not depend on the scale).
    data_scale: float = 1.0
    # Sums kept at accumulator_roundoff for at most this many terms, then added in fp32 (0: all
    # of them): fp8 MMA chains are promoted to fp32 (see _FP8_PROMOTION).
    promotion_length: int = 0
    # Other precisions the forward result may be asked in (the `output` sweep axis), beside
    # the default in `outputs`: cuDNN's fp8 and int8 graphs write any of them.
    forward_outputs: tuple[str, ...] = ()


# Hopper's FP8 tensor-core MMA keeps about 14 mantissa bits of its running sum before the fp32
# accumulator takes it (DeepSeek-V3 technical report, section 3.3.2, measured on H800).
_FP8_ACCUMULATION = 2.0**-14
# ... but not over a whole reduction: fp8 bwd_filter errors on an H100 stay flat as L grows.
# Capping the 14-bit part at 4,096 terms keeps the tolerance well below an indexing bug's error
# (evidence/notes/constants.md#precision-_fp8_promotion).
_FP8_PROMOTION = 4096
# fp8 results: fp16 for y and dx, fp32 for dw: the combinations cuDNN 9.19 builds plans for
# (shared/reference and issue 17's feasibility table); int8 is forward-only, int32 sums, fp32 y.
_FP8_OUTPUTS = (("fwd", "fp16"), ("bwd_data", "fp16"), ("bwd_filter", "fp32"))

# Sweep order. tf32 keeps 10 mantissa bits, bf16 7; every precision but fp64 accumulates in float.
TABLE: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "float32", 4, 2.0**-24, 2.0**-24),
    Precision("tf32", "float32", 4, 2.0**-11, 2.0**-24, tensor_float=True),
    Precision("fp16", "float16", 2, 2.0**-11, 2.0**-24),
    Precision("bf16", "float32", 2, 2.0**-8, 2.0**-24),
    Precision("fp64", "float64", 8, 2.0**-53, 2.0**-53),
    # e4m3: 3 mantissa bits, normal exponents -6..8, max 448; e5m2: 2 bits, -14..15, max 57344
    Precision("fp8_e4m3", "float64", 1, 2.0**-4, _FP8_ACCUMULATION, quantized=True,
              outputs=_FP8_OUTPUTS, promotion_length=_FP8_PROMOTION,
              forward_outputs=("bf16", "fp32", "fp8_e4m3")),
    Precision("fp8_e5m2", "float64", 1, 2.0**-3, _FP8_ACCUMULATION, quantized=True,
              outputs=_FP8_OUTPUTS, promotion_length=_FP8_PROMOTION,
              forward_outputs=("bf16", "fp32", "fp8_e5m2")),
    # integer sums are exact in int32 (127 * 127 * L stays below 2^31 for L < 133,000)
    Precision("int8", "float64", 1, 0.0, 0.0, quantized=True, outputs=(("fwd", "fp32"),),
              data_scale=16.0, forward_outputs=("int8",)),
)}
NAMES = tuple(TABLE)
QUANTIZED = tuple(p.name for p in TABLE.values() if p.quantized)
FLOATING = tuple(p.name for p in TABLE.values() if not p.quantized)
# (mantissa bits, smallest normal exponent, largest finite value) of the 8-bit float formats
# (OCP 8-bit floating point; the exponent bias is 1 - the smallest normal exponent)
MINIFLOAT = {"fp8_e4m3": (3, -6, 448.0), "fp8_e5m2": (2, -14, 57344.0)}
# The `output` axis's value for "the precision's own result type" (output_precision's default).
AUTO_OUTPUT = "auto"
# Largest value of each 8-bit result type. A result written in one is first multiplied by a
# power of two (output_scale) that puts its RMS 8 times below this (rounded to a power of two,
# so between 5.7 and 11 standard deviations): nothing saturates, and int8's rounding step stays
# a small part of the value.
_NARROW_LARGEST = {**{name: largest for name, (_, _, largest) in MINIFLOAT.items()},
                   "int8": 127.0}
_NARROW_HEADROOM = 8.0

# Rounding the operands and the result costs about one unit each; a few units of slack keep honest
# algorithms in, while any indexing bug (errors of order 1e-1) stays far out.
_OPERAND_UNITS = 8.0
# Sequential float accumulation of L terms drifts like sqrt(L) units (random-sign data).
_ACCUMULATION_UNITS = 2.0
# A recurrence stores its state at the precision after every step and reads it back in the next,
# so that rounding walks over the chain of steps (seq_len x layers) like an accumulation, in
# units of the storage's rounding rather than the accumulator's. On an H200, PyTorch's GRU
# without cuDNN and a plain loop (2816 units, fp16) erred 0.0029, 0.0041 and 0.0057 at 375, 750
# and 1,500 steps (sqrt(steps) exactly; 0.30 units) and cuDNN's, which carries the state
# wider, 0.00046 at each; a 150-step LSTM's native path 0.0019 (0.32 units). One unit leaves 3x
# (evidence/logs/issue40-stop59-nvidia-h200-2026-11-28.txt). A tensor-float precision (tf32)
# stores its state in fp32, so the walk is in fp32's units there. The walk never widens a
# tolerance past _WIDEST_CONDITIONED, so a bug's 1e-1 stays wrong: at bf16 that is reached from
# ~25 steps, and an honest bf16 recurrence of 1,500 steps (an estimated 0.045 by the fp16
# figures) is near it.
_CHAIN_UNITS = 1.0
# An 8-bit result is rounded once, from exact operands: no element is off by more than one unit,
# and over many elements the L2 error is about a third of one (measured in tests). 8 units of
# fp8 would be 0.5, loose enough to pass a result off by a factor of 1.5; 1.5 units is not.
_NARROW_OUTPUT_UNITS = 1.5
# The tolerance above is calibrated on random normal data, where an output of L terms is about
# as large as the root of the sum of its terms' squares (reference.term_spread), the scale of an
# honest sum's rounding error. Data whose terms cancel more (a 1-element dw of a few large terms,
# found by hypothesis) leave any honest float sum a larger relative error. A float64 reference
# carries its own rounding, about this many units of float64 times sqrt(L) times that spread: a
# result no larger is 0 within the reference's accuracy (an FMA sum of exactly cancelling terms
# reads 5e-23, not 0).
_REFERENCE_UNITS = 8.0
# An indexing bug (a sample skipped, a tap misplaced) errs by 1e-1 or more. The condition never
# widens a tolerance past half that, so such a result stays wrong on any data: where the terms
# cancel so much that an honest result may err more, the data cannot tell rounding from a bug
# (for fp32, terms cancelling 10,000s of times more than random data's).
_WIDEST_CONDITIONED = 0.05
# A result that depends on which side of a kink its inputs fall (the gradients of a ReLU
# recurrence: a unit's derivative is 0 or 1) is no continuous function of the rounding: a
# pre-activation within rounding of 0 takes either side, a fraction ~u of the units, and each
# flip moves the gradients it feeds by a whole unit's contribution, so the error grows like
# sqrt(u), not u. DeepBench's ReLU RNN (256 units, 25 steps, batch 16) on an H100: cuDNN, PyTorch
# without cuDNN and a plain loop alike erred 1.2-1.7% at fp16 (sqrt(u) 2.2%), 3.2-3.9% at bf16
# (6.2%) and 1.7-1.9% at tf32 (2.2%) (evidence/logs/rnn-quick-gpu-613ad6f-...log.gz). A bug
# errs by 1e-1 or more: at bf16 this tolerance (9.4%) comes near that, and the layer's fp32,
# tf32 and fp16 rows (3.7e-4, 3.3%, 3.3%) are the ones that catch it.
_KINK_UNITS = 1.5


def element_bytes(name: str) -> int:
    return TABLE[name].element_bytes


def widest_bytes(name: str) -> int:
    """Bytes per element of the widest buffer a point at `name` holds: its operands or one of
    its results (an fp8 point's fp32 dw, an int8 point's fp32 y)."""
    return max(element_bytes(n) for n in (name, *dict(TABLE[name].outputs).values()))


def output_precision(name: str, direction: str, asked: str | None = None) -> str | None:
    """The precision the result of `direction` is written in at precision `name`: `asked` (a
    point's output, one of offered_outputs), else the precision's own (the same one but for the
    quantized formats); None where that direction does not exist (int8 bwd)."""
    p = TABLE[name]
    if not p.quantized:
        return name
    default = dict(p.outputs).get(direction)
    return asked if asked is not None and default is not None else default


def offered_outputs(name: str, direction: str) -> tuple[str, ...]:
    """The result precisions `direction` can be asked in at precision `name`, its own first."""
    default = output_precision(name, direction)
    if default is None:
        return ()
    return (default, *(TABLE[name].forward_outputs if direction == "fwd" else ()))


def is_narrow(name: str | None) -> bool:
    """Whether results written in `name` need a scale to fit (the 8-bit types; None, no
    result at all, does not)."""
    return name in _NARROW_LARGEST


def output_scale(name: str, output: str | None, reduction_length: int) -> float:
    """The power of two a result written in `output` is multiplied by before it is rounded (1
    for a result that is not 8-bit). The result's expected RMS is the product of the operands'
    (data_scale each) times sqrt(reduction length); a power of two scales exactly, so the
    scaled result's only error is its rounding, and dividing by the scale undoes the rest."""
    if output is None or not is_narrow(output):
        return 1.0
    expected = TABLE[name].data_scale**2 * max(reduction_length, 1)**0.5
    target = _NARROW_LARGEST[output] / _NARROW_HEADROOM
    return 2.0 ** round(math.log2(target / expected))


def refusal(name: str, direction: str) -> str | None:
    """Why `direction` cannot run at precision `name` on any backend, or None."""
    if output_precision(name, direction) is None:
        return (f"{name} is forward-only (cuDNN's integer convolutions have no "
                f"{direction}); measure {direction} at fp16 or fp8")
    return None


def condition(result_norm: float, spread_norm: float) -> float:
    """How many times more the exact result's terms cancel than on the calibration data (the
    factor the tolerance is multiplied by): the terms' spread (reference.term_spread) over the
    result; at least 1, so data that cancels less keeps the tolerance as it is. 1 for a result
    that is 0 (`is_zero`): its error is measured against the spread instead (verdict.judge), a
    ratio to 0 would accept anything."""
    if result_norm <= 0:
        return 1.0
    return max(1.0, spread_norm / result_norm)


def is_zero(result_norm: float, spread_norm: float, reduction_length: int) -> bool:
    """Whether an exact result of this norm is 0 within the float64 reference's own rounding."""
    return result_norm <= (_REFERENCE_UNITS * 2.0**-53 * max(reduction_length, 1)**0.5
                           * spread_norm)


def tolerance(name: str, reduction_length: int, error_factor: float = 1.0,
              direction: str = "fwd", output: str | None = None,
              result_rms: float | None = None, conditioned: float = 1.0,
              kinked: bool = False, chain: int = 1) -> float:
    """Largest relative L2 error accepted for an algorithm run at precision `name` (result
    asked in `output`, None: its own; `result_rms`: the RMS of the scaled exact result, for an
    int8 one; `conditioned`: the data's condition factor, see condition). The first term is
    the rounding of the data on its way through (tf32's operands) and of the result: the
    result's precision for the quantized formats, whose operands are exact. An 8-bit result's
    rounding is the type's, whatever the algorithm: the algorithm's error factor multiplies the
    rest. The condition widens what is relative to the terms (operand and product rounding,
    accumulation), up to _WIDEST_CONDITIONED, not a quantized result's own rounding, which is
    relative to the result. `kinked`: the result has a kink's error (_KINK_UNITS), the least
    it is given. `chain`: the steps that each store a state the next reads (_CHAIN_UNITS)."""
    p = TABLE[name]
    of_result = 0.0
    of_terms = _OPERAND_UNITS * p.operand_roundoff * error_factor
    if p.quantized:
        result = output_precision(name, direction, output) or "fp32"
        of_result = _result_rounding(result, result_rms) * (1.0 if is_narrow(result)
                                                             else error_factor)
        of_terms = 0.0
    accumulation = p.accumulator_roundoff * reduction_length**0.5
    if p.promotion_length:             # short chains at accumulator_roundoff, summed in fp32
        accumulation = (p.accumulator_roundoff * min(reduction_length, p.promotion_length)**0.5
                        + TABLE["fp32"].accumulator_roundoff * reduction_length**0.5)
    of_terms += _ACCUMULATION_UNITS * accumulation * error_factor
    if chain > 1:
        state = TABLE["fp32"] if p.tensor_float else p
        walked = of_terms + _CHAIN_UNITS * state.operand_roundoff * chain**0.5 * error_factor
        of_terms = max(of_terms, min(walked, _WIDEST_CONDITIONED))
    smooth = of_result + max(of_terms, min(of_terms * conditioned, _WIDEST_CONDITIONED))
    return max(smooth, _KINK_UNITS * p.operand_roundoff ** 0.5) if kinked else smooth


def _result_rounding(result: str, result_rms: float | None = None) -> float:
    """The tolerance's rounding term for a quantized point's result written in `result`: a few
    units of a wide type; 1.5 units of an 8-bit one, whose unit is its unit roundoff (fp8) or,
    for int8, the half step relative to the scaled result's RMS (`result_rms`; without it the
    smallest RMS output_scale aims at, which zero padding can undercut at the borders)."""
    if not is_narrow(result):
        return _OPERAND_UNITS * TABLE[result].operand_roundoff
    if result in MINIFLOAT:
        return _NARROW_OUTPUT_UNITS * TABLE[result].operand_roundoff
    rms = result_rms or _NARROW_LARGEST[result] / _NARROW_HEADROOM / 2**0.5
    return _NARROW_OUTPUT_UNITS * 0.5 / rms


def delivered(asked: str, rel_error: float, reduction_length: int,
              error_factor: float, direction: str = "fwd",
              output: str | None = None, result_rms: float | None = None,
              conditioned: float = 1.0, kinked: bool = False, chain: int = 1) -> str | None:
    """What the accuracy shows was computed: the asked precision, tf32 for fp32 data computed on
    tensor cores, or None when the result is wrong even for that."""
    if rel_error <= tolerance(asked, reduction_length, error_factor, direction, output,
                              result_rms, conditioned, kinked, chain):
        return asked
    lowered = _tensor_float_of(asked)
    if lowered and rel_error <= tolerance(lowered, reduction_length, error_factor, direction,
                                          conditioned=conditioned, kinked=kinked, chain=chain):
        return lowered
    return None


def _tensor_float_of(name: str) -> str | None:
    """The tensor-core format that data of precision `name` may be computed at unasked (fp32:
    tf32), i.e. a tensor-float precision with the same storage and element size."""
    asked = TABLE[name]
    if asked.tensor_float or asked.quantized:
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
    if name == "int8":
        # symmetric: -128 is left out so that negating a value never overflows
        return np.clip(np.round(array), -127, 127).astype(np.float64)
    if name in MINIFLOAT:
        return _round_to_minifloat(np.asarray(array, dtype=np.float64), *MINIFLOAT[name])
    return array.astype(TABLE[name].storage).astype(np.float64)


def _round_to_minifloat(values: np.ndarray, mantissa_bits: int, min_exponent: int,
                        largest: float) -> np.ndarray:
    """Round-to-nearest-even to a small float format (subnormals below 2^min_exponent), with
    saturation at the largest finite value, as float64. The spacing of the values around x is
    2^(e - mantissa_bits) with e = x's binade exponent, no smaller than min_exponent; dividing by
    a power of two is exact, so np.round (half to even) does the rounding itself."""
    _, exponent = np.frexp(values)               # values = m * 2^exponent, 0.5 <= |m| < 1
    spacing = np.ldexp(1.0, np.maximum(exponent - 1, min_exponent) - mantissa_bits)
    return np.clip(np.round(values / spacing) * spacing, -largest, largest)


def _round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bfloat16, kept in float32 (NumPy has no bfloat16 type)."""
    bits = values.view(np.uint32).astype(np.uint64)
    rounding = 0x7FFF + ((bits >> 16) & 1)
    rounded = ((bits + rounding) >> 16 << 16).astype(np.uint32)
    return rounded.view(np.float32)
