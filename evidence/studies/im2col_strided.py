"""im2col before and after a change (issue 16) against PyTorch's CPU convolution (oneDNN).

Not a test: a script whose printed table goes into the closing note with the machine it ran on.

    .venv/bin/python evidence/studies/im2col_strided.py [--reps 11] [--layers train_61,res3a]
        [--directions fwd,bwd_data] [--all-strides] [--suites cpu_compare]
        [--before COMMIT] [--variant _shifted.MIN_CHANNELS=1000000 ...] (a number: integer or float) [--descriptor DESC ...]

The layers are the stride > 1 layers of the suites (cpu_compare and resnet50 by default; every
layer of them with --all-strides), at batch 8, fp32, NCHW, in all three directions. "before" is
harness/backends/cpu/im2col.py at commit --before (by default where HEAD left main;
evidence/studies/_before.py loads it from git, with the _columns.py of that commit); "after" is the
harness's im2col; "torch" is the torch_cpu backend (torch.nn.functional.conv2d and
aten.convolution_backward). With --variant MODULE.NAME=VALUE (repeatable), "variant" is the
harness's im2col prepared with those module constants of harness.backends.cpu changed (a shape
rule's alternative, timed beside it). Each point is prepared through the backend API the runner
uses and each output is checked against torch's before timing.

The implementations are interleaved launch by launch, in an order that rotates every round, so
that load from other processes on a shared machine falls on all of them alike: before each
timed launch a pause (OpenBLAS and OpenMP worker threads spin for a while after a call, and
would otherwise slow whichever library runs next) and one untimed launch (caches and threads
warm again). The table shows medians, the median and the spread (lowest and highest) of the
per-round ratios after/before and after/torch, before's and after's workspace, and the load
average when each point started; the geometric means of the per-round ratios' medians are by
issue 16's classes (evidence/studies/cpu_classes.py: A = 3x3 stride 1 with >= 64 channels in and
out, B = the rest).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _before import module_at  # noqa: E402
from cpu_classes import layer_class  # noqa: E402
from harness import backends, cpu_memory, reference  # noqa: E402
from harness.problem import ConvProblem  # noqa: E402
from harness.problem_text import parse_benchdnn  # noqa: E402
from harness.stats import geomean  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import DIRECTIONS, Point  # noqa: E402

BATCH = 8
SUITES = "cpu_compare,resnet50"
_SETTLE_S = 0.3  # longer than OpenBLAS's and libgomp's spin-wait after a call
# fp32 against torch's fp32: both round, so a relative L2 difference well above fp32's
# accumulated rounding means a wrong result.
_AGREEMENT = 1e-4


def _layers(suites: list[str], all_strides: bool, wanted: list[str]) -> list[ConvProblem]:
    """The suites' layers at BATCH, each once (both default suites list ResNet-50's 3x3
    layers)."""
    layers = []
    for suite in suites:
        for problem in load_suite(suite).problems:
            strided = (problem.stride_h, problem.stride_w) != (1, 1)
            chosen = not wanted or any(key in problem.name for key in wanted)
            layer = problem.with_batch(BATCH)
            if (strided or all_strides) and chosen and layer not in layers:
                layers.append(layer)
    return layers


def _before_im2col(commit: str):
    """im2col.py at `commit`, importing _columns.py of the same commit (the module it was
    written against) in place of today's."""
    module_at("harness/backends/cpu/_columns.py", "columns_before", commit)
    renames = {"harness.backends.cpu._columns": "columns_before"}
    module = module_at("harness/backends/cpu/im2col.py", "im2col_before", commit, renames)
    if hasattr(module, "_im2col_filter"):   # its bwd_filter GEMMs, of the same commit
        module._im2col_filter = module_at("harness/backends/cpu/_im2col_filter.py",
                                          "im2col_filter_before", commit, renames)
    return module.Im2col()


@contextmanager
def _constants(changes: dict[str, float]) -> Iterator[None]:
    """Module constants of harness.backends.cpu ("im2col.BLOCK_BYTES") changed, for preparing a
    variant (plans read them at prepare time; the launch keeps what it was prepared with)."""
    saved = {}
    for name, value in changes.items():
        module, _, constant = name.rpartition(".")
        target = importlib.import_module(f"harness.backends.cpu.{module}")
        saved[name] = (target, constant, getattr(target, constant))
        setattr(target, constant, value)
    try:
        yield
    finally:
        for target, constant, value in saved.values():
            setattr(target, constant, value)


def _algorithms(before: str, variant: dict[str, float]) -> dict[str, tuple[object, dict]]:
    """Each implementation's algorithm and the im2col constants it is prepared under."""
    after = backends.get("cpu").algorithm("im2col")
    chosen = {"before": (_before_im2col(before), {}), "after": (after, {})}
    if variant:
        chosen["variant"] = (after, variant)
    chosen["torch"] = (backends.get("torch_cpu").algorithm("conv2d"), {})
    return chosen


def _prepare(problem: ConvProblem, direction: str, algorithms: dict[str, tuple[object, dict]]
             ) -> tuple[dict[str, object], dict[str, float]]:
    """Prepared launches of each, and each own one's relative L2 error vs torch."""
    data = reference.make_data(problem, "fp32")
    prepared, outputs = {}, {}
    for name, (algo, changes) in algorithms.items():
        backend = "torch_cpu" if name == "torch" else "cpu"
        with _constants(changes):
            run = algo.prepare(Point(problem, direction, "fp32", "NCHW", backend, algo.name),
                               data)
        run.poison()
        run.launch()
        prepared[name], outputs[name] = run, run.output()
    errors = {name: reference.relative_errors(outputs[name], outputs["torch"])[0]
              for name in prepared if name != "torch"}
    return prepared, errors


def _time(prepared: dict[str, object], reps: int) -> dict[str, list[float]]:
    """Milliseconds per launch, `reps` of each, interleaved in a rotating order."""
    samples: dict[str, list[float]] = {name: [] for name in prepared}
    names = list(prepared)
    gc.disable()
    try:
        for round_ in range(reps):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                run = prepared[name]
                time.sleep(_SETTLE_S)
                run.launch()
                start = time.perf_counter_ns()
                run.launch()
                samples[name].append((time.perf_counter_ns() - start) * 1e-6)
    finally:
        gc.enable()
    return samples


def _ratio_spread(samples: dict[str, list[float]], name: str, other: str) -> tuple[float, ...]:
    """Median, lowest and highest of the per-round ratios name/other (launched in one round)."""
    ratios = [a / b for a, b in zip(samples[name], samples[other])]
    return statistics.median(ratios), min(ratios), max(ratios)


def _measure(problem: ConvProblem, direction: str, reps: int,
             algorithms: dict[str, tuple[object, dict]]) -> dict[str, object]:
    load = os.getloadavg()[0]
    prepared, errors = _prepare(problem, direction, algorithms)
    bad = {name: error for name, error in errors.items() if not error <= _AGREEMENT}
    if bad:
        raise SystemExit(f"{problem.label} {direction}: differs from torch by {bad}")
    samples = _time(prepared, reps)
    workspace = {f"{name}_mib": prepared[name].workspace_bytes / 2**20
                 for name in ("before", "after")}
    for run in prepared.values():
        run.release()
    return {"layer": problem.label, "direction": direction, "class": layer_class(problem),
            "load": load, **workspace,
            "after/before": _ratio_spread(samples, "after", "before"),
            "after/torch": _ratio_spread(samples, "after", "torch"),
            "before/torch": _ratio_spread(samples, "before", "torch"),
            **({"variant/after": _ratio_spread(samples, "variant", "after")}
               if "variant" in samples else {}),
            **{name: statistics.median(s) for name, s in samples.items()}}


def _spread(ratio: tuple[float, ...]) -> str:
    return f"{ratio[0]:5.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}]"


def _print_table(rows: list[dict[str, object]]) -> None:
    variant = "variant" in rows[0]
    print(f"{'layer':26s} {'cl':2s} {'direction':10s} {'before':>8s} {'after':>8s} "
          f"{'torch':>8s} {'after/before [range]':>21s} {'after/torch [range]':>20s} "
          + (f"{'variant/after [range]':>22s} " if variant else "")
          + f"{'ws MiB b/a':>11s} {'load':>5s}  (! = after/before's range > 1.5x: load met)")
    for row in rows:
        print(f"{row['layer']:26s} {row['class']:2s} {row['direction']:10s} "
              f"{row['before']:8.2f} {row['after']:8.2f} {row['torch']:8.2f} "
              f"{_spread(row['after/before']):>21s} {_spread(row['after/torch']):>20s} "
              + (f"{_spread(row['variant/after']):>22s} " if variant else "")
              + f"{row['before_mib']:5.0f}/{row['after_mib']:<5.0f} {row['load']:5.2f}"
              + ("  !" if row["after/before"][2] > 1.5 * row["after/before"][1] else ""))
    # Class figures from the per-round ratios' medians: a point whose rounds met load from
    # other processes keeps its ratios (all of a round's launches met it), not its medians.
    keys = ["before/torch", "after/torch", "after/before"] + (["variant/after"] if variant else [])
    print("geomeans of the per-round ratios' medians:")
    for klass in ("A", "B", "all"):
        for direction in (*DIRECTIONS, "all"):
            chosen = [r for r in rows if klass in ("all", r["class"])
                      and direction in ("all", r["direction"])]
            if chosen:
                figures = "  ".join(f"{key} {geomean([r[key][0] for r in chosen]):.2f}"
                                    for key in keys)
                print(f"class {klass:3s} {direction:10s}: {figures}  ({len(chosen)} points)")


def _variant(pairs: list[str]) -> dict[str, float]:
    changes = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        module, _, constant = name.rpartition(".")
        try:
            known = hasattr(importlib.import_module(f"harness.backends.cpu.{module}"), constant)
            number = float(value)
        except (ImportError, ValueError):
            known = False
        if not known:
            raise SystemExit(f"--variant {pair}: want MODULE.NAME=NUMBER, NAME a constant of "
                             f"harness/backends/cpu/MODULE.py")
        changes[name] = int(number) if number.is_integer() and "." not in value else number
    return changes


def main(argv: list[str] | None = None) -> int:
    cpu_memory.keep_freed_memory()   # as convbench runs measure (harness/cpu_memory.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11, help="timed launches of each per point")
    parser.add_argument("--layers", default="", help="comma-separated parts of layer names")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--all-strides", action="store_true",
                        help="stride-1 layers too (a regression check)")
    parser.add_argument("--suites", default=SUITES, help="comma-separated suite names")
    parser.add_argument("--before", default=None,
                        help="the commit 'before' comes from (default: where HEAD left main)")
    parser.add_argument("--descriptor", action="append", default=[], metavar="BENCHDNN",
                        help="time this layer (benchdnn descriptor) instead of the suites'")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE",
                        help="also time im2col prepared with this constant changed")
    args = parser.parse_args(argv)
    wanted = [key for key in args.layers.split(",") if key]
    if backends.get("torch_cpu").unavailable_reason():
        raise SystemExit(backends.get("torch_cpu").unavailable_reason())
    import torch
    args.before = args.before or _git("merge-base", "main", "HEAD")[:7]
    algorithms = _algorithms(args.before, _variant(args.variant))
    print(f"{platform.processor() or platform.machine()}: {_cpu_model()}, "
          f"{len(os.sched_getaffinity(0))} cores, numpy {np.__version__}, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads); before = {args.before} "
          f"({_git('rev-parse', '--short', args.before)}), after = the working tree"
          + (f", variant = after with {_variant(args.variant)}" if args.variant else "")
          + f"; batch {BATCH}, fp32, NCHW; {args.reps} interleaved rounds, ms; load average at "
          f"start {os.getloadavg()}")
    layers = ([parse_benchdnn(text) for text in args.descriptor] if args.descriptor
              else _layers(args.suites.split(","), args.all_strides, wanted))
    _print_table(sweep(layers, args.directions.split(","),
                       lambda problem, direction: _measure(problem, direction, args.reps,
                                                           algorithms)))
    print(f"load average at end {os.getloadavg()}")
    return 0


def sweep(layers: list[ConvProblem], directions: list[str],
          measure: Callable[[ConvProblem, str], dict[str, object]]) -> list[dict[str, object]]:
    """measure(layer, direction) of every layer and direction, a progress line after each."""
    rows = []
    for problem in layers:
        for direction in directions:
            rows.append(measure(problem, direction))
            print(f"  {rows[-1]['layer']} {direction}: done", file=sys.stderr, flush=True)
    return rows


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=Path(__file__).parent, check=True,
                          capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
