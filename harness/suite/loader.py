"""Suite files (TOML) become a `Sweep`; every mistake in one is a `SuiteError` naming the file, the
entry, the key and the bad value. Nothing here runs anything or knows the backend registry: the
runner checks backend and algorithm names, this module only checks that they are names.

The format (suites/quick.toml shows every key):

    name = "quick"                       # optional; defaults to the file name; a plain name
                                         # (letters, digits, _ - .), since it names files
    description = "what the suite is for"   # optional
    layers = [                           # required, at least one; three forms, freely mixed
                                         # (and recurrent layers: harness/suite/rnn_layers.py):
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
    threads = ["all"]                    # CPU points: "all" cores (default) or counts, e.g. [1, 2]
    ops = ["conv"]                       # also conv_bias, conv_bias_relu, conv_bias_add_relu:
                                         # the epilogue timed with the convolution (fwd only)
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
    race = true                          # false: time every candidate to the full floor
    plan_limit = 3                       # only each point's first 3 graph-API plans (default: all)
    build_budget_s = 30                  # longest run-time kernel build a row waits for (RNN)

    [compare]
    threshold = 0.05                     # fractional slowdown that counts as a regression

Axis lists must be non-empty and free of duplicates; unknown keys are errors everywhere.
The axes the command line can also set are checked in harness.suite.axes.
"""
from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import epilogue
from harness.problem import ConvProblem, ProblemError
from harness.problem_text import parse_benchdnn, parse_deepbench
from harness.rnn.problem import RnnProblem, RnnProblemError
from harness.suite import rnn_layers
from harness.suite.axes import checked_choices, checked_threads, checked_workspace_limits
from harness.suite.checks import (Invalid, SuiteError, check_keys, checked_bool,
                                  checked_build_budget, checked_choice,
                                  checked_cpu_rounds, checked_fraction, checked_gpu_processes,
                                  checked_int_at_least, checked_list, checked_outputs,
                                  checked_plain_name, checked_positive_int, checked_positive_number,
                                  checked_table, checked_text, checked_unique_list, did_you_mean,
                                  field_table,
                                  is_int, kind_of, plain_from_file)
from harness.sweep import (ALL_DIRECTIONS, GPU_TIMERS, LAYOUTS, OUTPUTS, PRECISIONS, TIMING_MODES,
                           AlgorithmChoice, Sweep, TimingOptions)

SUITE_SUFFIX = ".toml"
# This module's own path (harness/suite/loader.py), not harness.__file__: a stale editable install
# can load `harness` as a namespace package, whose __file__ is None.
REPO_SUITES = Path(__file__).resolve().parents[2] / "suites"


_TOP_KEYS = ("name", "description", "layers", "sweep", "timing", "compare")
_SWEEP_KEYS = ("directions", "precisions", "layouts", "workspace_limits", "batch", "threads",
               "ops", "outputs", "backends")
_BACKEND_KEYS = ("name", "algorithms", "optional")
# every TimingOptions field but those the harness sets per measurement
_TIMING_KEYS = tuple(f.name for f in dataclasses.fields(TimingOptions)
                     if f.name not in ("race_bar_ms", "race_first_replay", "replicate",
                                       "replay_checked"))
_COMPARE_KEYS = ("threshold",)
_PROBLEM_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem))
_REQUIRED_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem)
                         if f.default is dataclasses.MISSING)
_DEEPBENCH_KEYS = ("deepbench", "name", "multiplicity")


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
    raise SuiteError(f"unknown suite {text!r}{did_you_mean(text, known)}; available: "
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
    except Invalid as error:
        raise SuiteError(f"{source}: {error}", file=source, entry=error.where) from None


def _sweep_from_table(data: dict[str, Any], default_name: str) -> Sweep:
    check_keys(data, _TOP_KEYS, "")
    name = (checked_plain_name(data["name"], "name") if "name" in data
            else checked_plain_name(plain_from_file(default_name), "name (from the file name)"))
    checked_text(data.get("description", ""), "description", allow_empty=True)
    axes = checked_table(data.get("sweep", {}), "sweep")
    check_keys(axes, _SWEEP_KEYS, "sweep")
    batch = checked_positive_int(axes["batch"], "sweep.batch") if "batch" in axes else None
    if "layers" not in data:
        raise Invalid("layers", "missing; a suite needs at least one layer")
    fields: dict[str, Any] = {
        "name": name,
        "problems": _layers(data["layers"], batch),
        "timing": _timing(checked_table(data.get("timing", {}), "timing")),
        "regression_threshold": _compare(checked_table(data.get("compare", {}), "compare")),
    }
    fields.update(_axes(axes))
    return checked_outputs(Sweep(**fields), "sweep.outputs")


def _axes(axes: dict[str, Any]) -> dict[str, Any]:
    """The Sweep fields [sweep] sets; absent keys keep Sweep's defaults."""
    fields: dict[str, Any] = {}
    for key, allowed, what in (("directions", ALL_DIRECTIONS, "direction"),
                               ("precisions", PRECISIONS, "precision"),
                               ("layouts", LAYOUTS, "layout"),
                               ("ops", epilogue.OPS, "op"),
                               ("outputs", OUTPUTS, "output")):
        if key in axes:
            fields[key] = checked_choices(axes[key], f"sweep.{key}", allowed, what)
    if "workspace_limits" in axes:
        fields["workspace_limits"] = checked_workspace_limits(axes["workspace_limits"],
                                                       "sweep.workspace_limits")
    if "threads" in axes:
        fields["threads"] = checked_threads(axes["threads"], "sweep.threads")
    if "backends" in axes:
        fields["backends"] = _backends(axes["backends"], "sweep.backends")
    return fields


# ---- layers -----------------------------------------------------------------------------------
def _layers(value: Any, batch: int | None) -> tuple[ConvProblem | RnnProblem, ...]:
    entries = checked_list(value, "layers")
    problems: list[ConvProblem | RnnProblem] = []
    for index, entry in enumerate(entries):
        where = f"layers[{index}]"
        problem = _layer(entry, where, batch)
        if not problem.name.isprintable():
            raise Invalid(f"{where}.name", f"{problem.name!r} holds a control character or "
                                           "an unpaired surrogate; a layer name is printable text")
        if batch is not None and problem.batch != batch:
            try:
                problem = problem.with_batch(batch)
            except RnnProblemError as error:
                raise Invalid(where, str(error)) from None
        if problem in problems:
            first = problems.index(problem)
            raise Invalid(where, f"{problem.label!r} ({problem.short_shape}) repeats "
                                 f"layers[{first}]")
        problems.append(problem)
    return tuple(problems)


def _layer(entry: Any, where: str, batch: int | None) -> ConvProblem | RnnProblem:
    if rnn_layers.is_recurrent(entry):
        return rnn_layers.layer(entry, where, batch)
    try:
        if isinstance(entry, str):
            return parse_benchdnn(entry)
        if isinstance(entry, dict) and "deepbench" in entry:
            return _deepbench_layer(entry, where)
        if isinstance(entry, dict):
            return _field_layer(entry, where, batch)
    except ProblemError as error:
        raise Invalid(where, str(error)) from None
    raise Invalid(where, f"expected a benchdnn descriptor string or a table, got "
                         f"{kind_of(entry)} {entry!r}")


def _deepbench_layer(entry: dict[str, Any], where: str) -> ConvProblem:
    check_keys(entry, _DEEPBENCH_KEYS, where)
    fields = checked_list(entry["deepbench"], f"{where}.deepbench")
    for index, item in enumerate(fields):
        if not is_int(item):
            raise Invalid(f"{where}.deepbench[{index}]", f"expected an integer, got "
                                                         f"{kind_of(item)} {item!r}")
    name = checked_text(entry.get("name", ""), f"{where}.name", allow_empty=True)
    multiplicity = checked_positive_int(entry.get("multiplicity", 1), f"{where}.multiplicity")
    return parse_deepbench(fields, name=name, multiplicity=multiplicity)


def _field_layer(entry: dict[str, Any], where: str, batch: int | None) -> ConvProblem:
    fields = field_table(entry, _PROBLEM_FIELDS, _REQUIRED_FIELDS, where, batch,
                         "a layer table")
    for key, value in fields.items():
        if key == "name":
            checked_text(value, f"{where}.name", allow_empty=True)
        elif not is_int(value):
            raise Invalid(f"{where}.{key}", f"expected an integer, got {kind_of(value)} {value!r}")
    # Padding stated on one side only almost always means the same on both sides.
    fields.setdefault("pad_bottom", fields.get("pad_top", 0))
    fields.setdefault("pad_right", fields.get("pad_left", 0))
    fields.setdefault("pad_back", fields.get("pad_front", 0))
    return ConvProblem(**fields)


# ---- backends ---------------------------------------------------------------------------------
def _backends(value: Any, where: str) -> tuple[AlgorithmChoice, ...]:
    entries = checked_list(value, where, allow_empty=False)
    choices: list[AlgorithmChoice] = []
    for index, entry in enumerate(entries):
        choice = _backend(entry, f"{where}[{index}]")
        if choice.backend in [c.backend for c in choices]:
            raise Invalid(f"{where}[{index}].name", f"backend {choice.backend!r} is listed twice")
        choices.append(choice)
    return tuple(choices)


def _backend(entry: Any, where: str) -> AlgorithmChoice:
    if isinstance(entry, str):  # shorthand: "cpu" is {name = "cpu"}
        return AlgorithmChoice(checked_text(entry, where))
    table = checked_table(entry, where)
    check_keys(table, _BACKEND_KEYS, where)
    if "name" not in table:
        raise Invalid(f"{where}.name", "missing; every backend entry needs a name")
    name = checked_text(table["name"], f"{where}.name")
    algorithms = ()
    if "algorithms" in table:
        spot = f"{where}.algorithms"
        names = checked_unique_list(table["algorithms"], spot)
        algorithms = tuple(checked_text(item, f"{spot}[{i}]") for i, item in enumerate(names))
    optional = checked_bool(table.get("optional", False), f"{where}.optional")
    return AlgorithmChoice(name, algorithms, optional)


# ---- timing and compare -----------------------------------------------------------------------
def _timing(table: dict[str, Any]) -> TimingOptions:
    check_keys(table, _TIMING_KEYS, "timing")
    fields: dict[str, Any] = {}
    if "mode" in table:
        fields["mode"] = checked_choice(table["mode"], "timing.mode", TIMING_MODES, "timing mode")
    if "gpu_timer" in table:
        fields["gpu_timer"] = checked_choice(table["gpu_timer"], "timing.gpu_timer", GPU_TIMERS,
                                             "GPU timer")
    if "budget_ms" in table:
        fields["budget_ms"] = checked_positive_number(table["budget_ms"], "timing.budget_ms")
    if "build_budget_s" in table:
        fields["build_budget_s"] = checked_build_budget(table["build_budget_s"],
                                                        "timing.build_budget_s")
    for key, checked in (("gpu_processes", checked_gpu_processes),
                         ("cpu_rounds", checked_cpu_rounds)):
        if key in table:
            fields[key] = checked(table[key], f"timing.{key}")
    for key in ("min_samples", "max_samples", "plan_limit"):
        if key in table:
            fields[key] = checked_positive_int(table[key], f"timing.{key}")
    if "warmup" in table:
        fields["warmup"] = checked_int_at_least(table["warmup"], "timing.warmup", 0)
    for key in ("race", "runoff"):
        if key in table:
            fields[key] = checked_bool(table[key], f"timing.{key}")
    if "noise_target" in table:
        fields["noise_target"] = checked_fraction(table["noise_target"], "timing.noise_target")
    timing = TimingOptions(**fields)
    if timing.max_samples < timing.min_samples:
        raise Invalid("timing.max_samples", f"{timing.max_samples} is less than min_samples="
                                            f"{timing.min_samples}")
    return timing


def _compare(table: dict[str, Any]) -> float:
    check_keys(table, _COMPARE_KEYS, "compare")
    default = next(f.default for f in dataclasses.fields(Sweep)
                   if f.name == "regression_threshold")
    if "threshold" not in table:
        return default
    return checked_fraction(table["threshold"], "compare.threshold", example="0.05 for 5%")


