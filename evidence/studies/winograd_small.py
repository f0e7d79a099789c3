"""Winograd before/after a change (issue 16, ResNet-50's small-image 3x3 layers) against PyTorch's
CPU convolution (oneDNN).

Not a test: a script whose printed table goes into the closing note with the machine it ran on.

    .venv/bin/python evidence/studies/winograd_small.py [--reps 9] [--layers res4a,res5a]
        [--directions fwd,bwd_data] [--before COMMIT]

The layers are cpu_compare's ResNet-50 res2a-res5a 3x3 layers by default (any cpu_compare layer
whose name contains one of --layers), at batch 8, fp32, NCHW. "before" is the Winograd code
(winograd.py, _tiles.py, _winograd_filter.py, _workers.py) at commit --before (by default where
HEAD left main), loaded from git beside today's; "after" is the working tree's. Each point is
prepared through the backend API, every output checked against torch's, then timed as
evidence/studies/winograd_blocks.py times (interleaved launch by launch in a rotating order, a pause
where the library changes and WARM_MS of untimed launches before each timed one). The table shows medians, the median and spread
of the per-round ratios after/before (F2, F4) and best own (F2 or F4) / torch, before and after,
and the load average when each point started; then geometric means of those medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import module_at  # noqa: E402
from im2col_strided import (BATCH, _cpu_model, _git, _ratio_spread,  # noqa: E402
                             _spread, sweep)
from winograd_blocks import _time  # noqa: E402
from harness import backends, reference  # noqa: E402
from harness.problem import ConvProblem  # noqa: E402
from harness.stats import geomean  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import DIRECTIONS, Point  # noqa: E402

LAYERS = "res2a,res3a,res4a,res5a"
# Winograd F4 against torch's fp32: F4's own rounding (error_factor 16 in winograd.py) is
# ~1e-5 relative L2 on these layers; a wrong index or tile gives ~1.
_AGREEMENT = 1e-3
_MODULES = ("_workers", "_tiles", "_winograd_filter", "winograd")
# Untimed launches before each timed one, as convbench's CPU warm-up (timer.CPU_SETTLE_MS): a
# launch right after a pause reads up to 2x slower (res5a F4 17 ms after one warm launch, 6.8
# back to back), which convbench never times.
WARM_MS = 250.0


def _before_winograd(commit: str):
    """winograd.py and the modules it imports of the Winograd pipeline, all at `commit`."""
    renames: dict[str, str] = {}
    for name in _MODULES:
        module = module_at(f"harness/backends/cpu/{name}.py", f"{name}_before", commit, renames)
        renames[f"harness.backends.cpu.{name}"] = f"{name}_before"
    return module


def _algorithms(before: str) -> dict[str, object]:
    from harness.backends.cpu.winograd import algorithm as winograd

    old = _before_winograd(before)
    return {"F2 before": old.WinogradF2(), "F2 after": winograd.WinogradF2(),
            "F4 before": old.WinogradF4(), "F4 after": winograd.WinogradF4(),
            "torch": backends.get("torch_cpu").algorithm("conv2d")}


def _measure(problem: ConvProblem, direction: str, reps: int,
             algorithms: dict[str, object]) -> dict[str, object]:
    load = os.getloadavg()[0]
    data = reference.make_data(problem, "fp32")
    prepared, outputs = {}, {}
    for name, algo in algorithms.items():
        backend = "torch_cpu" if name == "torch" else "cpu"
        run = algo.prepare(Point(problem, direction, "fp32", "NCHW", backend, algo.name), data)
        run.poison()
        run.launch()
        prepared[name], outputs[name] = run, run.output()
    for name in prepared:
        error = reference.relative_errors(outputs[name], outputs["torch"])[0]
        if not error <= _AGREEMENT:
            raise SystemExit(f"{problem.label} {direction}: {name} differs from torch by {error}")
    samples = _time(prepared, reps, WARM_MS)
    for run in prepared.values():
        run.release()
    for side in ("before", "after"):   # the faster of F2 and F4, round by round
        samples[f"best {side}"] = [min(pair) for pair in zip(samples[f"F2 {side}"],
                                                              samples[f"F4 {side}"])]
    return {"layer": problem.label.split(":")[-1].replace("_branch2b", ""),
            "direction": direction, "load": load,
            **{f"{m} a/b": _ratio_spread(samples, f"{m} after", f"{m} before")
               for m in ("F2", "F4")},
            **{f"{side}/torch": _ratio_spread(samples, f"best {side}", "torch")
               for side in ("before", "after")},
            **{name: statistics.median(s) for name, s in samples.items()}}


RATIOS = ("F2 a/b", "F4 a/b", "before/torch", "after/torch")


def _print_table(rows: list[dict[str, object]]) -> None:
    times = ("F2 before", "F2 after", "F4 before", "F4 after", "torch")
    print(f"{'layer':6s} {'direction':10s} " + " ".join(f"{t:>9s}" for t in times) + " "
          + " ".join(f"{r + ' [range]':>20s}" for r in RATIOS) + "  load")
    for row in rows:
        print(f"{row['layer']:6s} {row['direction']:10s} "
              + " ".join(f"{row[t]:9.2f}" for t in times) + " "
              + " ".join(f"{_spread(row[r]):>20s}" for r in RATIOS) + f"  {row['load']:.2f}")
    print("geomeans of the per-round ratios' medians:")
    for direction in (*DIRECTIONS, "all"):
        chosen = [r for r in rows if direction in ("all", r["direction"])]
        if chosen:
            print(f"  {direction:10s} " + "  ".join(
                f"{r} {geomean([row[r][0] for row in chosen]):.3f}" for r in RATIOS)
                + f"  ({len(chosen)} points)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="timed launches of each per point")
    parser.add_argument("--layers", default=LAYERS, help="comma-separated parts of layer names")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--before", default=None,
                        help="the commit 'before' comes from (default: where HEAD left main)")
    args = parser.parse_args(argv)
    if backends.get("torch_cpu").unavailable_reason():
        raise SystemExit(backends.get("torch_cpu").unavailable_reason())
    args.before = args.before or _git("merge-base", "main", "HEAD")[:7]
    wanted = args.layers.split(",")
    layers = [p.with_batch(BATCH) for p in load_suite("cpu_compare").problems
              if any(key in p.name for key in wanted)]
    algorithms = _algorithms(args.before)
    print(f"{_cpu_model()}, {len(os.sched_getaffinity(0))} cores; before = {args.before}, "
          f"after = the working tree; batch {BATCH}, fp32, NCHW; {args.reps} interleaved "
          f"rounds, ms; load average at start {os.getloadavg()}")
    _print_table(sweep(layers, args.directions.split(","),
                       lambda problem, direction: _measure(problem, direction, args.reps,
                                                           algorithms)))
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
