"""Forward fp32 speed of the NumPy CPU algorithms against PyTorch's conv2d (oneDNN).

Not a test: a script whose printed table goes into the closing note with the machine it ran on.

    .venv/bin/python evidence/studies/cpu_speed.py [--reps 7] [--check] [--layers res2,speech1]

Each point is prepared once through the backend API the runner uses, launched once to warm up,
then timed with time.perf_counter_ns, GC off. Each algorithm's launches run back to back (as the
runner times them) after a short pause: OpenBLAS and OpenMP worker threads spin for a while
after a call, and interleaving NumPy and torch launches would make each pay for the other's
spinning threads. The whole sequence runs `--rounds` times so that load from other processes,
which comes and goes on a shared machine, is spread over all algorithms; the table shows the
median of all samples.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from harness import backends, reference  # noqa: E402
from harness import precision as precision_table  # noqa: E402
from harness.problem import ConvProblem  # noqa: E402
from harness.sweep import Point  # noqa: E402


def _resnet(name: str, channels: int, size: int) -> ConvProblem:
    return ConvProblem(8, channels, size, size, channels, 3, 3, pad_top=1, pad_left=1,
                       pad_bottom=1, pad_right=1, name=name)


# ResNet-50's 3x3 layers at batch 8, and DeepBench's DeepSpeech layers (training_set rows 2, 6):
# W x H = 700 x 161 (1 channel) and 341 x 79 (32 channels), kernels 20x5 and 10x5, stride 2.
LAYERS = {
    "res2": _resnet("res2 3x3 64ch 56x56", 64, 56),
    "res3": _resnet("res3 3x3 128ch 28x28", 128, 28),
    "res4": _resnet("res4 3x3 256ch 14x14", 256, 14),
    "res5": _resnet("res5 3x3 512ch 7x7", 512, 7),
    "speech1": ConvProblem(8, 1, 161, 700, 32, 5, 20, stride_h=2, stride_w=2,
                           name="DeepSpeech 1 k5x20 s2"),
    "speech2": ConvProblem(8, 32, 79, 341, 32, 5, 10, stride_h=2, stride_w=2,
                           name="DeepSpeech 2 k5x10 s2"),
}
ALGORITHMS = [
("cpu", "im2col"), ("cpu", "direct"), ("cpu", "fft"),
              ("cpu", "winograd_f2x2_3x3"), ("cpu", "winograd_f4x4_3x3"), ("torch_cpu", "conv2d")]
_SETTLE_S = 0.3  # longer than OpenBLAS's and libgomp's spin-wait after a call
SHORT = {"im2col": "im2col", "direct": "direct", "fft": "fft", "winograd_f2x2_3x3": "wino F2",
         "winograd_f4x4_3x3": "wino F4", "conv2d": "torch"}


def _prepare(problem: ConvProblem, data, check: bool) -> dict[str, object]:
    """Prepared launches of every algorithm that supports the layer, checked if asked."""
    prepared = {}
    expected = reference.reference(problem, "fwd", data) if check else None
    for backend_name, algo_name in ALGORITHMS:
        backend = backends.get(backend_name)
        if backend.unavailable_reason():
            continue
        algo = backend.algorithm(algo_name)
        point = Point(problem, "fwd", "fp32", "NCHW", backend_name, algo_name)
        if algo.supports(point):
            continue
        run = algo.prepare(point, data)
        run.poison()
        run.launch()  # warm-up (and the result to check)
        if check:
            error, _ = reference.relative_errors(run.output(), expected)
            limit = precision_table.tolerance("fp32", problem.reduction_length("fwd"), algo.error_factor)
            if not error <= limit:
                raise SystemExit(f"{algo_name} is wrong on {problem.label}: "
                                 f"{error:.2e} > {limit:.1e}")
        prepared[algo_name] = run
    return prepared


def _time(prepared: dict[str, object], reps: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per launch: `rounds` passes over the algorithms, `reps` launches each."""
    samples: dict[str, list[float]] = {name: [] for name in prepared}
    gc.disable()
    try:
        for _ in range(rounds):
            for name, run in prepared.items():
                time.sleep(_SETTLE_S)
                run.launch()  # first launch after the pause is not timed
                for _ in range(reps):
                    start = time.perf_counter_ns()
                    run.launch()
                    samples[name].append((time.perf_counter_ns() - start) * 1e-9)
    finally:
        gc.enable()
    return samples


def _machine() -> str:
    model = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = _blas_name()
    torch_note = "torch not installed"
    if backends.get("torch_cpu").unavailable_reason() is None:
        import torch
        torch_note = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return (f"{model}, {len(os.sched_getaffinity(0))} cores; numpy {np.__version__} ({blas}); "
            f"{torch_note}")


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        return config["Build Dependencies"]["blas"]["name"]
    except (TypeError, KeyError):
        return "unknown BLAS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="launches per algorithm per round")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the algorithms")
    parser.add_argument("--check", action="store_true", help="verify every output first")
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated layer keys")
    args = parser.parse_args(argv)
    rows = []
    for key in args.layers.split(","):
        problem = LAYERS[key]
        data = reference.make_data(problem, "fp32")
        prepared = _prepare(problem, data, args.check)
        samples = _time(prepared, args.reps, args.rounds)
        medians = {name: statistics.median(s) for name, s in samples.items()}
        rows.append((problem, medians))
        for run in prepared.values():
            run.release()
    print(f"machine: {_machine()}")
    print(f"forward fp32, batch as listed; GFLOP/s = problem.flops / median time of "
          f"{args.rounds} rounds x {args.reps} launches")
    _print_table(rows)
    return 0


def _print_table(rows: list[tuple[ConvProblem, dict[str, float]]]) -> None:
    names = [name for _, name in ALGORITHMS]
    header = (f"{'layer':24s} {'GFLOP':>6s} " + " ".join(f"{SHORT[n]:>8s}" for n in names)
              + f" {'im2col/torch':>12s} {'F4/im2col':>9s} {'fft/im2col':>10s}")
    print(header)
    for problem, medians in rows:
        rates = {n: problem.flops / t / 1e9 for n, t in medians.items()}
        cells = " ".join(f"{rates[n]:8.1f}" if n in rates else f"{'-':>8s}" for n in names)
        print(f"{problem.label:24s} {problem.flops / 1e9:6.2f} {cells} "
              f"{_ratio(rates, 'im2col', 'conv2d'):>12s} "
              f"{_ratio(rates, 'winograd_f4x4_3x3', 'im2col'):>9s} "
              f"{_ratio(rates, 'fft', 'im2col'):>10s}")


def _ratio(rates: dict[str, float], top: str, bottom: str) -> str:
    if top in rates and bottom in rates:
        return f"{rates[top] / rates[bottom]:.2f}x"
    return "-"


if __name__ == "__main__":
    sys.exit(main())
