"""The float64 oracle for recurrent layers (issue 40): forward and backpropagation through time
of LSTM (with an optional projection), GRU and plain tanh / ReLU RNNs, stacked and
bidirectional, with per-sequence lengths, in cuDNN's and PyTorch's conventions (shared/
reference/rnn.md 1.5): LSTM gates i, f, g, o; GRU gates r, z, n with the reset gate applied
after the recurrent GEMM ("linear before reset"); two biases per gate (bW with the input GEMM,
bR with the recurrent one); the projection P after the cell's output.

Plain loops over time with one recurrent GEMM per step each way, written against `xp` (NumPy or
CuPy) as harness/reference.py is, so the same code checks outputs on the GPU. What does not
depend on the previous step is done for CHUNK_STEPS steps at a time: forward the input GEMM,
backward the weights', the biases' and the input's gradients. Those were four of a step's six
GEMMs, each a launch the host issues where the oracle runs on the GPU. Checked against PyTorch's
float64 nn.LSTM / nn.GRU / nn.RNN and their autograd, and against central finite differences of
its own forward pass (tests/test_rnn_reference.py).

Weights: `weights[layer][direction]` is a dict of the arrays RnnProblem.weight_shapes names.
Sequences shorter than seq_len (RnnProblem.lengths) stop where they end: their later outputs are
zero and their final state is the one at their last step; the reverse direction starts at each
sequence's own end, as packed sequences do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.rnn.problem import RnnProblem


# Steps whose input GEMMs run as one (a bound on the memory they take beside the tape)
CHUNK_STEPS = 64


@dataclass
class Forward:
    """What the forward pass returns, and what its backward pass needs (`tape`)."""
    y: Any             # (seq_len, batch, directions x out_size)
    h: Any             # (layers x directions, batch, out_size)
    c: Any | None      # (layers x directions, batch, hidden): LSTM only
    tape: list         # per layer: (its input, per direction the steps' saved values)


def _sigmoid(a: Any, xp: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-a))


def _mask(problem: RnnProblem, xp: Any) -> Any:
    """(seq_len, batch, 1): 1 where a sequence has a step, 0 past its end."""
    t = xp.arange(problem.seq_len)[:, None]
    lengths = xp.asarray(problem.lengths if problem.lengths is not None
                         else [problem.seq_len] * problem.batch)
    return (t < lengths[None, :]).astype(xp.float64)[:, :, None]


def _reverse(x: Any, problem: RnnProblem, xp: Any) -> Any:
    """Each sequence reversed within its own length (its padding stays at the end)."""
    if problem.lengths is None:
        return x[::-1]
    out = xp.zeros_like(x)
    for b, n in enumerate(problem.lengths):
        out[:n, b] = x[:n, b][::-1]
    return out


def _input_gates(x: Any, w: dict, xp: Any) -> Any:
    """x (steps, batch, input) @ W^T + bW: several steps' input GEMMs as one."""
    gi = _rows(x) @ w["W"].T + (w["bW"] if "bW" in w else 0.0)
    return gi.reshape(*x.shape[:2], -1)


def _cell_forward(cell: str, gi: Any, h: Any, c: Any, w: dict, xp: Any) -> tuple:
    """One step from its input gates `gi` (_input_gates): (new h, new c, what the step's
    backward pass needs, the previous h first)."""
    gh = h @ w["R"].T + (w["bR"] if "bR" in w else 0.0)
    if cell == "lstm":
        i, f, g, o = xp.split(gi + gh, 4, axis=1)
        i, f, g, o = _sigmoid(i, xp), _sigmoid(f, xp), xp.tanh(g), _sigmoid(o, xp)
        c_new = f * c + i * g
        m = o * xp.tanh(c_new)
        h_new = m @ w["P"].T if "P" in w else m
        return h_new, c_new, (h, c, i, f, g, o, c_new, m)
    if cell == "gru":
        gi_r, gi_z, gi_n = xp.split(gi, 3, axis=1)
        gh_r, gh_z, gh_n = xp.split(gh, 3, axis=1)
        r, z = _sigmoid(gi_r + gh_r, xp), _sigmoid(gi_z + gh_z, xp)
        n = xp.tanh(gi_n + r * gh_n)
        return (1.0 - z) * n + z * h, None, (h, r, z, n, gh_n)
    a = gi + gh
    h_new = xp.tanh(a) if cell == "rnn_tanh" else xp.maximum(a, 0.0)
    return h_new, None, (h, a, h_new)


def _direction_forward(problem: RnnProblem, x: Any, h0: Any, c0: Any, w: dict, xp: Any,
                       mask: Any) -> tuple:
    h, c, ys, saved = h0, c0, [], []
    for start in range(0, problem.seq_len, CHUNK_STEPS):
        gates = _input_gates(x[start:start + CHUNK_STEPS], w, xp)
        for t, gi in enumerate(gates, start):
            h_new, c_new, step = _cell_forward(problem.cell, gi, h, c, w, xp)
            keep = mask[t]
            h = keep * h_new + (1.0 - keep) * h
            if c is not None:
                c = keep * c_new + (1.0 - keep) * c
            ys.append(keep * h_new)
            saved.append(step)
    return xp.stack(ys), h, c, saved


def forward(problem: RnnProblem, x: Any, h0: Any, c0: Any | None, weights: list,
            xp: Any) -> Forward:
    """The layer stack's forward pass in float64 (module docstring)."""
    mask, layer_in, hs, cs, tape = _mask(problem, xp), x, [], [], []
    lstm = problem.cell == "lstm"
    for layer in range(problem.layers):
        outs, saved = [], []
        for d in range(problem.directions):
            k = layer * problem.directions + d
            seq = layer_in if d == 0 else _reverse(layer_in, problem, xp)
            y, h, c, steps = _direction_forward(problem, seq, h0[k], c0[k] if lstm else None,
                                                weights[layer][d], xp, mask)
            outs.append(y if d == 0 else _reverse(y, problem, xp))
            hs.append(h)
            cs.append(c)
            saved.append(steps)
        tape.append((layer_in, saved))
        layer_in = xp.concatenate(outs, axis=2)
    return Forward(layer_in, xp.stack(hs), xp.stack(cs) if lstm else None, tape)


def _cell_backward(cell: str, dh: Any, dc: Any, w: dict, step: tuple, grads: dict,
                   xp: Any) -> tuple:
    """One step back: the gradients of its input and recurrent gates (dgi, dgh, which
    _weight_grads turns into the weights' and the input's), dh_prev and dc_prev; a projection's
    gradient is added to `grads` here."""
    if cell == "lstm":
        h, c, i, f, g, o, c_new, m = step
        if "P" in w:
            grads["P"] += dh.T @ m
            dh = dh @ w["P"]
        tanh_c = xp.tanh(c_new)
        dc = dc + dh * o * (1.0 - tanh_c ** 2)
        da = xp.concatenate([dc * g * i * (1.0 - i), dc * c * f * (1.0 - f),
                             dc * i * (1.0 - g ** 2), dh * tanh_c * o * (1.0 - o)], axis=1)
        dgi = dgh = da
        dc_prev = dc * f
    elif cell == "gru":
        h, r, z, n, gh_n = step
        da_n = dh * (1.0 - z) * (1.0 - n ** 2)
        da_r = da_n * gh_n * r * (1.0 - r)
        da_z = dh * (h - n) * z * (1.0 - z)
        dgi = xp.concatenate([da_r, da_z, da_n], axis=1)
        dgh = xp.concatenate([da_r, da_z, da_n * r], axis=1)
        dc_prev = None
    else:
        h, a, h_new = step
        dgi = dgh = dh * ((1.0 - h_new ** 2) if cell == "rnn_tanh" else (a > 0))
        dc_prev = None
    dh_prev = dgh @ w["R"] + (dh * z if cell == "gru" else 0.0)
    return dgi, dgh, dh_prev, dc_prev


def _weight_grads(start: int, back: list, x: Any, saved: list, w: dict, grads: dict,
                  dx: Any, xp: Any) -> None:
    """Steps start.. start + len(back) - 1 (`back`: their (dgi, dgh), last step first) as one
    GEMM each: W's, R's and the biases' gradients added to `grads`, the input's written to dx."""
    stop = start + len(back)
    dgi = xp.stack([gi for gi, _ in reversed(back)])
    dgh = xp.stack([gh for _, gh in reversed(back)])
    h_prev = xp.stack([step[0] for step in saved[start:stop]])
    grads["W"] += _rows(dgi).T @ _rows(x[start:stop])
    grads["R"] += _rows(dgh).T @ _rows(h_prev)
    if "bW" in grads:
        grads["bW"] += _rows(dgi).sum(axis=0)
        grads["bR"] += _rows(dgh).sum(axis=0)
    dx[start:stop] = (_rows(dgi) @ w["W"]).reshape(dx[start:stop].shape)


def _rows(a: Any) -> Any:
    """(steps, batch, n) as (steps x batch, n): the steps' rows of one GEMM."""
    return a.reshape(-1, a.shape[-1])


def backward(problem: RnnProblem, fwd: Forward, weights: list, dy: Any, dh_n: Any,
             dc_n: Any | None, xp: Any) -> tuple:
    """Gradients of a loss with gradients dy, dh_n, dc_n at the outputs: (dx, dh0, dc0, and the
    weights' gradients shaped as `weights`)."""
    mask, lstm = _mask(problem, xp), problem.cell == "lstm"
    grads = [[{k: xp.zeros_like(v) for k, v in w.items()} for w in layer] for layer in weights]
    dh0 = xp.zeros_like(fwd.h)
    dc0 = xp.zeros_like(fwd.c) if lstm else None
    size = problem.out_size
    for layer in reversed(range(problem.layers)):
        layer_in, saved = fwd.tape[layer]
        dx = xp.zeros_like(layer_in)
        for d in range(problem.directions):
            k = layer * problem.directions + d
            w, g = weights[layer][d], grads[layer][d]
            dy_d = dy[:, :, d * size:(d + 1) * size]
            dy_d = dy_d if d == 0 else _reverse(dy_d, problem, xp)
            seq = layer_in if d == 0 else _reverse(layer_in, problem, xp)
            dh, dc = dh_n[k], dc_n[k] if lstm else None
            step_dx, back = xp.zeros_like(seq), []
            for t in reversed(range(problem.seq_len)):
                keep = mask[t]
                dh_t = dh + keep * dy_d[t]
                dgi, dgh, dh_prev, dc_prev = _cell_backward(
                    problem.cell, keep * dh_t, keep * dc if lstm else None, w, saved[d][t], g,
                    xp)
                dh = dh_prev + (1.0 - keep) * dh_t
                if lstm:
                    dc = dc_prev + (1.0 - keep) * dc
                back.append((dgi, dgh))
                if len(back) == CHUNK_STEPS or t == 0:
                    _weight_grads(t, back, seq, saved[d], w, g, step_dx, xp)
                    back = []
            dx += step_dx if d == 0 else _reverse(step_dx, problem, xp)
            dh0[k] = dh
            if lstm:
                dc0[k] = dc
        dy = dx
    return dy, dh0, dc0, grads
