"""Does the harness's GPU time agree with what a profiler sees? (issues 4 and 5 acceptance)

For sampled points (ResNet-50 layers, several precisions, layouts and algorithms; legacy cuDNN,
graph-API heuristic picks and PyTorch) this compares the harness's median per-call time (warm:
replay of a CUDA graph of the calls) with the GPU activity (kernels, memsets) CUPTI records through
torch.profiler for the same calls issued as a user issues them (stream order, back to back). The
profiler's time per call is the union of the activity intervals: the sum of durations where
kernels run one after another, the wall time where one call's kernels overlap (FFT). Also shown:
the held-stream timer (the fallback when calls cannot be captured), a naive timing (events around
back-to-back calls, nothing holding the stream), and the effect of a 1 ms host sleep added to the
launcher on both timers.

    python benchmarks/gpu_fidelity.py [--batch 32] [--out fidelity.csv]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pandas as pd

from harness import backends, reference
from harness.executor import PointExecutor, algorithm_for
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions
from harness.graph_timer import time_cuda_graph
from harness.timer import _spin, time_cuda

TIMING = TimingOptions(budget_ms=100, min_samples=20, max_samples=200, noise_target=0.002)
CANDIDATES = [  # (layer, direction, precision, layout, algorithm)
    ("res2a_branch2b", "fwd", "fp32", "NCHW", "winograd_nonfused"),
    ("res2a_branch2b", "fwd", "fp16", "NHWC", "implicit_precomp_gemm"),
    ("res2a_branch2b", "bwd_data", "fp16", "NHWC", "algo_1"),
    ("res2a_branch2b", "bwd_filter", "bf16", "NHWC", "algo_1"),
    ("res2a_branch2b", "fwd", "fp32", "NCHW", "fft_tiling"),
    ("res2a_branch1", "fwd", "fp16", "NHWC", "implicit_precomp_gemm"),
    ("res2b_branch2a", "fwd", "bf16", "NHWC", "implicit_precomp_gemm"),
    ("res3a_branch2b", "fwd", "tf32", "NCHW", "implicit_precomp_gemm"),
    ("res3a_branch2b", "bwd_data", "fp32", "NCHW", "winograd_nonfused"),
    ("res3a_branch2c", "bwd_filter", "fp16", "NHWC", "algo_1"),
    ("res3b_branch2a", "bwd_data", "bf16", "NHWC", "algo_1"),
    ("res4a_branch2b", "fwd", "fp16", "NHWC", "implicit_precomp_gemm"),
    ("res4a_branch2b", "fwd", "fp32", "NCHW", "winograd_nonfused"),
    ("res4a_branch2c", "fwd", "bf16", "NCHW", "implicit_precomp_gemm"),
    ("res4b_branch2a", "bwd_data", "bf16", "NHWC", "algo_1"),
    ("res4b_branch2a", "bwd_filter", "fp16", "NHWC", "algo_1"),
    ("res5a_branch2b", "fwd", "bf16", "NHWC", "implicit_precomp_gemm"),
    ("res5a_branch2b", "bwd_data", "fp32", "NCHW", "winograd_nonfused"),
    ("res5a_branch2c", "fwd", "fp16", "NHWC", "implicit_precomp_gemm"),
    ("res5b_branch2a", "bwd_filter", "bf16", "NHWC", "algo_1"),
    ("res3a_branch1", "fwd", "fp32", "NCHW", "implicit_precomp_gemm"),
    ("res4a_branch1", "bwd_data", "fp16", "NCHW", "algo_1"),
    ("res5a_branch1", "fwd", "tf32", "NHWC", "implicit_precomp_gemm"),
    ("conv1", "fwd", "fp16", "NHWC", "implicit_precomp_gemm"),
    ("res2a_branch2b", "bwd_filter", "fp32", "NCHW", "fft"),
    ("res4a_branch2b", "bwd_data", "fp16", "NCHW", "fft_tiling"),
]
# The same check for the other GPU backends (issue 5): graph-API heuristic picks and PyTorch.
OTHER_BACKENDS = [  # (backend, layer, direction, precision, layout)
    ("cudnn_graph", "res2a_branch2b", "fwd", "fp16", "NHWC"),
    ("cudnn_graph", "res3a_branch2b", "bwd_data", "bf16", "NHWC"),
    ("cudnn_graph", "res4a_branch2c", "bwd_filter", "fp16", "NHWC"),
    ("cudnn_graph", "res5a_branch2b", "fwd", "fp32", "NHWC"),
    ("cudnn_graph", "res4b_branch2a", "fwd", "tf32", "NCHW"),
    ("cudnn_graph", "res5b_branch2a", "bwd_data", "bf16", "NCHW"),
    ("torch_gpu", "res2a_branch2b", "fwd", "fp16", "NHWC"),
    ("torch_gpu", "res3a_branch2b", "bwd_data", "bf16", "NHWC"),
    ("torch_gpu", "res4a_branch2c", "bwd_filter", "fp16", "NHWC"),
    ("torch_gpu", "res5a_branch2b", "fwd", "tf32", "NCHW"),
    ("torch_gpu", "res4b_branch2a", "fwd", "bf16", "NCHW"),
]


def _profiled_ms(prepared, calls: int = 20) -> tuple[float, float]:
    """Per call, from CUPTI's records of `calls` back-to-back calls (stream held while queued):
    (union of the activity intervals, summed activity durations)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    prepared.stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _spin(prepared.stream, 1.5 * calls * 0.5 + 1.0)
        for _ in range(calls):
            prepared.launch()
        prepared.stream.synchronize()
    intervals = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                       if e.device_type == torch.autograd.DeviceType.CUDA
                       and "spin_ns" not in e.name)
    summed = sum(end - start for start, end in intervals)
    return _union_length(intervals) / calls / 1e3, summed / calls / 1e3


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by sorted intervals, overlaps counted once."""
    covered, reach = 0.0, float("-inf")
    for start, end in intervals:
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def _naive_ms(prepared, calls: int = 30) -> float:
    """Events around back-to-back calls with nothing holding the stream: what a naive timer sees."""
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(prepared.stream)
    for _ in range(calls):
        prepared.launch()
    end.record(prepared.stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / calls


def _points(batch: int) -> list[Point]:
    problems = {p.name.split(":")[-1]: p for p in load_suite("resnet50").problems}
    points = [Point(problems[layer].with_batch(batch), direction, precision, layout, "cudnn",
                    algorithm, None, TIMING)
              for layer, direction, precision, layout, algorithm in CANDIDATES]
    for backend, layer, direction, precision, layout in OTHER_BACKENDS:
        algorithm = backends.get(backend).algorithms()[0]
        point = Point(problems[layer].with_batch(batch), direction, precision, layout, backend,
                      algorithm.name, None, TIMING)
        if algorithm.expands:   # the graph API's heuristic (mode A) pick comes first
            variants = algorithm.variants(point, reference.make_data(point.problem, precision))
            point = replace(point, algorithm=variants[0])
        points.append(point)
    return points


def _busy_gpu(ms: float = 50.0) -> None:
    """Keep the GPU busy for a moment so its clock is up again after an idle gap (backend set-up
    between points leaves it idle long enough to drop, and the first point after it read up to
    6% slow in an earlier run of this script)."""
    import cupy
    a = cupy.ones((2048, 2048), dtype=cupy.float32)
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < ms:
        a @ a
        cupy.cuda.Device().synchronize()


def _median(samples) -> float:
    return sorted(samples)[len(samples) // 2]


def _sleepy(launch):
    def launch_after_sleep() -> None:
        time.sleep(0.001)
        launch()
    return launch_after_sleep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default="fidelity.csv")
    args = parser.parse_args()
    executor = PointExecutor()
    rows = []
    for point in _points(args.batch):
        _busy_gpu()
        harness_m = executor.measure_one(point)
        if not harness_m.ok:
            print(f"skip {point.point_id}: {harness_m.status} {harness_m.reason[:80]}")
            continue
        data = reference.make_data(point.problem, point.precision)
        prepared = algorithm_for(point).prepare(point, data)
        prepared.launch()
        profiled, summed = _profiled_ms(prepared)
        held = _median(time_cuda(prepared.launch, prepared.stream, TIMING).samples_ms)
        sleepy = _sleepy(prepared.launch)
        rows.append({
            "backend": point.backend,
            "point": " ".join((point.problem.name.split(":")[-1], point.direction,
                               point.precision, point.layout, point.algorithm[:40])),
            "timer": harness_m.extras.get("gpu_timer"),
            "sm_clock_mhz": harness_m.extras.get("sm_clock_mhz"),
            "harness_ms": harness_m.median_ms, "profiler_ms": profiled,
            "profiler_sum_ms": summed, "held_stream_ms": held,
            "naive_ms": _naive_ms(prepared), "host_ms": harness_m.host_ms,
            "graph_1ms_sleep_ms": _median(time_cuda_graph(sleepy, prepared.stream,
                                                          TIMING).samples_ms),
            "held_1ms_sleep_ms": _median(time_cuda(sleepy, prepared.stream, TIMING).samples_ms)})
        prepared.release()
    _summarise(pd.DataFrame(rows), args.out)


def _summarise(df: pd.DataFrame, out: str) -> None:
    df["harness/profiler"] = df["harness_ms"] / df["profiler_ms"]
    df["held/profiler"] = df["held_stream_ms"] / df["profiler_ms"]
    df["naive/profiler"] = df["naive_ms"] / df["profiler_ms"]
    df["graph_sleep/harness"] = df["graph_1ms_sleep_ms"] / df["harness_ms"]
    df["held_sleep/held"] = df["held_1ms_sleep_ms"] / df["held_stream_ms"]
    df.to_csv(out, index=False)
    pd.set_option("display.width", 250)
    print(df.round(4).to_string(index=False))
    small = df["harness_ms"] < 0.05
    print(f"\ntimers used: {df['timer'].value_counts().to_dict()}")
    for column in ("harness/profiler", "held/profiler"):
        off = (df[column] - 1).abs()
        print(f"{column}: {(off <= 0.03).sum()} of {len(df)} within 3%, "
              f"{(off[small] <= 0.05).sum()} of {small.sum()} under 50 us within 5%; "
              f"ratios {df[column].min():.3f} to {df[column].max():.3f}")
    for backend, part in df.groupby("backend"):
        off = (part["harness/profiler"] - 1).abs()
        print(f"  {backend}: {(off <= 0.03).sum()} of {len(part)} within 3%, ratios "
              f"{part['harness/profiler'].min():.3f} to {part['harness/profiler'].max():.3f}")
    print(f"naive timing / profiler: median {df['naive/profiler'].median():.2f}x, "
          f"max {df['naive/profiler'].max():.2f}x")
    for column in ("graph_sleep/harness", "held_sleep/held"):
        print(f"1 ms host sleep in the launcher ({column}): moved the time by at most "
              f"{(df[column] - 1).abs().max() * 100:.2f}%")


if __name__ == "__main__":
    main()
