"""Winograd before/after: the old tile engine (winograd.py at BEFORE_CHUNKS below: whole-image
blocks sized by GEMM width, one thread for its copies) against the new one (chunks on threads,
harness/backends/cpu/winograd.py), with own im2col and PyTorch's CPU convolution (oneDNN) as
the yardsticks.

Not a test: a script whose printed table goes into the closing note with the machine it ran on.

    .venv/bin/python evidence/studies/winograd_blocks.py [--rounds 11] [--layers res2a,conv3_1]
        [--directions fwd,bwd_data] [--warm-ms 60] [--check] [--before COMMIT]

Layers: the "class A" rows of suites/cpu_compare.toml (3x3, stride 1, at least 64 channels in
and out), at the suite's batch 8, fp32, NCHW. For each layer and direction every algorithm is
prepared once through the backend API the runner uses; then `--rounds` rounds each launch every
algorithm for `--warm-ms` untimed (after a pause where the threads it wakes differ from the
last algorithm's: each library's worker threads spin for a while after a call, and the other
would pay for it), then once timed with time.perf_counter_ns, GC off. Old and new thus
alternate within every round, so load from other processes on a shared machine falls on both
alike; the table shows medians, and the load average before and after each layer, which says
how far to trust them; a summary closes it with the geometric means per direction.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "evidence" / "studies"))

from _before import module_at  # noqa: E402
from harness import backends, reference  # noqa: E402
from harness import precision as precision_table  # noqa: E402
from harness.problem import ConvProblem  # noqa: E402
from harness.stats import geomean  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import DIRECTIONS, Point  # noqa: E402

_SETTLE_S = 0.3  # longer than OpenBLAS's and libgomp's spin-wait after a call
COLUMNS = ("im2col", "torch", "F2 old", "F2 new", "F4 old", "F4 new", "F4 U")


# The engine before the chunked, threaded pipeline (issue 16, second round): main at e370f71,
# blocks of whole images sized by GEMM width, each step one pass over the whole block.
BEFORE_CHUNKS = "e370f71"


def _old_winograd(commit: str):
    """winograd.py as it was at `commit`, as its own module (from git), with the _tiles.py of
    that commit."""
    module_at("harness/backends/cpu/_tiles.py", "tiles_before", commit)
    return module_at("harness/backends/cpu/winograd.py", "winograd_before", commit,
                     renames={"harness.backends.cpu._tiles": "tiles_before"})


def class_a_layers() -> list[ConvProblem]:
    return [p for p in load_suite("cpu_compare").problems
            if (p.kernel_h, p.kernel_w, p.stride_h, p.stride_w) == (3, 3, 1, 1)
            and min(p.in_channels, p.out_channels) >= 64]


def _algorithms(before: str) -> dict[str, object]:
    from harness.backends.cpu.winograd import algorithm as winograd

    old = _old_winograd(before)
    cpu = backends.get("cpu")
    found = {"im2col": cpu.algorithm("im2col"),
             "F2 old": old.WinogradF2(), "F2 new": winograd.WinogradF2(),
             "F4 old": old.WinogradF4(), "F4 new": winograd.WinogradF4()}
    torch_cpu = backends.get("torch_cpu")
    if torch_cpu.unavailable_reason() is None:
        found["torch"] = torch_cpu.algorithm("conv2d")
    return found


class _FilterTransformOnly:
    """New F4's filter transform alone, as fwd and bwd_data run it inside every launch: what
    transforming the weights once, at prepare, would save."""
    backend = "cpu"

    def __init__(self, problem: ConvProblem, data: reference.ProblemData):
        import numpy as np

        from harness.backends.cpu import tiles as _tiles
        from harness.backends.cpu.winograd import algorithm as winograd, toom_cook
        from harness.threads import available_cores

        p = problem
        mats = toom_cook.matrices(4, winograd.WinogradF4.points)
        self._w = data.w.astype(np.float32)
        self._u = np.empty((36, p.groups, p.channels_per_group, p.filters_per_group), np.float32)
        self._slots = available_cores()
        self._tasks = winograd._weight_tasks(_tiles.kron(mats["g"], mats["g"], np.float32),
                                             self._w, self._u, self._slots, swapped=True)

    def launch(self) -> None:
        from harness.backends.cpu.workers import run_tasks

        run_tasks(self._tasks, self._slots)

    def release(self) -> None:
        self._u = self._w = self._tasks = None


def _prepare(problem: ConvProblem, direction: str, algorithms: dict[str, object], check: bool):
    data = reference.make_data(problem, "fp32")
    expected = reference.reference(problem, direction, data) if check else None
    prepared = {}
    for label, algo in algorithms.items():
        run = algo.prepare(Point(problem, direction, "fp32", "NCHW", algo.backend, algo.name), data)
        run.launch()
        if check:
            error, _ = reference.relative_errors(run.output(), expected)
            limit = precision_table.tolerance("fp32", problem.reduction_length(direction),
                                              algo.error_factor)
            if not error <= limit:
                raise SystemExit(f"{label} is wrong on {problem.label} {direction}: "
                                 f"{error:.2e} > {limit:.1e}")
        prepared[label] = run
    if direction != "bwd_filter":
        prepared["F4 U"] = _FilterTransformOnly(problem, data)
    return prepared


# Which threads an algorithm's launch wakes: PyTorch's (oneDNN, OpenMP), OpenBLAS's own (im2col,
# the old Winograd), or Python threads with single-threaded BLAS (the new Winograd's chunks).
# OpenBLAS's idle workers spin for ~0.1 s of CPU after a multithreaded call (measured: a 2000^2
# sgemm, then 0.1 s of process CPU while asleep), which took a core from the next algorithm's
# Python threads (new F4 res3a forward 4.4 ms alone, 8.0 ms right after the old F4).
_LIBRARY = {"torch": "torch", "F2 new": "chunks", "F4 new": "chunks", "F4 U": "chunks"}


def _time(prepared: dict[str, object], rounds: int, warm_ms: float) -> dict[str, list[float]]:
    """Milliseconds of one launch, `rounds` samples per algorithm, interleaved round by round
    (the starting algorithm rotates so that none always follows the same one). Each sample
    follows at least `warm_ms` of untimed launches of the same algorithm (one at least), as in
    convbench's timing loop, where every point runs its launches back to back: on the 2-core VM
    a launch after the cores idled is slower for the next ~40 ms (measured: im2col res2a
    8.4 -> 11.5 ms, new F4 6.7 -> 14 ms after a 0.3 s pause, recovering after 4 launches)."""
    labels = list(prepared)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    last_library = None
    gc.disable()
    try:
        for r in range(rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                run = prepared[label]
                library = _LIBRARY.get(label, "openblas")
                if library != last_library:
                    time.sleep(_SETTLE_S)
                    last_library = library
                warm_until = time.perf_counter() + warm_ms * 1e-3
                run.launch()
                while time.perf_counter() < warm_until:
                    run.launch()
                start = time.perf_counter_ns()
                run.launch()
                samples[label].append((time.perf_counter_ns() - start) * 1e-6)
    finally:
        gc.enable()
    return samples


def _short(problem: ConvProblem) -> str:
    return problem.label.split(":")[-1].replace("_branch2b", "")


def _row(problem: ConvProblem, direction: str, stat: str, ms: dict[str, float],
         load: tuple[float, float]) -> str:
    cells = " ".join(f"{ms[c]:8.1f}" if c in ms else f"{'-':>8s}" for c in COLUMNS)
    best_old = min(ms[c] for c in ("im2col", "F2 old", "F4 old"))
    best_new = min(ms[c] for c in ("im2col", "F2 new", "F4 new"))
    torch = ms.get("torch", float("nan"))
    return (f"{_short(problem):9s} {direction:10s} {stat:4s} {cells}"
            f" {ms['F4 old'] / ms['F4 new']:7.2f}x"
            f" {ms['im2col'] / ms['F4 old']:7.2f}x {ms['im2col'] / ms['F4 new']:7.2f}x"
            f" {best_old / torch:7.2f}x {best_new / torch:7.2f}x   {load[0]:.2f}-{load[1]:.2f}")


HEADER = (f"{'layer':9s} {'direction':10s} stat " + " ".join(f"{c:>8s}" for c in COLUMNS)
          + f" {'F4 o/n':>8s} {'i2c/F4o':>8s} {'i2c/F4n':>8s} {'bestO/t':>8s} {'bestN/t':>8s}"
          + "   load1")
LEGEND = """\
ms: med = median of the rounds; min = the fastest round, the launch least disturbed by other
processes (on a shared machine the nearer an idle machine's time). F4 U = new F4's filter
transform alone (inside F4 new's time in fwd and bwd_data; bwd_filter has none).
F4 o/n = old F4 time / new F4 time (speed-up). i2c/F4o, i2c/F4n = im2col time / F4 time (how
much faster F4 is than own im2col; target >= 1.3 forward). bestO/t, bestN/t = the fastest own
algorithm (im2col, F2, F4) before / after, over torch_cpu's time (target <= 1.0).
load1 = 1-minute load average before and after the layer's rounds."""


# (label, numerator, denominator) of the summary's ratios; "best old"/"best new" = the fastest
# own algorithm of the old/new engine (im2col counts in both).
SUMMARY = [("F4o/i2c", "F4 old", "im2col"), ("F4n/i2c", "F4 new", "im2col"),
           ("i2c/F4o", "im2col", "F4 old"), ("i2c/F4n", "im2col", "F4 new"),
           ("bestO/t", "best old", "torch"), ("bestN/t", "best new", "torch"),
           ("F4o/t", "F4 old", "torch"), ("F4n/t", "F4 new", "torch"), ("i2c/t", "im2col", "torch")]


def _with_best(ms: dict[str, float]) -> dict[str, float]:
    return {**ms, "best old": min(ms[c] for c in ("im2col", "F2 old", "F4 old")),
            "best new": min(ms[c] for c in ("im2col", "F2 new", "F4 new"))}


def _summary(medians: dict[str, list[dict[str, float]]]) -> str:
    """Geometric means over the layers, per direction, of the medians' ratios: the figures
    issue 16's class A targets are stated in."""
    lines = ["geomean over layers of median ratios: "
             + " ".join(f"{label:>8s}" for label, _, _ in SUMMARY)]
    for direction, rows in medians.items():
        rows = [_with_best(ms) for ms in rows]
        cells = [geomean([ms[top] / ms[bottom] for ms in rows]) if bottom in rows[0] else math.nan
                 for _, top, bottom in SUMMARY]
        lines.append(f"  {direction:10s} ({len(rows)} layers)            "
                     + " ".join(f"{c:7.2f}x" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="timed launches per algorithm")
    parser.add_argument("--before", default=BEFORE_CHUNKS,
                        help="the commit whose winograd.py is 'old' (default: before the chunks)")
    parser.add_argument("--layers", default="", help="comma-separated substrings of layer names")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--warm-ms", type=float, default=60.0,
                        help="untimed launches (of the same algorithm) before each timed one")
    parser.add_argument("--check", action="store_true",
                        help="verify every output against the float64 reference first (slow)")
    args = parser.parse_args(argv)
    wanted = [w for w in args.layers.split(",") if w]
    layers = [p for p in class_a_layers() if not wanted or any(w in p.label for w in wanted)]
    algorithms = _algorithms(args.before)
    print(f"cores {len(os.sched_getaffinity(0))}, batch 8, fp32, NCHW, {args.rounds} rounds; "
          f"{args.warm_ms:g} ms of warm-up launches before each timed one; "
          f"load average at start {os.getloadavg()}")
    print(HEADER, flush=True)
    medians: dict[str, list[dict[str, float]]] = {}
    for problem in layers:
        for direction in args.directions.split(","):
            before = os.getloadavg()[0]
            prepared = _prepare(problem, direction, algorithms, args.check)
            samples = _time(prepared, args.rounds, args.warm_ms)
            for run in prepared.values():
                run.release()
            load = (before, os.getloadavg()[0])
            for stat, summary in (("med", statistics.median), ("min", min)):
                ms = {label: summary(s) for label, s in samples.items()}
                print(_row(problem, direction, stat, ms, load), flush=True)
            medians.setdefault(direction, []).append(
                {label: statistics.median(s) for label, s in samples.items()})
    print(f"load average at end {os.getloadavg()}")
    print(_summary(medians))
    print(LEGEND)
    return 0


if __name__ == "__main__":
    sys.exit(main())
