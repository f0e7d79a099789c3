"""The plain loop (harness/backends/torch/rnn_loop.py) on full-length sequences: the ATen ops one
training step dispatches per recurrent step, and its median time over 7 calls on the CPU, one
thread. Run it at two commits (git stash or a worktree) to compare the paths; not a test.

    .venv/bin/python evidence/studies/plain_loop_ops.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.backends.torch import rnn_loop
from harness.rnn.oracle import make_data
from harness.rnn.problem import RnnProblem
from harness.sweep import Point, TimingOptions


class Counted(TorchDispatchMode):
    """Counts the ATen ops dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    torch.set_num_threads(1)
    for cell in ("gru", "lstm"):
        problem = RnnProblem(cell, 64, 64, 200, 8)
        point = Point(problem, "train_step", "fp32", "TNC", "torch_cpu", "plain_loop", None,
                      TimingOptions())
        call = rnn_loop.loop_call(torch, point, make_data(problem, "fp32", 0), "cpu")
        call()
        with Counted() as counted:
            call()
        times = []
        for _ in range(7):
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
        print(f"{cell}: {counted.ops / problem.seq_len:.1f} ops a step, median "
              f"{sorted(times)[3] * 1e3:.1f} ms a training step (T={problem.seq_len})")


if __name__ == "__main__":
    main()
