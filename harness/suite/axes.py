"""The sweep axes the suite file and the command line both set (directions, precisions, layouts,
ops, outputs; workspace limits; thread counts), checked alike; `indexed` says whether a bad item
is named by its place in a list (a file's `sweep.precisions[1]`) or not (a repeatable flag)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.suite.checks import (Invalid, SuiteError, checked_list, checked_positive_int,
                                  checked_unique_list, did_you_mean, is_int, kind_of, parse_size,
                                  show_size)
from harness.threads import ALL as ALL_THREADS


def checked_choices(value: Any, where: str, allowed: Sequence[str], what: str,
                    indexed: bool = True) -> tuple[str, ...]:
    items = checked_unique_list(value, where, indexed)
    for index, item in enumerate(items):
        spot = f"{where}[{index}]" if indexed else where
        if not isinstance(item, str) or item not in allowed:
            raise Invalid(spot, f"unknown {what} {item!r}{did_you_mean(item, allowed)}; "
                                f"expected one of {', '.join(allowed)}")
    return tuple(items)


def checked_workspace_limits(value: Any, where: str,
                             indexed: bool = True) -> tuple[int | None, ...]:
    items = checked_list(value, where, allow_empty=False)
    limits: list[int | None] = []
    for index, item in enumerate(items):
        spot = f"{where}[{index}]" if indexed else where
        limit = _size(item, spot)
        if limit in limits:
            raise Invalid(spot, f"{item!r} repeats an earlier limit ({show_size(limit)})")
        limits.append(limit)
    return tuple(limits)


def checked_threads(value: Any, where: str, indexed: bool = True) -> tuple[int, ...]:
    """Thread counts for CPU points: positive integers, or "all" (the libraries' default)."""
    counts: list[int] = []
    for index, item in enumerate(checked_unique_list(value, where, indexed)):
        spot = f"{where}[{index}]" if indexed else where
        if isinstance(item, str) and item.strip().lower() == "all":
            counts.append(ALL_THREADS)
        elif isinstance(item, str) and item.strip().isdigit():
            counts.append(checked_positive_int(int(item), spot))
        elif is_int(item):
            counts.append(checked_positive_int(item, spot))
        else:
            raise Invalid(spot, f"expected a thread count or 'all', got {kind_of(item)} {item!r}")
    if len(set(counts)) < len(counts):
        raise Invalid(where, "a thread count is given twice")
    return tuple(counts)


# Results store the limit as int64; a larger limit than 8 EiB means unlimited anyway.
_LARGEST_LIMIT = 2**63 - 1


def _size(item: Any, where: str) -> int | None:
    if item is None:
        return None
    if is_int(item):
        if item < 0:
            raise Invalid(where, f"{item!r} is negative; a workspace limit is a byte count")
        size = item
    elif isinstance(item, str):
        try:
            size = parse_size(item)
        except SuiteError as error:
            raise Invalid(where, str(error)) from None
    else:
        raise Invalid(where, f"expected a byte count or a size such as '64MiB', got "
                             f"{kind_of(item)} {item!r}")
    if size is not None and size > _LARGEST_LIMIT:
        raise Invalid(where, f"{item!r} is more than 8 EiB; say 'unlimited'")
    return size
