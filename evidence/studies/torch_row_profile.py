"""Where a PyTorch convolution row's time goes when its shape is new to the process (issue 39: in
the selection sweep each torch_gpu row costs ~250 ms over two processes against ~15 ms for a
graph-API plan). Warms imports, handles and the autotuner on one layer, then measures LAYERS'
three directions (each a shape the autotuner has not seen); prints each row's stage times, and
profiles the second half of the layers (cuDNN's kernel modules mostly loaded by then, as in a
sweep) under cProfile: their wall and the functions with the most cumulative and own time.

    python evidence/studies/torch_row_profile.py [PRECISION] [LAYOUT] [LAYER ...]
"""
import cProfile
import pstats
import sys
import time

from harness.executor import PointExecutor
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions

precision = sys.argv[1] if len(sys.argv) > 1 else "fp16"
layout = sys.argv[2] if len(sys.argv) > 2 else "NHWC"
problems = {p.name.rsplit(":", 1)[-1]: p for p in load_suite("resnet50").problems}
layers = sys.argv[3:] or [name for name in problems if name != "conv1"]
timing = TimingOptions(min_samples=10, gpu_processes=1, budget_ms=10)


def points(layer: str) -> list[Point]:
    return [Point(problems[layer], direction, precision, layout, "torch_gpu", "cudnn_benchmark",
                  None, timing) for direction in ("fwd", "bwd_data", "bwd_filter")]


executor = PointExecutor()
for point in points("conv1"):
    executor.measure([point])     # warm: imports, torch's handles, the profiler's first use
stages = ("stage_prepare_ms", "stage_verify_ms", "stage_time_ms", "setup_ms")
profile = cProfile.Profile()
start = time.perf_counter()
count = 0
for index, layer in enumerate(layers):
    profiled = index >= len(layers) // 2
    if profiled and not count:
        start = time.perf_counter()
    for point in points(layer):
        if profiled:
            profile.enable()
        rows = executor.measure([point])
        profile.disable()
        for row in rows:
            count += profiled
            print(layer, point.direction, row.status,
                  " ".join(f"{k[:-3]}={row.extras.get(k, getattr(row, k, None)) or 0:.1f}"
                           for k in stages), row.extras.get("gpu_timer"), flush=True)
wall = time.perf_counter() - start
print(f"{count} rows profiled in {wall:.2f} s ({wall / max(count, 1) * 1e3:.0f} ms a row, "
      "cProfile on)")
pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
pstats.Stats(profile).sort_stats("tottime").print_stats(20)
