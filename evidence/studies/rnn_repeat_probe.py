"""Does cudnn_rnn's bwd_data repeat its result call after call on one training forward's
reserve space, and if not, is it cuDNN's summation order (small differences) or the call
changing what it reads (large ones)? For each shape, precision and algorithm: three calls in a
row, then three more each after the reserve space is restored from a copy taken after prepare;
prints the largest relative difference of each call's output from the first.

    python3 evidence/studies/rnn_repeat_probe.py
"""
from __future__ import annotations

from harness import backends
from harness.rnn.oracle import make_data
from harness.rnn.problem import RnnProblem
from harness.sweep import Point, TimingOptions

SHAPES = (RnnProblem("lstm", 28, 128, 28, 16, name="mnist_row_lstm"),
          RnnProblem("gru", 64, 64, 16, 16, layers=2, bidirectional=True, name="gru_2x_bi"))


def relative(a, b) -> float:
    import cupy
    return float(cupy.linalg.norm(a - b) / cupy.linalg.norm(a))


def main() -> None:
    backend = backends.get("cudnn_rnn")
    for problem in SHAPES:
        for precision in ("fp32", "tf32", "fp16"):
            data = make_data(problem, precision)
            for algo in backend.algorithms():
                point = Point(problem, "bwd_data", precision, "TNC", "cudnn_rnn", algo.name,
                              None, TimingOptions())
                prepared = algo.prepare(point, data)
                reserve = prepared._buffers["reserve"]
                pristine = reserve.copy()
                runs = []
                for restore in (False, True):
                    for _ in range(3):
                        if restore:
                            reserve[...] = pristine
                        prepared.launch()
                        runs.append(prepared.output().copy())
                first = runs[0]
                print(problem.name, precision, algo.name, "in a row:",
                      " ".join(f"{relative(first, r):.2e}" for r in runs[1:3]),
                      "| reserve restored:",
                      " ".join(f"{relative(first, r):.2e}" for r in runs[3:]),
                      "| reserve changed by the calls:", bool((reserve != pristine).any()))
                prepared.release()


if __name__ == "__main__":
    main()
