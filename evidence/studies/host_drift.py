"""Where does a quiet CPU machine's run-to-run drift come from? (issue 36)

    python evidence/studies/host_drift.py [--seconds 180] [--suite quick]

Times, round after round for --seconds, three fixed probes and every forward and bwd_filter CPU
point of the suite (prepared once, so buffers, allocator and code stay put):
  - each vCPU alone: a single-threaded 192x192 matmul pinned to one core, then the next;
  - all cores together: a 384x384 matmul on every core (one fork/join of BLAS threads);
  - Python alone: a pure-Python loop.
It then cuts the rounds into ~2 s windows and prints each series' spread (slowest window over
fastest), its correlation with each probe, and how much dividing the points by each probe
shrinks their window-to-window spread. A probe that moves with the points names the cause: on
the 2-core AMD EPYC VM (2026-11-27) the all-cores matmul moved with every point (correlation
0.84-0.96) while the single-core probes hardly did (0.2-0.8), and the run queue and steal
showed nothing: the host not running both vCPUs at once, which stalls every fork/join of a
multi-threaded point. Nothing is written; read the table.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from harness import runner, suite
from harness.executor import PointExecutor, algorithm_for


def _time_ms(work, repeats: int = 3) -> float:
    start = time.perf_counter_ns()
    for _ in range(repeats):
        work()
    return (time.perf_counter_ns() - start) / 1e6 / repeats


def _probes() -> dict[str, object]:
    small = np.random.default_rng(0).random((192, 192), dtype=np.float32)
    large = np.random.default_rng(1).random((384, 384), dtype=np.float32)
    cores = sorted(os.sched_getaffinity(0))

    def on_core(core: int):
        def work():
            os.sched_setaffinity(0, {core})
            with threadpool_limits(1):
                for _ in range(4):
                    small @ small
            os.sched_setaffinity(0, set(cores))
        return work

    def python_loop():
        total = 0
        for i in range(30_000):
            total += i * i

    probes = {f"core {c} alone": on_core(c) for c in cores}
    probes["all cores (384 matmul)"] = lambda: large @ large
    probes["Python loop"] = python_loop
    return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--suite", default="quick")
    args = parser.parse_args()
    points = [p for p in runner.plan(suite.load_suite(args.suite)).points
              if p.backend == "cpu" and p.direction in ("fwd", "bwd_filter")]
    executor = PointExecutor(0)
    launches = {}
    for p in points:
        prepared = algorithm_for(p).prepare(p, executor.cached_data(p))
        prepared.launch()
        launches[f"{p.problem.name.split(':')[-1]} {p.direction} {p.algorithm}"] = prepared.launch
    probes = _probes()
    series = {**probes, **launches}
    rounds = []
    end = time.time() + args.seconds
    while time.time() < end:
        rounds.append([_time_ms(work, 2 if name in launches else 3)
                       for name, work in series.items()])
    _report(np.array(rounds), list(series), len(probes))


def _report(rounds: np.ndarray, names: list[str], probes: int) -> None:
    per_window = max(1, len(rounds) // 90)
    windows = np.array([np.median(rounds[i:i + per_window], axis=0)
                        for i in range(0, len(rounds) - per_window + 1, per_window)])
    logs = np.log(windows / np.median(rounds, axis=0))
    corr = np.corrcoef(logs.T)
    print(f"{len(rounds)} rounds, {len(windows)} windows of {per_window}")
    header = " ".join(f"{n[:14]:>14}" for n in names[:probes])
    print(f"{'series':36} {'median ms':>9} {'spread':>6}  correlation with: {header}")
    for i, name in enumerate(names):
        cells = " ".join(f"{corr[i, j]:>+14.2f}" for j in range(probes))
        print(f"{name[:36]:36} {np.median(rounds[:, i]):>9.3f} "
              f"{np.exp(np.ptp(logs[:, i])):>6.2f}  {'':18}{cells}")
    points = logs[:, probes:]
    for j in range(probes):
        shrunk = np.std(points - logs[:, j:j + 1], axis=0).mean()
        print(f"points' window sd {np.std(points, axis=0).mean():.3f}; divided by "
              f"'{names[j]}': {shrunk:.3f}")


if __name__ == "__main__":
    main()
