"""im2col's bwd_data at stride 2 with K < 2C: compiled col2im against the phase correlations, on
shapes beyond cpu_compare's one (DeepBench train_06): ResNet-50 v1.5's stride-2 3x3 layers
(C = K), batch 8, fp32, one thread and all cores.

Not a test: a script whose printed table goes into the evidence log with the machine it ran on.

    .venv/bin/python evidence/studies/col2im_stride2.py [--reps 5]

Both ways are prepared by harness's Im2col with its col2im ratio forced (0: col2im; 1e9:
correlations), each checked against the float64 reference, then timed in interleaved rounds,
back to back after a warm-up of at least 0.3 s of launches (as harness/timer.py warms a CPU
point up: the cores idle before it, two-thread launches run slow for their first few; see
evidence/logs/col2im-two-threads-after-idle-...). Per shape and thread count: medians and the
median of the per-round ratios col2im / correlations, with their range.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness import reference
from harness.backends.cpu import CpuBackend
from harness.backends.cpu.im2col import algorithm as im2col
from harness.problem import ConvProblem
from harness.sweep import Point
from harness.threads import ALL, cores_for, limited

SHAPES = [
    ConvProblem(8, 128, 56, 56, 128, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                pad_bottom=1, pad_right=1, name="resnet50v1.5:layer2.0.conv2"),
    ConvProblem(8, 256, 28, 28, 256, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                pad_bottom=1, pad_right=1, name="resnet50v1.5:layer3.0.conv2"),
    ConvProblem(8, 512, 14, 14, 512, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                pad_bottom=1, pad_right=1, name="resnet50v1.5:layer4.0.conv2"),
    ConvProblem(8, 64, 112, 112, 64, 3, 3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                pad_bottom=1, pad_right=1, name="c64_112_s2"),
    ConvProblem(8, 32, 79, 341, 32, 5, 10, stride_h=2, stride_w=2, name="deepbench:train_06"),
]
WARM_S = 0.3


def prepared(p: ConvProblem, threads: int, ratio: float, data, expected):
    im2col.COL2IM_MIN_RATIO = ratio
    run = CpuBackend().algorithm("im2col").prepare(
        Point(p, "bwd_data", "fp32", "NCHW", "cpu", "im2col", threads=threads), data)
    run.launch()
    error = reference.relative_errors(run.output(), expected)[0]
    if not error <= 1e-4:
        raise SystemExit(f"{p.name} ratio {ratio}: relative L2 {error:.2e}")
    return run.launch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"{'shape':30} thr  col2im_ms  corr_ms  col2im/corr [range]")
    for p in SHAPES:
        data = reference.make_data(p, "fp32")
        expected = reference.reference(p, "bwd_data", data)
        for threads in (1, ALL):
            with limited(threads):
                runs = {"col2im": prepared(p, threads, 0, data, expected),
                        "corr": prepared(p, threads, 1e9, data, expected)}
                taken = {name: [] for name in runs}
                for round_ in range(args.reps):
                    for name in list(runs)[round_ % 2:] + list(runs)[:round_ % 2]:
                        began = time.perf_counter()
                        while time.perf_counter() - began < WARM_S:
                            runs[name]()
                        start = time.perf_counter_ns()
                        runs[name]()
                        taken[name].append((time.perf_counter_ns() - start) * 1e-6)
            ratios = sorted(c / r for c, r in zip(taken["col2im"], taken["corr"]))
            label = "1" if threads == 1 else f"all ({cores_for(threads)})"
            print(f"{p.name:30} {label:4} {statistics.median(taken['col2im']):9.2f} "
                  f"{statistics.median(taken['corr']):8.2f}  {statistics.median(ratios):.2f} "
                  f"[{ratios[0]:.2f}-{ratios[-1]:.2f}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
