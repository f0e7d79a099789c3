"""Replay the race (harness/stopping.py) on a run whose graph-API plans were all timed in full:
for each margin, how many plans a race would have stopped, whether any of them was within 2% of
its point's best, and how close the median of a row's first four samples is to its full median.

    python evidence/studies/race_replay.py \
        evidence/runs/resnet50-gpu-default-before-race-partial-nvidia-h100-2026-11-27.parquet

Plans are replayed in the order the run measured them (the journal's), each racing the fastest
median among the plans of its point (layer, direction, precision, layout) before it.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from harness import store

POINT = ["layer", "direction", "precision", "layout"]
HEAT = 4


def replay(graph, margin: float) -> tuple[int, int, int]:
    rows = raced = close = 0
    for _, point in graph.groupby(POINT, sort=False):
        best = np.inf
        final = point["median_ms"].min()
        for samples, median in zip(point["samples_ms"], point["median_ms"]):
            rows += 1
            if min(list(samples)[:HEAT]) > best * (1 + margin):
                raced += 1
                close += median < final * 1.02
            else:
                best = min(best, median)
    return rows, raced, close


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    args = parser.parse_args()
    df = store.load(args.results)
    graph = df[(df["backend"] == "cudnn_graph") & (df["status"] == "ok")]
    for margin in (0.1, 0.15, 0.2, 0.3):
        rows, raced, close = replay(graph, margin)
        print(f"margin {margin:.0%}: {raced} of {rows} plans raced out ({raced / rows:.1%}); "
              f"raced out within 2% of their point's best: {close}")
    heat = [statistics.median(list(s)[:HEAT]) / statistics.median(list(s))
            for s in graph["samples_ms"]]
    low, high = np.percentile(heat, [1, 99])
    inside = np.mean([abs(r - 1) <= 0.008 for r in heat])
    print(f"median of the first {HEAT} samples / full median: 1st-99th percentile "
          f"{low:.4f}-{high:.4f}; within 0.8% at {inside:.1%} of {len(heat)} rows")


if __name__ == "__main__":
    main()
