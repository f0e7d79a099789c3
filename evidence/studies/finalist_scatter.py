"""Do two candidates that run the same kernels read the same time? (issue 38, 2026-11-27)

The default ResNet-50 run put PyTorch's pick 3-4% ahead of the best own candidate at two points
where both run the same cuDNN kernels (explain_point.py: res3a_branch2c bwd_filter bf16 NHWC,
nvjet splitK + splitKreduce; res5b_branch2a fwd bf16 NHWC, nvjet 64x104). This measures, for
each point, the candidates named on the command line:
  (A) R rounds, each candidate measured afresh (prepare, verify, time) in a shuffled order;
  (B) each candidate prepared once, then timed R times in a shuffled order per round;
and prints each candidate's per-round medians and the per-round ratio of each to the first.
(A)'s spread is what a sweep's row can land on; (B)'s is what one preparation holds.

    python3 evidence/studies/finalist_scatter.py ROUNDS LAYER DIRECTION PRECISION LAYOUT \
        torch_gpu:cudnn_benchmark cudnn_graph:eng62_k25=1 cudnn:algo_1
"""
from __future__ import annotations

import random
import statistics
import sys
from dataclasses import replace

from harness import reference
from harness.executor import PointExecutor, algorithm_for
from harness.point_timing import time_gpu
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions

TIMING = TimingOptions(budget_ms=15, min_samples=17)


def _point(layer, direction, precision, layout, spec) -> Point:
    backend, algorithm = spec.split(":", 1)
    problems = {p.name.split(":")[-1]: p for p in load_suite("resnet50").problems}
    return Point(problems[layer].with_batch(32), direction, precision, layout, backend,
                 algorithm, None, TIMING)


def _line(name: str, values: list[float], first: list[float] | None) -> str:
    us = [v * 1e3 for v in values]
    text = f"  {name:45s} median {statistics.median(us):7.2f} us  range {min(us):.2f}-{max(us):.2f}"
    if first is not None:
        ratios = [v / f for v, f in zip(values, first)]
        text += (f"  ratio to first: median {statistics.median(ratios):.3f}"
                 f" range {min(ratios):.3f}-{max(ratios):.3f}")
    return text


def main() -> None:
    rounds, layer, direction, precision, layout, *specs = sys.argv[1:]
    rounds = int(rounds)
    points = [_point(layer, direction, precision, layout, s) for s in specs]
    fresh = {s: [] for s in specs}
    executor = PointExecutor()
    for _ in range(rounds):
        order = list(zip(specs, points))
        random.shuffle(order)
        for spec, point in order:
            m = executor.measure_one(point)
            assert m.status == "ok", (spec, m.status, m.reason)
            fresh[spec].append(m.median_ms)
    print(f"== {layer} {direction} {precision} {layout}: (A) {rounds} fresh measurements each")
    for s in specs:
        print(_line(s, fresh[s], None if s == specs[0] else fresh[specs[0]]))
    prepared = {}
    for spec, point in zip(specs, points):
        data = reference.make_data(point.problem, point.precision)
        prepared[spec] = algorithm_for(point).prepare(point, data)
    held = {s: [] for s in specs}
    for _ in range(rounds):
        order = list(specs)
        random.shuffle(order)
        for spec in order:
            timing = time_gpu(prepared[spec], replace(TIMING), None)
            held[spec].append(statistics.median(timing.samples_ms))
    print(f"   (B) one preparation each, timed {rounds} times")
    for s in specs:
        print(_line(s, held[s], None if s == specs[0] else held[specs[0]]))
    for p in prepared.values():
        p.release()


if __name__ == "__main__":
    main()
