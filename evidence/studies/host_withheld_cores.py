"""Issue 42, stop 63: which probe shows the host's spells without both vCPUs (host_cores.py)?

One CPU point (cpu_compare's res2a_branch2b bwd_filter, im2col, fp32, every core) is prepared
once; each iteration then reads square float32 matmuls of 384 (contention's probe), 256 and 192
at two threads and at one (medians of 5, 9 and 15), and times three launches of the point (the
mean of the last two: the ground truth), 0.1 s apart. A launch over --slow-ms marks a spell (its
buffers never change, so only the host can make it slow). Prints the raw rows (conv ms, the
three 2-thread probes, the three 1-thread probes), then per probe the parallel speedup outside
and inside the spells, and the spells' lengths.

    .venv/bin/python evidence/studies/host_withheld_cores.py [--iterations 160] [--slow-ms 22]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from threadpoolctl import threadpool_limits

from harness import backends, reference, threads
from harness.suite import load_suite
from harness.sweep import Point

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=160)
parser.add_argument("--slow-ms", type=float, default=22.0)
args = parser.parse_args()
problem = next(q for q in load_suite("cpu_compare").problems if q.name.endswith("res2a_branch2b"))
data = reference.make_data(problem, "fp32")
algo = next(a for a in backends.get("cpu").algorithms() if a.name == "im2col")
with threads.limited(threads.ALL):
    run = algo.prepare(Point(problem, "bwd_filter", "fp32", "NCHW", "cpu", "im2col",
                             threads=threads.ALL), data)
    run.launch()
SIZES = ((384, 5), (256, 9), (192, 15))
square = {n: np.ones((n, n), dtype=np.float32) for n, _ in SIZES}


def probe(n: int, cores: int, reps: int) -> float:
    times = []
    with threadpool_limits(cores):
        for _ in range(reps):
            start = time.perf_counter_ns()
            square[n] @ square[n]
            times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


rows = []
for _ in range(args.iterations):
    readings = [probe(n, 2, r) for n, r in SIZES] + [probe(n, 1, r) for n, r in SIZES]
    with threads.limited(threads.ALL):
        run.launch()
        start = time.perf_counter()
        run.launch()
        run.launch()
        conv = (time.perf_counter() - start) * 500
    rows.append([conv, *readings])
    print(" ".join(f"{x:.4f}" for x in rows[-1]), flush=True)
    time.sleep(0.1)
data = np.array(rows)
slow = data[:, 0] > args.slow_ms
print(f"{len(data)} iterations, {slow.sum()} in a spell (launch over {args.slow_ms} ms); launch ms "
      f"pct 5/50/95/max {np.round(np.percentile(data[:, 0], [5, 50, 95, 100]), 1)}")
for j, (n, _) in enumerate(SIZES):
    speedup = data[:, 4 + j] / data[:, 1 + j]
    inside = np.round(np.percentile(speedup[slow], [0, 50, 100]), 2) if slow.any() else "-"
    print(f"{n}: speedup outside the spells pct 1/5/50/90 "
          f"{np.round(np.percentile(speedup[~slow], [1, 5, 50, 90]), 2)}, inside min/median/max "
          f"{inside}")
lengths, run_length = [], 0
for s in slow:
    if s:
        run_length += 1
    elif run_length:
        lengths.append(run_length)
        run_length = 0
print("spell lengths in iterations:", lengths + ([run_length] if run_length else []))
