"""Student's t distribution with NumPy's standard library alone (scipy is a test extra):
the quantile the suite interval of `compare` uses (an expansion, within 0.3% where it is used),
and the exact survival function and its inverse the paired A/B test uses
(harness/compare/paired.py: 2-20 rounds, where an expansion is not good enough)."""
from __future__ import annotations

import math
from statistics import NormalDist


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion (Abramowitz & Stegun 26.7.5), so that
    NumPy is enough: within 0.3% of the exact value for df >= 7 and 0.5 <= p <= 0.9995, the
    range MIN_ROWS and the usual confidences need."""
    z = NormalDist().inv_cdf(p)
    terms = ((z ** 3 + z) / 4,
             (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(term / df ** (k + 1) for k, term in enumerate(terms))


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with a whole number `df` of degrees of freedom, exact: the finite
    series of Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df) for P(|T| <= t), so that
    NumPy is enough (the paired A/B test, harness/compare/paired.py, has few rounds: 5-20)."""
    if df < 1:
        raise ValueError(f"df={df!r}: Student's t needs at least one degree of freedom")
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, total, term = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2:
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total
                                         if df > 1 else 0.0))
    else:
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = math.sin(theta) * total
    upper = max(0.0, (1.0 - inside) / 2.0)
    return upper if t >= 0 else 1.0 - upper


def t_isf(p: float, df: int) -> float:
    """The t with P(T > t) = p (0 < p < 1), by bisection on t_sf: exact for the few degrees of
    freedom where t_quantile's expansion is not."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p!r} must lie strictly between 0 and 1")
    low, high = -1.0, 1.0
    while t_sf(low, df) < p:
        low *= 2.0
    while t_sf(high, df) > p:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_sf(middle, df) > p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, abs(middle)):
            break
    return (low + high) / 2.0
