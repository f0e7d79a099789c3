"""cpu:direct's forward pass, compiled (numba) against its NumPy kernel and oneDNN (PyTorch's
conv2d), interleaved rounds on one process (issue 42). Each round times every candidate once (a
median of 5 calls after one warm call); the table gives each candidate's median over the rounds
and the median of the per-round ratios to oneDNN.

    python evidence/studies/numba_direct/direct_vs_onednn.py [--rounds 7] [--threads N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from harness import backends, reference, threads
from harness.backends.cpu import compiled
from harness.problem_text import parse_benchdnn, parse_deepbench
from harness.sweep import Point

LAYERS = {
    "deepbench:train_02 (C=1)": parse_deepbench([700, 161, 1, 8, 32, 20, 5, 0, 0, 2, 2]),
    "deepbench:train_55 (C=1)": parse_deepbench([700, 161, 1, 16, 64, 5, 5, 1, 1, 2, 2]),
    "vgg_16:conv1_1 (C=3)": parse_benchdnn("mb8ic3ih224oc64oh224kh3ph1"),
    "deepbench:train_06 (C=32)": parse_deepbench([341, 79, 32, 8, 32, 10, 5, 0, 0, 2, 2]),
    "resnet_50:res2a_branch2b (C=64)": parse_benchdnn("mb8ic64ih56oc64oh56kh3ph1"),
}


def _median_ms(launch, calls: int = 5) -> float:
    launch()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        launch()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _prepared(problem, backend: str, algorithm: str, numpy_only: bool):
    point = Point(problem, "fwd", "fp32", "NCHW", backend, algorithm)
    saved = dict(compiled._state)
    if numpy_only:
        compiled._state["failed"] = "forced off for the comparison"
    try:
        return backends.get(backend).algorithm(algorithm).prepare(
            point, reference.make_data(problem, "fp32"))
    finally:
        compiled._state.clear()
        compiled._state.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=threads.ALL)
    args = parser.parse_args()
    print(f"threads {threads.label(args.threads)}, fp32, rounds {args.rounds}")
    print("| layer | compiled ms | NumPy direct ms | oneDNN ms | compiled / oneDNN | "
          "NumPy / oneDNN | GFLOP/s compiled |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, problem in LAYERS.items():
        candidates = {"compiled": _prepared(problem, "cpu", "direct", False),
                      "numpy": _prepared(problem, "cpu", "direct", True),
                      "onednn": _prepared(problem, "torch_cpu", "conv2d", False)}
        assert candidates["compiled"].extras["cpu_kernel"].startswith(("numba", "numpy"))
        rounds: dict[str, list[float]] = {k: [] for k in candidates}
        with threads.limited(args.threads):
            for _ in range(args.rounds):
                for key, prepared in candidates.items():
                    rounds[key].append(_median_ms(prepared.launch))
        ratio = {k: statistics.median(a / b for a, b in zip(rounds[k], rounds["onednn"]))
                 for k in ("compiled", "numpy")}
        med = {k: statistics.median(v) for k, v in rounds.items()}
        kernel = candidates["compiled"].extras["cpu_kernel"].split(":")[0]
        print(f"| {name} | {med['compiled']:.2f} ({kernel}) | {med['numpy']:.2f} | "
              f"{med['onednn']:.2f} | {ratio['compiled']:.2f} | {ratio['numpy']:.2f} | "
              f"{problem.flops / med['compiled'] / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    np.random.seed(0)
    main()
