import sys, time
sys.path.insert(0, '/work/main')
import numpy as np
from harness.problem_text import parse_deepbench, parse_benchdnn
from harness import reference, verdict
from harness.backends.cpu import direct_kernels as dk

def timeit(f, reps=5):
    f(); ts=[]
    for _ in range(reps):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return np.median(ts)*1e3

probs = {
 "train_02": parse_deepbench([700, 161, 1, 8, 32, 20, 5, 0, 0, 2, 2]),
 "train_06": parse_deepbench([341, 79, 32, 8, 32, 10, 5, 0, 0, 2, 2]),
 "vgg1_1": parse_benchdnn('mb8ic3ih224oc64oh224kh3ph1'),
 "res2a": parse_benchdnn('mb8ic64ih56oc64oh56kh3ph1'),
}
import torch
for name, p in probs.items():
    data = reference.make_data(p, "fp32")
    x = data.x.astype(np.float32); w = data.w.astype(np.float32); dy = data.dy.astype(np.float32)
    sd = len(p.spatial)
    st = np.array([getattr(p,'stride_d',1) if sd==3 else 1, p.stride_h, p.stride_w], np.int64)
    dl = np.array([1, p.dilation_h, p.dilation_w], np.int64)
    pd = np.array([0, p.pad_top, p.pad_left], np.int64)
    x5, w5, dy5 = dk.as_5d(x, sd), dk.as_5d(w, sd), dk.as_5d(dy, sd)
    y = np.empty(p.output_shape, np.float32); dx = np.empty(p.input_shape, np.float32); dw = np.empty(p.weight_shape, np.float32)
    y5, dx5, dw5 = dk.as_5d(y, sd), dk.as_5d(dx, sd), dk.as_5d(dw, sd)
    t0=time.perf_counter(); dk.forward(x5,w5,y5,st,dl,pd,p.groups); dk.backward_data(w5,dy5,dx5,st,dl,pd,p.groups); dk.backward_filter(x5,dy5,dw5,st,dl,pd,p.groups); comp=time.perf_counter()-t0
    out = {}
    for d, arr, f in (("fwd", y, lambda: dk.forward(x5,w5,y5,st,dl,pd,p.groups)), ("bwd_data", dx, lambda: dk.backward_data(w5,dy5,dx5,st,dl,pd,p.groups)), ("bwd_filter", dw, lambda: dk.backward_filter(x5,dy5,dw5,st,dl,pd,p.groups))):
        ms = timeit(f)
        j = verdict.check(p, d, data, arr.astype(np.float64), "fp32")
        xt, wt, dyt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
        pad=(p.pad_top, p.pad_left)
        if d=="fwd": tf=lambda: torch.nn.functional.conv2d(xt,wt,None,(p.stride_h,p.stride_w),pad)
        elif d=="bwd_data": tf=lambda: torch.ops.aten.convolution_backward(dyt,xt,wt,None,[p.stride_h,p.stride_w],list(pad),[1,1],False,[0,0],1,[True,False,False])
        else: tf=lambda: torch.ops.aten.convolution_backward(dyt,xt,wt,None,[p.stride_h,p.stride_w],list(pad),[1,1],False,[0,0],1,[False,True,False])
        tms = timeit(tf)
        print(f"{name:9s} {d:10s} numba {ms:8.3f} ms {p.flops/ms/1e6:7.1f} GF/s  torch {tms:8.3f} ms  ratio {ms/tms:5.2f}  err {j.rel_error:.1e} tol {j.tolerance:.1e} {j.delivered} (compile+first {comp:.1f}s)", flush=True)
