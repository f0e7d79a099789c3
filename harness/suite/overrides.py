"""Command-line flags applied to a loaded suite (`convbench run quick --precision fp16 ...`),
checked like the suite file's own values; errors name the flag."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from harness import epilogue
from harness.problem import ConvProblem
from harness.suite.axes import checked_choices, checked_threads, checked_workspace_limits
from harness.suite.checks import (Invalid, SuiteError, checked_bool, checked_build_budget,
                                  checked_choice,
                                  checked_cpu_rounds,
                                  checked_gpu_processes, checked_outputs, checked_positive_int,
                                  checked_positive_number, checked_text, checked_unique_list)
from harness.sweep import (ALL_DIRECTIONS, GPU_TIMERS, LAYOUTS, OUTPUTS, PRECISIONS, TIMING_MODES,
                           AlgorithmChoice, Sweep, TimingOptions)

# The command-line flag behind each `sweep_with_overrides` argument (each Overrides field), for
# error messages.
OVERRIDE_FLAGS = {
    "backends": "--backend", "algorithms": "--algorithm", "directions": "--direction",
    "precisions": "--precision", "layouts": "--layout", "batch": "--batch",
    "budget_ms": "--budget-ms", "workspace_limits": "--workspace-limit",
    "timing_mode": "--timing-mode", "gpu_timer": "--gpu-timer",
    "gpu_processes": "--gpu-processes", "cpu_rounds": "--cpu-rounds", "threads": "--threads",
    "ops": "--op", "outputs": "--output-type", "race": "--no-race",
    "runoff": "--no-runoff", "plan_limit": "--plan-limit", "build_budget_s": "--build-budget-s",
}


@dataclasses.dataclass(frozen=True)
class Overrides:
    """The command line's choices, unchecked; None keeps the suite's setting. One field per
    `sweep_with_overrides` keyword, named alike (OVERRIDE_FLAGS has the flag of each)."""
    backends: Sequence[str] | None = None
    algorithms: Sequence[str] | None = None
    directions: Sequence[str] | None = None
    precisions: Sequence[str] | None = None
    layouts: Sequence[str] | None = None
    batch: int | None = None
    budget_ms: float | None = None
    workspace_limits: Sequence[int | str | None] | None = None
    timing_mode: str | None = None
    gpu_timer: str | None = None
    gpu_processes: int | None = None
    cpu_rounds: int | None = None
    threads: Sequence[int | str] | None = None
    ops: Sequence[str] | None = None
    outputs: Sequence[str] | None = None
    race: bool | None = None
    runoff: bool | None = None
    plan_limit: int | None = None
    build_budget_s: float | None = None


def sweep_with_overrides(sweep: Sweep, *, backends: Sequence[str] | None = None,
                         algorithms: Sequence[str] | None = None,
                         directions: Sequence[str] | None = None,
                         precisions: Sequence[str] | None = None,
                         layouts: Sequence[str] | None = None, batch: int | None = None,
                         budget_ms: float | None = None,
                         workspace_limits: Sequence[int | str | None] | None = None,
                         timing_mode: str | None = None,
                         gpu_timer: str | None = None,
                         gpu_processes: int | None = None,
                         cpu_rounds: int | None = None,
                         threads: Sequence[int | str] | None = None,
                         ops: Sequence[str] | None = None,
                         outputs: Sequence[str] | None = None,
                         race: bool | None = None,
                         runoff: bool | None = None,
                         plan_limit: int | None = None,
                         build_budget_s: float | None = None) -> Sweep:
    """The sweep with the command line's choices applied; None leaves a setting as the suite has
    it. Errors name the flag (OVERRIDE_FLAGS). Algorithms are `name` (every backend in the sweep)
    or `backend:name` (that backend only; a backend with qualified names ignores plain ones)."""
    given = Overrides(backends=backends, algorithms=algorithms, directions=directions,
                      precisions=precisions, layouts=layouts, batch=batch, budget_ms=budget_ms,
                      workspace_limits=workspace_limits, timing_mode=timing_mode,
                      gpu_timer=gpu_timer, gpu_processes=gpu_processes, cpu_rounds=cpu_rounds,
                      threads=threads, ops=ops, outputs=outputs, race=race,
                      runoff=runoff, plan_limit=plan_limit, build_budget_s=build_budget_s)
    try:
        return _apply_overrides(sweep, given)
    except Invalid as error:
        raise SuiteError(str(error), entry=error.where) from None


def _apply_overrides(sweep: Sweep, given: Overrides) -> Sweep:
    flag = OVERRIDE_FLAGS
    changes: dict[str, Any] = {}
    for key, allowed, what in (("directions", ALL_DIRECTIONS, "direction"),
                               ("precisions", PRECISIONS, "precision"),
                               ("layouts", LAYOUTS, "layout"),
                               ("ops", epilogue.OPS, "op"),
                               ("outputs", OUTPUTS, "output")):
        value = getattr(given, key)
        if value is not None:
            changes[key] = checked_choices(value, flag[key], allowed, what, indexed=False)
    if given.workspace_limits is not None:
        changes["workspace_limits"] = checked_workspace_limits(given.workspace_limits,
                                                               flag["workspace_limits"],
                                                               indexed=False)
    choices = sweep.backends
    if given.backends is not None:
        choices = _override_backends(choices, given.backends, flag["backends"])
    if given.algorithms is not None:
        choices = _override_algorithms(choices, given.algorithms, flag["algorithms"])
    changes["backends"] = choices
    if given.threads is not None:
        changes["threads"] = checked_threads(given.threads, flag["threads"], indexed=False)
    if given.batch is not None:
        changes["problems"] = _rebatch(sweep.problems, given.batch, flag["batch"])
    changes["timing"] = _override_timing(sweep.timing, given)
    where = flag["outputs"] if given.outputs is not None else "the suite's sweep.outputs"
    return checked_outputs(dataclasses.replace(sweep, **changes), where)


def _override_backends(current: tuple[AlgorithmChoice, ...], names: Sequence[str],
                       where: str) -> tuple[AlgorithmChoice, ...]:
    """Named backends in the order given; a backend the suite lists keeps its algorithm list.
    Asked for by name, a backend is no longer optional: its absence must be reported."""
    by_name = {choice.backend: choice for choice in current}
    result = []
    for name in checked_unique_list(names, where, indexed=False):
        name = checked_text(name, where)
        choice = by_name.get(name, AlgorithmChoice(name))
        result.append(dataclasses.replace(choice, optional=False))
    return tuple(result)


def _override_algorithms(current: tuple[AlgorithmChoice, ...], names: Sequence[str],
                         where: str) -> tuple[AlgorithmChoice, ...]:
    plain: list[str] = []
    qualified: dict[str, list[str]] = {}
    known = [choice.backend for choice in current]
    for item in checked_unique_list(names, where, indexed=False):
        backend, _, algorithm = checked_text(item, where).rpartition(":")
        checked_text(algorithm, where)  # "cpu:" names no algorithm
        if not backend:
            plain.append(algorithm)
        elif backend not in known:
            raise Invalid(where, f"{item!r} names backend {backend!r}, which is not in the "
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
    size = checked_positive_int(batch, where)
    result: list[ConvProblem] = []
    for problem in problems:
        changed = problem.with_batch(size)
        if changed in result:
            raise Invalid(where, f"batch {size} makes layer {changed.label!r} appear twice")
        result.append(changed)
    return tuple(result)


def _override_timing(timing: TimingOptions, given: Overrides) -> TimingOptions:
    flag = OVERRIDE_FLAGS
    changes: dict[str, Any] = {}
    if given.budget_ms is not None:
        changes["budget_ms"] = checked_positive_number(given.budget_ms, flag["budget_ms"])
    if given.timing_mode is not None:
        changes["mode"] = checked_choice(given.timing_mode, flag["timing_mode"], TIMING_MODES,
                                         "timing mode")
    if given.gpu_timer is not None:
        changes["gpu_timer"] = checked_choice(given.gpu_timer, flag["gpu_timer"], GPU_TIMERS,
                                              "GPU timer")
    if given.gpu_processes is not None:
        changes["gpu_processes"] = checked_gpu_processes(given.gpu_processes,
                                                         flag["gpu_processes"])
    if given.cpu_rounds is not None:
        changes["cpu_rounds"] = checked_cpu_rounds(given.cpu_rounds, flag["cpu_rounds"])
    for name in ("race", "runoff"):
        if getattr(given, name) is not None:
            changes[name] = checked_bool(getattr(given, name), flag[name])
    if given.plan_limit is not None:
        changes["plan_limit"] = checked_positive_int(given.plan_limit, flag["plan_limit"])
    if given.build_budget_s is not None:
        changes["build_budget_s"] = checked_build_budget(given.build_budget_s,
                                                         flag["build_budget_s"])
    return dataclasses.replace(timing, **changes)
