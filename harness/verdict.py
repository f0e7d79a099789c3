"""How an algorithm's output is judged against the float64 reference: its relative L2 error, the
tolerance of its precision (harness/precision.py) scaled by how much the data's terms cancel,
and the precision its accuracy shows was delivered. The executor and the tests judge through
judge(), so a row and a test never disagree on what passes.

The condition needs a second reference, of the squared operands (reference.term_spread), as
dear as the first (float64 on the CPU). It is computed only where it can change the verdict: the
condition factor is at least 1, so an output within the plain tolerance passes whatever it is,
and only an output outside it (or any output of an exact result of norm 0) pays for it. Such a
row's `tolerance` is the scaled one it was judged by; any other row's is the plain one, which it
met.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import precision, reference
from harness.problem import ConvProblem


@dataclass(frozen=True)
class Judged:
    """What the check found: the errors, the tolerance the output was held to, the condition
    factor in it (1: the plain tolerance) and the precision delivered (None: wrong)."""
    rel_error: float
    max_abs_error: float
    tolerance: float
    conditioned: float
    delivered: str | None


@dataclass(frozen=True)
class Standard:
    """What the tolerance depends on besides the data (see precision.tolerance)."""
    precision: str
    reduction_length: int
    error_factor: float = 1.0
    direction: str = "fwd"
    output: str | None = None
    result_rms: float | None = None
    kinked: bool = False        # the result jumps where an input crosses a kink (ReLU's)
    chain: int = 1              # steps that each store a state the next reads (a recurrence)

    def tolerance(self, conditioned: float) -> float:
        return precision.tolerance(self.precision, self.reduction_length, self.error_factor,
                                   self.direction, self.output, self.result_rms, conditioned,
                                   self.kinked, self.chain)

    def delivered(self, rel_error: float, conditioned: float) -> str | None:
        return precision.delivered(self.precision, rel_error, self.reduction_length,
                                   self.error_factor, self.direction, self.output,
                                   self.result_rms, conditioned, self.kinked, self.chain)


def judge(output: Any, expected: Any, scales: Callable[[], reference.TermScales],
          standard: Standard, xp: Any = np) -> Judged:
    """`output` against the exact `expected`; `scales()` gives reference.term_scales for the
    same point, asked for only where it can change the verdict: an output outside the plain
    tolerance, or any output of an exact result of norm 0 (whose relative error is an absolute
    one, which would pass a wrong result on small data)."""
    result_norm = reference.l2_norm(expected, xp)
    rel, max_abs = reference.relative_errors(output, expected, xp, result_norm)
    plain = standard.delivered(rel, 1.0)
    if rel == float("inf") or (plain == standard.precision and result_norm > 0):
        return Judged(rel, max_abs, standard.tolerance(1.0), 1.0, plain)
    terms = scales()
    if precision.is_zero(result_norm, terms.spread_norm, standard.reduction_length):
        rel = _error_of_zero(output, expected, terms, xp)
        return Judged(rel, max_abs, standard.tolerance(1.0), 1.0, standard.delivered(rel, 1.0))
    conditioned = precision.condition(result_norm, terms.spread_norm)
    return Judged(rel, max_abs, standard.tolerance(conditioned), conditioned,
                  standard.delivered(rel, conditioned))


def _error_of_zero(output: Any, expected: Any, terms: reference.TermScales, xp: Any) -> float:
    """The relative error of an output whose exact result is 0: its error's norm over the terms'
    spread (the norm a result of those terms has on random data). Where no term reads data
    (every product has a padding factor), over the operands' norms: an algorithm that
    transforms whole operands (FFT) leaves rounding of the outputs it computes and crops on
    these too, bounded by that scale (an FFT's normwise error bound), while a misplaced value
    (order sqrt(L) for random data) still errs far over any tolerance."""
    error = reference.l2_norm(xp.asarray(output, dtype=xp.float64) - expected, xp)
    scale = terms.spread_norm or terms.operand_norms
    return error / scale if scale > 0 else float("inf")


def check(problem: ConvProblem, direction: str, data: reference.ProblemData, output: Any,
          name: str, error_factor: float = 1.0, xp: Any = np) -> Judged:
    """`output` of a plain convolution at precision `name` judged as the executor judges it,
    the reference computed here (for tests and scripts that run an algorithm themselves)."""
    expected = reference.reference(problem, direction, data, xp)
    standard = Standard(name, problem.reduction_length(direction), error_factor, direction)
    return judge(output, expected,
                 lambda: reference.term_scales(problem, direction, data, expected, xp),
                 standard, xp)
