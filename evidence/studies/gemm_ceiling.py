"""How close any im2col + GEMM can come to oneDNN here: each layer's convolution as the one GEMM
im2col reduces it to, its operands ready (no column copy, no padding waste), timed beside PyTorch's
CPU convolution (oneDNN). Issue 16 asks im2col <= 1.1x oneDNN (class A bwd_data) and <= 1.15x
(class B); no im2col can beat its GEMM, so where this ratio nears the target, the target leaves
nothing for the copies with this BLAS.

Not a test: a script whose table goes into the closing note with the machine it ran on.

    .venv/bin/python evidence/studies/gemm_ceiling.py [--reps 9] [--suite cpu_compare] [--class A|B]
        [--gemms fwd,bwd_data,bwd_filter]

Per layer (batch 8, fp32) and direction, its GEMM (`_gemms` gives the shapes: fwd's W @ col,
bwd_data's rotated W @ dy's columns, bwd_filter's dy @ col^T) in both operand orders, in column
blocks of 8 MiB of output as im2col's, and folded (the same flops in a squarer GEMM), by
NumPy's OpenBLAS and by MKL (torch.mm), all threads, the fastest of each library kept; and
oneDNN's time for the direction through the torch_cpu backend. Interleaved round by round, a
pause before each timed launch (OpenBLAS and OpenMP workers spin after a call).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from cpu_classes import layer_class  # noqa: E402
from harness import backends, cpu_memory, reference  # noqa: E402
from harness.stats import geomean  # noqa: E402
from harness.suite import load_suite  # noqa: E402
from harness.sweep import Point  # noqa: E402

_SETTLE_S = 0.3
_BLOCK_BYTES = 8 << 20   # of GEMM output a block, as im2col's blocks (im2col.BLOCK_BYTES)
_LIBRARIES = ("openblas", "mkl")


def _operands(p, rows: int, depth: int, columns: int, fold: int) -> dict[str, np.ndarray]:
    """Random fp32 operands of (rows x depth) @ (depth x columns), both orders and folded."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, depth), dtype=np.float32)
    b = rng.standard_normal((depth, columns), dtype=np.float32)
    return {"a": a, "b": b, "b_t": np.ascontiguousarray(b.T),
            "out": np.empty((rows, columns), np.float32),
            "out_t": np.empty((columns, rows), np.float32),
            "a_fold": a.reshape(rows * fold, depth // fold), "b_fold": b[:depth // fold],
            "out_fold": np.empty((rows * fold, columns), np.float32)}


def _gemms(p, direction: str) -> dict[str, object]:
    """The layer's GEMM for `direction`, every way timed: OpenBLAS (NumPy) and MKL (torch.mm on
    the same memory), both operand orders, OpenBLAS in 8 MiB output blocks, and folded.

    fwd: W (K x C*R*S) @ col (C*R*S x N*P*Q); folded moves the kernel row's S taps from the
    depth to the rows, (S*K x C*R) @ (C*R x columns), the same flops in a squarer GEMM, its
    shifted sum left out. bwd_data (stride 1: one correlation of dy with the rotated kernel):
    W' (C x K*R*S) @ dy's columns (K*R*S x N*H*W), folded likewise. bwd_filter: dW = dy (K x
    N*P*Q) @ col^T (N*P*Q x C*R*S), reducing over the pixels; folded (fold taps of a kernel row
    as the result's columns, as _im2col_filter.fold_of) is (C*R*S/fold x pixels) @ (pixels x
    fold*K), its extra columns left out. Leaving out what folding costs makes each fastest time
    a lower bound."""
    import torch
    crs, pixels = p.in_channels * p.kernel_h * p.kernel_w, p.batch * p.out_h * p.out_w
    if direction == "bwd_data":
        o = _operands(p, p.in_channels, p.out_channels * p.kernel_h * p.kernel_w,
                      p.batch * p.in_h * p.in_w, p.kernel_w)
    elif direction == "bwd_filter":
        k = p.out_channels
        o = _operands(p, k, pixels, crs, 1)
        rng = np.random.default_rng(1)
        fold = p.kernel_w
        col_fold = rng.standard_normal((crs // fold, pixels), dtype=np.float32)
        dy_fold = rng.standard_normal((pixels, fold * k), dtype=np.float32)
        o.update(a_fold=col_fold, b_fold=dy_fold,
                 out_fold=np.empty((crs // fold, fold * k), np.float32))
    else:
        o = _operands(p, p.out_channels, crs, pixels, p.kernel_w)
    t = {name: torch.from_numpy(a) for name, a in o.items()}
    block = max(256, _BLOCK_BYTES // (4 * o["out"].shape[0]))
    columns = o["out"].shape[1]

    def blocked() -> None:
        for first in range(0, columns, block):
            np.matmul(o["a"], o["b"][:, first:first + block], out=o["out"][:, first:first + block])

    return {"openblas A@B": lambda: np.matmul(o["a"], o["b"], out=o["out"]),
            "openblas B^T@A^T": lambda: np.matmul(o["b_t"], o["a"].T, out=o["out_t"]),
            "openblas blocked": blocked,
            "openblas folded": lambda: np.matmul(o["a_fold"], o["b_fold"], out=o["out_fold"]),
            "mkl A@B": lambda: torch.mm(t["a"], t["b"], out=t["out"]),
            "mkl B^T@A^T": lambda: torch.mm(t["b_t"], t["a"].T, out=t["out_t"]),
            "mkl folded": lambda: torch.mm(t["a_fold"], t["b_fold"], out=t["out_fold"])}


def _onednn(p, direction: str) -> dict[str, object]:
    algo = backends.get("torch_cpu").algorithm("conv2d")
    point = Point(p, direction, "fp32", "NCHW", "torch_cpu", "conv2d")
    return {f"oneDNN {direction}": algo.prepare(point, reference.make_data(p, "fp32")).launch}


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


_GEMMS = ("fwd", "bwd_data", "bwd_filter")


def _layer_rows(p, direction: str, reps: int) -> tuple[str, dict[str, float]]:
    """One line of the table and the ratio GEMM alone / oneDNN per library."""
    ms = _time({**_gemms(p, direction), **_onednn(p, direction)}, reps)
    best = {lib: min((ms[n], n) for n in ms if n.startswith(lib)) for lib in _LIBRARIES}
    gflop = 2 * p.out_channels * p.in_channels * p.kernel_h * p.kernel_w * p.batch \
        * p.out_h * p.out_w / 1e9
    onednn = ms[f"oneDNN {direction}"]
    ratios = {f"{lib} {direction}": best[lib][0] / onednn for lib in _LIBRARIES}
    fastest = min(best.values())
    line = (f"{p.label:26s} {direction:10s} {gflop:6.2f} {best['openblas'][0]:9.2f} "
            f"{best['mkl'][0]:7.2f} {gflop / fastest[0] * 1e3:8.0f} {onednn:7.2f} "
            f"{ratios[f'openblas {direction}']:9.2f} {ratios[f'mkl {direction}']:7.2f}  "
            f"{fastest[1]}")
    return line, ratios


def main() -> None:
    cpu_memory.keep_freed_memory()   # as convbench runs measure (harness/cpu_memory.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--suite", default="cpu_compare")
    parser.add_argument("--class", dest="klass", default="A", choices=("A", "B"))
    parser.add_argument("--gemms", default="fwd",
                        help="comma-separated: fwd, bwd_data (stride 1 only), bwd_filter")
    args = parser.parse_args()
    gemm_directions = args.gemms.split(",")
    unknown = set(gemm_directions) - set(_GEMMS)
    if unknown:
        raise SystemExit(f"--gemms: unknown {sorted(unknown)}; choose from {list(_GEMMS)}")
    ratios: dict[str, list[float]] = {}
    print(f"{'layer':26s} {'direction':10s} {'GFLOP':>6s} {'OpenBLAS':>9s} {'MKL':>7s} "
          f"{'GFLOP/s':>8s} {'oneDNN':>7s} {'OpenBLAS/':>9s} {'MKL/':>7s}  fastest shape "
          "(ms; each library's fastest GEMM shape; ratios over oneDNN)")
    for problem in load_suite(args.suite).problems:
        p = problem.with_batch(8)
        if layer_class(p) != args.klass:
            continue
        for gemm_direction in gemm_directions:
            if gemm_direction == "bwd_data" and (p.stride_h, p.stride_w) != (1, 1):
                print(f"{p.label:26s} bwd_data   (stride > 1: phase correlations or col2im, "
                      "not one GEMM; not timed)")
                continue
            line, layer_ratios = _layer_rows(p, gemm_direction, args.reps)
            print(line, flush=True)
            for name, value in layer_ratios.items():
                ratios.setdefault(name, []).append(value)
    for name, values in ratios.items():
        print(f"class {args.klass} {name}: geomean GEMM alone / oneDNN {geomean(values):.2f} "
              f"({len(values)} layers)")


if __name__ == "__main__":
    main()
