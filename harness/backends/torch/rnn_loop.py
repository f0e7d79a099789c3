"""A plain recurrent layer in PyTorch (issue 40): the per-step loop of tensor ops a user writes
by hand -- each step's gates from two matrix products and the cell's pointwise ops, autograd
for the backward directions. The "vanilla LSTM" of the classic comparison (a cuDNN LSTM trained
MNIST 7.5x faster on a K80 than one of these), beside nn.LSTM in the same backend.

Nothing is fused or hoisted: the input product is taken step by step, as in a textbook cell.
Sequences of their own lengths keep their state and write zeros past their end (torch.where on
a per-step mask); the reverse direction reads each sequence from its own end. Where every
sequence is as long as the batch, no step masks anything (_full_length).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.backends.base import Unsupported
from harness.backends.torch.cores import use_every_core
from harness.backends.torch.rnn import RnnPrepared, TorchRnn, tensors, timed_call
from harness.rnn.oracle import RnnData
from harness.rnn.problem import RnnProblem
from harness.sweep import TRAINING_FORWARD, TRAINING_STEP, Point


def _cell(torch: Any, cell: str, x_t: Any, h: Any, c: Any, w: dict) -> tuple:
    """One textbook step: (new h, new c or None)."""
    gi = x_t @ w["W"].t() + (w["bW"] if "bW" in w else 0)
    gh = h @ w["R"].t() + (w["bR"] if "bR" in w else 0)
    if cell == "lstm":
        i, f, g, o = (gi + gh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        m = torch.sigmoid(o) * torch.tanh(c)
        return (m @ w["P"].t() if "P" in w else m), c
    if cell == "gru":
        r_i, z_i, n_i = gi.chunk(3, dim=1)
        r_h, z_h, n_h = gh.chunk(3, dim=1)
        r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
        n = torch.tanh(n_i + r * n_h)
        return (1 - z) * n + z * h, None
    a = gi + gh
    return (torch.tanh(a) if cell == "rnn_tanh" else torch.relu(a)), None


def _full_length(torch: Any, cell: str, x: Any, h: Any, c: Any, w: dict, reverse: bool) -> tuple:
    """One direction of a layer whose sequences are all as long as the batch: the textbook loop,
    each step reading its input row and keeping its output, stacked at the end. No per-step
    mask, gather or scatter, which sequences of their own lengths need: a training step's ATen
    ops a step went from 80 to 64 (GRU) and 87 to 65 (LSTM), its time on one CPU thread to
    0.69x and 0.62x (evidence/studies/plain_loop_ops.py; its log in evidence/logs/). A 1,500-step
    GRU's loop is bound by issuing its ops: 3.5 s of host time a training step against 0.7 s of
    kernels on an H200 (evidence/runs/deepbench_rnn_training-train_step-fp16-07f74b7-...)."""
    ys = [None] * x.shape[0]
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        h, c = _cell(torch, cell, x[t], h, c, w)
        ys[t] = h
    return torch.stack(ys), h, c


def _loop_forward(torch: Any, p: RnnProblem, weights: list, device: str) -> Callable:
    lengths = torch.tensor(p.lengths if p.lengths is not None else [p.seq_len] * p.batch,
                           device=device)

    def direction(x: Any, h: Any, c: Any, w: dict, reverse: bool) -> tuple:
        if p.lengths is None:
            return _full_length(torch, p.cell, x, h, c, w, reverse)
        ys = [None] * p.seq_len
        for s in range(p.seq_len):
            t = (lengths - 1 - s).clamp(min=0) if reverse else torch.full_like(lengths, s)
            keep = (s < lengths)[:, None]
            x_t = x[t, torch.arange(p.batch, device=device)]
            h_new, c_new = _cell(torch, p.cell, x_t, h, c, w)
            h = torch.where(keep, h_new, h)
            c = torch.where(keep, c_new, c) if c is not None else None
            ys[s] = (t, torch.where(keep, h_new, torch.zeros_like(h_new)))
        y = torch.zeros(p.seq_len, p.batch, h.shape[1], dtype=x.dtype, device=device)
        rows = torch.arange(p.batch, device=device)
        for t, value in ys:       # scatter each step's output to the position it read
            y = y.index_put((t, rows), value, accumulate=True)
        return y, h, c

    def forward(x: Any, h0: Any, c0: Any) -> tuple:
        layer_in, hs, cs = x, [], []
        for layer in range(p.layers):
            outs = []
            for d in range(p.directions):
                k = layer * p.directions + d
                y, h, c = direction(layer_in, h0[k], None if c0 is None else c0[k],
                                    weights[layer][d], reverse=d == 1)
                outs.append(y)
                hs.append(h)
                cs.append(c)
            layer_in = torch.cat(outs, dim=2)
        return layer_in, torch.stack(hs), torch.stack(cs) if c0 is not None else None
    return forward


class TorchRnnLoop(TorchRnn):
    """TorchRnn's precisions and refusals; its own call."""
    name = "plain_loop"
    family = "loop"
    description = "a hand-written per-step loop of PyTorch tensor ops (the plain LSTM) + autograd"

    def prepare(self, point: Point, data: RnnData) -> RnnPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        import torch  # lazy: heavy, optional
        use_every_core(torch)
        return RnnPrepared(loop_call(torch, point, data, self.device), self.device)


def loop_call(torch: Any, point: Point, data: RnnData, device: str) -> Callable[[], tuple]:
    """The plain loop's timed call of `point`'s direction on `device`, holding the test data's
    weights (trainable where the direction trains them)."""
    as_tensor = tensors(torch, point, device)
    trains = point.direction in ("bwd_filter", TRAINING_FORWARD, TRAINING_STEP)
    weights = [[{k: as_tensor(v).requires_grad_(trains)
                 for k, v in w.items()} for w in layer] for layer in data.weights]
    flat = [weights[layer][d][key] for layer, d, key in point.problem.weight_keys()]
    forward = _loop_forward(torch, point.problem, weights, device)
    return timed_call(torch, point, data, as_tensor, forward, flat)
