"""What `convbench run` sweeps on a machine with a GPU when no flag names the backends.

A user with a GPU asks which verified algorithm is fastest for each layer at the precision they
train and serve in, and whether it beats PyTorch's autotuner and cuDNN's own choice. So the
default sweeps the GPU backends (legacy cuDNN, the graph API, PyTorch; for recurrent layers
cuDNN's RNN algorithms and PyTorch's) at fp32, tf32 (what
PyTorch's fp32 convolutions deliver unless told otherwise), fp16 and bf16, each precision in the
layout frameworks run it in: fp32 and tf32 in NCHW (PyTorch's default memory format), fp16 and
bf16 in NHWC (channels_last, the layout of mixed-precision training on tensor cores). The CPU
algorithms join only when asked (`--backend cpu,...`): on a GPU machine they took 77% of a
ResNet-50 run and answer another question. The float64 reference checks every GPU output
whatever the backends. Each flag given keeps its own say: --precision, --layout, --budget-ms
and --gpu-processes override their part of the default; --backend or --algorithm turns it off, as
does --cluster, and a suite that names no GPU backend (a CPU study) runs as it is.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from harness import families
from harness.sweep import AlgorithmChoice, Sweep

GPU_BACKENDS = ("cudnn", "cudnn_graph", "torch_gpu", "cudnn_rnn")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# the layout frameworks run a precision in; precisions not named run in NHWC, the tensor-core
# layout of every narrow type
FRAMEWORK_LAYOUT = {"fp64": "NCHW", "fp32": "NCHW", "tf32": "NCHW"}
# One timing process, not the suite's two: the default run answers "which algorithm"; a
# regression baseline wants the second process's spread (`--gpu-processes 2`), and the default
# ResNet-50 sweep would not finish in ten minutes with it.
PROCESSES = 1
# Timing budget per point (the suites' default is 200 ms): a ResNet-50 default sweep is ~10,000
# rows, and at the sample floor (17 samples) a row of 70 us kernels spent ~100 ms in timed calls.
# With 25 ms each of the floor's samples still averages several calls (timer._calls_per_graph).
BUDGET_MS = 25.0
HOW_TO_NARROW = ("narrow it with --precision, --layout or --direction; --backend names the "
                 "backends itself (cpu for the CPU algorithms) and then the suite's precisions, "
                 "layouts and timing apply")


def framework_layout(precision: str) -> str:
    return FRAMEWORK_LAYOUT.get(precision, "NHWC")


def applies(sweep: Sweep, args: argparse.Namespace) -> bool:
    """No --backend or --algorithm; a suite that asks for a GPU backend at all (cpu_compare and
    large_kernel are CPU studies and stay so); no --cluster (whose workers, not this machine,
    have the GPUs or not); and a GPU visible to this process."""
    from harness import env
    wants_gpu = any(choice.backend in GPU_BACKENDS for choice in sweep.backends)
    return (not args.backend and not args.algorithm and wants_gpu
            and not getattr(args, "cluster", None) and env.gpu_visible())


def with_gpu_default(sweep: Sweep, args: argparse.Namespace) -> tuple[Sweep, list[str]]:
    """The sweep the default runs on this machine, and the lines that say so (printed first).
    Where no GPU backend can run (CuPy or cuDNN missing), the suite's own backends, and why."""
    if not applies(sweep, args):
        return sweep, []
    usable, refused = _usable_backends(_computing({p.kind for p in sweep.problems}))
    notes = [f"note: GPU default: skipping {name}: {why}" for name, why in refused]
    if not usable:
        return sweep, [*notes, "note: a GPU is present but no GPU backend can use it: running "
                               "the suite's own backends"]
    precisions = sweep.precisions if args.precision else PRECISIONS
    layouts = sweep.layouts if args.layout else tuple(
        dict.fromkeys(framework_layout(p) for p in precisions))
    pairs = () if args.layout else tuple((p, framework_layout(p)) for p in precisions)
    processes = sweep.timing.gpu_processes if args.gpu_processes else PROCESSES
    budget = sweep.timing.budget_ms if args.budget_ms else min(sweep.timing.budget_ms, BUDGET_MS)
    sweep = replace(sweep, backends=tuple(AlgorithmChoice(b, optional=True) for b in usable),
                    precisions=precisions, layouts=layouts, precision_layouts=pairs,
                    timing=replace(sweep.timing, gpu_processes=processes, budget_ms=budget))
    return sweep, [*notes, describe(sweep)]


def describe(sweep: Sweep) -> str:
    backends = ", ".join(c.backend for c in sweep.backends)
    if sweep.precision_layouts:
        by_layout: dict[str, list[str]] = {}
        for precision, layout in sweep.precision_layouts:
            by_layout.setdefault(layout, []).append(precision)
        where = "; ".join(f"{' and '.join(p)} in {layout}" for layout, p in by_layout.items())
    else:
        where = f"{', '.join(sweep.precisions)} in {', '.join(sweep.layouts)}"
    kinds = {problem.kind for problem in sweep.problems}
    if kinds == {families.RNN}:     # the layouts above apply to convolutions only
        where = f"{', '.join(sweep.precisions)} in {families.RNN_LAYOUT}"
    elif families.RNN in kinds:
        where += f"; recurrent layers in {families.RNN_LAYOUT}"
    processes = sweep.timing.gpu_processes
    return (f"GPU default (a GPU is present and no --backend was given): {backends}; {where}; "
            f"{processes} timing process{'es' if processes > 1 else ''}, "
            f"{sweep.timing.budget_ms:g} ms of timed calls a point; {HOW_TO_NARROW}")


def _computing(kinds: set[str]) -> list[str]:
    """The GPU backends with an algorithm for one of the problem families `kinds` (cudnn_rnn
    has none for a convolution, cudnn none for a recurrent layer)."""
    from harness import backends
    return [name for name in GPU_BACKENDS
            if any(set(a.problem_kinds) & kinds for a in backends.get(name).algorithms())]


def _usable_backends(names: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Those of `names` that can run here, and why each other cannot."""
    from harness import backends
    usable, refused = [], []
    for name in names:
        reason = backends.get(name).unavailable_reason()
        if reason:
            refused.append((name, reason))
        else:
            usable.append(name)
    return usable, refused
