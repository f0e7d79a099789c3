"""im2col against its own GEMM floor (issue 42's "<= 1.4x its own GEMM floor"), before and after
a change, in interleaved rounds.

Not a test: a script whose printed table goes into the diary with the machine it ran on.

    .venv/bin/python evidence/studies/im2col_floor.py [--layers train_02,conv1_1]
        [--directions fwd,bwd_data] [--threads 0,1] [--reps 9] [--before COMMIT]
        [--profile] [--raw]

The layers are cpu_compare's (batch 8, fp32, NCHW). "after" is the working tree's im2col,
"before" the harness/backends/cpu/im2col/ package at --before (default HEAD), loaded from git
under another name beside it (helper modules outside the package are today's); "floor" is the
direction's GEMM as harness/backends/cpu/gemm_floor.py defines it (the operands ready, sliced
above its FULL_BYTES and scaled up), but timed here in every round beside the two, not once
as the best of three at prepare. Each launch is checked against the float64 reference first.

Rounds as evidence/studies/im2col_strided.py times them: the three interleaved launch by launch
in an order that rotates every round, each timed launch after a pause (OpenBLAS's threads spin a
while after a call) and one untimed launch. A round during which other processes used more than
NEIGHBOUR_SHARE of a core (/proc/stat's busy time less this process's own) is dropped and taken
again, up to 3 x --reps more times: the VM is shared, and a neighbour's burst on one of its two
cores had moved two-thread rounds 2-8x (stop 56). The run-queue waits harness/contention.py
reads do not serve here: a two-thread launch's own threads (OpenBLAS's spinning workers beside
convbench's) wait for each other. Per point: medians, the median and spread of the per-round
ratios after/floor, before/floor and after/before, and after's median over the harness's own
floor (gemm_floor.floor_ms, best of three: what a sweep's `gemm_floor_ms` column holds and
studies/cpu_targets.py divides by). --threads 0 is every core (threads.ALL). --profile prints a
cProfile of after's launches instead (where its time beyond the GEMM goes).
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from harness import backends, cpu_memory, host_cores, reference
from harness.backends.cpu import gemm_floor
from harness.problem import ConvProblem
from harness.suite import load_suite
from harness.sweep import DIRECTIONS, Point
from harness.threads import cores_for, limited, label

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "harness/backends/cpu/im2col"
BATCH = 8
_SETTLE_S = 0.3     # longer than OpenBLAS's spin-wait after a call
_TOLERANCE = 1e-5   # fp32's relative L2 bound (design/measurement.md)
# A round is contended where other processes used this share of one core over its wall time;
# idle, the VM's background read 0-5% (jiffies of 10 ms: coarse, hence whole rounds).
NEIGHBOUR_SHARE = 0.1


def _busy_ticks() -> tuple[int, int]:
    """(the machine's busy clock ticks, this process's own), from /proc."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return sum(fields) - fields[3] - fields[4], int(own[11]) + int(own[12])


def _neighbour_share(before: tuple[int, int], wall_s: float) -> float:
    """Cores' worth of other processes' CPU time since `before`, over `wall_s`."""
    busy, own = _busy_ticks()
    return (busy - before[0] - (own - before[1])) / os.sysconf("SC_CLK_TCK") / wall_s


def before_im2col(commit: str):
    """The im2col package at `commit` as package `im2col_before` (its own imports renamed)."""
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{commit}:{PACKAGE}"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    folder = Path(tempfile.mkdtemp()) / "im2col_before"
    folder.mkdir()
    for name in names:
        if name.endswith(".py"):
            source = subprocess.run(["git", "show", f"{commit}:{PACKAGE}/{name}"], cwd=ROOT,
                                    check=True, capture_output=True, text=True).stdout
            source = source.replace("harness.backends.cpu.im2col", "im2col_before")
            (folder / name).write_text(source)
    sys.path.insert(0, str(folder.parent))
    spec = importlib.util.spec_from_file_location("im2col_before", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["im2col_before"] = package
    spec.loader.exec_module(package)
    from im2col_before import algorithm
    return algorithm.Im2col()


def floor_launch(p: ConvProblem, direction: str,
                 dense: bool = False) -> tuple[callable, float]:
    """The floor's GEMM as a launch, and the factor its time scales by (gemm_floor.py); with
    `dense`, its result rows contiguous, as the floor stood before fwd's rows took y's
    spacing (gemm_floor.result_row)."""
    crs = p.channels_per_group * p.kernel_h * p.kernel_w
    pixels = p.batch * p.out_h * p.out_w
    per_pixel = 4 * p.groups * (crs + p.filters_per_group)
    taken = max(1, min(pixels, int(gemm_floor.FULL_BYTES // per_pixel)))
    a_shape, b_shape = gemm_floor.operand_shapes(p.groups, p.filters_per_group, crs, direction,
                                                 taken)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    columns = b_shape[2]        # the pixels taken, or bwd_filter's C x R x S
    row = columns if dense else gemm_floor.result_row(direction, columns, p.out_h * p.out_w, 4)
    out = np.empty((p.groups, a_shape[1], row), np.float32)[..., :columns]
    return (lambda: np.matmul(a, b, out=out)), pixels / taken


def measure(p: ConvProblem, direction: str, threads: int, reps: int, algorithms: dict,
            profile: bool, raw: bool = False, dense: bool = False,
            warm_s: float = 0.0) -> dict | None:
    data = reference.make_data(p, "fp32")
    expected = reference.reference(p, direction, data)
    runs = {}
    with limited(threads):
        for name, algo in algorithms.items():
            run = algo.prepare(Point(p, direction, "fp32", "NCHW", "cpu", "im2col",
                                   threads=threads),
                               data)
            run.poison()
            run.launch()
            error = reference.relative_errors(run.output(), expected)[0]
            if not error <= _TOLERANCE:
                raise SystemExit(f"{p.name} {direction} {name}: relative L2 {error:.2e}")
            runs[name] = run.launch
        floor, scale = floor_launch(p, direction)
        runs["floor"] = floor
        if dense:
            runs["dense"] = floor_launch(p, direction, dense=True)[0]
        harness_floor = gemm_floor.floor_ms(p, direction, np.float32, threads)
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [runs["after"]() for _ in range(3)])
            print(f"== {p.name} {direction} threads {label(threads)}")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
            return None
        samples = {name: [] for name in runs}
        names = list(runs)
        contended = 0
        # Stop 63: a round where the host withheld cores (harness/host_cores.py, its GEMM read
        # well under its usual parallel speedup before and after the round) is dropped too.
        # Stop 64: judged against the capacity the machine's earlier processes stored, as a
        # sweep's points are (a study started inside a long spell had judged by its own).
        host, cores = host_cores.this_process(), cores_for(threads)
        gc.disable()
        try:
            for round_ in range(4 * reps):
                if len(samples["floor"]) == reps:
                    break
                before = host.read(cores, cores)
                taken, ticks, began = {}, _busy_ticks(), time.perf_counter()
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    time.sleep(_SETTLE_S)
                    warmed = time.perf_counter()
                    runs[name]()
                    while time.perf_counter() - warmed < warm_s:
                        runs[name]()
                    start = time.perf_counter_ns()
                    runs[name]()
                    taken[name] = (time.perf_counter_ns() - start) * 1e-6
                shared = _neighbour_share(ticks, time.perf_counter() - began) > NEIGHBOUR_SHARE
                if shared or host.withheld(cores, before, host.read(cores, cores)):
                    contended += 1
                    continue
                for name, ms in taken.items():
                    samples[name].append(ms)
        finally:
            gc.enable()
        if not samples["floor"]:
            raise SystemExit(f"{p.name} {direction}: every round contended")
    for name in {"floor", "dense"} & samples.keys():
        samples[name] = [t * scale for t in samples[name]]
    if raw:
        print(f"{p.name} {direction} {label(threads)}: " + "; ".join(
            f"{name} " + " ".join(f"{t:.1f}" for t in s) for name, s in samples.items()))

    def ratio(a: str, b: str) -> tuple[float, float, float]:
        r = [x / y for x, y in zip(samples[a], samples[b])]
        return statistics.median(r), min(r), max(r)

    medians = {name: statistics.median(s) for name, s in samples.items()}
    return {"layer": p.name, "direction": direction, "threads": label(threads), **medians,
            "rounds": f"{len(samples['floor'])}/{contended}",
            "harness_floor": harness_floor,
            "after/floor": ratio("after", "floor"), "before/floor": ratio("before", "floor"),
            "after/before": ratio("after", "before"),
            "after/harness_floor": medians["after"] / harness_floor,
            "before/harness_floor": medians["before"] / harness_floor,
            **({"after/dense": ratio("after", "dense")} if dense else {})}


def _spread(r: tuple[float, float, float]) -> str:
    return f"{r[0]:5.2f} [{r[1]:.2f}-{r[2]:.2f}]"


def main(argv: list[str] | None = None) -> int:
    cpu_memory.keep_freed_memory()   # as convbench runs measure (harness/cpu_memory.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="", help="comma-separated parts of layer names")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--threads", default="0,1", help="comma-separated; 0 = every core")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--before", default="HEAD")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--raw", action="store_true", help="print every sample too")
    parser.add_argument("--warm-s", type=float, default=0.0,
                        help="after each pause, launch for this long before the timed launch "
                             "(0: one untimed launch). Two-thread launches of "
                             "workers.run_chunks run at one core's speed for their first few "
                             "after idle cores; the harness warms up >= 0.25 s (timer.py)")
    parser.add_argument("--dense-floor", action="store_true",
                        help="also the floor with contiguous result rows (floor_launch)")
    args = parser.parse_args(argv)
    wanted = [key for key in args.layers.split(",") if key]
    layers = [p.with_batch(BATCH) for p in load_suite("cpu_compare").problems
              if not wanted or any(key in p.name for key in wanted)]
    algorithms = {"before": before_im2col(args.before),
                  "after": backends.get("cpu").algorithm("im2col")}
    commit = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    model = next(line.split(":", 1)[1].strip() for line in
                 Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    print(f"{model}, {len(os.sched_getaffinity(0))} cores, numpy {np.__version__}; before = "
          f"{args.before} ({commit}), after = the working tree; batch {BATCH}, fp32, NCHW; "
          f"{args.reps} interleaved rounds, ms; load average at start {os.getloadavg()}")
    rows = []
    for p in layers:
        for direction in args.directions.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                row = measure(p, direction, threads, args.reps, algorithms, args.profile,
                              args.raw, args.dense_floor, args.warm_s)
                if row is not None:
                    rows.append(row)
                    print(f"  {p.name} {direction} {label(threads)}: done", file=sys.stderr,
                          flush=True)
    if rows:
        print(f"{'layer':26s} {'direction':10s} {'thr':3s} {'kept/cont':>9s} {'before':>8s} "
              f"{'after':>8s} "
              f"{'floor':>8s} {'floor*':>8s} {'before/floor':>18s} {'after/floor':>18s} "
              f"{'after/before':>18s} {'b/floor*':>8s} {'a/floor*':>8s}")
        for r in rows:
            print(f"{r['layer']:26s} {r['direction']:10s} {r['threads']:3s} {r['rounds']:>9s} "
                  f"{r['before']:8.2f} "
                  f"{r['after']:8.2f} {r['floor']:8.2f} {r['harness_floor']:8.2f} "
                  f"{_spread(r['before/floor']):>18s} {_spread(r['after/floor']):>18s} "
                  f"{_spread(r['after/before']):>18s} {r['before/harness_floor']:8.2f} "
                  f"{r['after/harness_floor']:8.2f}"
                  + (f" dense {r['dense']:.2f}, after/dense {_spread(r['after/dense'])}"
                     if "dense" in r else ""))
        print("floor* = gemm_floor.floor_ms (best of three at prepare, the sweep's column); "
              "ratios to floor are per round, [lowest-highest]; kept/cont = rounds kept / "
              f"dropped as contended (neighbours over {NEIGHBOUR_SHARE:.0%} of a core, or the host "
              "withholding cores: harness/host_cores.py)")
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
