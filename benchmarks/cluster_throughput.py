"""How many rows a second the one client and its journal take, and what the Dask scheduler costs
a shard: the numbers that say where `--cluster` stops scaling (docs/clusters.md).

Points of the fake backend cost next to nothing (simulated timings, 4x4 problems), so what is
measured is the harness around them:
  1. the journal alone: store.to_row + ResultWriter.append in this process, rows/s;
  2. end to end: shards of fake points on N local Dask workers, rows written through the same
     client loop as `convbench run --cluster`, rows/s;
  3. the scheduler: N workers running no-op tasks, seconds of overhead per task (= per shard).

Usage: python benchmarks/cluster_throughput.py [--workers 16] [--shards 400] [--limits 16]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import backends, cluster, env, runner, store
from harness.problem import ConvProblem
from harness.sweep import AlgorithmChoice, Sweep, TimingOptions

# The fake backend is test-only (tests/conftest.py registers it the same way).
backends.register("fake", "harness.backends.fake:FakeBackend")


def _sweep(shards: int, limits: int) -> Sweep:
    """`shards` problems at one precision: one shard each, 3 directions x `limits` rows."""
    problems = tuple(ConvProblem(1, 2, 4, 4, 1 + i, 1, 1, name=f"p{i}") for i in range(shards))
    return Sweep("throughput", problems, directions=("fwd", "bwd_data", "bwd_filter"),
                 precisions=("fp64",), workspace_limits=tuple(range(limits)),
                 backends=(AlgorithmChoice("fake", ("exact",)),),
                 timing=TimingOptions(min_samples=1, max_samples=1))


def journal_rows_per_s(measurements: list, folder: Path) -> float:
    fingerprint = env.fingerprint(include_gpu=False)
    writer = store.ResultWriter(folder / "journal.parquet")
    start = time.perf_counter()
    for m in measurements:
        writer.append(store.to_row(m, "r", "throughput", fingerprint, store.finished_now()))
    elapsed = time.perf_counter() - start
    writer.close()
    return len(measurements) / elapsed


def cluster_rows_per_s(work: Sweep, workers: int, folder: Path) -> tuple[float, int, float]:
    points = list(runner.plan(work).points)
    shards = runner.shards(points)
    with cluster.connect("local", workers, None, gpu=False) as dask:
        list(dask.run(shards[:workers], seed=0))            # warm every worker first
        writer = store.ResultWriter(folder / "cluster.parquet")
        start = time.perf_counter()
        rows = 0
        for shard in dask.run(shards, seed=0):
            for m, finished_at in zip(shard.measurements, shard.finished_at):
                writer.append(store.to_row(m, "r", "throughput", shard.env, finished_at))
                rows += 1
        elapsed = time.perf_counter() - start
        writer.close()
        per_task = _scheduler_s_per_task(dask.client, 4 * len(shards))
    return rows / elapsed, rows, per_task


def _noop(index: int) -> int:
    return index


def _scheduler_s_per_task(client, tasks: int) -> float:
    from distributed import as_completed
    start = time.perf_counter()
    futures = client.map(_noop, range(tasks), pure=False)
    for future in as_completed(futures):
        future.release()
    return (time.perf_counter() - start) / tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--shards", type=int, default=400)
    parser.add_argument("--limits", type=int, default=16)
    args = parser.parse_args()
    work = _sweep(args.shards, args.limits)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sample = []
        runner.run_points(runner.plan(_sweep(20, args.limits)).points, sample.append)
        journal = journal_rows_per_s(sample * 50, folder)
        rate, rows, per_task = cluster_rows_per_s(work, args.workers, folder)
    print(f"journal alone: {journal:,.0f} rows/s ({len(sample) * 50} rows)")
    print(f"{args.workers} local workers, {args.shards} shards of "
          f"{3 * args.limits} rows: {rate:,.0f} rows/s end to end ({rows} rows)")
    print(f"scheduler: {per_task * 1e3:.2f} ms per task ({args.workers} workers, no-op tasks)")


if __name__ == "__main__":
    main()
