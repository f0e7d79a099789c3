"""Which graph-API plan of a point stalls? Lists the point's plans, then measures them one by one,
printing each before it starts (run it under `timeout`: the last "start" line names the culprit).
The point is efficientnet_b0's depthwise features.1.0.block.0.0 (g32, 112x112, batch 32) bwd_data
NHWC, where a `run --model torchvision:efficientnet_b0` sweep stopped making rows on 2026-11-23.

    timeout 170 python evidence/studies/stall_plans.py fp16
"""
import sys, time
from harness.problem_text import parse_benchdnn
from harness.executor import PointExecutor, algorithm_for
from harness.sweep import Point, TimingOptions
from harness import reference
p = parse_benchdnn('g32mb32ic32ih112iw112oc32oh112ow112kh3kw3sh1sw1ph1pw1dh0dw0n"features.1.0.block.0.0"')
prec = sys.argv[1] if len(sys.argv) > 1 else "fp16"
point = Point(p, "bwd_data", prec, "NHWC", "cudnn_graph", "all", None, TimingOptions(budget_ms=10))
data = reference.make_data(p, prec, 0)
algo = algorithm_for(point)
t = time.time(); names = algo.variants(point, data); print(f"{prec}: {len(names)} plans listed in {time.time()-t:.1f} s", flush=True)
ex = PointExecutor()
from dataclasses import replace
for name in names:
    print(f"start {name}", flush=True); t = time.time()
    m = ex.measure_one(replace(point, algorithm=name))
    print(f"  {name}: {m.status} {m.median_ms} ms, {time.time()-t:.1f} s wall; {m.reason[:120]}", flush=True)
