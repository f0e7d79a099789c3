"""Where a recurrent GPU row's time goes (issue 40): one rnn_quick layer measured in this process
for each named algorithm and direction, after a warm measurement, under cProfile. Prints each
row's wall time and stage times, then the timer functions with the most cumulative time.

    python evidence/studies/rnn_row_profile.py [LAYER] [PRECISION] [DIRECTIONS] [ALGORITHMS] [SUITE]

DIRECTIONS and ALGORITHMS are comma-separated; ALGORITHMS are backend:algorithm; SUITE (default
rnn_quick) holds LAYER. PATTERN (the environment) widens the functions listed (a regex).
TIMING=suite (the environment) times with the suite's own options as one of its two timing
processes gets them (process_split.share), not the quick 3-sample floor.
"""
import cProfile
import os
import pstats
import sys
import time

from dataclasses import replace

from harness import process_split
from harness.executor import PointExecutor
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions

args = sys.argv[1:] + [None] * 5
layer = args[0] or "mnist:row_lstm"
precision = args[1] or "fp16"
directions = (args[2] or "fwd,train_step").split(",")
algorithms = (args[3] or "torch_gpu:nn_rnn,torch_gpu:nn_rnn_native,torch_gpu:plain_loop,"
              "cudnn_rnn:standard").split(",")
suite = load_suite(args[4] or "rnn_quick")
problem = next(p for p in suite.problems if p.name == layer)
timing = TimingOptions(min_samples=3, noise_target=0.02, gpu_processes=1, budget_ms=25)
if os.environ.get("TIMING") == "suite":
    timing = replace(process_split.share(suite.timing, suite.timing.gpu_processes),
                     gpu_processes=1)
executor = PointExecutor()
for direction in directions:
    for name in algorithms:
        backend, algorithm = name.split(":")
        point = Point(problem, direction, precision, "NCHW", backend, algorithm, None, timing)
        executor.measure([point])          # warm: imports, handles, reference
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        rows = executor.measure([point])
        profile.disable()
        wall = time.perf_counter() - start
        row = rows[0]
        stages = {k: round(v) for k, v in row.extras.items() if k.startswith("stage_")}
        print(f"== {layer} {direction} {precision} {name}: {wall * 1e3:.0f} ms, {row.status}, "
              f"median {row.median_ms} ms, host {row.host_ms} ms, {len(row.samples_ms)} "
              f"samples, {stages}")
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(os.environ.get("PATTERN", (
            r"timer|stream_hold|point_timing|cuda\.py|graphs|rnn_gpu|executor|gc|empty_cache")), 30)
