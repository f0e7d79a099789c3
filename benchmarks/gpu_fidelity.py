"""Does the harness's GPU time agree with what a profiler sees? (issue 4 acceptance)

For sampled cuDNN points (ResNet-50 layers, several precisions, layouts and algorithms) this
compares the harness's median per-call time (CUDA events, stream held while enqueueing) with the
summed durations of the GPU activities (kernels, memsets) that CUPTI records through
torch.profiler for the same call, and with a naive timing (events around back-to-back calls, no
hold). Then it adds a 1 ms host sleep to the launcher of a ~20 us point and checks the harness's
time moves by less than 5%.

    python benchmarks/gpu_fidelity.py [--points 24] [--out fidelity.csv]
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from harness import backends, reference
from harness.runner import PointExecutor
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions
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


def _profiled_ms(prepared, calls: int = 20) -> tuple[float, float]:
    """Per call, as CUPTI records it with the calls queued back to back (stream held):
    (summed durations of the GPU activities, first start to last end divided by calls)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    prepared.stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _spin(prepared.stream, 1.5 * calls * 0.5 + 1.0)
        for _ in range(calls):
            prepared.launch()
        prepared.stream.synchronize()
    device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
              and "spin_ns" not in e.name]
    total = sum(e.time_range.elapsed_us() for e in device)
    span = max(e.time_range.end for e in device) - min(e.time_range.start for e in device)
    return total / calls / 1e3, span / calls / 1e3


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
    return [Point(problems[layer].with_batch(batch), direction, precision, layout, "cudnn",
                  algorithm, None, TIMING)
            for layer, direction, precision, layout, algorithm in CANDIDATES]


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
    cudnn = backends.get("cudnn")
    rows = []
    for point in _points(args.batch):
        harness_m = executor.measure([point])[0]
        if not harness_m.ok:
            print(f"skip {point.point_id}: {harness_m.status} {harness_m.reason[:80]}")
            continue
        data = reference.make_data(point.problem, point.precision)
        prepared = cudnn.algorithm(point.algorithm).prepare(point, data)
        prepared.launch()
        profiled, span = _profiled_ms(prepared)
        naive = _naive_ms(prepared)
        sleepy = time_cuda(_sleepy(prepared.launch), prepared.stream, TIMING)
        sleepy_ms = sorted(sleepy.samples_ms)[len(sleepy.samples_ms) // 2]
        prepared.release()
        rows.append({"point": point.point_id.split("|", 2)[0] + " " + " ".join(
                         (point.direction, point.precision, point.layout, point.algorithm)),
                     "harness_ms": harness_m.median_ms, "profiler_ms": profiled,
                     "profiler_span_ms": span,
                     "naive_ms": naive, "host_ms": harness_m.host_ms,
                     "with_1ms_sleep_ms": sleepy_ms})
    df = pd.DataFrame(rows)
    df["harness/profiler"] = df["harness_ms"] / df["profiler_ms"]
    df["harness/span"] = df["harness_ms"] / df["profiler_span_ms"]
    df["naive/profiler"] = df["naive_ms"] / df["profiler_ms"]
    df["sleep/harness"] = df["with_1ms_sleep_ms"] / df["harness_ms"]
    df.to_csv(args.out, index=False)
    pd.set_option("display.width", 200)
    print(df.round(4).to_string(index=False))
    within = (df["harness/profiler"] - 1).abs() <= 0.03
    small = df["harness_ms"] < 0.05
    print(f"\n{within.sum()} of {len(df)} points within 3% of the profiler's kernel time; "
          f"worst ratio {df['harness/profiler'].max():.3f} / {df['harness/profiler'].min():.3f}")
    print(f"kernels under 50 us: {small.sum()}, within 5%: "
          f"{((df['harness/profiler'] - 1).abs()[small] <= 0.05).sum()}")
    span_ok = (df["harness/span"] - 1).abs() <= 0.03
    print(f"against the profiler's back-to-back span per call: {span_ok.sum()} of {len(df)} "
          f"within 3%; ratios {df['harness/span'].min():.3f} to {df['harness/span'].max():.3f}")
    print(f"naive timing / profiler: median {df['naive/profiler'].median():.2f}x, "
          f"max {df['naive/profiler'].max():.2f}x")
    print(f"1 ms host sleep in the launcher moved the harness time by at most "
          f"{(df['sleep/harness'] - 1).abs().max() * 100:.2f}%")


if __name__ == "__main__":
    main()
