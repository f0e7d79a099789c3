"""The value checkers shared by the suite file (loader) and the command line (overrides): each
names where a value came from (a file entry or a flag) and the rule it broke, by raising Invalid;
sizes such as "64MiB"; SuiteError, what a bad suite or override raises."""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

from harness.sweep import MAX_GPU_PROCESSES, Sweep
from harness.workspace_limit import limit_text

_UNLIMITED_WORDS = ("unlimited", "none", "inf")
_SIZE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")
# A suite name becomes part of file names: one plain path component, never "..", "/" or "\\".
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


class SuiteError(ValueError):
    """A suite file or override that cannot be used; the message names where and what."""

    def __init__(self, message: str, *, file: str | None = None, entry: str | None = None):
        super().__init__(message)
        self.file = file
        self.entry = entry


class Invalid(Exception):
    """Raised by the checkers below; the loader and the overrides turn it into a SuiteError that
    names the file or the flag, so no caller outside harness.suite ever sees it."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where


def parse_size(text: str) -> int | None:
    """Bytes from "0", "65536", "64MiB", "1.5GiB", "100MB" (SI); None for "unlimited"."""
    cleaned = text.strip().lower()
    if cleaned in _UNLIMITED_WORDS:
        return None
    match = _SIZE.fullmatch(cleaned)
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise SuiteError(f"invalid size {text!r}; expected a byte count such as 0, 65536, "
                         "64MiB, 1GiB or 'unlimited'")
    value = Fraction(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if value.denominator != 1:
        raise SuiteError(f"invalid size {text!r}: {float(value)} is not a whole number of bytes")
    return int(value)


def show_size(limit: int | None) -> str:
    # with exact bytes: two spellings of one limit ("64MiB", 67108864) must read as one number
    text = limit_text(limit)
    return text if limit is None else f"{text} = {limit} bytes"


def check_keys(table: dict[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            spot = f"{where}.{key}" if where else key
            raise Invalid(spot, f"unknown key {key!r}{did_you_mean(key, allowed)}; expected "
                                f"one of {', '.join(allowed)}")


def checked_table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(where, f"expected a table, got {kind_of(value)} {value!r}")
    return value


def checked_list(value: Any, where: str, allow_empty: bool = False) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise Invalid(where, f"expected a list, got {kind_of(value)} {value!r}")
    if not value and not allow_empty:
        raise Invalid(where, "is empty; give at least one value")
    return list(value)


def checked_unique_list(value: Any, where: str, indexed: bool = True) -> list[Any]:
    items = checked_list(value, where)
    for index, item in enumerate(items):
        if item in items[:index]:
            spot = f"{where}[{index}]" if indexed else where
            raise Invalid(spot, f"{item!r} is listed twice")
    return items


def checked_choice(value: Any, where: str, allowed: Sequence[str], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise Invalid(where, f"unknown {what} {value!r}{did_you_mean(value, allowed)}; "
                             f"expected one of {', '.join(allowed)}")
    return value


def checked_text(value: Any, where: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise Invalid(where, f"expected a string, got {kind_of(value)} {value!r}")
    if not allow_empty and not value.strip():
        raise Invalid(where, f"{value!r} is empty; expected a name")
    return value


def plain_from_file(stem: str) -> str:
    """A file called 'my suite.toml' is suite 'my-suite': a name the user never typed is made
    plain rather than refused."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).replace("..", "-").lstrip(".-")[:100] or "suite"


def checked_plain_name(value: Any, where: str) -> str:
    name = checked_text(value, where)
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise Invalid(where, f"{name!r} is not a plain name: use letters, digits, '_', '-' and "
                             "'.', not starting with '.' or '-', no '..', at most 100 "
                             "characters; it becomes part of file names")
    return name


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_int_at_least(value: Any, where: str, lowest: int) -> int:
    if not is_int(value) or value < lowest:
        rule = "a positive integer" if lowest == 1 else f"an integer >= {lowest}"
        raise Invalid(where, f"{value!r} must be {rule}")
    return value


def checked_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Invalid(where, f"expected true or false, got {kind_of(value)} {value!r}")
    return value


def checked_positive_int(value: Any, where: str) -> int:
    return checked_int_at_least(value, where, 1)


def checked_cpu_rounds(value: Any, where: str) -> int:
    return _replicates(value, where, "rounds per CPU point")


def checked_gpu_processes(value: Any, where: str) -> int:
    return _replicates(value, where, "worker processes per GPU")


def _replicates(value: Any, where: str, what: str) -> int:
    """A count of replicates a point is timed in (GPU processes, CPU rounds)."""
    count = checked_positive_int(value, where)
    if count > MAX_GPU_PROCESSES:
        raise Invalid(where, f"{count} {what} is more than the {MAX_GPU_PROCESSES} allowed")
    return count


def checked_positive_number(value: Any, where: str) -> float:
    ok = (is_int(value) or isinstance(value, float)) and math.isfinite(value) and value > 0
    if not ok:
        raise Invalid(where, f"{value!r} must be a positive number")
    return float(value)


# The longest build budget taken (a day): a wait the pool can poll for (Connection.poll overflows
# at about 2.1e6 s), and longer than any build a sweep should wait on.
MOST_BUILD_BUDGET_S = 86_400.0


def checked_build_budget(value: Any, where: str) -> float:
    """Seconds a run-time kernel build may take (TimingOptions.build_budget_s)."""
    seconds = checked_positive_number(value, where)
    if seconds > MOST_BUILD_BUDGET_S:
        raise Invalid(where, f"{value!r} s is more than a day ({MOST_BUILD_BUDGET_S:g} s)")
    return seconds


def checked_fraction(value: Any, where: str, example: str = "0.01 for 1%") -> float:
    number = checked_positive_number(value, where)
    if number >= 1:
        raise Invalid(where, f"{value!r} must be a fraction between 0 and 1, e.g. {example}")
    return number


def kind_of(value: Any) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list",
             dict: "table"}
    return names.get(type(value), type(value).__name__)


def did_you_mean(word: Any, options: Iterable[str]) -> str:
    if not isinstance(word, str):
        return ""
    options = list(options)
    same_letters = [option for option in options if option.lower() == word.lower()]
    close = same_letters or difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def checked_outputs(sweep: Sweep, where: str) -> Sweep:
    """The sweep, if every output it asks for is written by one of its precisions: one that
    none writes is a mistake (the axis would change nothing), not a no-op."""
    unoffered = sweep.unoffered_outputs()
    if unoffered:
        raise Invalid(where, f"no precision asked ({', '.join(sweep.precisions)}) writes "
                             f"{unoffered[0]} results in the directions asked; outputs other "
                             f"than auto are for fp8 (fwd: bf16, fp32, its own fp8) and int8 "
                             f"(fwd: int8)")
    return sweep


def field_table(entry: dict[str, Any], allowed: Sequence[str], required: Sequence[str],
                where: str, batch: int | None, what: str) -> dict[str, Any]:
    """A layer table's fields: only `allowed` keys, the [sweep] batch where it gives none, and
    every `required` key present (Invalid naming the first missing one, and `what` needs)."""
    check_keys(entry, allowed, where)
    fields = dict(entry)
    if batch is not None:
        fields.setdefault("batch", batch)
    missing = [key for key in required if key not in fields]
    if missing:
        raise Invalid(f"{where}.{missing[0]}", f"missing; {what} needs {', '.join(required)}")
    return fields
