"""A workspace limit's one encoding and its one text: bytes, or None for no limit; stored in the
`workspace_limit` column as int64 with -1 for "unlimited" (NaN would vanish in groupbys)."""
from __future__ import annotations

import math
from typing import Any

UNLIMITED_BYTES = -1


def limit_to_column(limit: int | None) -> int:
    """A workspace limit as the `workspace_limit` column stores it (None, no limit: -1)."""
    return UNLIMITED_BYTES if limit is None else int(limit)


def limit_from_column(value: Any) -> int | None:
    """The limit a `workspace_limit` cell means: bytes, or None for no limit (-1 or empty)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or _is_na(value):
        return None
    return None if int(value) < 0 else int(value)


def limit_text(value: Any) -> str:
    """A limit (bytes, None, or a column cell) as people read it: "unlimited", "64 MiB", "0 B"."""
    limit = limit_from_column(value)
    if limit is None:
        return "unlimited"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size:
            return f"{_three_digits(limit / size)} {unit}"
    return f"{limit} B"


def _three_digits(value: float) -> str:
    """1023 -> "1023", 1.5 -> "1.5", 64.0001 -> "64": whole numbers exact, others to three
    significant digits, never in exponent form ("1e+03")."""
    if value == int(value):
        return str(int(value))
    decimals = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def _is_na(value: Any) -> bool:
    # pandas' NA without importing pandas here (this module sits below everything else)
    return type(value).__name__ == "NAType"
