"""Suite files (TOML) become a `Sweep`; every mistake in one is a `SuiteError` naming the file, the
entry, the key and the bad value. Nothing here runs anything or knows the backend registry: the
runner checks backend and algorithm names, this module only checks that they are names.

The format (suites/quick.toml shows every key):

    name = "quick"                       # optional; defaults to the file name; a plain name
                                         # (letters, digits, _ - .), since it names files
    description = "what the suite is for"   # optional
    layers = [                           # required, at least one; three forms, freely mixed:
      'mb2ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3"',   # a benchdnn descriptor
      { deepbench = [700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2], name = "deepbench:train_01" },
      { batch = 2, in_channels = 64, in_h = 56, in_w = 56, out_channels = 64,
        kernel_h = 3, kernel_w = 3, pad_top = 1, pad_left = 1, name = "x", multiplicity = 3 },
    ]
    # (TOML 1.0 wants each inline table on one line; `[[layers]]` tables work as well.)
    # Field tables use ConvProblem's names; pad_bottom/pad_right default to pad_top/pad_left, and
    # batch may be left out when [sweep] sets it. A deepbench table takes name and multiplicity.

    [sweep]                              # every key optional; defaults are Sweep's
    directions = ["fwd", "bwd_data", "bwd_filter"]
    precisions = ["fp32"]                # fp32, tf32, fp16, bf16, fp64
    layouts = ["NCHW"]                   # NCHW, NHWC
    workspace_limits = ["unlimited"]     # bytes as integers, or "0", "64MiB", "1GiB", "unlimited"
    batch = 2                            # replaces every layer's batch
    [[sweep.backends]]                   # one table per backend, in run order
    name = "cpu"
    algorithms = ["direct", "im2col"]    # optional; left out = all of the backend's algorithms
    optional = false                     # optional = true: skipped (with a note) where unavailable
    # (shorthand: sweep.backends = ["cpu", "cudnn"] for backends with every algorithm, required)

    [timing]                             # every key optional; defaults are TimingOptions'
    mode = "warm"                        # "warm" or "cold" (L2 flushed before each sample)
    budget_ms = 40                       # time budget per point
    min_samples = 3
    max_samples = 100
    noise_target = 0.01                  # relative standard error of the median to stop at
    warmup = 1                           # untimed runs before timing

    [compare]
    threshold = 0.05                     # fractional slowdown that counts as a regression

Axis lists must be non-empty and free of duplicates; unknown keys are errors everywhere.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.problem import ConvProblem, ProblemError, parse_benchdnn, parse_deepbench
from harness.sweep import (DIRECTIONS, GPU_TIMERS, LAYOUTS, MAX_GPU_PROCESSES, PRECISIONS,
                           TIMING_MODES, AlgorithmChoice, Sweep, TimingOptions)

SUITE_SUFFIX = ".toml"
# This module's own path, not harness.__file__: a stale editable install can load `harness` as a
# namespace package, whose __file__ is None.
REPO_SUITES = Path(__file__).resolve().parent.parent / "suites"

# The command-line flag behind each `sweep_with_overrides` argument, for error messages.
OVERRIDE_FLAGS = {
    "backends": "--backend", "algorithms": "--algorithm", "directions": "--direction",
    "precisions": "--precision", "layouts": "--layout", "batch": "--batch",
    "budget_ms": "--budget-ms", "workspace_limits": "--workspace-limit",
    "timing_mode": "--timing-mode", "gpu_timer": "--gpu-timer",
    "gpu_processes": "--gpu-processes",
}

_TOP_KEYS = ("name", "description", "layers", "sweep", "timing", "compare")
_SWEEP_KEYS = ("directions", "precisions", "layouts", "workspace_limits", "batch", "backends")
_BACKEND_KEYS = ("name", "algorithms", "optional")
_TIMING_KEYS = tuple(f.name for f in dataclasses.fields(TimingOptions))
_COMPARE_KEYS = ("threshold",)
_PROBLEM_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem))
_REQUIRED_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem)
                         if f.default is dataclasses.MISSING)
_DEEPBENCH_KEYS = ("deepbench", "name", "multiplicity")
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


class _Invalid(Exception):
    """Raised by the checkers below; turned into a SuiteError that names the file or the flag."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where


# ---- finding suites ---------------------------------------------------------------------------
def suite_dirs() -> list[Path]:
    """Where suite names are looked up: ./suites first (a user's own), then the repository's."""
    local = Path.cwd() / "suites"
    return [local] if local.resolve() == REPO_SUITES else [local, REPO_SUITES]


def available_suites(search_dirs: Sequence[Path] | None = None) -> list[str]:
    names = {p.stem for d in (search_dirs or suite_dirs()) if d.is_dir()
             for p in d.glob(f"*{SUITE_SUFFIX}")}
    return sorted(names)


def resolve_suite(name_or_path: str | Path, search_dirs: Sequence[Path] | None = None) -> Path:
    """The file for a suite name or path: an existing path wins, then `<name>.toml` by name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    text = str(name_or_path)
    if path.suffix == SUITE_SUFFIX or "/" in text or "\\" in text:
        raise SuiteError(f"{text}: no such suite file", file=text)
    for directory in search_dirs or suite_dirs():
        candidate = directory / f"{text}{SUITE_SUFFIX}"
        if candidate.is_file():
            return candidate
    known = available_suites(search_dirs)
    raise SuiteError(f"unknown suite {text!r}{_did_you_mean(text, known)}; available: "
                     f"{', '.join(known) or 'none'}", file=text)


def _display(path: Path) -> str:
    """The path as the user would type it: relative to the working directory where possible."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ---- loading ----------------------------------------------------------------------------------
def load_suite(name_or_path: str | Path, *, search_dirs: Sequence[Path] | None = None) -> Sweep:
    """The Sweep a suite file describes; `search_dirs` replaces the default name lookup."""
    path = resolve_suite(name_or_path, search_dirs)
    return parse_suite(_read_text(path), source=_display(path), default_name=path.stem)


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; SuiteError naming the file when it is unreadable or binary."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SuiteError(f"{_display(path)}: cannot read it: {error.strerror or error}",
                         file=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = data[error.start:error.start + 4]
        raise SuiteError(f"{_display(path)}: not a UTF-8 text file (byte {error.start} is "
                         f"{bad!r}); a suite file is TOML text", file=str(path)) from None


def parse_suite(text: str, source: str = "<suite>", default_name: str = "suite") -> Sweep:
    """A Sweep from suite text; `source` is the file name errors carry."""
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError) as error:
        # TOMLDecodeError is a ValueError; so is an integer of 4300+ digits, which tomllib
        # lets int() refuse; arrays nested thousands deep exhaust the recursion limit.
        what = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise SuiteError(f"{source}: not valid TOML: {what}", file=source) from None
    try:
        return _sweep_from_table(data, default_name)
    except _Invalid as error:
        raise SuiteError(f"{source}: {error}", file=source, entry=error.where) from None


def _sweep_from_table(data: dict[str, Any], default_name: str) -> Sweep:
    _check_keys(data, _TOP_KEYS, "")
    name = (_plain_name(data["name"], "name") if "name" in data
            else _plain_name(_plain_from_file(default_name), "name (from the file name)"))
    _text(data.get("description", ""), "description", allow_empty=True)
    axes = _table(data.get("sweep", {}), "sweep")
    _check_keys(axes, _SWEEP_KEYS, "sweep")
    batch = _positive_int(axes["batch"], "sweep.batch") if "batch" in axes else None
    if "layers" not in data:
        raise _Invalid("layers", "missing; a suite needs at least one layer")
    fields: dict[str, Any] = {
        "name": name,
        "problems": _layers(data["layers"], batch),
        "timing": _timing(_table(data.get("timing", {}), "timing")),
        "regression_threshold": _compare(_table(data.get("compare", {}), "compare")),
    }
    fields.update(_axes(axes))
    return Sweep(**fields)


def _axes(axes: dict[str, Any]) -> dict[str, Any]:
    """The Sweep fields [sweep] sets; absent keys keep Sweep's defaults."""
    fields: dict[str, Any] = {}
    for key, allowed, what in (("directions", DIRECTIONS, "direction"),
                               ("precisions", PRECISIONS, "precision"),
                               ("layouts", LAYOUTS, "layout")):
        if key in axes:
            fields[key] = _choices(axes[key], f"sweep.{key}", allowed, what)
    if "workspace_limits" in axes:
        fields["workspace_limits"] = _workspace_limits(axes["workspace_limits"],
                                                       "sweep.workspace_limits")
    if "backends" in axes:
        fields["backends"] = _backends(axes["backends"], "sweep.backends")
    return fields


# ---- layers -----------------------------------------------------------------------------------
def _layers(value: Any, batch: int | None) -> tuple[ConvProblem, ...]:
    entries = _list(value, "layers")
    problems: list[ConvProblem] = []
    for index, entry in enumerate(entries):
        where = f"layers[{index}]"
        problem = _layer(entry, where, batch)
        if not problem.name.isprintable():
            raise _Invalid(f"{where}.name", f"{problem.name!r} holds a control character or "
                                            "an unpaired surrogate; a layer name is printable text")
        if batch is not None and problem.batch != batch:
            problem = problem.with_batch(batch)
        if problem in problems:
            first = problems.index(problem)
            raise _Invalid(where, f"{problem.label!r} ({problem.short_shape}) repeats "
                                  f"layers[{first}]")
        problems.append(problem)
    return tuple(problems)


def _layer(entry: Any, where: str, batch: int | None) -> ConvProblem:
    try:
        if isinstance(entry, str):
            return parse_benchdnn(entry)
        if isinstance(entry, dict) and "deepbench" in entry:
            return _deepbench_layer(entry, where)
        if isinstance(entry, dict):
            return _field_layer(entry, where, batch)
    except ProblemError as error:
        raise _Invalid(where, str(error)) from None
    raise _Invalid(where, f"expected a benchdnn descriptor string or a table, got "
                          f"{_kind(entry)} {entry!r}")


def _deepbench_layer(entry: dict[str, Any], where: str) -> ConvProblem:
    _check_keys(entry, _DEEPBENCH_KEYS, where)
    fields = _list(entry["deepbench"], f"{where}.deepbench")
    for index, item in enumerate(fields):
        if not _is_int(item):
            raise _Invalid(f"{where}.deepbench[{index}]", f"expected an integer, got "
                                                         f"{_kind(item)} {item!r}")
    name = _text(entry.get("name", ""), f"{where}.name", allow_empty=True)
    multiplicity = _positive_int(entry.get("multiplicity", 1), f"{where}.multiplicity")
    return parse_deepbench(fields, name=name, multiplicity=multiplicity)


def _field_layer(entry: dict[str, Any], where: str, batch: int | None) -> ConvProblem:
    _check_keys(entry, _PROBLEM_FIELDS, where)
    fields = dict(entry)
    if batch is not None:
        fields.setdefault("batch", batch)
    missing = [key for key in _REQUIRED_FIELDS if key not in fields]
    if missing:
        raise _Invalid(f"{where}.{missing[0]}", f"missing; a layer table needs "
                                                f"{', '.join(_REQUIRED_FIELDS)}")
    for key, value in fields.items():
        if key == "name":
            _text(value, f"{where}.name", allow_empty=True)
        elif not _is_int(value):
            raise _Invalid(f"{where}.{key}", f"expected an integer, got {_kind(value)} {value!r}")
    # Padding stated on one side only almost always means the same on both sides.
    fields.setdefault("pad_bottom", fields.get("pad_top", 0))
    fields.setdefault("pad_right", fields.get("pad_left", 0))
    return ConvProblem(**fields)


# ---- sweep axes -------------------------------------------------------------------------------
def _choices(value: Any, where: str, allowed: Sequence[str], what: str,
             indexed: bool = True) -> tuple[str, ...]:
    items = _unique_list(value, where, indexed)
    for index, item in enumerate(items):
        spot = f"{where}[{index}]" if indexed else where
        if not isinstance(item, str) or item not in allowed:
            raise _Invalid(spot, f"unknown {what} {item!r}{_did_you_mean(item, allowed)}; "
                                 f"expected one of {', '.join(allowed)}")
    return tuple(items)


def _workspace_limits(value: Any, where: str, indexed: bool = True) -> tuple[int | None, ...]:
    items = _list(value, where, allow_empty=False)
    limits: list[int | None] = []
    for index, item in enumerate(items):
        spot = f"{where}[{index}]" if indexed else where
        limit = _size(item, spot)
        if limit in limits:
            raise _Invalid(spot, f"{item!r} repeats an earlier limit ({_show_size(limit)})")
        limits.append(limit)
    return tuple(limits)


def _size(item: Any, where: str) -> int | None:
    if item is None:
        return None
    if _is_int(item):
        if item < 0:
            raise _Invalid(where, f"{item!r} is negative; a workspace limit is a byte count")
        return item
    if isinstance(item, str):
        try:
            return parse_size(item)
        except SuiteError as error:
            raise _Invalid(where, str(error)) from None
    raise _Invalid(where, f"expected a byte count or a size such as '64MiB', got "
                          f"{_kind(item)} {item!r}")


def _backends(value: Any, where: str) -> tuple[AlgorithmChoice, ...]:
    entries = _list(value, where, allow_empty=False)
    choices: list[AlgorithmChoice] = []
    for index, entry in enumerate(entries):
        choice = _backend(entry, f"{where}[{index}]")
        if choice.backend in [c.backend for c in choices]:
            raise _Invalid(f"{where}[{index}].name", f"backend {choice.backend!r} is listed twice")
        choices.append(choice)
    return tuple(choices)


def _backend(entry: Any, where: str) -> AlgorithmChoice:
    if isinstance(entry, str):  # shorthand: "cpu" is {name = "cpu"}
        return AlgorithmChoice(_text(entry, where))
    table = _table(entry, where)
    _check_keys(table, _BACKEND_KEYS, where)
    if "name" not in table:
        raise _Invalid(f"{where}.name", "missing; every backend entry needs a name")
    name = _text(table["name"], f"{where}.name")
    algorithms = ()
    if "algorithms" in table:
        spot = f"{where}.algorithms"
        algorithms = tuple(_text(item, f"{spot}[{i}]")
                           for i, item in enumerate(_unique_list(table["algorithms"], spot)))
    optional = table.get("optional", False)
    if not isinstance(optional, bool):
        raise _Invalid(f"{where}.optional", f"expected true or false, got {_kind(optional)} "
                                            f"{optional!r}")
    return AlgorithmChoice(name, algorithms, optional)


# ---- timing and compare -----------------------------------------------------------------------
def _timing(table: dict[str, Any]) -> TimingOptions:
    _check_keys(table, _TIMING_KEYS, "timing")
    fields: dict[str, Any] = {}
    if "mode" in table:
        fields["mode"] = _choice(table["mode"], "timing.mode", TIMING_MODES, "timing mode")
    if "gpu_timer" in table:
        fields["gpu_timer"] = _choice(table["gpu_timer"], "timing.gpu_timer", GPU_TIMERS,
                                      "GPU timer")
    if "budget_ms" in table:
        fields["budget_ms"] = _positive_number(table["budget_ms"], "timing.budget_ms")
    if "gpu_processes" in table:
        fields["gpu_processes"] = _gpu_processes(table["gpu_processes"], "timing.gpu_processes")
    for key in ("min_samples", "max_samples"):
        if key in table:
            fields[key] = _positive_int(table[key], f"timing.{key}")
    if "warmup" in table:
        fields["warmup"] = _int_at_least(table["warmup"], "timing.warmup", 0)
    if "noise_target" in table:
        fields["noise_target"] = _fraction(table["noise_target"], "timing.noise_target")
    timing = TimingOptions(**fields)
    if timing.max_samples < timing.min_samples:
        raise _Invalid("timing.max_samples", f"{timing.max_samples} is less than min_samples="
                                             f"{timing.min_samples}")
    return timing


def _compare(table: dict[str, Any]) -> float:
    _check_keys(table, _COMPARE_KEYS, "compare")
    default = next(f.default for f in dataclasses.fields(Sweep)
                   if f.name == "regression_threshold")
    if "threshold" not in table:
        return default
    return _fraction(table["threshold"], "compare.threshold", example="0.05 for 5%")


# ---- overrides (command-line flags) -----------------------------------------------------------
def sweep_with_overrides(sweep: Sweep, *, backends: Sequence[str] | None = None,
                         algorithms: Sequence[str] | None = None,
                         directions: Sequence[str] | None = None,
                         precisions: Sequence[str] | None = None,
                         layouts: Sequence[str] | None = None, batch: int | None = None,
                         budget_ms: float | None = None,
                         workspace_limits: Sequence[int | str | None] | None = None,
                         timing_mode: str | None = None,
                         gpu_timer: str | None = None,
                         gpu_processes: int | None = None) -> Sweep:
    """The sweep with the command line's choices applied; None leaves a setting as the suite has
    it. Errors name the flag (OVERRIDE_FLAGS). Algorithms are `name` (every backend in the sweep)
    or `backend:name` (that backend only; a backend with qualified names ignores plain ones)."""
    try:
        return _apply_overrides(sweep, locals())
    except _Invalid as error:
        raise SuiteError(str(error), entry=error.where) from None


def _apply_overrides(sweep: Sweep, given: dict[str, Any]) -> Sweep:
    flag = OVERRIDE_FLAGS
    changes: dict[str, Any] = {}
    for key, allowed, what in (("directions", DIRECTIONS, "direction"),
                               ("precisions", PRECISIONS, "precision"),
                               ("layouts", LAYOUTS, "layout")):
        if given[key] is not None:
            changes[key] = _choices(given[key], flag[key], allowed, what, indexed=False)
    if given["workspace_limits"] is not None:
        changes["workspace_limits"] = _workspace_limits(given["workspace_limits"],
                                                        flag["workspace_limits"], indexed=False)
    choices = sweep.backends
    if given["backends"] is not None:
        choices = _override_backends(choices, given["backends"], flag["backends"])
    if given["algorithms"] is not None:
        choices = _override_algorithms(choices, given["algorithms"], flag["algorithms"])
    changes["backends"] = choices
    if given["batch"] is not None:
        changes["problems"] = _rebatch(sweep.problems, given["batch"], flag["batch"])
    changes["timing"] = _override_timing(sweep.timing, given)
    return dataclasses.replace(sweep, **changes)


def _override_backends(current: tuple[AlgorithmChoice, ...], names: Sequence[str],
                       where: str) -> tuple[AlgorithmChoice, ...]:
    """Named backends in the order given; a backend the suite lists keeps its algorithm list.
    Asked for by name, a backend is no longer optional: its absence must be reported."""
    by_name = {choice.backend: choice for choice in current}
    result = []
    for name in _unique_list(names, where, indexed=False):
        name = _text(name, where)
        choice = by_name.get(name, AlgorithmChoice(name))
        result.append(dataclasses.replace(choice, optional=False))
    return tuple(result)


def _override_algorithms(current: tuple[AlgorithmChoice, ...], names: Sequence[str],
                         where: str) -> tuple[AlgorithmChoice, ...]:
    plain: list[str] = []
    qualified: dict[str, list[str]] = {}
    known = [choice.backend for choice in current]
    for item in _unique_list(names, where, indexed=False):
        backend, _, algorithm = _text(item, where).rpartition(":")
        _text(algorithm, where)  # "cpu:" names no algorithm
        if not backend:
            plain.append(algorithm)
        elif backend not in known:
            raise _Invalid(where, f"{item!r} names backend {backend!r}, which is not in the "
                                  f"sweep (backends: {', '.join(known)}); add it with --backend")
        else:
            qualified.setdefault(backend, []).append(algorithm)
    result = []
    for choice in current:
        chosen = qualified.get(choice.backend) or plain
        result.append(dataclasses.replace(choice, algorithms=tuple(chosen)) if chosen else choice)
    return tuple(result)


def _rebatch(problems: tuple[ConvProblem, ...], batch: Any,
             where: str) -> tuple[ConvProblem, ...]:
    size = _positive_int(batch, where)
    result: list[ConvProblem] = []
    for problem in problems:
        changed = problem.with_batch(size)
        if changed in result:
            raise _Invalid(where, f"batch {size} makes layer {changed.label!r} appear twice")
        result.append(changed)
    return tuple(result)


def _override_timing(timing: TimingOptions, given: dict[str, Any]) -> TimingOptions:
    changes: dict[str, Any] = {}
    if given["budget_ms"] is not None:
        changes["budget_ms"] = _positive_number(given["budget_ms"], OVERRIDE_FLAGS["budget_ms"])
    if given["timing_mode"] is not None:
        changes["mode"] = _choice(given["timing_mode"], OVERRIDE_FLAGS["timing_mode"],
                                  TIMING_MODES, "timing mode")
    if given["gpu_timer"] is not None:
        changes["gpu_timer"] = _choice(given["gpu_timer"], OVERRIDE_FLAGS["gpu_timer"],
                                       GPU_TIMERS, "GPU timer")
    if given["gpu_processes"] is not None:
        changes["gpu_processes"] = _gpu_processes(given["gpu_processes"],
                                                  OVERRIDE_FLAGS["gpu_processes"])
    return dataclasses.replace(timing, **changes)


# ---- sizes ------------------------------------------------------------------------------------
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


def _show_size(limit: int | None) -> str:
    return "unlimited" if limit is None else f"{limit} bytes"


# ---- small checkers: each names `where` and the bad value -------------------------------------
def _check_keys(table: dict[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            spot = f"{where}.{key}" if where else key
            raise _Invalid(spot, f"unknown key {key!r}{_did_you_mean(key, allowed)}; expected "
                                 f"one of {', '.join(allowed)}")


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(where, f"expected a table, got {_kind(value)} {value!r}")
    return value


def _list(value: Any, where: str, allow_empty: bool = False) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _Invalid(where, f"expected a list, got {_kind(value)} {value!r}")
    if not value and not allow_empty:
        raise _Invalid(where, "is empty; give at least one value")
    return list(value)


def _unique_list(value: Any, where: str, indexed: bool = True) -> list[Any]:
    items = _list(value, where)
    for index, item in enumerate(items):
        if item in items[:index]:
            spot = f"{where}[{index}]" if indexed else where
            raise _Invalid(spot, f"{item!r} is listed twice")
    return items


def _choice(value: Any, where: str, allowed: Sequence[str], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _Invalid(where, f"unknown {what} {value!r}{_did_you_mean(value, allowed)}; "
                              f"expected one of {', '.join(allowed)}")
    return value


def _text(value: Any, where: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _Invalid(where, f"expected a string, got {_kind(value)} {value!r}")
    if not allow_empty and not value.strip():
        raise _Invalid(where, f"{value!r} is empty; expected a name")
    return value


def _plain_from_file(stem: str) -> str:
    """A file called 'my suite.toml' is suite 'my-suite': a name the user never typed is made
    plain rather than refused."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).replace("..", "-").lstrip(".-")[:100] or "suite"


def _plain_name(value: Any, where: str) -> str:
    name = _text(value, where)
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise _Invalid(where, f"{name!r} is not a plain name: use letters, digits, '_', '-' and "
                              "'.', not starting with '.' or '-', no '..', at most 100 "
                              "characters; it becomes part of file names")
    return name


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_at_least(value: Any, where: str, lowest: int) -> int:
    if not _is_int(value) or value < lowest:
        rule = "a positive integer" if lowest == 1 else f"an integer >= {lowest}"
        raise _Invalid(where, f"{value!r} must be {rule}")
    return value


def _positive_int(value: Any, where: str) -> int:
    return _int_at_least(value, where, 1)


def _gpu_processes(value: Any, where: str) -> int:
    count = _positive_int(value, where)
    if count > MAX_GPU_PROCESSES:
        raise _Invalid(where, f"{count} worker processes per GPU is more than the "
                              f"{MAX_GPU_PROCESSES} allowed")
    return count


def _positive_number(value: Any, where: str) -> float:
    ok = (_is_int(value) or isinstance(value, float)) and math.isfinite(value) and value > 0
    if not ok:
        raise _Invalid(where, f"{value!r} must be a positive number")
    return float(value)


def _fraction(value: Any, where: str, example: str = "0.01 for 1%") -> float:
    number = _positive_number(value, where)
    if number >= 1:
        raise _Invalid(where, f"{value!r} must be a fraction between 0 and 1, e.g. {example}")
    return number


def _kind(value: Any) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list",
             dict: "table"}
    return names.get(type(value), type(value).__name__)


def _did_you_mean(word: Any, options: Iterable[str]) -> str:
    if not isinstance(word, str):
        return ""
    options = list(options)
    same_letters = [option for option in options if option.lower() == word.lower()]
    close = same_letters or difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

