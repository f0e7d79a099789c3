"""Where a GPU row's time goes (issue 38/39): one point of the resnet50 suite measured in this
process, every graph-API plan (or the named backend's algorithms), under cProfile; prints the wall
time of the whole point, per row, and the 25 functions with the most cumulative time.

    python evidence/studies/row_profile.py [LAYER] [BACKEND] [PRECISION] [LAYOUT] [DIRECTION]
"""
import cProfile
import pstats
import sys
import time

from harness.executor import PointExecutor
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions

layer, backend, precision, layout, direction = (sys.argv[1:] + [None] * 5)[:5]
layer = layer or "res2a_branch2b"
problem = next(p for p in load_suite("resnet50").problems if p.name.endswith(layer))
point = Point(problem, direction or "fwd", precision or "fp16", layout or "NHWC",
              backend or "cudnn_graph", "engines", None,
              TimingOptions(min_samples=17, gpu_processes=1, budget_ms=25))
executor = PointExecutor()
executor.measure([point])          # warm: imports, handles, reference, first plans
profile = cProfile.Profile()
start = time.perf_counter()
profile.enable()
rows = executor.measure([point])
profile.disable()
wall = time.perf_counter() - start
print(f"{point.problem.label} {point.direction} {point.precision} {point.layout} "
      f"{point.backend}: {len(rows)} rows in {wall:.2f} s ({wall / len(rows) * 1e3:.0f} ms a row)")
pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
pstats.Stats(profile).sort_stats("tottime").print_stats(15)
