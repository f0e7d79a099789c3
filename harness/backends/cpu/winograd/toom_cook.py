"""Winograd's minimal filtering matrices F(m, r), built exactly (fractions) by the Toom-Cook
construction for any output size and interpolation points (algorithm.py uses them)."""
from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

Matrix = list[list[Fraction]]


def _poly_mul(a: Sequence[Fraction], b: Sequence[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def toom_cook(outputs: int, taps: int, points: Sequence[Fraction]) -> tuple[Matrix, Matrix, Matrix]:
    """(A^T, G, B^T) of the minimal 1-D correlation F(outputs, taps), y = A^T[(G g) (.) (B^T d)].

    Correlation is the transpose of polynomial multiplication, which evaluates both factors at
    alpha = outputs + taps - 1 points (the given finite ones and infinity) and interpolates:
    A^T is the transposed evaluation matrix of the outputs' polynomial, G that of the filter's,
    B^T the transposed Lagrange interpolation. The Lagrange denominators f_j are moved from B^T
    into G (as in Lavin & Gray), which leaves B^T with the coefficients of
    N_j(x) = prod_{l != j} (x - a_l) and, for infinity, of M(x) = prod_l (x - a_l).
    """
    alpha = outputs + taps - 1
    if len(points) != alpha - 1 or len(set(points)) != len(points):
        raise ValueError(f"F({outputs},{taps}) needs {alpha - 1} distinct finite points")
    at = [[a**i for a in points] + [Fraction(int(i == outputs - 1))] for i in range(outputs)]
    g, bt = [], []
    for j, a in enumerate(points):
        others = [b for i, b in enumerate(points) if i != j]
        numerator, denominator = [Fraction(1)], Fraction(1)
        for b in others:
            numerator = _poly_mul(numerator, [-b, Fraction(1)])
            denominator *= a - b
        g.append([a**k / denominator for k in range(taps)])
        bt.append(numerator + [Fraction(0)] * (alpha - len(numerator)))
    g.append([Fraction(int(k == taps - 1)) for k in range(taps)])
    everything = [Fraction(1)]
    for b in points:
        everything = _poly_mul(everything, [-b, Fraction(1)])
    bt.append(everything)
    return at, g, bt


def as_array(matrix: Matrix) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in matrix])


def matrices(m: int, points: Sequence[Fraction]) -> dict[str, np.ndarray]:
    """Forward F(m, 3) and filter-gradient F(3, m) matrices on the same points (same B^T)."""
    at, g, bt = toom_cook(m, 3, points)
    at_f, g_f, bt_f = toom_cook(3, m, points)
    assert bt_f == bt
    return {"at": as_array(at), "g": as_array(g), "bt": as_array(bt), "at_f": as_array(at_f),
            "g_f": as_array(g_f)}
