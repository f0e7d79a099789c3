"""A plain recurrent layer in PyTorch (issue 40): the per-step loop of tensor ops a user writes
by hand -- each step's gates from two matrix products and the cell's pointwise ops, autograd
for the backward directions. The "vanilla LSTM" of the classic comparison (a cuDNN LSTM trained
MNIST 7.5x faster on a K80 than one of these), beside nn.LSTM in the same backend.

Nothing is fused or hoisted: the input product is taken step by step, as in a textbook cell.
Sequences of their own lengths keep their state and write zeros past their end (torch.where on
a per-step mask); the reverse direction reads each sequence from its own end.
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


def _loop_forward(torch: Any, p: RnnProblem, weights: list, device: str) -> Callable:
    lengths = torch.tensor(p.lengths if p.lengths is not None else [p.seq_len] * p.batch,
                           device=device)

    def direction(x: Any, h: Any, c: Any, w: dict, reverse: bool) -> tuple:
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
