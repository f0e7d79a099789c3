import sys, time
sys.path.insert(0, '/work/main'); sys.path.insert(0, __import__('os').path.dirname(__file__))
import numpy as np
from harness.problem_text import parse_deepbench, parse_benchdnn
from harness.backends.cpu import compiled
k = compiled.kernels()
t0 = time.perf_counter(); import rbk; 
probs = {"train_02": parse_deepbench([700, 161, 1, 8, 32, 20, 5, 0, 0, 2, 2]),
         "train_55": parse_deepbench([700, 161, 1, 16, 64, 5, 5, 1, 1, 2, 2]),
         "vgg1_1": parse_benchdnn('mb8ic3ih224oc64oh224kh3ph1')}
rng = np.random.default_rng(0)
for name, p in probs.items():
    if len(sys.argv) > 1 and name not in sys.argv[1:]: continue
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weight_shape).astype(np.float32)
    x5, w5 = x[:, :, None], w[:, :, None]
    y = np.empty(p.output_shape, np.float32); y5 = y[:, :, None]
    y2 = np.empty_like(y); y25 = y2[:, :, None]
    n, c, h, wd = x.shape
    xp = np.empty((n, c, 1, h, p.stride_w, -(-wd // p.stride_w)), np.float32)
    st = np.array([1, p.stride_h, p.stride_w], np.int64); dl = np.array([1, p.dilation_h, p.dilation_w], np.int64)
    pd = np.array([0, p.pad_top, p.pad_left], np.int64)
    k.phases(x5, p.stride_w, xp, 0, k.phase_jobs(x5))
    jobs = k.forward_jobs(w5, y5, p.groups)
    f1 = lambda: k.forward(xp, w5, y5, st, dl, pd, p.groups, wd, 0, jobs)
    f2 = lambda: rbk.forward_rb(xp, w5, y25, st, dl, pd, p.groups, wd, 0, jobs)
    t = time.perf_counter(); f2(); comp = time.perf_counter() - t
    f1()
    err = np.abs(y - y2).max() / np.abs(y).max()
    def med(f):
        ts = []
        for _ in range(5):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        return np.median(ts) * 1e3
    a, b = med(f1), med(f2)
    print(f"{name}: product {a:.1f} ms ({p.flops/a/1e6:.1f} GF/s)  register-blocked {b:.1f} ms ({p.flops/b/1e6:.1f} GF/s)  rel diff {err:.1e}  compile {comp:.1f} s", flush=True)
