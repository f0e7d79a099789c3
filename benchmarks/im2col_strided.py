"""im2col before and after phase planes (issue 16) against PyTorch's CPU convolution (oneDNN).

Not a test: a script whose printed table goes into the closing note with the machine it ran on.

    .venv/bin/python benchmarks/im2col_strided.py [--reps 11] [--layers train_61,res3a]
        [--directions fwd,bwd_data] [--all-strides]

The layers are the stride > 1 layers of suites/cpu_compare.toml and suites/resnet50.toml (or
every layer of both with --all-strides, to see that stride 1 did not get slower), at batch 8,
fp32, NCHW, in all three directions. "before" is harness/backends/cpu/im2col.py as it was before phase planes
(benchmarks/_before.py loads it from git); "after" is the harness's
im2col; "torch" is the torch_cpu backend (torch.nn.functional.conv2d and
aten.convolution_backward). Each point is prepared through the backend API the runner uses and
each output is checked against torch's before timing.

The three are interleaved launch by launch, in an order that rotates every round, so that load
from other processes on a shared machine falls on all of them alike: before each timed launch a
pause (OpenBLAS and OpenMP worker threads spin for a while after a call, and would otherwise
slow whichever library runs next) and one untimed launch (caches and threads warm again). The
table shows medians, before's and after's workspace, and the load average when each point
started.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _before import module_at  # noqa: E402
from harness import backends, reference  # noqa: E402
from harness.problem import ConvProblem  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import DIRECTIONS, Point  # noqa: E402

BATCH = 8
SUITES = ("cpu_compare", "resnet50")
IMPLEMENTATIONS = ("before", "after", "torch")
_SETTLE_S = 0.3  # longer than OpenBLAS's and libgomp's spin-wait after a call
# fp32 against torch's fp32: both round, so a relative L2 difference well above fp32's
# accumulated rounding means a wrong result.
_AGREEMENT = 1e-4


def _layers(all_strides: bool, wanted: list[str]) -> list[ConvProblem]:
    """The suites' layers at BATCH, each once (both suites list ResNet-50's 3x3 layers)."""
    layers = []
    for suite in SUITES:
        for problem in load_suite(suite).problems:
            strided = (problem.stride_h, problem.stride_w) != (1, 1)
            chosen = not wanted or any(key in problem.name for key in wanted)
            layer = problem.with_batch(BATCH)
            if (strided or all_strides) and chosen and layer not in layers:
                layers.append(layer)
    return layers


def _algorithms() -> dict[str, object]:
    return {"before": module_at("harness/backends/cpu/im2col.py", "im2col_before").Im2col(), "after": backends.get("cpu").algorithm("im2col"),
            "torch": backends.get("torch_cpu").algorithm("conv2d")}


def _prepare(problem: ConvProblem, direction: str) -> tuple[dict[str, object], dict[str, float]]:
    """Prepared launches of the three, and before's and after's relative L2 error vs torch."""
    data = reference.make_data(problem, "fp32")
    prepared, outputs = {}, {}
    for name, algo in _algorithms().items():
        backend = "torch_cpu" if name == "torch" else "cpu"
        run = algo.prepare(Point(problem, direction, "fp32", "NCHW", backend, algo.name), data)
        run.poison()
        run.launch()
        prepared[name], outputs[name] = run, run.output()
    errors = {name: reference.relative_errors(outputs[name], outputs["torch"])[0]
              for name in ("before", "after")}
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


def _measure(problem: ConvProblem, direction: str, reps: int) -> dict[str, object]:
    load = os.getloadavg()[0]
    prepared, errors = _prepare(problem, direction)
    bad = {name: error for name, error in errors.items() if not error <= _AGREEMENT}
    if bad:
        raise SystemExit(f"{problem.label} {direction}: differs from torch by {bad}")
    samples = _time(prepared, reps)
    workspace = {f"{name}_mib": prepared[name].workspace_bytes / 2**20
                 for name in ("before", "after")}
    for run in prepared.values():
        run.release()
    return {"layer": problem.label, "direction": direction, "load": load, **workspace,
            **{name: statistics.median(s) for name, s in samples.items()}}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _print_table(rows: list[dict[str, object]]) -> None:
    print(f"{'layer':28s} {'direction':10s} {'before':>9s} {'after':>9s} {'torch':>9s} "
          f"{'before/t':>8s} {'after/t':>8s} {'after/b':>8s} {'ws MiB b/a':>12s} {'load':>5s}")
    for row in rows:
        print(f"{row['layer']:28s} {row['direction']:10s} {row['before']:9.2f} "
              f"{row['after']:9.2f} {row['torch']:9.2f} {row['before'] / row['torch']:8.2f} "
              f"{row['after'] / row['torch']:8.2f} {row['after'] / row['before']:8.2f} "
              f"{row['before_mib']:5.0f}/{row['after_mib']:<6.0f} {row['load']:5.2f}")
    # Class B of issue 16: DeepBench's stride-2 layers and VGG-16 conv1_1 (with --all-strides).
    class_b = [r for r in rows if str(r["layer"]).startswith(("deepbench", "vgg_16:conv1_1"))]
    groups = {"class B": class_b,
              "resnet_50": [r for r in rows if str(r["layer"]).startswith("resnet_50")],
              "all": rows}
    for label, group in groups.items():
        for direction in (*DIRECTIONS, "all"):
            chosen = [r for r in group if direction in ("all", r["direction"])]
            if chosen:
                ratios = {key: _geomean([r[key] / r["torch"] for r in chosen])
                          for key in ("before", "after")}
                print(f"geomean vs torch, {label:9s} {direction:10s}: before "
                      f"{ratios['before']:.2f}x  after {ratios['after']:.2f}x  "
                      f"({len(chosen)} points)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11, help="timed launches of each per point")
    parser.add_argument("--layers", default="", help="comma-separated parts of layer names")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--all-strides", action="store_true",
                        help="stride-1 layers too (a regression check)")
    args = parser.parse_args(argv)
    wanted = [key for key in args.layers.split(",") if key]
    if backends.get("torch_cpu").unavailable_reason():
        raise SystemExit(backends.get("torch_cpu").unavailable_reason())
    import torch
    print(f"{len(os.sched_getaffinity(0))} cores, numpy {np.__version__}, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads); batch {BATCH}, fp32, NCHW; "
          f"median of {args.reps} interleaved launches, ms; load average at start "
          f"{os.getloadavg()}")
    rows = []
    for problem in _layers(args.all_strides, wanted):
        for direction in args.directions.split(","):
            rows.append(_measure(problem, direction, args.reps))
            print(f"  {rows[-1]['layer']} {direction}: done", file=sys.stderr, flush=True)
    _print_table(rows)
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
