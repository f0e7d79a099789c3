"""How close any im2col + GEMM can come to oneDNN here: each layer's convolution as the one GEMM
im2col reduces it to, its operands ready (no column copy, no padding waste), timed beside PyTorch's
CPU convolution (oneDNN). Issue 16 asks im2col bwd_data <= 1.1x oneDNN on class A; no im2col can
beat its GEMM, so where this ratio is over 1.1 the target is out of reach with this BLAS.

Not a test: a script whose table goes into the closing note with the machine it ran on.

    .venv/bin/python benchmarks/gemm_ceiling.py [--reps 9] [--suite cpu_compare] [--class A]

Per layer (batch 8, fp32): the GEMM W (K x C*R*S) @ col (C*R*S x N*P*Q) in both operand orders,
in column blocks of 8 MiB of output as im2col's, and folded (S taps of a kernel row as rows:
(S*K x C*R) @ (C*R x N*P*Q), the same flops), by NumPy's OpenBLAS and by MKL (torch.mm), all
threads, the fastest of each library kept; bwd_data of a stride-1 layer with C = K is the same
GEMM shape (the rotated kernel's correlation), so one GEMM stands for fwd and bwd_data. oneDNN's
fwd and bwd_data through the torch_cpu backend. Interleaved round by round, a pause before each
timed launch (OpenBLAS and OpenMP workers spin after a call).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from cpu_classes import layer_class  # noqa: E402
from harness import backends, cpu_memory, reference  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import Point  # noqa: E402

_SETTLE_S = 0.3
_BLOCK_BYTES = 8 << 20   # of GEMM output a block, as im2col's blocks (im2col.BLOCK_BYTES)
_LIBRARIES = ("openblas", "mkl")


def _gemms(p) -> dict[str, object]:
    """The layer's GEMM, every way timed: OpenBLAS (NumPy) and MKL (torch.mm on the same
    memory), both operand orders, OpenBLAS in 8 MiB output blocks, and folded (the kernel
    row's S taps moved from the depth to the rows: (S*K x C*R) @ (C*R x columns), the same
    flops in a squarer GEMM, as bwd_filter's fold_of; its shifted sum left out)."""
    import torch
    depth, columns = p.in_channels * p.kernel_h * p.kernel_w, p.batch * p.out_h * p.out_w
    fold = p.kernel_w
    rng = np.random.default_rng(0)
    w = rng.standard_normal((p.out_channels, depth), dtype=np.float32)
    col = rng.standard_normal((depth, columns), dtype=np.float32)
    col_t = np.ascontiguousarray(col.T)
    out = np.empty((p.out_channels, columns), np.float32)
    out_t = np.empty((columns, p.out_channels), np.float32)
    w_fold = w.reshape(p.out_channels * fold, depth // fold)
    col_fold = col[:depth // fold]
    out_fold = np.empty((p.out_channels * fold, columns), np.float32)
    block = max(256, _BLOCK_BYTES // (4 * p.out_channels))
    t = {name: torch.from_numpy(a) for name, a in (("w", w), ("col", col), ("col_t", col_t),
         ("out", out), ("out_t", out_t), ("w_fold", w_fold), ("col_fold", col_fold),
         ("out_fold", out_fold))}

    def blocked() -> None:
        for first in range(0, columns, block):
            np.matmul(w, col[:, first:first + block], out=out[:, first:first + block])

    return {"openblas W@col": lambda: np.matmul(w, col, out=out),
            "openblas col^T@W^T": lambda: np.matmul(col_t, w.T, out=out_t),
            "openblas blocked": blocked,
            "openblas folded": lambda: np.matmul(w_fold, col_fold, out=out_fold),
            "mkl W@col": lambda: torch.mm(t["w"], t["col"], out=t["out"]),
            "mkl col^T@W^T": lambda: torch.mm(t["col_t"], t["w"].T, out=t["out_t"]),
            "mkl folded": lambda: torch.mm(t["w_fold"], t["col_fold"], out=t["out_fold"])}


def _onednn(p) -> dict[str, object]:
    algo = backends.get("torch_cpu").algorithm("conv2d")
    data = reference.make_data(p, "fp32")
    return {f"oneDNN {d}": algo.prepare(Point(p, d, "fp32", "NCHW", "torch_cpu", "conv2d"),
                                        data).launch for d in ("fwd", "bwd_data")}


def _time(launches: dict[str, object], reps: int) -> dict[str, float]:
    samples = {name: [] for name in launches}
    names = list(launches)
    for round_ in range(reps):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            time.sleep(_SETTLE_S)
            launches[name]()
            start = time.perf_counter_ns()
            launches[name]()
            samples[name].append((time.perf_counter_ns() - start) * 1e-6)
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    cpu_memory.keep_freed_memory()   # as convbench runs measure (harness/cpu_memory.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--suite", default="cpu_compare")
    parser.add_argument("--class", dest="klass", default="A")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {f"{lib} {d}": [] for lib in _LIBRARIES
                                      for d in ("fwd", "bwd_data")}
    print(f"{'layer':26s} {'GFLOP':>6s} {'OpenBLAS':>9s} {'MKL':>6s} {'GFLOP/s':>8s} "
          f"{'oneDNN fwd':>10s} {'bwd_data':>9s} {'OpenBLAS/fwd':>12s} {'/bwd_data':>9s} "
          f"{'MKL/fwd':>8s} {'/bwd_data':>9s}  fastest")
    for problem in load_suite(args.suite).problems:
        p = problem.with_batch(8)
        if layer_class(p) != args.klass:
            continue
        ms = _time({**_gemms(p), **_onednn(p)}, args.reps)
        best = {lib: min((ms[n], n) for n in ms if n.startswith(lib)) for lib in _LIBRARIES}
        gflop = 2 * p.out_channels * p.in_channels * p.kernel_h * p.kernel_w * p.batch \
            * p.out_h * p.out_w / 1e9
        cells = []
        for lib, (gemm, _) in best.items():
            for d in ("fwd", "bwd_data"):
                ratios[f"{lib} {d}"].append(gemm / ms[f"oneDNN {d}"])
                cells.append(gemm / ms[f"oneDNN {d}"])
        fastest = min(best.values())
        print(f"{p.label:26s} {gflop:6.2f} {best['openblas'][0]:9.2f} {best['mkl'][0]:6.2f} "
              f"{gflop / fastest[0] * 1e3:8.0f} {ms['oneDNN fwd']:10.2f} "
              f"{ms['oneDNN bwd_data']:9.2f} {cells[0]:12.2f} {cells[1]:9.2f} {cells[2]:8.2f} "
              f"{cells[3]:9.2f}  {fastest[1]}")
    for name, values in ratios.items():
        geomean = math.exp(sum(map(math.log, values)) / len(values))
        print(f"class {args.klass} {name}: geomean GEMM alone / oneDNN {geomean:.2f} "
              f"({len(values)} layers)")


if __name__ == "__main__":
    main()
