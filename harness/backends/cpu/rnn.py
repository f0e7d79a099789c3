"""A NumPy recurrent layer, forward (inference) pass (issue 40): the CPU algorithm CI measures
for real beside PyTorch's, written apart from the float64 oracle so they share no bug.

Per layer and direction the input GEMM is hoisted out of the time loop (one (T*N x I) by (I x
G*H) product for every step at once, as cuDNN and oneDNN do), leaving one recurrent GEMM a step.
Sequences of their own lengths are read through per-step index tables: the reverse direction
reads position length-1-s of each sequence at step s, and a sequence past its end keeps its state
and writes zeros. fp32 and fp64 (common.COMPUTE_DTYPES), the outputs in the oracle's order
(harness/rnn/oracle.py): y, h_n, c_n.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness import families
from harness.backends.base import Algorithm, Prepared, Unsupported
from harness.backends.cpu.common import COMPUTE_DTYPES
from harness.rnn.oracle import RnnData, flat
from harness.rnn.problem import RnnProblem
from harness.sweep import Point


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * a) + 1.0)     # no overflow for large negative a


def _positions(problem: RnnProblem, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """(T, N) the time index each sequence reads at each step, and whether it has that step."""
    lengths = np.asarray(problem.lengths if problem.lengths is not None
                         else [problem.seq_len] * problem.batch)
    steps = np.arange(problem.seq_len)[:, None]
    valid = steps < lengths[None, :]
    read = np.where(valid, lengths[None, :] - 1 - steps, 0) if reverse else \
        np.broadcast_to(steps, valid.shape)
    return np.ascontiguousarray(read), valid


def _step(cell: str, gi: np.ndarray, gh: np.ndarray, h: np.ndarray,
          c: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """One step from the input GEMM's part `gi` and the recurrent one's `gh`: (the cell's
    output before any projection, the new cell state)."""
    if cell == "lstm":
        i, f, g, o = np.split(gi + gh, 4, axis=1)
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c_new), c_new
    if cell == "gru":
        r_i, z_i, n_i = np.split(gi, 3, axis=1)
        r_h, z_h, n_h = np.split(gh, 3, axis=1)
        r, z = _sigmoid(r_i + r_h), _sigmoid(z_i + z_h)
        n = np.tanh(n_i + r * n_h)
        return n + z * (h - n), None
    a = gi + gh
    return (np.tanh(a) if cell == "rnn_tanh" else np.maximum(a, 0)), None


def _direction(problem: RnnProblem, x: np.ndarray, h: np.ndarray, c: np.ndarray | None,
               w: dict, reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One layer's one direction over the whole sequence: (y, final h, final c)."""
    t_len, n, _ = x.shape
    gi_all = (x.reshape(t_len * n, -1) @ w["W"].T).reshape(t_len, n, -1)
    if "bW" in w:
        gi_all += w["bW"]
    read, valid = _positions(problem, reverse)
    y = np.zeros((t_len, n, h.shape[1]), dtype=x.dtype)
    rows = np.arange(n)
    for s in range(t_len):
        keep = valid[s][:, None]
        gh = h @ w["R"].T
        if "bR" in w:
            gh += w["bR"]
        m, c_new = _step(problem.cell, gi_all[read[s], rows], gh, h, c)
        h_new = m @ w["P"].T if "P" in w else m
        y[read[s], rows] = np.where(keep, h_new, y[read[s], rows])
        h = np.where(keep, h_new, h)
        c = np.where(keep, c_new, c) if c is not None else None
    return y, h, c


class RnnPrepared(Prepared):
    device = "cpu"
    stream = None
    workspace_bytes = 0

    def __init__(self, problem: RnnProblem, data: RnnData, dtype: Any):
        self.problem = problem
        self.extras: dict[str, Any] = {}
        def cast(a: Any) -> Any:
            return None if a is None else np.ascontiguousarray(a, dtype=dtype)
        self.x, self.h0, self.c0 = cast(data.x), cast(data.h0), cast(data.c0)
        self.weights = [[{k: cast(v) for k, v in w.items()} for w in layer]
                        for layer in data.weights]
        self.result: tuple = ()

    def launch(self) -> None:
        p, layer_in, hs, cs = self.problem, self.x, [], []
        for layer in range(p.layers):
            outs = []
            for d in range(p.directions):
                k = layer * p.directions + d
                y, h, c = _direction(p, layer_in, self.h0[k],
                                     None if self.c0 is None else self.c0[k],
                                     self.weights[layer][d], reverse=d == 1)
                outs.append(y)
                hs.append(h)
                cs.append(c)
            layer_in = np.concatenate(outs, axis=2) if len(outs) > 1 else outs[0]
        self.result = (layer_in, np.stack(hs), np.stack(cs) if self.c0 is not None else None)

    def poison(self) -> None:
        for array in self.result:
            if array is not None:
                array.fill(np.nan)

    def output(self) -> np.ndarray:
        return flat(*self.result)

    def release(self) -> None:
        self.result = ()
        self.weights = []


class NumpyRnn(Algorithm):
    backend = "cpu"
    name = "rnn_loop"
    family = "loop"
    description = ("LSTM/GRU/RNN forward in NumPy: one input GEMM for all steps, then one "
                   "recurrent GEMM a step")
    directions = ("fwd",)
    problem_kinds = (families.RNN,)

    def supports(self, point: Point) -> str | None:
        if point.precision not in COMPUTE_DTYPES:
            return (f"precision {point.precision}: the NumPy recurrent layer computes in "
                    f"{' and '.join(COMPUTE_DTYPES)}")
        return None

    def prepare(self, point: Point, data: RnnData) -> RnnPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        return RnnPrepared(point.problem, data, COMPUTE_DTYPES[point.precision])
