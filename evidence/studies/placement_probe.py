"""Do GPU rows' run-to-run jumps come from the process state they are measured in? (issue 13)
The same cuDNN points measured (A) once in each of 8 fresh processes, (B) 10 times in one process
with a fresh executor (new buffers) after a random spacer allocation, (C) 10 times in that process
with one executor (the same buffers). Run on a GPU machine: python3 evidence/studies/placement_probe.py
(results/logs/gpu-placement-*.md)."""
import sys, random, statistics, subprocess, json
from dataclasses import replace
from harness.suite import load_suite
from harness.suite.overrides import sweep_with_overrides
from harness import runner
from harness.executor import PointExecutor
CASES = [("resnet_50:res4a_branch2b", "fwd", "bf16", "gemm"),
         ("resnet_50:res5a_branch2b", "fwd", "fp16", "gemm"),
         ("resnet_50:res5a_branch2b", "bwd_data", "tf32", "algo_1"),
         ("resnet_50:res5b_branch2a", "fwd", "fp16", "implicit_precomp_gemm")]

def point(layer, direction, precision, algo, layout="NCHW"):
    sw = load_suite("resnet50")
    sw = replace(sw, problems=tuple(p for p in sw.problems if p.name == layer))
    sw = sweep_with_overrides(sw, backends=["cudnn"], algorithms=[algo], directions=[direction],
                              precisions=[precision], layouts=[layout], workspace_limits=["unlimited"])
    return runner.plan(sw).points[0]

def once(case, ex=None):
    ex = ex or PointExecutor(0)
    m = ex.measure_one(point(*case))
    return statistics.median(m.samples_ms)

if sys.argv[1:] == ["one"]:
    print(json.dumps([once(c) for c in CASES])); sys.exit()
import cupy
procs = [json.loads(subprocess.check_output([sys.executable, __file__, "one"]).decode().strip().splitlines()[-1]) for _ in range(8)]
fresh, same = [], []
ex = PointExecutor(0)
for i in range(10):
    spacer = cupy.empty(random.randint(1, 64) * (1 << 20) + random.randint(0, 4096) * 256, dtype=cupy.uint8)
    fresh.append([once(c) for c in CASES])
    same.append([once(c, ex) for c in CASES])
    del spacer
for j, c in enumerate(CASES):
    f = lambda rows: " ".join(f"{r[j]*1e3:.1f}" for r in rows)
    print(c, "\n  processes:", f(procs), "\n  fresh+spacer:", f(fresh), "\n  same executor:", f(same))
