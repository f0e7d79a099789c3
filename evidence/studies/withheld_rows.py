"""Issue 42, stop 63: one CPU point (cpu_compare, im2col, fp32, every core) measured N times in
this process through runner.run_point; prints each row's median, `contended`, `host_speedup`,
`host_probe_ms` and reason. Run it with PYTHONPATH at two trees to compare them, e.g. interleaved
processes of the tree before harness/host_cores.py and after.

    python evidence/studies/withheld_rows.py LABEL LAYER_SUFFIX DIRECTION N
"""
import statistics, sys, time
from harness import runner, threads
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions
problem = next(p for p in load_suite("cpu_compare").problems if p.name.endswith(sys.argv[2]))
point = Point(problem, sys.argv[3], "fp32", "NCHW", "cpu", "im2col", threads=threads.ALL,
              timing=TimingOptions(budget_ms=200.0, min_samples=9))
for _ in range(int(sys.argv[4])):
    m = runner.run_point(point)
    e = m.extras
    print(f"{sys.argv[1]} {problem.name} {point.direction} median {statistics.median(m.samples_ms):6.2f} ms "
          f"contended {e.get('contended')} speedup {e.get('host_speedup')} probe {e.get('host_probe_ms'):.2f} "
          f"| {m.reason[:160]}", flush=True)
    time.sleep(0.5)
